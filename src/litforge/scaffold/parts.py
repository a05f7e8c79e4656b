"""What a new project is made of: the template's example project (its package, configs,
tests, entry scripts, notebook) renamed, plus the skeleton files of `project_files/`.

`--minimal` picks which examples to copy (the digits CNN only); `--without a,b` which of
litforge's extras the project depends on (and the configs that need them). Paths are the
template repository's; `*` spans `/`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

# The template's example project: what a new project copies and renames.
EXAMPLE_PACKAGE = "litforge_examples"
PROJECT_FILES = (
    "train.py",
    "eval.py",
    "conf/*",
    f"src/{EXAMPLE_PACKAGE}/*",
    f"tests/{EXAMPLE_PACKAGE}/*",
    "notebooks/*.ipynb",
)

# --minimal leaves out the character-level GPT, its text data, and what builds on them
# (the fine-tune experiments; the Hugging Face model is trained as a LanguageModel).
GPT_FILES = (
    f"src/{EXAMPLE_PACKAGE}/nets/gpt.py",
    f"src/{EXAMPLE_PACKAGE}/models/language_model.py",
    f"src/{EXAMPLE_PACKAGE}/data/text.py",
    "conf/model/gpt.yaml",
    "conf/data/text.yaml",
    "conf/data/text_stream.yaml",
    "conf/experiment/gpt_char.yaml",
    "conf/experiment/gpt_char_finetune.yaml",
    "conf/experiment/hf_finetune.yaml",
    "conf/model/hf_causal_lm.yaml",
    "conf/data/hf_text.yaml",
    "conf/experiment/precision_ab.yaml",
    "conf/hparams_search/gpt_char_optuna.yaml",
    f"tests/{EXAMPLE_PACKAGE}/test_gpt.py",
    f"tests/{EXAMPLE_PACKAGE}/test_text.py",
)


@dataclass(frozen=True)
class Extra:
    name: str  # litforge's extra (pyproject.toml [project.optional-dependencies])
    about: str
    files: tuple[str, ...] = ()  # project files that need it, left out without it
    # Depended on when its files ship. False: the files ship, the extra comes only with
    # `--with` (a heavy install for one example experiment; running it without names it).
    by_default: bool = True


# The extras a project depends on unless told `--without` (scaffold always: it updates).
EXTRAS: dict[str, Extra] = {
    extra.name: extra
    for extra in (
        Extra("sweeps", "Optuna sweeps (hparams_search=...)", ("conf/hparams_search/*",)),
        Extra("slurm", "hydra/launcher=slurm"),
        # A W&B sweep needs a W&B account: its extra comes when asked for, as hf's does.
        Extra("wandb", "Weights & Biases logger", ("conf/wandb_sweep.yaml",), by_default=False),
        Extra("tensorboard", "TensorBoard logger"),
        Extra("mlflow", "MLflow logger"),
        Extra("s3", "checkpoints on S3"),
        Extra(
            "hf",
            "Hugging Face models (experiment=hf_finetune)",
            (
                "conf/experiment/hf_finetune.yaml",
                "conf/model/hf_causal_lm.yaml",
                "conf/data/hf_text.yaml",
            ),
            by_default=False,
        ),  # fmt: skip
    )
}
ALWAYS = ("scaffold",)


def used_extras(minimal: bool) -> list[str]:
    """The extras whose capability the project's own files use (its Optuna sweeps): what a
    new project depends on beside `ALWAYS`. The Hugging Face experiment and the W&B sweep
    ship without their extras (transformers, peft, accelerate and wandb would make the first
    `make train` half again as long, for two examples); they, and the library's other options (logger=mlflow, hydra/launcher=slurm, an s3://
    checkpoint.dir), name their extra in one line when picked without it; `--with` adds
    them up front."""
    shipped = [
        extra
        for extra in EXTRAS.values()
        if extra.files
        and extra.by_default
        and not (minimal and all(f in GPT_FILES for f in extra.files))
    ]
    return [extra.name for extra in shipped]


def parse_without(text: str) -> list[str]:
    """`'wandb, s3'` -> `['wandb', 's3']`; a name that is not an extra is a ValueError."""
    return _extras("--without", text, "leave out")


def parse_with(text: str) -> list[str]:
    """`'mlflow,s3'` -> `['mlflow', 's3']`: extras to depend on beyond those the project's
    files use; a name that is not an extra is a ValueError."""
    return _extras("--with", text, "add")


def _extras(flag: str, text: str, verb: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in EXTRAS]
    if unknown:
        raise ValueError(
            f"{flag} {','.join(unknown)}: not an extra a project can {verb}; choose from "
            + ", ".join(f"{e.name} ({e.about})" for e in EXTRAS.values())
        )
    return names


def matches(pattern: str, path: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern)


def is_project_file(path: str) -> bool:
    return any(matches(p, path) for p in PROJECT_FILES)

"""Optional parts a new project can leave out (`--without a,b`, `--minimal`): each part names
its files (dropped together) and the lines of shared files that mention it (guarded).

Paths are the source repository's, with `{pkg}` for the package directory; `*` spans `/`.
A line rule (file, regex, count, alternative) guards `count` lines from each line where the
regex (multi-line mode, searched in the whole text) matches; `alternative` (text, newline
included) replaces them when the part is left out.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lines:
    file: str
    regex: str
    count: int = 1
    alternative: str | None = None


@dataclass(frozen=True)
class Part:
    name: str
    about: str
    files: tuple[str, ...]
    lines: tuple[Lines, ...] = field(default=())


PYPROJECT = "pyproject.toml"

PARTS: dict[str, Part] = {
    part.name: part
    for part in (
        Part(
            "wandb",
            "Weights & Biases logger, its sweep file and tests",
            files=(
                "src/{pkg}/tracking/wandb_logger.py",
                "src/{pkg}/conf/logger/wandb.yaml",
                "conf/wandb_sweep.yaml",
                "tests/loggers/test_wandb.py",
                "tests/loggers/test_wandb_sweep.py",
                "benchmarks/logger_overhead.py",
            ),
            lines=(
                Lines(PYPROJECT, r"^wandb = \["),
                Lines(PYPROJECT, r'^\s*"litforge\[wandb\]",'),
                Lines("src/{pkg}/conf/logger/many.yaml", r"^\s*- wandb\s*$"),
                Lines(
                    "src/{pkg}/conf/logger/many.yaml",
                    r"^# CSV, TensorBoard and Weights",
                    1,
                    "# CSV and TensorBoard together (each as in its own file here).\n",
                ),
                Lines("tests/e2e/test_cli.py", r"wandb.*offline-run-"),
                Lines("tests/test_architecture.py", r'^\s*\(\["logger=wandb"\], '),
                Lines("tests/sweeps/test_outcomes.py", r'overrides\("logger=many"\) ==', 3),
                Lines("benchmarks/run.py", r"^\s*logger_overhead,\s*$"),
                Lines("benchmarks/run.py", r'"loggers": lambda: logger_overhead'),
            ),
        ),
        Part(
            "s3",
            "S3 checkpoint store extras (s3fs, moto) and the tests against a local S3 server",
            files=(
                "tests/s3server.py",
                "tests/tcpproxy.py",
                "tests/checkpointing/test_s3_runs.py",
                "tests/checkpointing/test_hanging_store.py",
                "tests/checkpointing/test_store.py",
                "tests/checkpointing/test_lineage.py",
                "benchmarks/checkpoint_stall.py",
            ),
            lines=(
                Lines(PYPROJECT, r"^s3 = \["),
                Lines(PYPROJECT, r'^\s*"litforge\[s3\]",'),
                Lines(PYPROJECT, r'^\s*"(s3fs|moto\[server\]|boto3|botocore)=='),
                Lines(PYPROJECT, r"^\s*# s3fs \(through aiobotocore\)", 2),
                Lines("tests/conftest.py", r"^@pytest.fixture\n(?=def s3\()", 16),
                Lines(
                    "tests/test_benchmarks.py",
                    r"^def test_checkpoint_stall_reads_each_save_timing",
                    1,
                    "def _checkpoint_stall_reads_each_save_timing(tmp_path):  # needs the s3 part\n",
                ),
                Lines(
                    "tests/e2e/test_fsdp.py",
                    r"^def test_a_killed_fsdp_run_resumes_from_its_sharded_checkpoint_on_s3",
                    1,
                    "def _a_killed_fsdp_run_resumes_on_s3(s3, tmp_path):  # needs the s3 part\n",
                ),
                Lines("benchmarks/run.py", r"^\s*checkpoint_stall,\s*$"),
                Lines("benchmarks/run.py", r'"checkpoint": lambda: checkpoint_stall'),
            ),
        ),
        Part(
            "sweeps",
            "the Optuna sweeper (hparams_search=...), its pruning callback, plugin and tests",
            files=(
                "src/{pkg}/sweeps/*",
                "src/hydra_plugins/{pkg}_optuna/*",
                "src/{pkg}/sweeps/pruning.py",
                "conf/hparams_search/*",
                "src/{pkg}/conf/hydra/sweeper/optuna.yaml",
                "src/{pkg}/conf/callbacks/optuna_pruning.yaml",
                "tests/sweeps/*",
                "tests/e2e/test_sweep.py",
                "tests/user_project/conf/hparams_search/*",
                "benchmarks/sweep_overhead.py",
            ),
            lines=(
                Lines(PYPROJECT, r"^# Sweeps: litforge's Optuna sweeper", 2),
                Lines(PYPROJECT, r'^\s*"litforge\[sweeps\]",'),
                Lines("conf/train.yaml", r"^\s*- hparams_search: null"),
                Lines(
                    "tests/test_user_code.py",
                    r"^def test_an_optuna_sweep_over_the_users_own_keys",
                    1,
                    "def _an_optuna_sweep_over_the_users_own_keys(tmp_path):  # needs the sweeper\n",
                ),
                Lines("benchmarks/run.py", r"^\s*sweep_overhead,\s*$"),
                Lines("benchmarks/run.py", r'"sweep": sweep_overhead'),
            ),
        ),
    )
}

# --minimal: the digits example only (no GPT, text data, benchmarks); not offered by name.
MINIMAL = Part(
    "gpt",
    "the character-level GPT, text data, precision A/B experiment, benchmarks",
    files=(
        "src/{pkg}/nets/gpt.py",
        "src/{pkg}/models/language_model.py",
        "src/{pkg}/data/text.py",
        "conf/model/gpt.yaml",
        "conf/data/text.yaml",
        "conf/experiment/gpt_char.yaml",
        "conf/experiment/precision_ab.yaml",
        "conf/hparams_search/gpt_char_optuna.yaml",
        "benchmarks/*",
        "tests/test_benchmarks.py",
        "tests/nets/test_gpt.py",
        "tests/data/test_text.py",
        "tests/test_precision_ab.py",
        "tests/test_budget.py",
        "tests/test_eval.py",
        "tests/test_precision_settings.py",
        "tests/callbacks/test_throughput.py",
        "tests/callbacks/test_numerics.py",
        "tests/callbacks/test_final_validation.py",
        "tests/sweeps/test_search_space.py",
        "tests/data/test_loaders.py",
        "tests/e2e/test_fsdp.py",  # FSDP shards the GPT's blocks; the CNN has none
    ),
    lines=(
        Lines("Makefile", r"^# CPU benchmark suite", 4),
        Lines("Makefile", r"^# The same run in float32 and each mixed precision", 5),
        Lines(
            "tests/test_train.py",
            r'^MODELS = \{"cnn": \[\], "gpt": TINY_GPT\}',
            1,
            'MODELS = {"cnn": []}\n',
        ),
        # Rules of keys only the precision A/B config has (test_schema fails on a rule that
        # matches no key).
        Lines("src/{pkg}/validation/schema.py", r'^\s*"precision_ab\.(threshold|smooth_steps)":'),
        Lines("src/{pkg}/validation/schema.py", r'^\s*"precision_ab\.compare": Either\($', 3),
        Lines("tests/test_train.py", r'"experiment=gpt_char": \[\*TINY_GPT'),
        Lines("tests/test_train.py", r'"gradient_checkpointing": \[\*TINY_GPT'),
        Lines(
            "tests/test_bad_input.py",
            r'"model=cnnn is not an option of conf/model/: cnn, gpt"',
            1,
            '    (["model=cnnn"], "model=cnnn is not an option of conf/model/: cnn"),\n',
        ),
        Lines("tests/test_bad_input.py", r'^\s*\(\["data=text"\]'),
        Lines("tests/test_bad_input.py", r'^\s*\(\["experiment=gpt_char", '),
        Lines("tests/e2e/test_cli.py", r'\(\["model=gpt"\], "model=gpt reads block_size'),
        Lines(
            "tests/e2e/test_cli.py",
            r"^def test_gpt_char_experiment_learns_text",
            1,
            "def _gpt_char_experiment_learns_text(tmp_path):  # needs the GPT (not in --minimal)\n",
        ),
        Lines(
            "tests/checkpointing/test_resume_exact.py",
            r"^def test_gpt_with_checkpointing_and_accumulation",
            1,
            "def _gpt_with_checkpointing_and_accumulation_resumes_bitwise(tmp_path):  # needs the GPT\n",
        ),
    ),
)


def parse_without(text: str) -> list[str]:
    """`'wandb, s3'` -> `['wandb', 's3']`; a name that is not a part is a ValueError."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PARTS]
    if unknown:
        raise ValueError(
            f"--without {','.join(unknown)}: not an optional part; choose from "
            + ", ".join(f"{p.name} ({p.about})" for p in PARTS.values())
        )
    return names


def matches(pattern: str, path: str, pkg: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern.replace("{pkg}", pkg))


def all_parts() -> list[Part]:
    """Every part a template can leave out, the --minimal one last."""
    return [*PARTS.values(), MINIMAL]

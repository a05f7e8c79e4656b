"""Which of litforge's extras installs a missing package, so its absence is one line.

litforge imports an extra's packages only where its capability runs (pyproject.toml,
[project.optional-dependencies]); a run that needs one it lacks is told which to install.
"""

from __future__ import annotations

# top-level module -> the extra that installs it
EXTRA_OF = {
    "wandb": "wandb",
    "tensorboard": "tensorboard",
    "tensorboardX": "tensorboard",
    "mlflow": "mlflow",
    "optuna": "sweeps",
    "cmaes": "sweeps",
    "psycopg": "postgres",
    "optuna_dashboard": "dashboard",
    "hydra_plugins.hydra_joblib_launcher": "sweeps",
    "submitit": "slurm",
    "hydra_plugins.hydra_submitit_launcher": "slurm",
    "copier": "scaffold",
    "s3fs": "s3",
    "gcsfs": "gcs",
    "adlfs": "azure",
    "transformers": "hf",
    "tokenizers": "hf",
    "peft": "hf",
    "accelerate": "hf",
    "bitsandbytes": "qlora",
    "sky": "cloud",
    "pyarrow": "parquet",
}


def missing_extra(err: BaseException) -> str | None:
    """`the wandb package is not installed: pip install 'litforge[wandb]'` when `err`
    (or its cause) is a missing package of one of litforge's extras, else None."""
    while err is not None:
        if isinstance(err, ImportError):
            name = getattr(err, "name", None) or ""
            text = str(err)
            for module, extra in EXTRA_OF.items():
                if name == module or name.startswith(module + ".") or f"`{module}`" in text:
                    return f"the {module} package is not installed: {_how_to_add(extra)}"
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return None


def _how_to_add(extra: str) -> str:
    """How to install `extra` here: in a project that pins litforge in its pyproject.toml
    (as `make new-project` writes it), through that pin, which `make train` reinstalls when
    the file changes; a plain `pip install 'litforge[...]'` there could fetch another
    litforge than the pinned one."""
    import re
    from pathlib import Path

    pyproject = Path.cwd() / "pyproject.toml"
    try:
        text = pyproject.read_text()
    except (OSError, UnicodeDecodeError):
        text = ""
    # litforge's own pyproject.toml names litforge[...] too (extras built of extras)
    own = re.search(r"^name\s*=\s*[\"']litforge[\"']", text, re.MULTILINE)
    pins = re.search(r"[\"']litforge\[[\w,\s-]*\]", text)
    if pins and not own and (Path.cwd() / "Makefile").is_file():
        return f"add {extra} to litforge[...] in pyproject.toml, then make train installs it"
    return f"pip install 'litforge[{extra}]'"


def require(*modules: str) -> None:
    """At the top of a module that needs one of `modules` (any one will do): raise the
    ModuleNotFoundError of the first when none is installed, so the config check that
    imports the module (validation.targets) says which extra to install before training."""
    import importlib.util

    if all(importlib.util.find_spec(m) is None for m in modules):
        raise ModuleNotFoundError(f"No module named {modules[0]!r}", name=modules[0])

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
                    return f"the {module} package is not installed: pip install 'litforge[{extra}]'"
        err = err.__cause__ or err.__context__  # type: ignore[assignment]
    return None


def require(*modules: str) -> None:
    """At the top of a module that needs one of `modules` (any one will do): raise the
    ModuleNotFoundError of the first when none is installed, so the config check that
    imports the module (validation.targets) says which extra to install before training."""
    import importlib.util

    if all(importlib.util.find_spec(m) is None for m in modules):
        raise ModuleNotFoundError(f"No module named {modules[0]!r}", name=modules[0])

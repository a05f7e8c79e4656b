"""MLflow (an extra: `pip install -e ".[mlflow]"`), checked before training.

The default tracking store is a SQLite file in the run directory (MLflow 3 refuses its
`file:` store unless MLFLOW_ALLOW_FILE_STORE=true); point `tracking_uri` at a shared
server or database to see many runs together. The run id is kept in
`save_dir/mlflow-run-id`, so a resumed run continues the same MLflow run.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.rank_zero import rank_zero_only

from litforge.errors import ConfigError
from litforge.extras import require
from litforge.tracking import run_ids

require("mlflow")  # its extra (pyproject.toml); missing: one line before any training

ID_FILE = run_ids.MLFLOW


def mlflow_logger(
    save_dir: str,
    tracking_uri: str,
    experiment_name: str = "litforge",
    run_name: str | None = None,
    tags: dict[str, Any] | None = None,
    timeout_s: float = 10.0,
    parent_run: str | None = None,
) -> Any:
    """Lightning's MLFlowLogger, after checking that mlflow is installed and the tracking
    URI answers."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise ConfigError(
            'logger=mlflow needs MLflow: pip install -e ".[mlflow]" (mlflow-skinny, '
            "sqlalchemy, alembic)"
        ) from None
    _check_reachable(tracking_uri, timeout_s)
    run_id = run_ids.read(Path(save_dir), ID_FILE)
    tags = dict(tags or {})
    if parent_run and rank_zero_only.rank == 0:
        tags["mlflow.parentRunId"] = _parent_run_id(tracking_uri, experiment_name, parent_run)
    logger = _resumable()(
        experiment_name=experiment_name,
        run_name=run_name,
        tracking_uri=tracking_uri,
        tags=tags,
        run_id=run_id,
    )
    if run_id is None:
        run_ids.keep(Path(save_dir), ID_FILE, logger.run_id)
    return logger


def _parent_run_id(tracking_uri: str, experiment_name: str, name: str) -> str:
    """The run that holds a sweep's trials as nested runs (tag `litforge.parent=<name>`),
    created by the first trial that needs it."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    experiment_id = (
        experiment.experiment_id if experiment else client.create_experiment(experiment_name)
    )
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.`litforge.parent` = '{name}'", max_results=1
    )
    if found:
        return found[0].info.run_id
    parent = client.create_run(experiment_id, run_name=name, tags={"litforge.parent": name})
    client.set_terminated(parent.info.run_id)
    return parent.info.run_id


def _resumable() -> type:
    """MLFlowLogger whose hyperparameters may be logged again by a resumed run: MLflow
    refuses to change a logged param, so a changed value (e.g. a raised max_epochs) is
    kept as the tag `resumed/<key>` and the original param stays."""
    from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
    from lightning.pytorch.loggers import MLFlowLogger

    class ResumableMLFlowLogger(MLFlowLogger):
        @rank_zero_only
        def log_hyperparams(self, params: Any) -> None:
            flat = {k: str(v)[:250] for k, v in _flatten_dict(_convert_params(params)).items()}
            logged = self.experiment.get_run(self.run_id).data.params
            for key, value in flat.items():
                if key in logged and logged[key] != value:
                    self.experiment.set_tag(self.run_id, f"resumed/{key}", value)
            super().log_hyperparams({k: v for k, v in flat.items() if k not in logged})

    return ResumableMLFlowLogger


def _check_reachable(uri: str, timeout_s: float) -> None:
    scheme = uri.partition("://")[0] if "://" in uri else "file"
    if scheme in ("http", "https"):
        try:
            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s)
        except (urllib.error.URLError, OSError) as err:
            raise ConfigError(
                f"logger.mlflow.tracking_uri={uri}: the tracking server does not answer "
                f"({getattr(err, 'reason', err)}); start it, or use sqlite:///PATH"
            ) from None
    elif scheme == "sqlite":
        path = Path(uri.split(":///", 1)[-1])
        if not path.parent.exists() and rank_zero_only.rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
    elif scheme == "file":
        raise ConfigError(
            f"logger.mlflow.tracking_uri={uri}: MLflow 3 refuses its file store by default; "
            "use sqlite:///PATH (the default) or an http(s):// tracking server"
        )

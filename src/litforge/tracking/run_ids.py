"""The tracked-run ids a resumed run continues, kept as one-line files in the run directory.

tracking.carry_ids / keep_ids copy these files beside the checkpoints, so a run resumed on
another machine (a lost spot instance) continues the same W&B / MLflow run.
"""

from __future__ import annotations

from pathlib import Path

from lightning.fabric.utilities.rank_zero import rank_zero_only

WANDB = "wandb-run-id"
MLFLOW = "mlflow-run-id"
ALL = (WANDB, MLFLOW)


def read(run_dir: Path, name: str) -> str | None:
    """The id kept in `run_dir/name`, or None for a run that has none yet."""
    path = run_dir / name
    return path.read_text().strip() if path.is_file() else None


def keep(run_dir: Path, name: str, run_id: str) -> None:
    """Rank 0 writes the id; the other ranks' loggers do not log."""
    if rank_zero_only.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(run_id + "\n")

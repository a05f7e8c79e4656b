"""The command that evaluates a checkpoint as it was trained, from its run's record.

A run directory holds Hydra's record of the overrides the run was given
(`.hydra/overrides.yaml`). When `eval.py ckpt_path=...` is configured for another model
than the checkpoint's, the exact command that matches it is the best hint. The record is
data someone else could have written: it is read with `yaml.safe_load`, only a short list
of short strings is used, and nothing is built from it: it is printed for a person to run.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

_MAX_OVERRIDES = 100
_MAX_RECORD_BYTES = 100_000  # a record is a few hundred bytes; more is not one
_MAX_LENGTH = 300
_NOT_CARRIED = ("hydra.", "ckpt_path=", "run_name=", "resume=", "restore.")


def eval_command(checkpoint: str) -> str | None:
    """`python eval.py OVERRIDES ckpt_path=CHECKPOINT` for a local checkpoint whose run
    directory (two levels up: RUN_DIR/checkpoints/step-N.ckpt) records its overrides; None
    when there is no such record or it is not a list of strings."""
    if "://" in checkpoint:
        return None
    run_dir = Path(checkpoint).absolute().parent.parent
    try:
        with (run_dir / ".hydra" / "overrides.yaml").open("rb") as stream:
            text = stream.read(_MAX_RECORD_BYTES).decode()
        record = yaml.safe_load(text)
    except Exception:  # noqa: BLE001 - only a hint: a record that does not read gives none
        return None
    if not isinstance(record, list) or len(record) > _MAX_OVERRIDES:
        return None
    if not all(isinstance(item, str) and 0 < len(item) <= _MAX_LENGTH for item in record):
        return None
    kept = [item for item in record if not item.lstrip("+~").startswith(_NOT_CARRIED)]
    return shlex.join(["python", "eval.py", *kept, f"ckpt_path={checkpoint}"])

"""Which checkpoint a run continues from: resolved by us, not by `ckpt_path="last"`; and
what a rerun of a run that had already finished says."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from omegaconf import DictConfig

from litforge import console
from litforge.callbacks.epoch_log import epoch_scalars
from litforge.checkpointing import checkpoint_file
from litforge.checkpointing.start import own_what
from litforge.checkpointing.store import MARKER_SUFFIX, CheckpointStore, Manifest, digest, remove
from litforge.errors import ConfigError, LitforgeError

log = logging.getLogger("litforge")


def newest_complete(
    store: CheckpointStore, staging_dir: Path, model: DictConfig, sharded: bool = False
) -> tuple[Path, str] | None:
    """`newest_intact`, checked as a resume checks it: it must load safely and come from
    the configured `model` (ConfigError otherwise)."""
    found = newest_intact(store, staging_dir)
    if found is not None:
        what = own_what(str(store), found[1])
        checkpoint_file.check_resumable(found[0], model, what, sharded)
    return found


def newest_intact(store: CheckpointStore, staging_dir: Path) -> tuple[Path, str] | None:
    """The newest checkpoint with a marker and intact bytes, as a local file, and its name.

    Newer files without a marker, or whose size or sha256 disagree with it, are skipped
    with a warning naming them. None when the directory holds no checkpoint at all; a
    ConfigError when it holds some but none is complete and intact.
    """
    names = store.names()
    if not names:
        return None
    for name in reversed(names):
        try:
            manifest = store.manifest(name)
        except FileNotFoundError:
            log.warning("skipping %s/%s: no completeness marker (interrupted upload?)", store, name)
            continue
        except ValueError as err:
            log.warning("skipping %s/%s: its completeness marker %s%s is unreadable (%s)",
                        store, name, name, MARKER_SUFFIX, err)  # fmt: skip
            continue
        local = store.local_copy(name, staging_dir, "resume")
        if digest(local) != (manifest.bytes, manifest.sha256):
            log.warning(
                "skipping %s/%s: size or sha256 differs from its marker (corrupt)", store, name
            )
            continue
        return local, name
    raise ConfigError(
        f"checkpoints exist at {store} ({', '.join(names)}) but none is complete and intact; "
        "refusing to start from scratch silently. Pass resume=never to start fresh, or "
        "ckpt_path=FILE to pick one"
    )


def upload_staged(store: CheckpointStore, staging_dir: Path) -> list[str]:
    """Upload the complete staged copies a previous attempt could not (a store outage),
    with their markers, oldest first; returns their names.

    Runs before the resume point is chosen, so a rerun continues from the newest checkpoint
    anywhere, and before anything could overwrite a staged copy. A staged copy is removed
    only once its upload committed, or when the store already holds the same bytes.
    """
    if store.is_local:
        return []
    committed = {m.name: m for m in store.manifests()}
    uploaded = []
    for marker in sorted(Path(staging_dir).glob(f"step-*.ckpt{MARKER_SUFFIX}")):
        try:
            manifest = Manifest.from_json(marker.read_bytes())
            if marker.name != manifest.name + MARKER_SUFFIX:
                raise ValueError(f"it names {manifest.name}")
        except (OSError, ValueError) as err:  # a marker torn by a crash, or changed
            log.warning("staged marker %s is unreadable (%s); left where it is", marker, err)
            continue
        local = marker.with_name(manifest.name)
        if not local.exists() or digest(local)[1] != manifest.sha256:
            log.warning("staged %s does not match its marker; left where it is", local)
            continue
        remote = committed.get(manifest.name)
        if remote is not None and remote.sha256 != manifest.sha256:
            log.warning("staged %s differs from %s/%s; left where it is", local, store, local.name)
            continue
        if remote is None:
            try:
                store.upload(local, manifest)
            except Exception as err:  # noqa: BLE001 - any backend error: not uploaded
                raise LitforgeError(
                    f"could not upload the staged checkpoint {local} to {store} "
                    f"({type(err).__name__}); it stays there. Run again once the store answers"
                ) from err
            uploaded.append(manifest.name)
        remove(local)
        marker.unlink()
    return uploaded


# What the recipe writes into metrics.json itself, as facts of this fit.
_RECIPE_FIELDS = {"global_step", "epoch", "effective_batch_size"}


class AlreadyFinished(L.Callback):
    """A rerun whose checkpoint already reached trainer.max_steps or max_epochs trains
    nothing and logs nothing: it says so, and its metrics are the run's own, from
    run_dir/metrics.json (put back among the trainer's metrics, so the recipe reports and
    writes them again instead of an empty set)."""

    def __init__(self, run_dir: Path) -> None:
        self.metrics_file = Path(run_dir) / "metrics.json"
        self._resumed = False
        self._trained = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._resumed = self._trained = False

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._resumed = self._resumed or trainer.state.fn == TrainerFn.FITTING

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        # Not on_train_start: Lightning calls it (and on_train_end) when a checkpoint taken
        # at an epoch's end finishes the run, with no batch left to train.
        self._trained = True

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._resumed or self._trained:
            return
        if trainer.max_steps != -1 and trainer.global_step >= trainer.max_steps:
            limit = f"trainer.max_steps={trainer.max_steps}"
        elif trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
            limit = f"trainer.max_epochs={trainer.max_epochs}"
        else:
            return
        said = (
            f"the run had already finished (step {trainer.global_step}, {limit}): nothing trained"
        )
        earlier = _numbers(self.metrics_file)
        if not earlier:
            console.info("%s; %s holds no metrics of it (raise %s to train on)", said,
                         self.metrics_file, limit.partition("=")[0])  # fmt: skip
            return
        for name, value in earlier.items():
            trainer.callback_metrics.setdefault(name, torch.tensor(value, dtype=torch.float64))
        # As the `finished:` line shows them: X_step and X_epoch beside X left out.
        shown = ", ".join(f"{k}={v:.4g}" for k, v in epoch_scalars(earlier).items())
        console.info("%s; its metrics, from %s: %s", said, self.metrics_file, shown)


def _numbers(path: Path) -> dict[str, float]:
    """The logged metrics of a metrics.json (numbers, not the recipe's own fields)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict):
        return {}
    return {
        k: float(v)
        for k, v in record.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in _RECIPE_FIELDS
        and not (isinstance(v, int) and abs(v) > 1e308)  # float() of it would raise
    }  # fmt: skip

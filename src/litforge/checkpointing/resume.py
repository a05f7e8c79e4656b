"""Which checkpoint a run continues from: resolved by us, not by `ckpt_path="last"`."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from litforge.checkpointing import checkpoint_file
from litforge.checkpointing.store import MARKER_SUFFIX, CheckpointStore, Manifest, digest, remove
from litforge.errors import ConfigError, LitforgeError

log = logging.getLogger("litforge")


def newest_complete(
    store: CheckpointStore, staging_dir: Path, model: DictConfig, sharded: bool = False
) -> tuple[Path, str] | None:
    """The newest checkpoint with a marker and intact bytes, as a local file, and its name;
    it must load safely and come from the configured `model` (ConfigError otherwise).

    Newer files without a marker, or whose size or sha256 disagree with it, are skipped
    with a warning naming them. None when the directory holds no checkpoint at all.
    """
    names = store.names()
    if not names:
        return None
    manifests = {m.name: m for m in store.manifests()}
    for name in reversed(names):
        manifest = manifests.get(name)
        if manifest is None:
            log.warning("skipping %s/%s: no completeness marker (interrupted upload?)", store, name)
            continue
        local = store.local_copy(name, staging_dir, "resume")
        if digest(local) != (manifest.bytes, manifest.sha256):
            log.warning(
                "skipping %s/%s: size or sha256 differs from its marker (corrupt)", store, name
            )
            continue
        what = f"the checkpoint to resume, {store}/{name} (resume=never starts over),"
        checkpoint_file.check_resumable(local, model, what, sharded)
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
        manifest = Manifest.from_json(marker.read_text())
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

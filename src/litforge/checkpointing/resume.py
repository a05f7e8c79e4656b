"""Which checkpoint a run continues from: resolved by us, not by `ckpt_path="last"`."""

from __future__ import annotations

import logging
from pathlib import Path

from litforge.checkpointing import checkpoint_file
from litforge.checkpointing.store import CheckpointStore, sha256_of
from litforge.errors import ConfigError

log = logging.getLogger("litforge")


def newest_complete(store: CheckpointStore, staging_dir: Path) -> tuple[Path, str] | None:
    """The newest checkpoint with a marker and intact bytes, as a local file, and its name.

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
        if local.stat().st_size != manifest.bytes or sha256_of(local) != manifest.sha256:
            log.warning(
                "skipping %s/%s: size or sha256 differs from its marker (corrupt)", store, name
            )
            continue
        checkpoint_file.load(str(local))  # refuses pickled objects with a clear error
        return local, name
    raise ConfigError(
        f"checkpoints exist at {store} ({', '.join(names)}) but none is complete and intact; "
        "refusing to start from scratch silently. Pass resume=never to start fresh, or "
        "ckpt_path=FILE to pick one"
    )

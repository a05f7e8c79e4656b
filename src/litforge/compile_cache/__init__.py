"""The compile cache: with `compile.enabled=true` and checkpoints on a store, inductor's
on-disk caches are kept beside the checkpoints, signed, and fetched by a run on a fresh
machine. It attaches as a callback of the config (conf/callbacks/compile_cache.yaml) and
finds the run's checkpoint store among the Trainer's callbacks at fit start.

callback.py     the callback, and the config's factory for it (`when_enabled`)
archive.py      the archive as data from a bucket: its key, signature, bounded fetch, unpacking
local_files.py  this machine's cache directories, their files, a tar of them, torch's counters
"""

from __future__ import annotations

from litforge.compile_cache.callback import CompileCache, when_enabled

__all__ = ["CompileCache", "when_enabled"]

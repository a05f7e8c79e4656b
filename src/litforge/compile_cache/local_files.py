"""This machine's compile caches as files: where they lie, what they hold, a tar of them,
and torch's own count of cache hits and misses."""

from __future__ import annotations

import os
import platform
import re
import tarfile
from pathlib import Path

import torch

FOLDER = "compile-cache"
# Locks and half-written files: never worth carrying, and a lock restored elsewhere blocks.
_SKIP = re.compile(r"(\.lock$|\.tmp|^tmp)")

Files = dict[str, tuple[int, int]]  # archive member name -> (size, mtime_ns)


def local_roots() -> dict[str, Path]:
    """The cache directories by their name in the archive."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    roots = {"inductor": Path(cache_dir())}
    triton = os.environ.get("TRITON_CACHE_DIR")
    if triton and not Path(triton).resolve().is_relative_to(roots["inductor"].resolve()):
        roots["triton"] = Path(triton)
    return roots


def archive_name(device: torch.device) -> str:
    """This torch and card's archive, relative to the checkpoint directory."""
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
    key = re.sub(r"[^A-Za-z0-9.+-]+", "_", f"torch-{torch.__version__}-{card}")
    return f"{FOLDER}/{key}.tar"


def scan(roots: dict[str, Path]) -> Files:
    """Every cache file under `roots`, by archive member name."""
    found: Files = {}
    for prefix, root in roots.items():
        for path in root.rglob("*") if root.is_dir() else ():
            if path.is_file() and not path.is_symlink() and not _SKIP.search(path.name):
                stat = path.stat()
                found[f"{prefix}/{path.relative_to(root).as_posix()}"] = (
                    stat.st_size,
                    stat.st_mtime_ns,
                )
    return found


def pack(files: Files, roots: dict[str, Path], archive: Path) -> int:
    """A tar of `files` at `archive`; returns its size in bytes."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w") as tar:
        for member in sorted(files):
            prefix, _, relative = member.partition("/")
            path = roots[prefix] / relative
            if path.is_file():  # inductor may have replaced it since the scan
                tar.add(path, arcname=member, recursive=False)
    return archive.stat().st_size


def lookups() -> dict[str, int]:
    """This process's compile-cache hits and misses so far: inductor's FX graphs and
    AOTAutograd's entries (torch's own counters)."""
    from torch._dynamo.utils import counters

    return {
        f"{kind}_{outcome}": int(counters[group][f"{prefix}_{outcome}"])
        for kind, group, prefix in (
            ("fx_graph", "inductor", "fxgraph_cache"),
            ("aot_autograd", "aot_autograd", "autograd_cache"),
        )
        for outcome in ("hit", "miss")
    }

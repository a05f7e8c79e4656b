"""Writes that land at once, outside any fsspec transaction.

fsspec keeps one transaction per (cached) filesystem instance, shared by every thread, and
Lightning saves each checkpoint inside `with fs.transaction` on that same instance
(lightning.fabric.utilities.cloud_io._atomic_save). A write from another thread meanwhile,
such as the run lock's heartbeat or a background upload's completeness marker, would be
deferred into Lightning's transaction: committed only with that checkpoint, lost when its
save fails, and failing the save when the deferred file's own directory is gone.
"""

from __future__ import annotations

from typing import Any


def write_now(fs: Any, path: str, data: bytes) -> None:
    """`fs.pipe_file(path, data)`, committed when it returns whatever transaction is open."""
    with fs.open(path, "wb", autocommit=True) as file:
        file.write(data)

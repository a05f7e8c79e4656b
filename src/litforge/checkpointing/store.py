"""A checkpoint directory on any fsspec filesystem, with completeness markers.

A checkpoint `step-00000120.ckpt` (a file, or under trainer=fsdp a directory of one shard
per process) counts only once `step-00000120.ckpt.complete` exists:
a JSON manifest (size, sha256, step, monitored metric) written after the upload
succeeded. A crash mid-upload leaves a file without a marker, which resume skips.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

from fsspec.core import url_to_fs

from litforge.checkpointing.direct_write import write_now
from litforge.checkpointing.marker import (  # noqa: F401 - their home before marker.py
    _MAX_MARKER_BYTES,
    MARKER_SUFFIX,
    Manifest,
    checkpoint_name,
    step_of,
)
from litforge.errors import STORE_ADVICE, ConfigError, redact_url
from litforge.extras import missing_extra


def download_dir(staging_dir: Path, purpose: str) -> Path:
    """A per-process place for downloads: DDP ranks fetch the same object concurrently."""
    return Path(staging_dir) / purpose / f"pid{os.getpid()}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def digest(path: Path) -> tuple[int, str]:
    """Size and sha256 of a checkpoint: a file, or a sharded checkpoint's directory (its
    files' relative names and hashes, in order, hashed again)."""
    if not path.is_dir():
        return path.stat().st_size, sha256_of(path)
    files = sorted(f for f in path.rglob("*") if f.is_file())
    listing = "".join(f"{f.relative_to(path).as_posix()}\0{sha256_of(f)}\n" for f in files)
    return sum(f.stat().st_size for f in files), hashlib.sha256(listing.encode()).hexdigest()


def remove(path: Path) -> None:
    """Delete a local checkpoint, a file or a sharded checkpoint's directory."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _s3_timeouts(options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """botocore's connect and read timeouts default to 60 s, each retried: a silent
    endpoint held a save for minutes. Bound them by timeout_s unless set explicitly."""
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("connect_timeout", timeout_s)
    config.setdefault("read_timeout", timeout_s)
    config.setdefault("retries", {"max_attempts": 2})
    return {**options, "config_kwargs": config}


class CheckpointStore:
    """One run's checkpoint directory at `url` (s3://, gs://, az://, file://, a local path).

    storage_options: keyword arguments of the fsspec filesystem (e.g. s3fs's
    `config_kwargs` for botocore timeouts and retries); never credentials, which come from
    the environment.
    """

    def __init__(
        self,
        url: str,
        storage_options: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        scheme, sep, rest = str(url).partition("://")
        if sep and not rest.strip("/"):
            raise ConfigError(f"checkpoint.dir={url} has no location after {scheme}://")
        self.url = str(url).rstrip("/")
        self.timeout_s = timeout_s
        options = dict(storage_options or {})
        if timeout_s and scheme in ("s3", "s3a"):
            options = _s3_timeouts(options, timeout_s)
        try:
            self.fs, self.root = url_to_fs(self.url, **options)
        except Exception as err:  # noqa: BLE001 - unknown protocol, missing package, bad host
            extra = missing_extra(err)
            if extra is not None:
                raise ConfigError(f"checkpoint.dir={redact_url(self.url)}: {extra}") from None
            raise ConfigError(
                f"checkpoint.dir={redact_url(self.url)} is not a usable URL "
                f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}). Give a local "
                "path or an fsspec URL such as s3://bucket/prefix (needs s3fs), gs://... (gcsfs)"
            ) from err
        self.is_local = "file" in (
            self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        )

    def __str__(self) -> str:
        return redact_url(self.url)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def check_access(self) -> None:
        """Fail at start-up, not at the first save, on bad credentials, a missing bucket or
        an endpoint that does not answer within `timeout_s`."""
        if self.timeout_s is None:
            self._probe()
            return
        errors: list[BaseException] = []

        def probe() -> None:
            try:
                self._probe()
            except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
                errors.append(err)

        # A daemon thread: a probe stuck on a silent endpoint must not hold the exit.
        thread = threading.Thread(target=probe, name="litforge-store-probe", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            raise ConfigError(
                f"checkpoint.dir={self}: no answer within {self.timeout_s:g} s "
                "(checkpoint.timeout_s). Check the endpoint (AWS_ENDPOINT_URL for S3-compatible "
                "stores) and the network, or raise checkpoint.timeout_s"
            )
        if errors:
            raise errors[0]

    def _probe(self) -> None:
        # Every DDP rank (and node) probes at start-up: one probe object each.
        probe = self.path(f".litforge-write-test-{socket.gethostname()}-{os.getpid()}")
        bucket = self.root.split("/")[0]
        if not self.is_local and not bucket:
            raise ConfigError(f"checkpoint.dir={self} names no bucket; use s3://BUCKET/prefix")
        try:
            if self.is_local:
                self.fs.makedirs(self.root, exist_ok=True)
            else:
                # Never create buckets: a typo would silently send checkpoints elsewhere.
                # (info, not exists: exists() turns credential errors into False.)
                try:
                    self.fs.info(bucket)
                except FileNotFoundError:
                    raise FileNotFoundError(f"bucket {bucket!r} does not exist") from None
            self.fs.pipe_file(probe, b"ok")
            self.fs.rm_file(probe)
        except Exception as err:  # noqa: BLE001 - each backend raises its own types
            what = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if self.is_local:
                raise ConfigError(
                    f"checkpoint.dir={self}: cannot write there ({what}). Give a directory "
                    "this user may write to (a path, or an fsspec URL such as s3://BUCKET/prefix)"
                ) from err
            raise ConfigError(
                f"checkpoint.dir={self}: cannot write there ({what}). {STORE_ADVICE}"
            ) from err

    def upload(self, local: Path, manifest: Manifest) -> None:
        """Copy the checkpoint (unless it was saved in place), then write its marker: the
        commit. A sharded checkpoint's directory goes file by file."""
        target = self.path(manifest.name)
        if not (self.is_local and Path(target).resolve() == local.resolve()):
            if local.is_dir():
                for file in sorted(f for f in local.rglob("*") if f.is_file()):
                    self.fs.put_file(str(file), f"{target}/{file.relative_to(local).as_posix()}")
            else:
                self.fs.put_file(str(local), target)
        write_now(self.fs, self.path(manifest.name + MARKER_SUFFIX), manifest.to_json().encode())

    def local_copy(self, name: str, staging_dir: Path, purpose: str) -> Path:
        """The file itself for a local store; else a per-process download under staging_dir."""
        if self.is_local:
            return Path(self.path(name))
        return self.download(name, download_dir(staging_dir, purpose) / name)

    def download(self, name: str, local: Path) -> Path:
        """A checkpoint to `local`: a file, or a sharded checkpoint's directory."""
        local.parent.mkdir(parents=True, exist_ok=True)
        remote = self.path(name)
        if not self._isdir(remote):
            self.fs.get_file(remote, str(local))
            return local
        remove(local)
        for file in self.fs.find(remote):
            relative = file[len(remote.rstrip("/")) + 1 :] if file.startswith(remote) else None
            if relative is None:  # some backends drop the leading slash or the protocol
                relative = file.rsplit(f"/{name}/", 1)[-1]
            (local / relative).parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(file, str(local / relative))
        return local

    def _isdir(self, path: str) -> bool:
        # Not from s3fs's listing cache: another rank may have written the checkpoint since.
        self.fs.invalidate_cache(self.root)
        return self.fs.isdir(path)

    def names(self) -> list[str]:
        """Checkpoint file names present (complete or not), oldest step first."""
        try:
            entries = self.fs.ls(self.root, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = [Path(e).name for e in entries]
        return sorted((n for n in names if step_of(n) is not None), key=step_of)

    def set_aside(self) -> str | None:
        """Move every checkpoint and marker into a new `superseded-<time>` folder here.

        A fresh start on a used location (resume=never, an explicit ckpt_path) begins a new
        lineage: the old run is kept, out of sight of resume, retention and "best".
        Returns the folder's URL, or None when there was nothing to move.
        """
        try:
            entries = [Path(e).name for e in self.fs.ls(self.root, detail=False, refresh=True)]
        except FileNotFoundError:
            return None
        ours = [n for n in entries if step_of(n.removesuffix(MARKER_SUFFIX)) is not None]
        if not ours:
            return None
        folder = f"superseded-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        if self.is_local:
            self.fs.makedirs(self.path(folder), exist_ok=True)
        # Markers first: a move cut short leaves a checkpoint without its marker behind,
        # which resume skips, never one that counts in both places.
        for name in sorted(ours, key=lambda n: not n.endswith(MARKER_SUFFIX)):
            self.fs.mv(self.path(name), self.path(f"{folder}/{name}"), recursive=True)
        return f"{self}/{folder}"

    def manifest(self, name: str) -> Manifest:
        """The marker of checkpoint `name`: FileNotFoundError without one, ValueError (one
        line) when it is unreadable or names another checkpoint."""
        # A marker is a few hundred bytes: one ranged read, never a whole hostile object.
        text = self.fs.cat_file(self.path(name + MARKER_SUFFIX), start=0, end=_MAX_MARKER_BYTES + 1)
        if len(text) > _MAX_MARKER_BYTES:
            raise ValueError(f"over {_MAX_MARKER_BYTES} bytes")
        manifest = Manifest.from_json(text)
        if manifest.name != name:
            raise ValueError(f"it names {manifest.name}")
        return manifest

    def manifests(self) -> list[Manifest]:
        """Markers of complete checkpoints, oldest step first; unreadable markers are skipped."""
        found = []
        for name in self.names():
            try:
                found.append(self.manifest(name))
            except (FileNotFoundError, ValueError):
                continue
        return found

    def delete(self, name: str) -> None:
        # Marker first: a half-deleted checkpoint must never look complete.
        for path in (self.path(name + MARKER_SUFFIX), self.path(name)):
            if self._isdir(path):  # a sharded checkpoint
                self.fs.rm(path, recursive=True)
            elif self.fs.exists(path):
                self.fs.rm_file(path)

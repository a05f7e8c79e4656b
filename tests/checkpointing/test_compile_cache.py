"""compile.cache: inductor's caches saved beside the checkpoints, signed, and fetched by a
run on a machine whose cache is empty only when the signature verifies, with a plain
LightningModule its user compiled and Lightning's own ModelCheckpoint saving (real
inductor, in this process: each fit on its own cache directory, torch's in-memory caches
cleared between them)."""

from __future__ import annotations

import io
import json
import logging
import tarfile
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from litforge import build
from litforge.checkpointing.callback import StoreCheckpoint
from litforge.checkpointing.store import CheckpointStore
from litforge.compile_cache.archive import (
    KEY_ENV,
    NO_KEY,
    ArchiveRefused,
    fetch_verified,
    signature,
    unpack,
)
from litforge.compile_cache.callback import CompileCache
from litforge.compile_cache.local_files import archive_name, lookups
from litforge.errors import ConfigError

ARCHIVE = archive_name(torch.device("cpu"))
KEY = b"a-test-key-of-32-characters-0001"


class Net(nn.Module):  # dynamo skips a torch.nn class's own forward: a user's module
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.layer(x))


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


def fit(tmp_path: Path, name: str, cache_dir: Path, store: str, monkeypatch, key=KEY) -> dict:
    """One fit of 2 steps compiled with inductor whose cache is `cache_dir` (a fresh machine
    when empty) and whose archives are signed with `key`; returns its run.json's
    compile_cache record."""
    from torch._dynamo.utils import counters
    from torch._inductor.utils import clear_caches

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache_dir))
    torch._dynamo.reset()
    clear_caches()
    counters.clear()
    run_dir = tmp_path / name
    run_dir.mkdir()
    model = Tiny()
    model.net.compile(backend="inductor")
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            CompileCache(CheckpointStore(store), run_dir / "staging", run_dir, key=key),
            L.pytorch.callbacks.ModelCheckpoint(run_dir / "ckpt", every_n_train_steps=2),
        ],
    )
    trainer.fit(model)
    assert trainer.global_step == 2  # trained on, whatever the cache held
    for path in run_dir.rglob("*"):  # the key never lands in a checkpoint or a record
        assert not path.is_file() or key not in path.read_bytes(), path
    return json.loads((run_dir / "run.json").read_text())["compile_cache"]


def members(store: str) -> set[str]:
    with tarfile.open(
        fileobj=io.BytesIO(CheckpointStore(store).fs.cat_file(f"{store}/{ARCHIVE}"))
    ) as tar:
        return set(tar.getnames())


def tampered(archive: bytes, marker: Path) -> bytes:
    """The archive with one line prepended to each of its `.py` members: it would write
    `marker` when inductor imports the file."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive)) as source,
        tarfile.open(fileobj=out, mode="w") as tar,
    ):
        for member in source.getmembers():
            data = source.extractfile(member).read()
            if member.name.endswith(".py"):
                data = f"open({str(marker)!r}, 'w').write('ran')\n".encode() + data
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def test_a_fresh_machine_fetches_only_a_signed_archive(s3, tmp_path, monkeypatch, caplog):
    store, first_cache = "s3://litforge/runs/compiled", tmp_path / "machine-1"
    fs = CheckpointStore(store).fs
    (first_cache / "elsewhere").mkdir(parents=True)
    (first_cache / "elsewhere" / "another-run.py").write_text("# not this run's")
    fs.pipe_file(f"{store}/{ARCHIVE}", b"not a tar")  # anyone's, unsigned
    with caplog.at_level(logging.INFO, logger="litforge"):
        first = fit(tmp_path, "first", first_cache, store, monkeypatch)
    assert f"{store}/{ARCHIVE} has no signature" in caplog.text
    assert first["fetched_files"] == 0 and first["fx_graph_miss"] > 0
    saved = members(store)  # the unsigned archive replaced by this run's, signed
    assert saved and all(m.startswith("inductor/") for m in saved)
    assert "inductor/elsewhere/another-run.py" not in saved  # only what this run added
    assert any(m.endswith(".py") for m in saved)  # code inductor imports on a hit
    # Someone with write access to the bucket, not the key, adds a line to each .py file.
    marker = tmp_path / "attacker-ran"
    fs.pipe_file(f"{store}/{ARCHIVE}", tampered(fs.cat_file(f"{store}/{ARCHIVE}"), marker))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="litforge"):
        refused = fit(tmp_path, "tampered", tmp_path / "machine-2", store, monkeypatch)
    assert not marker.exists()  # nothing of it ran: it was never unpacked
    assert not (tmp_path / "machine-2" / "elsewhere").exists()
    said = [r.getMessage() for r in caplog.records if "does not match its signature" in r.message]
    assert len(said) == 1 and f"{store}/{ARCHIVE}" in said[0], caplog.text
    assert refused["fetched_files"] == 0 and refused["fx_graph_miss"] > 0  # only the compile
    # That run compiled, so it saved its own signed archive: another machine, its cache
    # empty (and at another path), gets every graph as a hit.
    resaved = members(store)
    third = fit(tmp_path, "third", tmp_path / "machine-3", store, monkeypatch)
    assert third["fetched_files"] == len(resaved)
    assert third["fx_graph_miss"] == 0 and third["fx_graph_hit"] > 0
    assert not marker.exists()
    # It compiled nothing new, so it uploaded nothing: the archive is the one it fetched.
    assert members(store) == resaved


def test_without_a_key_nothing_is_fetched(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(KEY_ENV, raising=False)
    store = tmp_path / "store"
    built = tmp_path / "built.tar"
    write_tar(built, {"inductor/fx/graph.py": b"raise SystemExit('ran')"})
    (store / ARCHIVE).parent.mkdir(parents=True)
    (store / ARCHIVE).write_bytes(built.read_bytes())
    (store / f"{ARCHIVE}.sig").write_text(signature(KEY, ARCHIVE, built))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    trainer = L.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=False,
                        callbacks=[CompileCache(CheckpointStore(str(store)), tmp_path / "st",
                                                run_dir, key=None)])  # fmt: skip
    with caplog.at_level(logging.INFO, logger="litforge"):
        trainer.fit(Tiny())
    assert caplog.text.count(NO_KEY) == 1
    assert trainer.global_step == 1 and not (tmp_path / "cache").exists()
    assert json.loads((run_dir / "run.json").read_text())["compile_cache"] == {"off": "no key"}


def write_tar(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def put_signed(store: Path, name: str, archive: Path, key: bytes = KEY) -> None:
    (store / name).parent.mkdir(parents=True, exist_ok=True)
    (store / name).write_bytes(archive.read_bytes())
    (store / f"{name}.sig").write_text(signature(key, name, archive))


def test_only_the_key_and_the_name_it_was_signed_under_verify(tmp_path):
    archive = tmp_path / "built.tar"
    write_tar(archive, {"inductor/fx/a": b"x"})
    store_dir = tmp_path / "store"
    store = CheckpointStore(str(store_dir))
    put_signed(store_dir, ARCHIVE, archive)
    fetch_verified(store, ARCHIVE, KEY, tmp_path / "got.tar", 10**6)
    assert (tmp_path / "got.tar").read_bytes() == archive.read_bytes()
    with pytest.raises(ArchiveRefused, match="does not match its signature"):
        fetch_verified(store, ARCHIVE, b"another-key-of-32-characters-002", tmp_path / "g", 10**6)
    # A valid archive and signature copied under another card's name: a replay, refused.
    other = "compile-cache/torch-2.0-NVIDIA_H100.tar"
    (store_dir / other).write_bytes((store_dir / ARCHIVE).read_bytes())
    (store_dir / f"{other}.sig").write_bytes((store_dir / f"{ARCHIVE}.sig").read_bytes())
    with pytest.raises(ArchiveRefused, match=f"{other} does not match its signature"):
        fetch_verified(store, other, KEY, tmp_path / "g", 10**6)
    (store_dir / f"{ARCHIVE}.sig").unlink()
    with pytest.raises(ArchiveRefused, match="has no signature"):
        fetch_verified(store, ARCHIVE, KEY, tmp_path / "g", 10**6)


def test_an_archive_over_the_limit_is_not_downloaded(tmp_path):
    archive = tmp_path / "built.tar"
    write_tar(archive, {"inductor/fx/a": bytes(20_000)})
    store_dir = tmp_path / "store"
    put_signed(store_dir, ARCHIVE, archive)
    with pytest.raises(ArchiveRefused, match=r"over compile.cache_max_bytes=10000"):
        fetch_verified(CheckpointStore(str(store_dir)), ARCHIVE, KEY, tmp_path / "g", 10_000)
    assert not (tmp_path / "g").exists()


def test_on_a_local_store_the_archive_is_renamed_into_place(tmp_path):
    archive = tmp_path / "built.tar"
    with tarfile.open(archive, "w"):
        pass
    store = tmp_path / "store"
    cache = CompileCache(CheckpointStore(str(store)), tmp_path / "staging", None, key=KEY)
    cache._name = ARCHIVE
    cache._send(archive, signature(KEY, ARCHIVE, archive), archive.stat().st_size, step=4)
    assert (store / ARCHIVE).read_bytes() == archive.read_bytes()
    assert (store / f"{ARCHIVE}.sig").read_text() == signature(KEY, ARCHIVE, archive)
    assert not list((store / ARCHIVE).parent.glob("*.partial"))


def test_a_file_already_there_is_kept(tmp_path):
    root = tmp_path / "cache"
    (root / "fx").mkdir(parents=True)
    (root / "fx" / "kept").write_text("local")
    archive = tmp_path / "a.tar"
    write_tar(archive, {"inductor/fx/kept": b"remote", "inductor/fx/new": b"remote"})
    assert unpack(archive, {"inductor": root}, 10**6) == 1
    assert (root / "fx" / "kept").read_text() == "local"
    assert (root / "fx" / "new").read_text() == "remote"
    assert not list(root.glob(".litforge-unpack-*"))


def hostile(kind: str, path: Path) -> None:
    """A tar at `path` that is not plain files under the cache."""
    if kind == "gzip":  # 10 MB of zeros in a few KB, under the .tar name
        with tarfile.open(path, "w:gz") as tar:
            info = tarfile.TarInfo("inductor/fx/big")
            info.size = 10**7
            tar.addfile(info, io.BytesIO(bytes(10**7)))
        return
    with tarfile.open(path, "w") as tar:
        tar.addfile(*_safe("inductor/fx/fine"))  # refused with the rest: all or nothing
        names = {"parent": "inductor/../../escaped", "absolute": "/escaped",
                 "unknown-root": "elsewhere/x"}  # fmt: skip
        info = tarfile.TarInfo(names.get(kind, "inductor/fx/x"))
        if kind in ("symlink", "hardlink"):
            info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        elif kind == "device":
            info.type = tarfile.CHRTYPE
            tar.addfile(info)
        elif kind == "oversize":
            info.size = 2 * 10**6
            tar.addfile(info, io.BytesIO(bytes(info.size)))
        else:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))


def _safe(name: str) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = 2
    return info, io.BytesIO(b"ok")


@pytest.mark.parametrize(
    "kind",
    ["gzip", "symlink", "hardlink", "device", "parent", "absolute", "unknown-root", "oversize"],
)
def test_only_plain_files_inside_the_cache_are_unpacked(tmp_path, kind):
    archive = tmp_path / "a.tar"
    hostile(kind, archive)
    root = tmp_path / "cache"
    with pytest.raises(ArchiveRefused, match=f"^{archive}[: ]"):
        unpack(archive, {"inductor": root}, 10**6, str(archive))
    assert not (tmp_path / "escaped").exists()
    assert not [p for p in root.rglob("*") if p.is_file()]  # nothing added, not even "fine"


def built(cfg) -> list[CompileCache]:
    """The compile cache the config's callbacks give (conf/callbacks/compile_cache.yaml)."""
    return [c for c in build.build_callbacks(cfg) if isinstance(c, CompileCache)]


def test_the_key_comes_from_a_local_file_or_the_environment(make_cfg, tmp_path, monkeypatch):
    on = ["compile.enabled=true"]
    monkeypatch.delenv(KEY_ENV, raising=False)
    (cache,) = built(make_cfg(*on))
    assert cache._key is None
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    (cache,) = built(make_cfg(*on, "compile.cache_max_bytes=5000"))
    assert (cache._key, cache.max_bytes) == (KEY, 5000)
    key_file = tmp_path / "key"
    key_file.write_text("a-key-from-a-file-of-32-chars-03\n")
    (cache,) = built(make_cfg(*on, f"compile.cache_key_file={key_file}"))
    assert cache._key == b"a-key-from-a-file-of-32-chars-03"  # the file wins over the environment
    missing = f"compile.cache_key_file={tmp_path / 'absent'}"
    with pytest.raises(ConfigError, match=f"^{missing} cannot be read"):
        built(make_cfg(*on, missing))
    monkeypatch.setenv(KEY_ENV, "short-secret")
    with pytest.raises(ConfigError, match=f"{KEY_ENV}: the compile-cache key is 12 ch") as err:
        built(make_cfg(*on))
    assert "short-secret" not in str(err.value)  # the key itself never in a message


@pytest.mark.parametrize(
    ("overrides", "attached"),
    [
        ([], False),
        (["compile.enabled=true"], True),
        (["compile.enabled=true", "compile.cache=false"], False),
        (["compile.enabled=true", "compile.backend=aot_eager"], False),  # keeps no files
        (["compile.enabled=true", "checkpoint=none"], False),  # nowhere to keep it
    ],
)
def test_attached_when_compiling_with_inductor(make_cfg, overrides, attached):
    assert len(built(make_cfg(*overrides))) == attached


def test_it_keeps_the_cache_beside_the_run_checkpoints(tmp_path, monkeypatch):
    """Built by the config, it finds the store and staging directory of the run's saver
    among the Trainer's callbacks; without a saver it does nothing."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    store = CheckpointStore(str(tmp_path / "store"))
    saver = StoreCheckpoint(store, tmp_path / "staging")
    cache = CompileCache(run_dir=tmp_path, key=KEY)
    trainer = L.Trainer(accelerator="cpu", logger=False, callbacks=[cache, saver],
                        enable_checkpointing=False)  # fmt: skip
    assert cache._beside_checkpoints(trainer)
    assert (cache._store, cache._staging_dir) == (store, tmp_path / "staging")
    alone = CompileCache(run_dir=tmp_path, key=KEY)
    assert not alone._beside_checkpoints(L.Trainer(accelerator="cpu", logger=False,
                                                   callbacks=[alone]))  # fmt: skip
    assert alone._store is None


def test_lookups_are_torch_counters():
    assert set(lookups()) == {"fx_graph_hit", "fx_graph_miss", "aot_autograd_hit",
                              "aot_autograd_miss"}  # fmt: skip

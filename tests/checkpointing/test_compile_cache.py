"""compile.cache: inductor's caches saved beside the checkpoints and fetched by a run on a
machine whose cache is empty, with a plain LightningModule its user compiled and Lightning's
own ModelCheckpoint saving (real inductor, in this process: two fits, each on its own cache
directory, torch's in-memory caches cleared between them)."""

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

from litforge.checkpointing import compile_cache
from litforge.checkpointing.compile_cache import CompileCache, archive_name, lookups
from litforge.checkpointing.store import CheckpointStore

ARCHIVE = archive_name(torch.device("cpu"))


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


def fit(tmp_path: Path, name: str, cache_dir: Path, store: str, monkeypatch) -> dict:
    """One fit of 2 steps compiled with inductor whose cache is `cache_dir` (a fresh machine
    when empty); returns its run.json's compile_cache record."""
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
            CompileCache(CheckpointStore(store), run_dir / "staging", run_dir),
            L.pytorch.callbacks.ModelCheckpoint(run_dir / "ckpt", every_n_train_steps=2),
        ],
    )
    trainer.fit(model)
    return json.loads((run_dir / "run.json").read_text())["compile_cache"]


def members(store: str) -> set[str]:
    with tarfile.open(
        fileobj=io.BytesIO(CheckpointStore(store).fs.cat_file(f"{store}/{ARCHIVE}"))
    ) as tar:
        return set(tar.getnames())


def test_a_fresh_machine_fetches_what_the_first_run_compiled(s3, tmp_path, monkeypatch, caplog):
    store, first_cache = "s3://litforge/runs/compiled", tmp_path / "machine-1"
    (first_cache / "elsewhere").mkdir(parents=True)
    (first_cache / "elsewhere" / "another-run.py").write_text("# not this run's")
    CheckpointStore(store).fs.pipe_file(f"{store}/{ARCHIVE}", b"not a tar")  # damaged
    with caplog.at_level(logging.INFO, logger="litforge"):
        first = fit(tmp_path, "first", first_cache, store, monkeypatch)
    assert "is unreadable" in caplog.text and "compiling from scratch" in caplog.text
    assert first["fetched_files"] == 0 and first["fx_graph_miss"] > 0
    saved = members(store)  # the damaged archive replaced by this run's
    assert saved and all(m.startswith("inductor/") for m in saved)
    assert "inductor/elsewhere/another-run.py" not in saved  # only what this run added
    # Another machine, its cache empty (and at another path): every graph is a hit.
    second_cache = tmp_path / "machine-2"
    second = fit(tmp_path, "second", second_cache, store, monkeypatch)
    assert second["fetched_files"] == len(saved)
    assert second["fx_graph_miss"] == 0 and second["fx_graph_hit"] > 0
    # It compiled nothing new, so it uploaded nothing: the archive is the first run's.
    assert members(store) == saved
    assert not (second_cache / "elsewhere").exists()


def test_on_a_local_store_the_archive_is_renamed_into_place(tmp_path):
    archive = tmp_path / "built.tar"
    with tarfile.open(archive, "w"):
        pass
    store = tmp_path / "store"
    cache = CompileCache(CheckpointStore(str(store)), tmp_path / "staging", None)
    cache._name = ARCHIVE
    cache._send(archive, archive.stat().st_size, step=4)
    assert (store / ARCHIVE).read_bytes() == archive.read_bytes()
    assert not list((store / ARCHIVE).parent.glob("*.partial"))


def test_a_file_already_there_is_kept_and_a_member_outside_is_refused(tmp_path):
    root = tmp_path / "cache"
    (root / "fx").mkdir(parents=True)
    (root / "fx" / "kept").write_text("local")
    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tar:
        for name, text in (("inductor/fx/kept", "remote"), ("inductor/fx/new", "remote")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    assert compile_cache.unpack(archive, {"inductor": root}) == 1
    assert (root / "fx" / "kept").read_text() == "local"
    assert (root / "fx" / "new").read_text() == "remote"
    assert not list(root.glob(".litforge-unpack-*"))
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("inductor/../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.TarError):
        compile_cache.unpack(archive, {"inductor": root})
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize(
    ("overrides", "attached"),
    [
        ([], False),
        (["compile.enabled=true"], True),
        (["compile.enabled=true", "compile.cache=false"], False),
        (["compile.enabled=true", "compile.backend=aot_eager"], False),  # keeps no files
    ],
)
def test_attached_when_compiling_with_inductor(make_cfg, tmp_path, overrides, attached):
    cfg = make_cfg(*overrides)
    found = compile_cache.attach(cfg, CheckpointStore(str(tmp_path / "s")), tmp_path / "st")
    assert [type(c) for c in found] == ([CompileCache] if attached else [])


def test_lookups_are_torch_counters():
    assert set(lookups()) == {"fx_graph_hit", "fx_graph_miss", "aot_autograd_hit",
                              "aot_autograd_miss"}  # fmt: skip

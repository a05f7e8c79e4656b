"""microbatch.auto: an out-of-memory step splits its batches into pieces and runs again,
keeping the effective batch and the data order, so the model trained is the one an
uninterrupted run trains."""

from __future__ import annotations

import logging
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from litforge.callbacks.auto_microbatch import AutoMicrobatch, split
from litforge.errors import ConfigError
from litforge.exits import explained
from litforge.monitors.out_of_memory import OutOfMemory
from litforge.training import train

RUN = ["trainer=cpu", "trainer.max_steps=6", "checkpoint.every_n_train_steps=3", "test=false",
       "model.net.dropout=0", "data.batch_size=32", "trainer.val_check_interval=3"]  # fmt: skip


def oom(phase: str, above: int = 0) -> list[str]:
    return ["microbatch.auto=true", "+callbacks.oom._target_=tests.helpers.OutOfMemoryAbove",
            f"+callbacks.oom.phase={phase}", f"+callbacks.oom.above={above}"]  # fmt: skip


def last_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    newest = max(run_dir.rglob("*step-00000006*.ckpt"), key=lambda p: p.stat().st_mtime)
    checkpoint = torch.load(newest, map_location="cpu", weights_only=False)
    return checkpoint["state_dict"], checkpoint["callbacks"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, torch.Tensor]:
    from tests.conftest import compose

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    train(compose(RUN, run_dir, "train"))
    return last_weights(run_dir)[0]


def assert_same_model(weights: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]):
    assert weights.keys() == reference.keys()
    for name, tensor in weights.items():
        # The same samples summed in another order: float32 rounding, no more.
        torch.testing.assert_close(tensor, reference[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize(
    ("phase", "above", "accumulate", "parts"),
    [("forward", 8, 1, 4), ("backward", 8, 2, 2), ("optimizer", 0, 1, 2)],
)
def test_a_step_out_of_memory_runs_again_in_pieces_and_trains_the_same_model(
    make_cfg, tmp_path, caplog, uninterrupted, phase, above, accumulate, parts
):
    micro = 32 // accumulate
    overrides = [*RUN, f"data.batch_size={micro}", f"trainer.accumulate_grad_batches={accumulate}"]
    with caplog.at_level(logging.WARNING):
        metrics = train(make_cfg(*overrides, *oom(phase, above)))
    weights, callbacks = last_weights(tmp_path / "run")
    assert_same_model(weights, uninterrupted)
    assert metrics["effective_batch_size"] == 32
    assert callbacks["AutoMicrobatch"]["parts"] == parts  # a resumed run starts split
    said = [r.getMessage() for r in caplog.records if "microbatch.auto" in r.getMessage()]
    assert said, caplog.text
    first = said[0]
    assert f"microbatch.auto: out of memory in the {phase}" in first
    assert f"micro-batch {micro} -> {micro // 2}" in first
    assert f"accumulation {accumulate} -> {accumulate * 2}" in first
    assert first.endswith(f"data.batch_size={micro // parts} "
                          f"trainer.accumulate_grad_batches={accumulate * parts}") or len(said) > 1  # fmt: skip


def test_one_sample_per_piece_still_out_of_memory_ends_with_the_report(make_cfg):
    with pytest.raises(OutOfMemory) as stop, explained():
        train(make_cfg(*RUN, "data.batch_size=4", *oom("forward", 0)))
    assert str(stop.value).startswith("out of memory in the forward at optimizer step 0")


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["data.batch_size=1"], "microbatch.auto=true with data.batch_size=1: a micro-batch"),
        (
            ["trainer=ddp", "trainer.devices=2"],
            "microbatch.auto=true runs in one process; this run has 2",
        ),  # fmt: skip
        (["callbacks=none"], "microbatch.auto=true is carried out by callbacks.auto_microbatch"),
    ],
)
def test_a_setting_it_cannot_shrink_is_one_line_before_training(make_cfg, overrides, said):
    with pytest.raises(ConfigError, match=said):
        train(make_cfg(*RUN, "microbatch.auto=true", *overrides))


class PlainModel(L.LightningModule):
    """Written the way Lightning users write one: a dict batch, a dict output."""

    def __init__(self, above: int) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.above = above
        self.sizes: list[int] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int):
        self.sizes.append(len(batch["x"]))
        if len(batch["x"]) > self.above:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        loss = nn.functional.mse_loss(self.layer(batch["x"]), batch["y"])
        return {"loss": loss, "rows": len(batch["x"])}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def dict_loader() -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(45, 4, generator=generator), torch.randn(45, 1, generator=generator)
    return DataLoader([{"x": a, "y": b} for a, b in zip(x, y, strict=True)], batch_size=10)


def fit_plain(tmp_path: Path, above: int, callbacks: list[L.Callback]) -> PlainModel:
    torch.manual_seed(0)
    model = PlainModel(above=above)
    trainer = L.Trainer(max_epochs=1, callbacks=callbacks, logger=False, accelerator="cpu",
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, train_dataloaders=dict_loader())
    return model


def test_a_plain_lightning_module_with_dict_batches_and_an_uneven_last_piece(tmp_path):
    reference = fit_plain(tmp_path, above=10, callbacks=[])
    model = fit_plain(tmp_path, above=5, callbacks=[AutoMicrobatch()])
    # 10 fails, then halves of 5 to the end; the last batch (5) in pieces of 2 and 3.
    assert model.sizes == [10, 5, 5, 5, 5, 5, 5, 5, 5, 2, 3]
    torch.testing.assert_close(model.layer.weight, reference.layer.weight)
    torch.testing.assert_close(model.layer.bias, reference.layer.bias)


def test_split_cuts_tensors_of_the_batch_and_shares_the_rest():
    batch = {"x": torch.arange(10).view(5, 2), "mask": torch.ones(3), "n": 7}
    pieces = split(batch, 5, 2)
    assert [count for _, count in pieces] == [2, 3]
    assert pieces[0][0]["x"].tolist() == [[0, 1], [2, 3]]
    assert pieces[1][0]["x"].tolist() == [[4, 5], [6, 7], [8, 9]]
    assert pieces[1][0]["mask"].shape == (3,) and pieces[1][0]["n"] == 7


@pytest.mark.gpu
def test_a_real_cuda_out_of_memory_shrinks_and_trains(tmp_path):
    """A card capped at 1.5 GiB: a batch of 16,384 rows through four 4096-wide layers
    needs about 2 GiB of activations; a quarter of it fits."""
    device = torch.device("cuda")
    torch.cuda.set_per_process_memory_fraction(
        1.5 * 2**30 / torch.cuda.get_device_properties(device).total_memory
    )
    try:
        wide = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(4096, 4096), nn.ReLU())])

        class Wide(L.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.net = wide

            def training_step(self, batch, batch_idx):
                return self.net(batch[0]).square().mean()

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=1e-3)

        data = TensorDataset(torch.randn(2 * 16384, 4096))
        shrink = AutoMicrobatch()
        trainer = L.Trainer(max_steps=2, callbacks=[shrink], logger=False, accelerator="gpu",
                            devices=1, enable_checkpointing=False, enable_progress_bar=False,
                            default_root_dir=tmp_path)  # fmt: skip
        trainer.fit(Wide(), train_dataloaders=DataLoader(data, batch_size=16384))
        assert shrink.parts >= 2 and trainer.global_step == 2
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()


def test_batches_it_cannot_split_are_refused_at_the_first_batch(tmp_path):
    class Words(PlainModel):
        def training_step(self, batch, batch_idx):
            raise AssertionError("no step runs")

    trainer = L.Trainer(max_steps=1, callbacks=[AutoMicrobatch()], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        default_root_dir=tmp_path)  # fmt: skip
    words = DataLoader(["a", "b", "c", "d"], batch_size=2)
    with pytest.raises(ConfigError, match="cannot split this DataModule's batches: it needs a"):
        trainer.fit(Words(above=10), train_dataloaders=words)

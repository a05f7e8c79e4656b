"""The plain epoch lines: each epoch's own metrics, whatever their names, the last epoch
included, the monitored metric first; a validation inside an epoch shows only its own."""

from __future__ import annotations

import logging
import re

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from litforge.callbacks.epoch_log import EpochLog


class NamedLikeLHT(L.LightningModule):
    """Logs values that say which epoch and batch they come from, under the names
    lightning-hydra-template users write (`train_loss`, `val_loss`, a best-so-far)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        self.log("train_loss", float(10 * self.current_epoch + batch_idx), on_epoch=True)
        return self.layer(batch[0]).sum()

    def on_train_epoch_end(self) -> None:
        self.log("epochs_done", float(self.current_epoch + 1))

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", float(100 + self.current_epoch))

    def on_validation_epoch_end(self) -> None:
        self.log("val_loss_best", float(100))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit(
    tmp_path, max_epochs=3, ckpt_path=None, save_on_train_epoch_end=None, **trainer_args
) -> list[str]:
    data = TensorDataset(torch.zeros(16, 2))
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        max_epochs=max_epochs,
        callbacks=[
            EpochLog(),
            ModelCheckpoint(
                tmp_path, monitor="val_loss", save_on_train_epoch_end=save_on_train_epoch_end
            ),
        ],
        **trainer_args,
    )
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("litforge")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        loaders = DataLoader(data, batch_size=4), DataLoader(data, batch_size=4)
        trainer.fit(NamedLikeLHT(), *loaders, ckpt_path=ckpt_path)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return [r for r in records if r.startswith("epoch ")]


def values(line: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"(\S+)=(\S+)", line)}


def test_each_epoch_line_holds_that_epochs_own_metrics(tmp_path):
    lines = fit(tmp_path)
    assert [line.split(":")[0] for line in lines] == [
        "epoch 0 step 4",
        "epoch 1 step 8",
        "epoch 2 step 12",  # the last epoch's line is written too
    ]
    for epoch, line in enumerate(lines):
        assert line.split(": ")[1].startswith("val_loss="), line  # the monitored one first
        assert values(line) == {
            "val_loss": 100 + epoch,
            "train_loss": 10 * epoch + 1.5,  # the mean of batches 0..3 of this epoch
            "epochs_done": epoch + 1,  # logged in the module's on_train_epoch_end
            "val_loss_best": 100,
        }, line


def test_a_validation_inside_an_epoch_shows_only_its_own_metrics(tmp_path):
    lines = fit(tmp_path, val_check_interval=2, max_epochs=1)
    assert len(lines) == 2, lines
    assert values(lines[0]) == {"val_loss": 100, "val_loss_best": 100}  # no stale train value
    assert lines[0].startswith("epoch 0 step 2:")
    assert values(lines[1])["train_loss"] == 1.5


def test_a_run_resumed_at_an_epochs_end_writes_no_empty_line_for_it(tmp_path):
    """The run that trained the epoch wrote its line; resumed from a checkpoint saved at its
    closing validation (as litforge's are), Lightning ends that epoch again, with no batch
    and no metric."""
    fit(tmp_path, max_epochs=1, save_on_train_epoch_end=False)
    (ckpt,) = tmp_path.glob("*.ckpt")
    lines = fit(tmp_path, max_epochs=2, ckpt_path=ckpt)
    assert [line.split(":")[0] for line in lines] == ["epoch 1 step 8"], lines
    assert values(lines[0])["train_loss"] == 11.5


def test_a_validation_that_ends_fit_mid_epoch_is_written_once_with_the_epoch(tmp_path):
    """max_steps reached on a validating batch mid-epoch: that validation closes the epoch,
    so it is on the epoch's line (with the partial epoch's training metrics), not on two."""
    lines = fit(tmp_path, val_check_interval=2, max_steps=6)
    assert [line.split(":")[0] for line in lines] == [
        "epoch 0 step 2",
        "epoch 0 step 4",
        "epoch 1 step 6",
    ], lines
    assert values(lines[-1]) == {
        "val_loss": 101,
        "train_loss": 10.5,  # batches 0 and 1 of epoch 1
        "epochs_done": 2,
        "val_loss_best": 100,
    }

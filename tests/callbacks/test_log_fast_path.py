"""LogFastPath: the same logged values, without Lightning's walk of an unmoved metric."""

from __future__ import annotations

import threading

import lightning as L
import torch
from lightning.pytorch.trainer.connectors.logger_connector import result
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from litforge.callbacks import log_fast_path
from litforge.callbacks.log_fast_path import LogFastPath


class ManyLogs(L.LightningModule):
    """A plain module that logs several values per step, as #20388's reporter does."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.layer(x), y)
        for i in range(5):
            self.log(f"train/part{i}", loss * (i + 1), on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(callbacks: list[L.Callback]) -> dict[str, float]:
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    trainer = L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=callbacks,
    )  # fmt: skip
    trainer.fit(ManyLogs(), DataLoader(data, batch_size=8))
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def test_same_logged_values_with_and_without():
    assert fit([LogFastPath()]) == fit([])


def test_walks_no_unmoved_metric_during_fit_and_only_then(monkeypatch):
    walks: list[object] = []
    real = result.apply_to_collection

    def counting(data, *args, **kwargs):
        walks.append(data)
        return real(data, *args, **kwargs)

    monkeypatch.setattr(result, "apply_to_collection", counting)
    fit([])
    without = len(walks)
    walks.clear()
    fit([LogFastPath()])
    # 8 steps x 2 epochs x 5 logs walk without it; with it, only the first move of each.
    assert without >= 80 and len(walks) < without - 70
    assert not getattr(log_fast_path._active, "on", False)  # off again after teardown


def test_other_moves_take_lightnings_path():
    LogFastPath().setup(None, None, "fit")  # type: ignore[arg-type]
    try:
        metric = result._ResultMetric(result._Metadata("fx", "name"), is_tensor=True)
        metric.update(torch.tensor(2.0), 1)
        assert metric.to(torch.device("cpu")) is metric
        metric.to(torch.float64)  # a dtype: Lightning's walk, so it really converts
        assert metric.value.dtype == torch.float64
    finally:
        LogFastPath().teardown(None, None, "fit")  # type: ignore[arg-type]


def test_another_thread_is_not_affected():
    LogFastPath().setup(None, None, "fit")  # type: ignore[arg-type]
    seen: list[bool] = []
    try:
        thread = threading.Thread(
            target=lambda: seen.append(getattr(log_fast_path._active, "on", False))
        )
        thread.start()
        thread.join()
    finally:
        LogFastPath().teardown(None, None, "fit")  # type: ignore[arg-type]
    assert seen == [False]

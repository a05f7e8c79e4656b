"""The numerics watch in precision=fp8: float8 saturation and underflow, per layer."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from torch import nn

from litforge.monitors.numerics.callback import NumericsWatch
from litforge.monitors.numerics.float8 import FORMATS, cast_stats
from litforge.precision.fp8.training import Float8Precision


def test_one_outlier_flushes_a_tensorwise_cast_but_not_a_rowwise_one():
    x = torch.ones(4, 64)
    x[0, 0] = 1e6  # scale 448 / 1e6: every 1.0 becomes 4.5e-4, under e4m3's 2^-9 step
    amax, lost = cast_stats(x, "input", rowwise=False).tolist()
    assert amax == 1e6 and lost == pytest.approx(255 / 256)
    amax, lost = cast_stats(x, "input", rowwise=True).tolist()
    assert amax == 1e6 and lost == pytest.approx(63 / 256)  # only the outlier's own row
    assert cast_stats(torch.ones(4, 64), "input", rowwise=False).tolist() == [1.0, 0.0]
    x[1, 1] = math.inf
    assert cast_stats(x, "input", rowwise=False)[0] == math.inf  # saturates
    assert FORMATS["input"][0] == 448.0 and FORMATS["grad"][0] == 57344.0


class _Scaled(L.LightningModule):
    """A user's LightningModule whose input a test can blow up from a given step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32))
        self.blow_up_at = 2

    def training_step(self, batch, batch_idx):
        (x,) = batch
        if self.global_step == self.blow_up_at:
            x = x * math.inf
        return ((self.net(x).float() - 1.0) ** 2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_the_watch_names_the_float8_layer_that_saturated_first(tmp_path, caplog, recipe):
    torch.manual_seed(0)
    module = _Scaled()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)), 16)
    watch = NumericsWatch(policy="warn", activations=True)
    trainer = L.Trainer(accelerator="cpu", max_steps=4, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        plugins=[Float8Precision(recipe, min_dim=16, device="cpu")],
                        callbacks=[watch], default_root_dir=tmp_path)  # fmt: skip
    with caplog.at_level("INFO", logger="litforge"), pytest.raises(Exception, match="finite"):
        trainer.fit(module, data)  # warn trained on; the broken weights end the run
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "litforge")
    assert "numerics: non-finite loss at step 2 (precision bf16-mixed + float8 in 2 Linear" in text
    assert "precision=fp8-rowwise: a scale per row" in text
    table = text[text.index("numerics: float8 casts per Linear layer") :].splitlines()
    assert table[1].split()[0] == "net.0" and "saturates float8 from step 2" in table[1]

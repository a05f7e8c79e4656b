"""Gradient accumulation: 4 x 8 samples give the same optimizer step as 32 at once."""

from __future__ import annotations

import torch

from litforge import build


def _weights_after_one_step(make_cfg, batch_size: int, accumulate: int) -> dict[str, torch.Tensor]:
    cfg = make_cfg(
        f"data.batch_size={batch_size}",
        f"trainer.accumulate_grad_batches={accumulate}",
        "data.shuffle=false",  # the same 32 samples in both runs
        "model.net.dropout=0.0",
        "model.scheduler=null",
        "trainer.max_steps=1",  # optimizer steps, not batches
        "trainer.limit_val_batches=0",
        "trainer.enable_checkpointing=false",
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        "callbacks=none",
        "logger=none",
    )
    # SGD's step is linear in the gradient, so summation order moves weights by ~1e-9. AdamW's
    # first step is lr * g / (|g| + eps): a gradient near zero flips sign on rounding alone.
    cfg.model.optimizer = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.5}
    torch.manual_seed(0)
    module = build.build_module(cfg)
    trainer = build.build_trainer(cfg, enable_model_summary=False)
    trainer.fit(module, datamodule=build.build_datamodule(cfg))
    assert trainer.global_step == 1
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_accumulating_4x8_equals_one_batch_of_32(make_cfg):
    initial = _weights_after_one_step(make_cfg, 32, 1)
    accumulated = _weights_after_one_step(make_cfg, 8, 4)
    for name, weight in initial.items():
        # Float32 summation order differs by ~1e-9; a real difference is above 1e-4 (below).
        torch.testing.assert_close(accumulated[name], weight, rtol=0, atol=1e-6, msg=name)
    # Control: without accumulation the 8-sample step lands measurably elsewhere.
    small = _weights_after_one_step(make_cfg, 8, 1)
    assert max((small[n] - w).abs().max().item() for n, w in initial.items()) > 1e-4

"""The loader's worker count changes how fast a run reads, never what it trains: the
workers' base seed comes from the loader's own generator, not from the global RNG that
dropout draws from."""

from __future__ import annotations

import torch

from litforge.training import train


def test_zero_and_one_worker_end_with_the_same_weights(make_cfg, tmp_path):
    weights = {}
    for workers in (0, 1):
        run_dir = tmp_path / f"workers-{workers}"
        train(
            make_cfg(
                "debug=limit",
                "trainer.max_epochs=3",  # a new iterator each epoch without workers
                "test=false",
                "logger=none",
                f"data.num_workers={workers}",
                run_dir=run_dir,
            )
        )
        last = sorted((run_dir / "checkpoints").glob("step-*.ckpt"))[-1]
        weights[workers] = torch.load(last, weights_only=True)["state_dict"]
    assert weights[0].keys() == weights[1].keys()
    for name, value in weights[0].items():
        assert torch.equal(value, weights[1][name]), name

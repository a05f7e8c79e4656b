"""resume=auto, resume=never and an explicit ckpt_path, on the same run directory."""

from __future__ import annotations

import logging
import shutil

import torch

from litforge.training import train


def messages(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


def test_auto_never_and_explicit(make_cfg, tmp_path, caplog):
    run_dir = tmp_path / "run"
    caplog.set_level(logging.INFO, logger="litforge")
    first = train(make_cfg("debug=limit", "test=false", "checkpoint.keep_last=10"))
    assert first["global_step"] == 6
    step3 = tmp_path / "kept-step-3.ckpt"  # a copy: later runs prune their directory
    shutil.copy(run_dir / "checkpoints" / "step-00000003.ckpt", step3)
    weights_at_6 = torch.load(run_dir / "checkpoints" / "step-00000006.ckpt", weights_only=True)

    caplog.clear()  # auto: continues from step 6, which already ends the run
    again = train(make_cfg("debug=limit", "test=false", "checkpoint.keep_last=10"))
    assert "resuming from" in messages(caplog) and again["global_step"] == 6
    said = messages(caplog)
    assert (
        "the run had already finished (step 6, trainer.max_epochs=2): nothing trained; its "
        f"metrics, from {run_dir / 'metrics.json'}: "
    ) in said
    assert f"val/loss={first['val/loss']:.4g}" in said
    line = next(line for line in said.splitlines() if "already finished" in line)
    assert "train/loss=" in line and "train/loss_step" not in line  # as `finished:` shows it
    assert "train/loss_epoch" not in line
    # The end of the run reports (and metrics.json keeps) the metrics it finished with.
    assert again["val/loss"] == first["val/loss"] and again["val/acc"] == first["val/acc"]
    finished = next(line for line in said.splitlines() if line.startswith("finished: "))
    assert f"val/acc={first['val/acc']:.4g}, val/loss={first['val/loss']:.4g}" in finished

    caplog.clear()  # never: trains from step 0 again, overwriting nothing it resumed from
    fresh = train(make_cfg("debug=limit", "test=false", "resume=never", "seed=7"))
    assert "resume=never: starting fresh" in messages(caplog) and fresh["global_step"] == 6
    redone = torch.load(run_dir / "checkpoints" / "step-00000006.ckpt", weights_only=True)
    assert not torch.equal(
        redone["state_dict"]["net.head.5.weight"], weights_at_6["state_dict"]["net.head.5.weight"]
    )

    caplog.clear()  # explicit: another run directory continues from the step-3 file
    explicit = train(
        make_cfg("debug=limit", "test=false", f"ckpt_path={step3}", run_dir=tmp_path / "other")
    )
    assert f"resuming from ckpt_path={step3}" in messages(caplog)
    assert explicit["global_step"] == 6

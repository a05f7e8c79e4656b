"""A SIGTERM that lands while a run sets up (before its first step) saves at the first step
and stops, in a plain run and in a sweep's trial: the grace period is not spent training."""

from __future__ import annotations

import signal

import pytest
import torch

from litforge.checkpointing.preemption import Preempted
from litforge.sweeps import signals
from litforge.training import train

RUN = ["trainer.max_steps=50", "trainer.max_epochs=-1", "trainer.limit_val_batches=1",
       "trainer.num_sanity_val_steps=1", "test=false", "logger=none"]  # fmt: skip


# setup: before the run's own handler is in (a sweep's watch records it; outside a sweep
# the default handler ends the process, before any work); on_fit_start: before Lightning
# registers its handlers; sanity check: after them.
@pytest.mark.parametrize(
    ("hook", "in_sweep"),
    [("setup", True), ("on_fit_start", False), ("on_fit_start", True),
     ("on_sanity_check_start", False), ("on_sanity_check_start", True)],
)  # fmt: skip
def test_a_signal_during_setup_saves_at_the_first_step(make_cfg, tmp_path, hook, in_sweep):
    cfg = make_cfg(
        *RUN,
        "+callbacks.signal._target_=tests.checkpointing.signal_hooks.SignalAt",
        f"+callbacks.signal.hook={hook}",
    )
    watch = signals.SignalWatch()  # the sweep learns of the signal from Preempted
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted, match="SIGTERM received: saved a checkpoint at step 1 ") as err:
        if in_sweep:
            with watch.active():
                train(cfg)
        else:
            train(cfg)
    assert err.value.exit_code == 143
    saved = tmp_path / "run" / "checkpoints" / "step-00000001.ckpt"
    assert torch.load(saved, weights_only=True)["global_step"] == 1
    assert signal.getsignal(signal.SIGTERM) is before  # every handler given back


def test_a_run_that_fails_before_training_gives_its_handlers_back(make_cfg):
    before = signal.getsignal(signal.SIGTERM)
    cfg = make_cfg(*RUN, "+callbacks.fail._target_=tests.helpers.OutOfMemoryAt",
                   "+callbacks.fail.phase=sanity")  # fmt: skip
    with pytest.raises(Exception, match="tests.helpers.OutOfMemoryAt"):
        train(cfg)
    assert signal.getsignal(signal.SIGTERM) is before

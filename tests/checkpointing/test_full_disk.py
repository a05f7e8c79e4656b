"""A disk that fills up mid-run: a failed save is one warning and training goes on; only
the final save failing stops the run, in one line. The fault is injected into the local
file write (fsspec's, which Lightning saves through) after a number of bytes."""

from __future__ import annotations

import errno
import logging
import math
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileOpener

from litforge.checkpointing.callback import FinalSaveFailed
from litforge.training import train

CNN = ["experiment=digits_cnn", "trainer=cpu", "trainer.max_steps=6", "test=false",
       "trainer.limit_val_batches=1", "trainer.val_check_interval=2",
       "checkpoint.every_n_train_steps=1", "checkpoint.keep_last=10"]  # fmt: skip


@pytest.fixture
def full_disk(monkeypatch):
    """`full_disk(steps)`: saves of these steps' checkpoints fail with ENOSPC after 4 KiB."""
    failing: set[str] = set()
    write = LocalFileOpener.write

    def limited_write(self, data, *args, **kwargs):
        if any(name in str(self.path) for name in failing):
            if len(data) > 4096:
                write(self, data[:4096])
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, data, *args, **kwargs)

    monkeypatch.setattr(LocalFileOpener, "write", limited_write)
    return lambda *steps: failing.update(f"step-{s:08d}.ckpt" for s in steps)


def saved_steps(run_dir: Path) -> list[int]:
    files = sorted((run_dir / "checkpoints").glob("step-*.ckpt"))
    assert all((f.parent / (f.name + ".complete")).is_file() for f in files)
    return [int(f.stem.split("-")[1]) for f in files]


def test_failed_saves_are_one_warning_each_and_training_goes_on(
    make_cfg, tmp_path, full_disk, caplog
):
    full_disk(3, 4)
    with caplog.at_level(logging.WARNING, "litforge"):
        metrics = train(make_cfg(*CNN))
    assert metrics["global_step"] == 6 and math.isfinite(metrics["val/loss"])
    run_dir = tmp_path / "run"
    assert saved_steps(run_dir) == [1, 2, 5, 6]
    warnings = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    newest = (
        f"the newest complete checkpoint is step 2 ({run_dir / 'checkpoints'}/step-00000002.ckpt)"
    )
    assert warnings == [
        f"checkpoint of step {s} not written: No space left on device "
        f"({run_dir / 'checkpoints'}/step-{s:08d}.ckpt); training goes on, {newest}"
        for s in (3, 4, 4)  # step 4: saved at the step, tried again after its validation
    ]  # fmt: skip
    assert not list((run_dir / "checkpoints").glob("step-0000000[34]*"))  # nothing partial


def test_a_final_save_that_cannot_be_written_stops_in_one_line(make_cfg, tmp_path, full_disk):
    full_disk(5, 6)
    with pytest.raises(FinalSaveFailed) as caught:
        train(make_cfg(*CNN))
    where = tmp_path / "run" / "checkpoints"
    assert str(caught.value) == (
        f"the final checkpoint (step 6) could not be written: No space left on device "
        f"({where}/step-00000006.ckpt); the newest complete checkpoint is step 4 "
        f"({where}/step-00000004.ckpt). Free some space: the same command plus "
        f"hydra.run.dir={tmp_path / 'run'} resumes from it"
    )
    assert saved_steps(tmp_path / "run") == [1, 2, 3, 4]

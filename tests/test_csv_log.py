"""metrics.csv across runs in one directory: kept, cut back on resume, emptied on a fresh start.

The exact-resume tests (tests/checkpointing/test_resume_exact.py) compare whole logs of a
killed-and-resumed run with an uninterrupted one.
"""

from __future__ import annotations

import csv
from pathlib import Path

from litforge.tracking.csv_logger import _KeepingWriter
from litforge.training import train

LOG = Path("csv") / "metrics.csv"


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_writer_keeps_an_existing_file_and_cuts_it_back(tmp_path):
    first = _KeepingWriter(str(tmp_path))
    for step in range(5):
        first.log_metrics({"loss": float(step)}, step)
    first.save()

    second = _KeepingWriter(str(tmp_path))  # a rerun in the same directory
    assert second.metrics_keys == ["loss", "step"]
    second.keep_steps_before(3)
    second.log_metrics({"loss": 30.0, "acc": 0.5}, 3)  # a new column: the header is rewritten
    second.save()
    rows = read_rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["0", "1", "2", "3"]
    assert rows[3] == {"acc": "0.5", "loss": "30.0", "step": "3"}
    assert rows[0]["acc"] == ""


def test_testing_the_best_checkpoint_does_not_cut_the_log(make_cfg, tmp_path):
    # trainer.test(ckpt_path=best) also calls on_load_checkpoint: it must not cut.
    train(make_cfg("debug=limit", "checkpoint.keep_last=1"))
    rows = read_rows(tmp_path / "run" / LOG)
    train_steps = sorted({int(r["step"]) for r in rows if r.get("train/loss_step")})
    assert train_steps == list(range(6))  # debug=limit: 6 optimizer steps, one row each
    assert any(r.get("test/acc") for r in rows)


def test_rerun_after_the_end_keeps_the_log_and_a_fresh_start_empties_it(make_cfg, tmp_path):
    args = ("debug=limit", "test=false")
    train(make_cfg(*args))
    before = (tmp_path / "run" / LOG).read_text()
    before_rows = read_rows(tmp_path / "run" / LOG)
    assert "train/acc" in before.splitlines()[0]

    train(make_cfg(*args))  # resume=auto on a finished run: nothing to train, no row lost
    assert (tmp_path / "run" / LOG).read_text() == before

    train(make_cfg(*args, "resume=never", "seed=3"))  # a new run: its own rows only
    rows = read_rows(tmp_path / "run" / LOG)
    assert len(rows) == len(before_rows)
    assert (tmp_path / "run" / LOG).read_text() != before

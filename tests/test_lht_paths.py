"""lightning-hydra-template's `paths` group resolves into litforge's layout, and an
interpolation in hydra.run.dir that cannot resolve is one line, not Hydra's failed
traceback."""

from __future__ import annotations

from litforge import training as train_entry
from tests.test_bad_input import assert_one_line_error, run
from tests.test_user_code import SEARCH

FAST = ["trainer=cpu", "trainer.max_steps=2", "trainer.limit_val_batches=1", "test=false",
        "logger=none", "callbacks=none"]  # fmt: skip


def test_an_lht_experiment_puts_its_run_under_paths_log_dir(tmp_path, capfd):
    args = [SEARCH, "experiment=lht_paths", f"paths.log_dir={tmp_path}/logs", *FAST]
    code, out, err = run(train_entry.main, args, None, capfd)
    assert code == 0, err[-2000:]
    assert (tmp_path / "logs" / "train" / "runs" / "fixed" / "metrics.json").is_file()


def test_an_interpolation_that_does_not_resolve_is_one_line(tmp_path, capfd):
    code, out, err = run(train_entry.main, ["hydra.run.dir=${paths.bogus}/x", *FAST], None, capfd)
    assert_one_line_error(code, out, err, "hydra.run.dir: Interpolation key 'paths.bogus'")
    assert "exception formatting" not in err

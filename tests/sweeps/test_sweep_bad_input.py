"""A sweep's mistakes: one line naming the key, before the first trial where it can be
known then; a storage password never printed. Through the real entry point, in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from litforge import training as train_entry
from tests.test_bad_input import run

OPTUNA = ["-m", "hparams_search=digits_optuna", "debug=limit", "test=false"]
# A user's model and optimizer whose defaulted arguments its YAML leaves out
# (LitClassifier's num_classes, SGD's weight_decay).
USER_CONF = Path(__file__).parents[1] / "user_project" / "conf"
USER = ["-m", f"hydra.searchpath=[file://{USER_CONF}]", "model=lht_mlp", "data=lht_digits",
        "hparams_search=lht_optuna", "debug=limit", "test=false"]  # fmt: skip
CASES = [
    ([*OPTUNA, "model.optimizer.lrr=interval(0.1, 1)"],
     "model.optimizer.lrr is not a key of the composed config; did you mean model.optimizer.lr?"),
    ([*USER, "model.num_classes=choice(10, 12)"],
     "model.num_classes is an argument of tests.user_project.lit_module.LitClassifier "
     "(default 10) that the config does not set; sweep it as +model.num_classes"),
    ([*USER, "model.optimizer.weight_decay=interval(0, 0.1)"],
     "model.optimizer.weight_decay is an argument of torch.optim.SGD (default 0)"),
    ([*OPTUNA, "model.optimizer.lr=range(5, 1)"], "model.optimizer.lr=range(5, 1): the range is empty"),
    ([*OPTUNA, "hydra.sweeper.sampler=bogus"], "hydra.sweeper.sampler=bogus is not one of: tpe"),
    ([*OPTUNA, "hydra.sweeper.pruner=bogus"], "hydra.sweeper.pruner=bogus is not one of: median"),
    ([*OPTUNA, "hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials=0 must be an integer >= 1"),
    ([*OPTUNA, "hydra.sweeper.schedule=sometimes"],
     "hydra.sweeper.schedule=sometimes: give trials (each trial started as its devices free"),
    ([*OPTUNA, "hydra.sweeper.storage=postgresql://me:s3cret@127.0.0.1:9/db"],
     "hydra.sweeper.storage=postgresql://127.0.0.1:9/db: cannot open it"),
    ([*OPTUNA, "hydra.sweeper.sampler=grid"], "sampler=grid needs a finite set of values"),
    ([*OPTUNA, "+hydra.sweeper.n_trails=3"],
     "hydra.sweeper.n_trails is not a key of litforge's Optuna sweeper (did you mean n_trials?)"),
    (["-m", "trainer=cpu", "debug=fdr", "trainer.max_epochs=1,-7"],
     "sweep job 1 (trainer=cpu debug=fdr trainer.max_epochs=-7"),
    ([*OPTUNA, "hydra.sweeper.direction=[min,max]"],
     "hydra.sweeper.direction has 2 entries but optimized_metric=val/acc is one metric"),
    ([*OPTUNA, "optimized_metric=[val/loss,val/acc]", "hydra.sweeper.direction=[min,max]",
      "hydra.sweeper.pruner=none", "~callbacks.optuna_pruning"],
     "trial 0: optimized_metric=[val/loss, val/acc] is a list (a multi-objective sweep), but "
     "checkpoints are ranked by one metric: set checkpoint.monitor"),
    ([*OPTUNA, "optimized_metric=val/nope"],
     "trial 0: checkpoint.monitor=val/nope (optimized_metric) was not logged by the sanity "
     "validation, so no checkpoint could ever rank best; logged:"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "message"), CASES, ids=[c[1].split(":")[0][:40] for c in CASES])
def test_one_line_per_mistake(tmp_path, capfd, args, message):
    code, out, err = run(
        train_entry.main, [*args, f"hydra.sweep.dir={tmp_path / 's'}"], tmp_path / "r", capfd
    )
    assert code == 2, out[-2000:] + err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], err[-2000:]
    assert "Traceback" not in err and "s3cret" not in out + err


@pytest.mark.parametrize("storage", ["{d}/study.journal", "sqlite:///{d}/study.db"])
def test_a_storage_in_a_missing_directory_is_one_line_and_not_created(tmp_path, capfd, storage):
    """A mistyped shared path must not give this machine a study of its own."""
    missing = tmp_path / "nfs" / "shraed"
    given = storage.format(d=missing)
    args = [*OPTUNA, f"hydra.sweeper.storage={given}", f"hydra.sweep.dir={tmp_path / 's'}"]
    code, out, err = run(train_entry.main, args, tmp_path / "r", capfd)
    assert code == 2, out[-2000:] + err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: hydra.sweeper.storage={given}: directory {missing} does not exist (litforge "
        f"creates only its default, the sweep directory); create it first, e.g. mkdir -p "
        f"{missing}, or correct the path"
    ], err[-2000:]
    assert not (tmp_path / "nfs").exists() and not list((tmp_path / "s").glob("[0-9]*"))

"""A user's own code through litforge: a plain LightningModule and DataModule written the
lightning-hydra-template way (tests/user_project), a net with str/float/bool/list keys,
SGD + StepLR as `_partial_` targets, its config directory on Hydra's search path."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import DictConfig, open_dict

from litforge import build
from litforge import training as train_entry
from litforge.cli import check_group_choices
from litforge.errors import ConfigError
from litforge.evaluation import evaluate
from litforge.training import train
from litforge.validation import targets
from tests.helpers import ROOT, poison, run_entry
from tests.test_bad_input import assert_one_line_error, run

USER_CONF = ROOT / "tests" / "user_project" / "conf"
SEARCH = f"hydra.searchpath=[file://{USER_CONF}]"
USER = [SEARCH, "model=lht_mlp", "data=lht_digits", "trainer=cpu",
        "trainer.limit_train_batches=5", "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2"]  # fmt: skip
NET = "tests.user_project.nets.MLP"


def newest_checkpoint(run_dir: Path) -> Path:
    return sorted((run_dir / "checkpoints").glob("step-*.ckpt"))[-1]


def test_user_module_trains_resumes_with_its_schedule_and_evaluates(make_cfg, tmp_path, caplog):
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.INFO, "litforge"):
        first = train(make_cfg(*USER, "trainer.max_epochs=2", "run_name=u", "test=false",
                               run_dir=run_dir))  # fmt: skip
    assert first["global_step"] == 10
    # Every default callback measured the plain classes; none skipped or refused.
    assert "memory budget for LitClassifier (6,762 parameters, optimizer SGD)" in caplog.text
    assert "effective batch size 32 = batch_size 32" in caplog.text
    # One start-up line per object the config builds, by its _target_.
    for line in ("building data <tests.user_project.datamodule.DigitsDataModule>",
                 "building model <tests.user_project.lit_module.LitClassifier>",
                 f"building model.net <{NET}>", "building model.optimizer <torch.optim.SGD> (partial)",
                 "building model.scheduler <torch.optim.lr_scheduler.StepLR> (partial)",
                 "built callbacks.memory_budget <litforge.monitors.memory_budget.MemoryBudget>",
                 "built logger.csv <", "built trainer <lightning.pytorch.trainer.trainer.Trainer> "
                 "(1 node(s) x 1 CPUAccelerator, SingleDeviceStrategy, precision 32-true)"):  # fmt: skip
        assert caplog.text.count(line) == 1, line
    assert not [
        r for r in caplog.records if r.levelname == "WARNING" and "skipped" in r.getMessage()
    ]
    resumed = train(make_cfg(*USER, "trainer.max_epochs=4", "run_name=u", run_dir=run_dir))
    whole = train(make_cfg(*USER, "trainer.max_epochs=4", run_dir=tmp_path / "whole"))
    assert resumed["global_step"] == whole["global_step"] == 20
    assert resumed["val/loss"] == whole["val/loss"]  # resumed at an epoch's end: bitwise
    for name in ("run", "whole"):
        saved = torch.load(newest_checkpoint(tmp_path / name), weights_only=True)
        # StepLR(step_size=1, gamma=0.5) stepped once an epoch, across the resume too.
        assert saved["lr_schedulers"][0]["last_epoch"] == 4
        assert saved["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(0.1 / 16)
        # The partials the module keeps in hparams are stored as their config.
        assert saved["hyper_parameters"]["optimizer"]["_target_"] == "torch.optim.SGD"
        assert saved["litforge_model"]["net"]["activation"] == "gelu"
    assert 0.0 <= resumed["test/acc"] <= 1.0
    ckpt = newest_checkpoint(run_dir)
    metrics = evaluate(make_cfg(*USER, f"ckpt_path={ckpt}", config_name="eval",
                                run_dir=tmp_path / "eval"))  # fmt: skip
    assert metrics["test/acc"] == pytest.approx(whole["test/acc"], abs=0.2)
    with pytest.raises(ConfigError, match=r"trained with model.net.hidden_sizes=\[64, 32\]"):
        evaluate(make_cfg(*USER, f"ckpt_path={ckpt}", "model.net.hidden_sizes=[16]",
                          config_name="eval", run_dir=tmp_path / "eval2"))  # fmt: skip


# (arguments, what the one line says). Each fails before training starts.
USER_CASES = [
    (["+model.net.activaton=relu"],
     f"model.net.activaton is not an argument of {NET} (it takes: in_features, hidden_sizes, "
     "num_classes, activation, norm_eps, use_norm); did you mean model.net.activation?"),
    (["+model.optimizer.momentm=0.9"], "did you mean model.optimizer.momentum?"),
    (["~model.net.in_features"], f"model.net: {NET} requires in_features"),
    (["model.net._target_=my_lab.MLP"], "model.net._target_=my_lab.MLP cannot be imported (module my_lab"),
    (["model.optimizer._target_=builtins.dict"], "built a dict, not a torch.optim.Optimizer"),
    (["~model.scheduler._partial_"], "needs model.scheduler._partial_=true"),
    (["model.net.activation=swish"], f"model.net.activation='swish' must be one of relu, gelu, tanh ({NET} refused it)"),
    (["model.net.norm_eps=abc"], f"model.net.norm_eps=abc is invalid; {NET} takes a number"),
    (["model.net.hidden_sizes=[a]"], "model.net.hidden_sizes=['a'] is invalid; "),
    (["model.net.use_norm=3"], "model.net.use_norm=3 is invalid"),
    (["+data.batchsize=8"], "data.batchsize is not an argument of tests.user_project.datamodule.DigitsDataModule"),
    (["model=nope"], f"model=nope is not an option of conf/model/, file://{USER_CONF}/model/: "
     + ", ".join(sorted(p.stem for d in (ROOT / "conf", USER_CONF) for p in (d / "model").glob("*.yaml")))),
]  # fmt: skip


@pytest.mark.parametrize(("args", "line"), USER_CASES, ids=[" ".join(a) for a, _ in USER_CASES])
def test_bad_input_in_user_code_is_one_line(tmp_path, capfd, args, line):
    run_dir = tmp_path / "run"
    code, out, err = run(train_entry.main, [*USER, *args], run_dir, capfd)
    assert_one_line_error(code, out, err, line)
    assert not run_dir.exists()


def test_a_search_path_entry_that_does_not_exist_is_one_line(tmp_path, capfd):
    args = ["hydra.searchpath=[file:///nonexistent/conf]", "model=lht_mlp"]
    code, out, err = run(train_entry.main, args, tmp_path / "run", capfd)
    assert_one_line_error(code, out, err, "hydra.searchpath entry /nonexistent/conf does not exist")


def test_package_search_path_composes_and_lists_its_options(make_cfg):
    pkg = "hydra.searchpath=[pkg://tests.user_project.conf]"
    cfg = make_cfg(pkg, "model=lht_mlp", "data=lht_digits")
    assert cfg.model.net._target_ == NET and cfg.data.batch_size == 32
    check_group_choices([pkg, "model=lht_mlp"])
    with pytest.raises(ConfigError, match=r"pkg://tests.user_project.conf/data/: digits, "):
        check_group_choices([pkg, "data=nope"])


def test_ddp_gives_each_rank_a_disjoint_shard_of_a_plain_datamodule(tmp_path):
    run_dir = tmp_path / "run"
    args = [*USER, "trainer.devices=2", "trainer.max_epochs=1", "test=false",
            "+callbacks.shard._target_=tests.helpers.RecordShard"]  # fmt: skip
    result = run_entry("train.py", *args, run_dir=run_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((run_dir / "shards" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert {r["sampler"] for r in ranks} == {"DistributedSampler"}  # Lightning's, not none
    first, second = (set(r["indices"]) for r in ranks)
    # 1,197 samples: every one trained on once; DistributedSampler pads the odd one out.
    assert len(first | second) == 1197 and len(first & second) == 1
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["effective_batch_size"] == 64  # 32 per process x 2


STANDALONE = "tests.user_project.standalone"
NOT_LIGHTNING = [
    ("model", f"{STANDALONE}.StandaloneModule",
     "is a pytorch_lightning.LightningModule; .* import LightningModule from lightning.pytorch"),
    ("data", f"{STANDALONE}.StandaloneData",
     "is a pytorch_lightning.LightningDataModule; .* import LightningDataModule from lightning.pytorch"),
    ("model", "torch.nn.Identity",
     "built a torch.nn.modules.linear.Identity, not a lightning.pytorch.LightningModule$"),
]  # fmt: skip


@pytest.mark.parametrize(("group", "target", "line"), NOT_LIGHTNING)
def test_a_model_or_data_not_on_lightning_is_one_line_before_training(
    make_cfg, group, target, line
):
    """A class of the standalone `pytorch_lightning` package (`import pytorch_lightning as
    pl`), or no Lightning class at all: one line naming the key and the fix, not Lightning's
    TypeError or `Expected a parent` from inside `fit`."""
    if target.startswith(STANDALONE):
        pytest.importorskip("pytorch_lightning")
    cfg = make_cfg(*USER)
    with open_dict(cfg):
        cfg[group] = {"_target_": target}
    builder = build.build_module if group == "model" else build.build_datamodule
    with pytest.raises(ConfigError, match=f"^{group}._target_={re.escape(target)} {line}"):
        builder(cfg)


def test_fsdp_refuses_a_plain_module_in_one_line(make_cfg):
    with pytest.raises(ConfigError, match=r"trainer=fsdp: model=tests.user_project"):
        build.build_module(make_cfg(*USER, "trainer=fsdp"))


def test_an_optuna_sweep_over_the_users_own_keys(tmp_path):
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "train.py", "-m", *USER, "hparams_search=lht_optuna",
               "trainer.max_epochs=2", "test=false", f"hydra.sweep.dir={sweep_dir}"]  # fmt: skip
    env = {**os.environ, "CI": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(sweep_dir / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["COMPLETE"] * 3
    assert len({r["model.net.activation"] + r["model.net.norm_eps"] for r in rows}) == 3
    for row in rows:  # each trial trained with its own values
        config = yaml.safe_load((sweep_dir / row["number"] / ".hydra" / "config.yaml").read_text())
        assert config["model"]["net"]["activation"] == row["model.net.activation"]
        assert config["model"]["net"]["norm_eps"] == pytest.approx(float(row["model.net.norm_eps"]))


def test_the_numerics_watch_catches_a_plain_modules_fault(make_cfg, caplog):
    with caplog.at_level(logging.WARNING, "litforge"):
        metrics = train(make_cfg(*USER, *poison(2), "callbacks.numerics.policy=skip",
                                 "trainer.max_epochs=1", "test=false"))  # fmt: skip
    assert metrics["global_step"] == 5 and math.isfinite(metrics["val/loss"])
    assert "numerics: non-finite loss at step 2 (precision 32-true)" in caplog.text
    assert "first parameter with a non-finite gradient: net.model.1.weight" in caplog.text


def test_modules_and_partials_in_hparams_are_stored_as_their_config(make_cfg, tmp_path):
    keeps_all = "model._target_=tests.user_project.lit_module.SavesEverything"
    metrics = train(make_cfg(*USER, keeps_all, "trainer.max_epochs=1"))
    saved = torch.load(metrics["best_checkpoint"], weights_only=True)
    assert saved["hyper_parameters"]["net"]["_target_"] == NET
    assert saved["hyper_parameters"]["scheduler"]["_target_"] == "torch.optim.lr_scheduler.StepLR"
    assert saved["datamodule_hyper_parameters"]["batch_size"] == 32


def test_nested_config_arrives_as_hydra_delivers_it(make_cfg, caplog):
    """A nested node reaches the module as Hydra's `instantiate` passes it (a DictConfig:
    attribute access works, in __init__ and after fit), and the checkpoint stays plain."""
    cfg = make_cfg(*USER, "model=lht_nested", "trainer.max_epochs=1", "test=false")
    module = build.build_module(cfg)
    assert module.criterion.label_smoothing == 0.1
    metrics = train(cfg)
    saved = torch.load(metrics["best_checkpoint"], weights_only=True)
    assert saved["hyper_parameters"]["loss"] == {"name": "cross_entropy", "label_smoothing": 0.1}
    assert "memory budget: skipped" not in caplog.text  # it builds its copies the same way
    assert isinstance(module.hparams.loss, DictConfig)  # on_fit_end read it the same way
    # `_convert_` is honoured as Hydra honours it: `all` hands the module a plain dict.
    with pytest.raises(Exception, match="no attribute 'label_smoothing'"):
        build.build_module(make_cfg(*USER, "model=lht_nested", "+model._convert_=all"))


def test_a_plain_module_fine_tunes_from_its_checkpoint_with_frozen_layers(make_cfg, tmp_path):
    first = [*USER, "trainer.max_epochs=1", "test=false"]
    train(make_cfg(*first, run_dir=tmp_path / "pre"))
    pretrained = newest_checkpoint(tmp_path / "pre")
    train(make_cfg(*first, "restore.mode=finetune", f"restore.from={pretrained}",
                   "model.freeze=[net.model.1.*]", run_dir=tmp_path / "tuned"))  # fmt: skip
    before = torch.load(pretrained, weights_only=False)["state_dict"]
    after = torch.load(newest_checkpoint(tmp_path / "tuned"), weights_only=False)["state_dict"]
    for name, tensor in after.items():  # frozen as restored; the rest trained on
        assert torch.equal(tensor, before[name]) == name.startswith("net.model.1."), name


def test_the_budget_measures_a_module_whose_optimizer_reads_its_trainer(make_cfg, caplog):
    """configure_optimizers builds Adam on `self.trainer.model.parameters()` with no partial
    in the config: the budget measures it with a Trainer attached (Adam: two states)."""
    from litforge.commands import budget

    cfg = make_cfg(*USER, "model=lht_reads_trainer", "trainer.max_steps=2", "test=false")
    subject = budget.from_config(cfg)
    states = subject.states("32-true")
    assert states.optimizers == ("Adam",)
    tensors = len(list(subject.module.parameters()))
    # exp_avg and exp_avg_sq of each weight, and each tensor's float32 `step`
    assert states.optimizer == 2 * states.gradients + 4 * tensors
    train(cfg)
    assert "memory budget: skipped" not in caplog.text


def test_a_module_completed_in_its_setup_gets_a_budget_line_that_says_so(make_cfg, caplog):
    """Lightning calls the callbacks' `setup` before the module's: the budget's measurement
    of a module that completes itself there fails, and its one warning names the hook."""
    target = "model._target_=tests.user_project.completes_in_setup.CentredByTheData"
    metrics = train(make_cfg(*USER, target, "trainer.max_steps=2", "test=false"))
    assert metrics["global_step"] == 2  # the run itself trains
    (line,) = [r.getMessage() for r in caplog.records if "memory budget: skipped" in r.getMessage()]
    assert line.endswith(
        "; it measured a training step before CentredByTheData.setup() ran); "
        "callbacks.memory_budget=null hides this"
    ), line


BROKEN = [
    ("def build(depth=1, width):\n    pass\n", "SyntaxError: non-default argument follows default argument ({file}, line 1)"),
    ("WIDTH = undefined_name\n", "NameError: name 'undefined_name' is not defined"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "line"), BROKEN, ids=["syntax", "raises"])
def test_a_target_module_that_is_found_but_broken_is_one_line_saying_where(
    tmp_path, monkeypatch, source, line
):
    """The user's module is on the path and fails as it imports: the line says what it
    raised (a syntax error with its file and line), not to check that it is installed."""
    (tmp_path / "broken_lab.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = "model._target_=broken_lab.Model cannot be imported: importing broken_lab raised "
    expected += line.format(file=tmp_path / "broken_lab.py")
    with pytest.raises(ConfigError) as caught:
        targets.locate({"_target_": "broken_lab.Model"}, "model")
    assert str(caught.value) == expected

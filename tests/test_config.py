"""Composition: every option of every group composes, and the trainer group is complete."""

from __future__ import annotations

import inspect
import shutil

import lightning as L
import pytest
import torch
from hydra.errors import MissingConfigException

from litforge import build
from litforge.errors import ConfigError
from litforge.validation.checks import check_config
from tests.helpers import CONF, conf_groups, conf_options

GROUPS = conf_groups()
options = conf_options


def test_the_groups_the_readme_promises_exist():
    assert set(GROUPS) >= {"data", "model", "precision", "trainer", "logger", "callbacks", "debug"}
    expected = {"32", "16-mixed", "bf16-mixed", "bf16-true", "16-true", "fp8", "fp8-rowwise"}
    assert set(options("precision")) == expected
    assert {"default", "cpu", "gpu", "ddp"} <= set(options("trainer"))
    assert {"fdr", "overfit", "limit", "profiler", "profile"} <= set(options("debug"))


@pytest.mark.parametrize(
    "override",
    [f"{group}={option}" for group in GROUPS for option in options(group)],
)
def test_every_option_composes_and_passes_checks(make_cfg, override):
    # Token models need token data: those come as pairs.
    pairs = {"model=gpt": "gpt_char", "data=text": "gpt_char", "data=text_stream": "gpt_char",
             "model=hf_causal_lm": "hf_finetune", "data=hf_text": "hf_finetune"}  # fmt: skip
    base = [f"experiment={pairs[override]}"] if override in pairs else []
    cfg = make_cfg(*base, override)
    if override == "trainer=gpu" and not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="trainer.accelerator=gpu but no CUDA GPU"):
            check_config(cfg)
    else:
        check_config(cfg)


def test_precision_group_sets_the_trainer_precision(make_cfg):
    assert make_cfg("precision=bf16-mixed").trainer.precision == "bf16-mixed"
    assert make_cfg().trainer.precision == "32"
    # True fp16 cannot represent AdamW's default eps (1e-8 rounds to 0): the group raises it.
    assert make_cfg("precision=16-true").model.optimizer.eps == pytest.approx(1e-4)


def test_trainer_config_lists_every_trainer_argument(make_cfg):
    expected = set(inspect.signature(L.Trainer.__init__).parameters) - {
        "self",
        "callbacks",
        "logger",
    }
    assert set(make_cfg().trainer) == expected


def test_any_trainer_key_overrides_without_plus(make_cfg):
    cfg = make_cfg(
        "trainer.devices=4", "trainer.gradient_clip_val=1.0", "trainer.max_time=00:00:01:00"
    )
    assert cfg.trainer.devices == 4
    assert cfg.trainer.gradient_clip_val == 1.0


@pytest.mark.parametrize(
    "override", ["precision=fp4", "model=resnet", "data=imagenet", "trainer=tpu"]
)
def test_unknown_group_option_names_the_valid_ones(make_cfg, override):
    with pytest.raises(MissingConfigException) as err:
        make_cfg(override)
    group = override.split("=")[0]
    assert f"Could not find '{group}/" in str(err.value)
    assert options(group)[0] in str(err.value.options)


@pytest.mark.parametrize("devices", ["auto", "-1", "1", "4", "[0,1]", "'0,1'"])
def test_valid_device_forms_pass(make_cfg, devices):
    check_config(make_cfg(f"trainer.devices={devices}"))


@pytest.mark.parametrize("devices", ["0", "-2", "[]", "'a,b'", "1.5"])
def test_invalid_device_forms_fail(make_cfg, devices):
    with pytest.raises(ConfigError, match=r"trainer.devices=.* is invalid"):
        check_config(make_cfg(f"trainer.devices={devices}"))


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0"),
        ("trainer.num_nodes=0", "trainer.num_nodes=0"),
        ("data.batch_size=0", "data.batch_size=0"),
        ("data.num_workers=-1", "data.num_workers=-1"),
        ("model.optimizer.lr=0", "model.optimizer.lr=0"),
        ("model.optimizer.weight_decay=-1", "model.optimizer.weight_decay=-1"),
        ("+trainer.max_epoch=3", "trainer.max_epoch is not an argument of lightning.Trainer"),
        ("trainer.precision=fp8", "trainer.precision=fp8 is invalid; must be one of 32,"),
    ],
)
def test_bad_values_name_their_key(make_cfg, override, key):
    cfg = make_cfg(override)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("+", "")):
        check_config(cfg)  # litforge's own keys
        build.build_datamodule(cfg)  # the user's: their constructors decide
        build.build_module(cfg)


def test_experiment_direction_reaches_checkpoint_ranking(make_cfg):
    assert make_cfg("experiment=digits_cnn").checkpoint.mode == "max"
    assert make_cfg("experiment=digits_cnn").optimized_metric == "val/acc"
    assert make_cfg().checkpoint.mode == "min"
    assert make_cfg("experiment=digits_cnn", "checkpoint=none").checkpoint is None


def test_a_project_file_replaces_or_adds_a_library_option(tmp_path):
    from litforge.cli import check_group_choices, compose
    from litforge.conf import LIBRARY_CONF_DIR

    project = tmp_path / "conf"
    shutil.copytree(CONF, project)
    (project / "trainer").mkdir()
    library_default = (LIBRARY_CONF_DIR / "trainer" / "default.yaml").read_text()
    (project / "trainer" / "default.yaml").write_text(
        library_default.replace("max_epochs: 12", "max_epochs: 3")
    )
    (project / "trainer" / "a100.yaml").write_text("defaults:\n  - gpu\ndevices: 8\n")
    cfg = compose([], tmp_path / "run", conf_dir=project)
    assert cfg.trainer.max_epochs == 3  # the project's default.yaml, not litforge's
    cfg = compose(["trainer=cpu"], tmp_path / "run", conf_dir=project)
    assert cfg.trainer.max_epochs == 3 and cfg.trainer.accelerator == "cpu"  # cpu extends it
    cfg = compose(["trainer=a100"], tmp_path / "run", conf_dir=project)
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.devices == 8
    with pytest.raises(ConfigError, match=r"trainer=x is not an option of .*: a100, cpu, ddp"):
        check_group_choices(["trainer=x"], "train", str(project))

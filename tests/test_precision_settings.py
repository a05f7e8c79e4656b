"""The settings the precision group brings: the float32 matmul precision (every option) and
the GradScaler of 16-mixed (its knobs, the plugin on CUDA, its state in checkpoints)."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from litforge import build, cli, precision
from litforge.errors import ConfigError
from litforge.training import train
from litforge.validation.checks import check_config
from tests.helpers import TINY_GPT

OPTIONS = ["32", "16-mixed", "bf16-mixed", "bf16-true", "16-true"]


@pytest.fixture(autouse=True)
def _restore_matmul_precision():
    yield
    torch.set_float32_matmul_precision("highest")  # process-wide: leave torch's default


@pytest.mark.parametrize("option", OPTIONS)
def test_every_precision_names_its_matmul_precision(make_cfg, option):
    expected = "highest" if option == "32" else "high"
    assert make_cfg(f"precision={option}").precision.matmul == expected


def test_matmul_precision_reaches_torch_on_every_build(make_cfg):
    build.build_trainer(make_cfg("precision=bf16-mixed", "trainer=cpu"))
    assert torch.get_float32_matmul_precision() == "high"
    # The next job of an in-process sweep gets its own, not the previous job's.
    build.build_trainer(make_cfg("precision=32", "trainer=cpu"))
    assert torch.get_float32_matmul_precision() == "highest"
    build.build_trainer(make_cfg("precision=32", "precision.matmul=medium", "trainer=cpu"))
    assert torch.get_float32_matmul_precision() == "medium"


def test_scaler_knobs_compose_by_group_and_by_key(make_cfg):
    overrides = ["precision=16-mixed", "precision.init_scale=1024", "precision.growth_interval=7"]
    # What the command line does to them before Hydra: nothing that would refuse the key.
    assert cli.quote_numeric_choices(overrides) == overrides
    cli.check_group_choices(overrides)
    assert precision.scaler_kwargs(make_cfg(*overrides)) == {
        "init_scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 7,
    }  # fmt: skip
    assert precision.scaler_kwargs(make_cfg("precision=16-mixed"))["init_scale"] == 65536.0


def test_no_scaler_plugin_off_cuda_or_outside_16_mixed(make_cfg):
    assert precision.scaler_plugin(make_cfg("precision=16-mixed"), "cpu") is None
    assert precision.scaler_plugin(make_cfg("precision=bf16-mixed"), "cuda") is None
    trainer = build.build_trainer(make_cfg("precision=16-mixed", "trainer=cpu"))
    assert str(trainer.precision) == "bf16-mixed"  # Lightning's CPU fallback: no scaler
    assert getattr(trainer.precision_plugin, "scaler", None) is None


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("precision.init_scale=0", "precision.init_scale=0 is invalid; must be a number > 0"),
        ("precision.init_scale=-8", "precision.init_scale=-8 is invalid; must be a number > 0"),
        ("precision.growth_factor=1.0",
         "precision.growth_factor=1.0 is invalid; must be a number > 1"),
        ("precision.backoff_factor=1.5",
         "precision.backoff_factor=1.5 is invalid; must be a number > 0 and < 1"),
        ("precision.backoff_factor=0",
         "precision.backoff_factor=0 is invalid; must be a number > 0 and < 1"),
        ("precision.growth_interval=0",
         "precision.growth_interval=0 is invalid; must be an integer >= 1"),
        ("precision.matmul=fast",
         "precision.matmul=fast is invalid; must be one of highest, high, medium"),
    ],
)  # fmt: skip
def test_bad_precision_settings_are_one_line(make_cfg, override, line):
    with pytest.raises(ConfigError) as caught:
        check_config(make_cfg("precision=16-mixed", override))
    assert str(caught.value) == line


# -- CUDA --------------------------------------------------------------------------------------
GPU = [*TINY_GPT, "trainer=gpu", "precision=16-mixed", "test=false", "trainer.limit_val_batches=1"]


class RecordScaler(L.Callback):
    """The GradScaler's state when training starts (after a resumed run restored it)."""

    at_start: dict = {}

    def on_train_start(self, trainer: L.Trainer, *args) -> None:
        RecordScaler.at_start = trainer.precision_plugin.scaler.state_dict()


@pytest.mark.gpu
def test_16_mixed_on_cuda_trains_with_the_configured_grad_scaler(make_cfg):
    cfg = make_cfg(*GPU, "precision.init_scale=1024", "precision.growth_factor=4",
                   "precision.backoff_factor=0.25", "precision.growth_interval=7")  # fmt: skip
    trainer = build.build_trainer(cfg)
    assert str(trainer.precision) == "16-mixed"
    assert torch.get_float32_matmul_precision() == "high"
    scaler = trainer.precision_plugin.scaler
    assert scaler.is_enabled()
    assert (scaler.get_scale(), scaler.get_growth_factor()) == (1024.0, 4.0)
    assert (scaler.get_backoff_factor(), scaler.get_growth_interval()) == (0.25, 7)


@pytest.mark.gpu
def test_grad_scaler_state_round_trips_through_a_checkpoint(make_cfg, tmp_path):
    run_dir = tmp_path / "run"
    # 2^30 overflows at first (the scale backs off); growth_interval=3 lets it grow again.
    first = ["precision.init_scale=1073741824", "precision.growth_interval=3",
             "checkpoint.every_n_train_steps=4"]  # fmt: skip
    train(make_cfg(*GPU, *first, "trainer.max_steps=8", run_dir=run_dir))
    saved = torch.load(run_dir / "checkpoints" / "step-00000008.ckpt", weights_only=True)
    state = saved["MixedPrecision"]
    assert state["scale"] < 2.0**30 and state["growth_interval"] == 3
    record = f"+callbacks.record._target_={__name__}.RecordScaler"
    # The resumed run continues with the checkpoint's scaler, not the config's init_scale.
    train(make_cfg(*GPU, "precision.init_scale=2", record, "trainer.max_steps=10", run_dir=run_dir))
    assert RecordScaler.at_start["scale"] == state["scale"]
    assert RecordScaler.at_start["_growth_tracker"] == state["_growth_tracker"]

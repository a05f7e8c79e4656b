"""The numerics watch (callbacks.numerics) in real runs: a batch poisoned by
`tests.helpers.PoisonStep` under each policy, what it logs, how often it reads the device, and
16-mixed with a real GradScaler (on CPU: torch has one; litforge builds it only on CUDA)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from litforge import build, precision
from litforge.errors import ConfigError
from litforge.monitors.numerics.callback import NumericsFault
from litforge.training import train
from tests.helpers import TINY_GPT, csv_rows, poison, run_entry

CNN = ["experiment=digits_cnn", "trainer.max_steps=4", "test=false", "trainer.limit_val_batches=1"]
HERE = "tests.callbacks.test_numerics"
RECORD = f"+callbacks.record._target_={HERE}.RecordSteps"
POISON = poison(2)
STOPPED = ("non-finite loss at step 2: skipped it, saved a checkpoint at step 3 to {} and stopped "
           "(callbacks.numerics.policy=stop). Try the fixes listed above; {} from that "
           "checkpoint")  # fmt: skip


def stopped(run_dir: Path, named: bool) -> str:
    """The stop message; a run without run_name needs its directory given to resume."""
    how = "the same command" + ("" if named else f" plus hydra.run.dir={run_dir}") + " resumes"
    return STOPPED.format(run_dir / "checkpoints", how)


class RecordSteps(L.Callback):
    """Each step's weights before and after; its gradient norm (after the watch, unclipped)."""

    def __init__(self) -> None:
        self.before: dict[int, list[torch.Tensor]] = {}
        self.after: dict[int, list[torch.Tensor]] = {}
        self.norms: dict[int, float] = {}
        RecordSteps.last = self

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, *args) -> None:
        self.before[trainer.global_step] = [p.detach().clone() for p in pl_module.parameters()]

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            self.norms[trainer.global_step] = math.sqrt(sum(float(g.norm()) ** 2 for g in grads))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, *args) -> None:
        step = trainer.global_step - 1  # the step this batch took
        self.after[step] = [p.detach().clone() for p in pl_module.parameters()]

    def on_train_end(self, trainer: L.Trainer, pl_module) -> None:
        self.scheduler_steps = trainer.lr_scheduler_configs[0].scheduler.last_epoch
        self.adamw_steps = {int(s["step"]) for s in trainer.optimizers[0].state.values()}


class RecordEnd(L.Callback):
    """The global step of the last training batch that ended."""

    step: int | None = None

    def on_train_batch_end(self, trainer: L.Trainer, *args) -> None:
        RecordEnd.step = trainer.global_step


def messages(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "litforge")


def finite_weights(checkpoint: Path) -> bool:
    saved = torch.load(checkpoint, weights_only=True)["state_dict"]
    return all(torch.isfinite(t).all() for t in saved.values())


# -- the policies ------------------------------------------------------------------------------
def test_stop_saves_a_checkpoint_that_resumes_and_raises(make_cfg, tmp_path):
    with pytest.raises(NumericsFault) as caught:
        train(make_cfg(*CNN, *POISON))
    assert caught.value.exit_code == 65
    run_dir = tmp_path / "run"
    assert str(caught.value) == stopped(run_dir, named=False)
    saved = run_dir / "checkpoints" / "step-00000003.ckpt"
    assert (saved.parent / (saved.name + ".complete")).is_file() and finite_weights(saved)
    # The run's lock is held until this process exits: resume from the file (see below).
    metrics = train(make_cfg(*CNN, f"ckpt_path={saved}", run_dir=tmp_path / "resumed"))
    assert metrics["global_step"] == 4 and math.isfinite(metrics["val/loss"])


def test_stop_saves_no_checkpoint_of_weights_an_update_broke(make_cfg, tmp_path, caplog):
    # eps=1e-8 is 0 in float16: step 0's update itself makes weights non-finite, and the
    # fault shows only in step 1's loss. The watch must not call those weights good.
    with caplog.at_level(logging.WARNING), pytest.raises(NumericsFault) as caught:
        train(make_cfg(*CNN, "precision=16-true", "precision.optimizer_eps=1e-8"))
    assert "saved no checkpoint (the weights are already non-finite)" in str(caught.value)
    assert not list((tmp_path / "run" / "checkpoints").glob("*.ckpt"))
    assert "numerics: AdamW eps=1e-08 rounds to 0 in torch.float16" in messages(caplog)


@pytest.mark.slow
def test_stop_exits_65_with_a_checkpoint_the_same_command_resumes(make_cfg, tmp_path, caplog):
    run_dir = tmp_path / "run"
    args = [*CNN, "run_name=poisoned"]
    result = run_entry("train.py", *args, *POISON, run_dir=run_dir)
    assert result.returncode == 65, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: " + stopped(run_dir, named=True)]
    report = result.stdout + result.stderr
    assert "numerics: non-finite loss at step 2 (precision 32-true)" in report
    assert "first parameter with a non-finite gradient: net.features.0.weight" in report
    with caplog.at_level(logging.INFO):
        metrics = train(make_cfg(*args, run_dir=run_dir))  # the fix: no more poison
    assert f"resuming from {run_dir / 'checkpoints'}/step-00000003.ckpt" in messages(caplog)
    assert metrics["global_step"] == 4 and math.isfinite(metrics["val/loss"])


@pytest.mark.slow
def test_ddp_ranks_stop_together(tmp_path):
    run_dir, args = tmp_path / "run", [*CNN, "trainer.devices=2", *POISON]
    result = run_entry("train.py", *args, run_dir=run_dir)
    assert result.returncode == 65, result.stderr[-3000:]
    assert "error: " + stopped(run_dir, named=False) in result.stderr.splitlines()
    assert finite_weights(run_dir / "checkpoints" / "step-00000003.ckpt")


def test_skip_leaves_that_step_out_and_trains_on(make_cfg, caplog):
    with caplog.at_level(logging.WARNING):
        metrics = train(make_cfg(*CNN, *POISON, "callbacks.numerics.policy=skip", RECORD))
    record = RecordSteps.last
    for step in range(4):
        pairs = zip(record.before[step], record.after[step], strict=True)
        assert all(torch.equal(a, b) for a, b in pairs) == (step == 2)  # only 2 changed nothing
    assert all(torch.isfinite(p).all() for p in record.after[3])
    assert metrics["global_step"] == 4 and math.isfinite(metrics["val/loss"])
    assert record.scheduler_steps == 4  # Lightning steps the LR schedule after every step
    assert record.adamw_steps == {3}  # AdamW counts only the steps that updated the weights
    text = messages(caplog)
    assert "numerics: non-finite loss at step 2 (precision 32-true)" in text
    assert "first parameter with a non-finite gradient: net.features.0.weight" in text
    assert "policy skip: skipped this optimizer step" in text
    assert "numerics: 1 of 4 optimizer steps in this run had a fault (policy skip)" in text


def test_warn_reports_once_trains_on_and_finds_where_activations_overflow(make_cfg, caplog):
    overrides = [*TINY_GPT, "trainer.max_steps=5", "test=false", "trainer.limit_val_batches=1",
                 f"+callbacks.end._target_={HERE}.RecordEnd"]  # fmt: skip
    with caplog.at_level(logging.INFO), pytest.raises(NumericsFault, match="^the weights are"):
        train(
            make_cfg(*overrides, *POISON, "callbacks.numerics.policy=warn",
                     "callbacks.numerics.activations=true")
        )  # fmt: skip
    assert RecordEnd.step == 5  # went on to the end, then refused the NaN weights (below)
    text = messages(caplog)
    assert text.count("numerics: non-finite loss at step 2") == 1
    assert "first parameter with a non-finite gradient: net.wte.weight" in text
    assert "policy warn: that step was applied; training goes on" in text
    assert "numerics: 3 of 5 optimizer steps in this run had a fault (policy warn)" in text
    table = text.split("numerics: largest activation |x| per module")[1].splitlines()
    # The weights are NaN from step 3 on; the table starts at the module that ran first.
    assert table[1].split() == ["net.wte", "inf", "overflows", "float16", "from", "step", "3"]


WARN_NAN = ("error: the weights are not finite at the end of training (step 4, "
            "callbacks.numerics.policy=warn; the first fault was at step 2): the run's metrics "
            "and its latest checkpoints are not usable, and it was not tested. Try the fixes "
            "listed above; callbacks.numerics.policy=stop stops at the first fault and saves a "
            "checkpoint to resume from")  # fmt: skip


def test_warn_that_ends_with_non_finite_weights_fails_the_run(make_cfg, tmp_path):
    """warn trains on past the fault into NaN weights: that is no finished run with NaN
    metrics and a broken best checkpoint, but the numerics fault, before any test."""
    with pytest.raises(NumericsFault) as caught:
        train(make_cfg(*CNN[:2], "trainer.limit_val_batches=1", *POISON,
                       "callbacks.numerics.policy=warn"))  # fmt: skip
    assert "error: " + str(caught.value) == WARN_NAN
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.slow
def test_warn_with_non_finite_weights_exits_65_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    args = [*CNN[:2], "trainer.limit_val_batches=1", *POISON, "callbacks.numerics.policy=warn"]
    result = run_entry("train.py", *args, run_dir=run_dir)
    assert result.returncode == 65, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [WARN_NAN] and result.stderr.splitlines()[-1] == WARN_NAN
    assert "finished:" not in result.stdout + result.stderr  # no test, no final metrics line
    assert not (run_dir / "metrics.json").exists()


def test_grad_norm_is_logged_before_clipping(make_cfg, tmp_path):
    train(make_cfg(*CNN, "trainer.log_every_n_steps=1", "trainer.gradient_clip_val=1e-3", RECORD))
    rows = [r for r in csv_rows(tmp_path / "run") if r.get("numerics/grad_norm")]
    logged = {int(r["step"]): float(r["numerics/grad_norm"]) for r in rows}
    assert sorted(logged) == list(range(4))
    expected = RecordSteps.last.norms
    assert all(logged[s] == pytest.approx(expected[s], rel=1e-5) for s in logged)
    assert min(logged.values()) > 1e-3  # not the clipped norm


# -- reads of the device per step ---------------------------------------------------------------
class CountReads(L.Callback):
    """How many times a tensor is read into Python (each a host-device sync on a GPU)
    between the start and the end of each training batch."""

    per_step: list[int] = []
    active = False
    count = 0

    def on_train_batch_start(self, *args) -> None:
        CountReads.active, CountReads.count = True, 0

    def on_train_batch_end(self, *args) -> None:
        CountReads.active = False
        CountReads.per_step.append(CountReads.count)


@pytest.fixture
def reads(monkeypatch, make_cfg, tmp_path):
    for name in ("item", "tolist", "cpu", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):
            CountReads.count += CountReads.active
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)

    def per_step(*overrides: str, base: tuple[str, ...] = (*CNN, "trainer.max_steps=3")):
        CountReads.per_step = []
        quiet = ["checkpoint=none", "logger=none", "trainer.num_sanity_val_steps=0",
                 f"+callbacks.reads._target_={HERE}.CountReads"]  # fmt: skip
        run_dir = tmp_path / str(len(list(tmp_path.iterdir())))
        train(make_cfg(*base, *quiet, *overrides, run_dir=run_dir))
        return CountReads.per_step

    return per_step


def test_reads_per_step_are_none_for_warn_and_one_for_skip_and_stop(reads):
    base = reads("callbacks.numerics=null")
    assert len(base) == 3
    assert reads("callbacks.numerics.policy=warn") == base
    assert reads("callbacks.numerics.policy=skip") == [n + 1 for n in base]
    assert reads() == [n + 1 for n in base]  # the default: stop


# -- 16-mixed with a GradScaler ----------------------------------------------------------------
@pytest.fixture
def cpu_scaler(monkeypatch):
    """16-mixed with a real torch.amp.GradScaler on the CPU, built from the config's knobs
    as on CUDA (where Lightning would otherwise run bf16-mixed)."""

    def plugin(cfg, accelerator):
        scaler = torch.amp.GradScaler("cpu", **precision.scaler_kwargs(cfg))
        return MixedPrecision("16-mixed", "cpu", scaler=scaler)

    monkeypatch.setattr(build, "scaler_plugin", plugin)
    return [*TINY_GPT, "precision=16-mixed", "trainer.max_steps=5", "test=false",
            "trainer.limit_val_batches=1"]  # fmt: skip


def test_scaler_skips_are_normal_and_logged(cpu_scaler, make_cfg, tmp_path, caplog):
    # 2^20 overflows float16 gradients now and then: the scaler skips and backs off, no fault.
    with caplog.at_level(logging.WARNING):
        metrics = train(make_cfg(*cpu_scaler, "precision.init_scale=1048576",
                                 "trainer.log_every_n_steps=1", "trainer.max_steps=8"))  # fmt: skip
    assert metrics["global_step"] == 8 and "numerics:" not in messages(caplog)
    rows = [r for r in csv_rows(tmp_path / "run") if r.get("numerics/skipped_steps")]
    skipped = [float(r["numerics/skipped_steps"]) for r in rows]
    scales = [float(r["numerics/loss_scale"]) for r in rows]
    # The scale each step ran with; skipped steps as counted (stop reads a step late).
    assert len(rows) == 8 and scales[:2] == [2.0**20, 2.0**19] and 1 <= skipped[-1] < 8
    assert skipped == sorted(skipped) and scales == sorted(scales, reverse=True)


def test_scaler_stop_saves_the_state_after_the_skipped_step(cpu_scaler, make_cfg, tmp_path):
    with pytest.raises(NumericsFault, match=r"^non-finite loss at step 2: skipped it, saved a "
                       r"checkpoint at step 4 to "):  # fmt: skip
        train(make_cfg(*cpu_scaler, *POISON, "precision.init_scale=1024"))
    path = tmp_path / "run" / "checkpoints" / "step-00000004.ckpt"
    # Read a step late (no sync of its own): steps 0, 1 and 3 applied, the poisoned step 2
    # skipped by the scaler, whose scale halved once; Lightning saved its state.
    state = torch.load(path, weights_only=True)["MixedPrecision"]
    assert (state["scale"], state["growth_interval"]) == (512.0, 2000) and finite_weights(path)


@pytest.mark.slow
def test_scaler_runs_read_nothing_extra_whatever_the_policy(cpu_scaler, reads):
    gpt = (*cpu_scaler, "trainer.max_steps=3")
    base = reads("callbacks.numerics=null", base=gpt)
    for policy in ("warn", "skip", "stop"):  # the scaler's own read decides
        assert reads(f"callbacks.numerics.policy={policy}", base=gpt) == base, policy


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "line"), [
    (["callbacks.numerics.min_loss_scale=2048", "precision.init_scale=1024"], "numerics: loss "
     "scale collapsed to 1024 (below callbacks.numerics.min_loss_scale=2048) at step 0"),
    # 2^28 overflows the first 8 steps (see test_scaler_skips_are_normal_and_logged).
    (["callbacks.numerics.max_skipped_in_row=3", "precision.init_scale=268435456"], "numerics: 3 "
     "optimizer steps in a row skipped by the GradScaler (callbacks.numerics.max_skipped_in_row=3) at step 2"),
])  # fmt: skip
def test_a_collapsing_loss_scale_is_a_fault(cpu_scaler, make_cfg, caplog, overrides, line):
    with caplog.at_level(logging.WARNING):
        train(make_cfg(*cpu_scaler, "callbacks.numerics.policy=warn", *overrides))
    assert line in messages(caplog)


# -- CUDA --------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_on_cuda_reads_are_as_designed_and_16_mixed_reports_the_scaler(reads, make_cfg, caplog):
    gpu = (*CNN, "trainer=gpu", "trainer.max_steps=3")
    base = reads("callbacks.numerics=null", base=gpu)
    assert reads("callbacks.numerics.policy=warn", base=gpu) == base
    assert reads(base=gpu) == [n + 1 for n in base]  # stop: one read before each step
    mixed = (*gpu, "precision=16-mixed")  # build.py's GradScaler plugin
    assert reads(base=mixed) == reads("callbacks.numerics=null", base=mixed)
    overrides = [*TINY_GPT, "trainer=gpu", "precision=16-mixed", "precision.init_scale=1024",
                 *POISON, "trainer.max_steps=6", "test=false"]  # fmt: skip
    with caplog.at_level(logging.WARNING), pytest.raises(NumericsFault, match="^non-finite loss"):
        train(make_cfg(*overrides))
    assert "GradScaler: loss scale 1024, optimizer steps skipped so far 1" in messages(caplog)


# -- bad input ---------------------------------------------------------------------------------
BAD = {
    "policy=x": "policy='x' is not one of: warn, skip, stop",
    "max_skipped_in_row=-1": "max_skipped_in_row=-1 must be an integer >= 1",
    "min_loss_scale=-0.5": "min_loss_scale=-0.5 must be a number >= 0 (0: never)",
    "activations=maybe": "activations='maybe' must be true or false",
}


@pytest.mark.parametrize("setting", list(BAD))
def test_bad_settings_are_one_line_before_training(make_cfg, setting):
    with pytest.raises(ConfigError) as caught:
        build.build_trainer(make_cfg(f"callbacks.numerics.{setting}"))
    assert str(caught.value) == f"callbacks.numerics.{BAD[setting]}"

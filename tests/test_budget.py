"""The memory budget: exact state bytes, measured activations, the CLI and the callback."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.core.optimizer import _configure_optimizers
from torch.utils.data import default_collate

from litforge.build import build_datamodule, build_module
from litforge.commands import budget
from litforge.errors import ConfigError
from litforge.monitors.memory_budget import MemoryBudget, MemoryBudgetExceeded
from litforge.planning.budget import measure as budget_measure
from litforge.planning.budget import report as budget_report
from litforge.planning.budget.measure import precision_plugin
from litforge.precision import PRECISIONS
from litforge.training import train
from tests.helpers import ROOT, TINY_GPT

MODELS = {"cnn": ["experiment=digits_cnn"], "gpt": TINY_GPT}
CPU = torch.device("cpu")
NO_LOG = r".*self\.log\(\)` but the `self\.trainer` reference is not registered.*"


def subject(make_cfg, *overrides: str) -> budget.Subject:
    return budget.from_config(make_cfg(*overrides, "trainer=cpu"))


def real_step_bytes(module: L.LightningModule, batch, dtype: torch.dtype) -> tuple[int, int, int]:
    """Weights, gradients, optimizer state after one real step of the module's own
    optimizer, summed over the tensors themselves."""
    module = module.to(dtype)
    batch = [t.to(dtype) if t.is_floating_point() else t for t in batch]
    (optimizer,), _, _ = _configure_optimizers(module.configure_optimizers())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=NO_LOG)
        module.training_step(batch, 0).backward()
    optimizer.step()
    params = list(module.parameters())
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    assert len(state) == 3 * len(params)  # AdamW: exp_avg, exp_avg_sq, step per parameter
    return (
        sum(p.nbytes for p in params),
        sum(p.grad.nbytes for p in params),
        sum(t.nbytes for t in state),
    )


@pytest.mark.parametrize("model", list(MODELS))
def test_weights_gradients_optimizer_are_the_real_tensors_bytes(make_cfg, monkeypatch, model):
    cfg = make_cfg(*MODELS[model], "trainer=cpu")
    s = budget.from_config(cfg)
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    batch = default_collate([datamodule.train_set[i] for i in range(4)])
    for precision, dtype in (("32", torch.float32), ("bf16-true", torch.bfloat16)):
        row = s.row(precision, s.checkpointing)
        real = real_step_bytes(build_module(cfg), batch, dtype)
        assert (row.weights, row.gradients, row.optimizer) == real
        # A large module's copy steps on the meta device instead: the same tensors.
        monkeypatch.setattr(budget_measure, "SMALL_MODULE_BYTES", 0)
        meta = budget_measure.state_bytes(s.module, precision, CPU, s.config)
        monkeypatch.undo()
        assert (meta.weights, meta.gradients, meta.optimizer) == real
    # Mixed precision keeps float32 master weights, gradients and state.
    mixed, full = s.row("bf16-mixed", s.checkpointing), s.row("32", s.checkpointing)
    assert (mixed.weights, mixed.gradients, mixed.optimizer) == (
        full.weights, full.gradients, full.optimizer,
    )  # fmt: skip


@pytest.mark.parametrize("model", list(MODELS))
def test_activations_scaled_from_two_samples_equal_a_full_batch_count(make_cfg, model):
    s = subject(make_cfg, *MODELS[model])
    settings = (None,) if s.checkpointing is None else (False, True)
    for precision in ("32", "bf16-mixed", "bf16-true"):
        for checkpointing in settings:
            estimate = s.row(precision, checkpointing).activations
            (direct,) = s.activation_bytes(precision, checkpointing, s.batch_size)
            assert estimate == direct > 0, (precision, checkpointing)


def test_bf16_and_checkpointing_lower_the_activations(make_cfg):
    s = subject(make_cfg, "experiment=gpt_char")
    plain = s.row("32", False).activations
    # gpt_char, batch 64 x 64 characters, 2026-11-30: 0.168 and 0.607.
    assert s.row("32", True).activations / plain < 0.2
    assert s.row("bf16-mixed", False).activations / plain < 0.65
    cnn = subject(make_cfg, "experiment=digits_cnn")
    assert cnn.row("bf16-mixed").activations / cnn.row("32").activations < 0.75  # 0.707


def test_the_benchmark_counts_with_the_budgets_function(make_cfg):
    from benchmarks import memory

    net, batch = memory._setup(False, "experiment=gpt_char")
    s = subject(
        make_cfg, *memory.SUBJECT, "experiment=gpt_char", "model.gradient_checkpointing=false"
    )
    s.module.net.load_state_dict(net.state_dict())
    for bf16, precision in ((False, "32"), (True, "bf16-mixed")):
        (direct,) = s.activation_bytes(precision, False, s.batch_size)
        assert memory.saved_bytes(net, batch, bf16=bf16) == direct


def test_precision_plugins_are_the_ones_lightning_builds():
    for precision in PRECISIONS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False)
        ours = precision_plugin(precision, CPU)
        assert type(ours) is type(trainer.precision_plugin), precision
        assert getattr(ours, "precision", None) == getattr(
            trainer.precision_plugin, "precision", None
        )


def test_options_pick_the_largest_micro_batch_that_fits(make_cfg):
    s = subject(make_cfg, "experiment=digits_cnn")
    row = s.row("32")
    limit = budget_report.Limit(s.row("32", batch_size=16).total, "test")
    first, second = budget_report.options(s, row, limit)[:2]
    assert first.change.startswith("data.batch_size=16 trainer.accumulate_grad_batches=4 ")
    assert first.fits and first.total == limit.size
    assert second.change == "precision=bf16-mixed" and second.total == s.row("bf16-mixed").total


def test_compare_table_says_what_does_not_fit():
    args = ["experiment=gpt_char", "--compare", "--device-memory", "1MiB"]
    result = subprocess.run(
        [sys.executable, "-m", "litforge.budget", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    table = lines[lines.index("") + 1 :]
    assert table[0].split()[:7] == list(budget_report.COLUMNS)
    rows = [line.split()[:2] for line in table[1:7]]
    assert rows == [[p, c] for p in ("32", "bf16-mixed", "bf16-true") for c in ("off", "on")]
    assert all(line.endswith("does not fit") for line in table[1:7])
    assert "the configured setting does not fit; options, in order:" in lines


def test_unparseable_device_memory_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as stop:
        budget.main(["--device-memory", "lots"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("error: --device-memory='lots' is neither a size")


def test_callback_checks_its_arguments():
    key = "callbacks.memory_budget"
    cases = {"device_memory": "lots", "enforce": "yes", "compare_after_steps": 0}
    for name, value in cases.items():
        with pytest.raises(ConfigError, match=rf"^{key}\.{name}={value!r}"):
            MemoryBudget(**{name: value})
    assert MemoryBudget(device_memory="H100").device_memory == "H100"


def test_a_run_that_cannot_fit_stops_before_training_with_the_options(make_cfg, tmp_path, caplog):
    # In-process (train.py's recipe): the entry point turns the error into its exit status
    # and one `error:` line as for every LitforgeError (tests/test_bad_input.py).
    cfg = make_cfg(*TINY_GPT, "trainer.max_steps=2", "callbacks.memory_budget.device_memory=100KiB")
    with caplog.at_level(logging.INFO, "litforge"), pytest.raises(MemoryBudgetExceeded) as stop:
        train(cfg)
    assert stop.value.exit_code == 2
    error = str(stop.value)
    assert error.startswith("memory budget: this run needs about ") and "\n" not in error
    changes = [
        "data.batch_size=1 trainer.accumulate_grad_batches=8 (same effective batch): ",
        "precision=bf16-mixed: ",
        "model.gradient_checkpointing=true: ",
        "a card with more memory: T4 (14.7 GiB usable): ",
    ]
    positions = [error.index(change) for change in changes]
    assert positions == sorted(positions)
    assert "memory budget: precision=32-true checkpointing=off weights=" in caplog.text
    run_dir = tmp_path / "run"
    assert not (run_dir / "metrics.json").exists()
    assert not list(run_dir.rglob("*.ckpt"))


def _fit(make_cfg, callbacks: list[L.Callback]) -> dict[str, torch.Tensor]:
    cfg = make_cfg(*TINY_GPT, "model.net.dropout=0.1")
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, module = build_datamodule(cfg), build_module(cfg)
    trainer = L.Trainer(
        accelerator="cpu", max_steps=3, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=callbacks,
    )  # fmt: skip
    trainer.fit(module, datamodule=datamodule)
    return {**module.state_dict(), "rng": torch.get_rng_state()}


def test_the_callback_leaves_training_unchanged(make_cfg, caplog):
    # Over its limit but not enforced: it also measures the alternatives, then trains.
    callback = MemoryBudget(device_memory="1KiB", enforce=False)
    with caplog.at_level(logging.WARNING, "litforge"):
        with_budget = _fit(make_cfg, [callback])
    assert callback.estimate is not None and callback.estimate.total > 0
    assert "memory budget: this run needs about" in caplog.text
    without = _fit(make_cfg, [])
    assert with_budget.keys() == without.keys()
    assert all(torch.equal(with_budget[k], without[k]) for k in without)


@pytest.mark.gpu
def test_the_estimate_is_near_the_measured_gpu_peak(make_cfg):
    # The default GPT shape (3.3M parameters, batch 32 x 128): large enough that the
    # CUDA context-free extras (cuBLAS workspace, the batch) are small next to it.
    cfg = make_cfg("model=gpt", "data=text", "trainer=gpu")
    L.seed_everything(cfg.seed, verbose=False)
    callback = MemoryBudget(compare_after_steps=3)
    trainer = L.Trainer(
        accelerator="gpu", devices=1, max_steps=4, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, callbacks=[callback],
    )  # fmt: skip
    trainer.fit(build_module(cfg), datamodule=build_datamodule(cfg))
    assert callback.peak is not None and callback.estimate is not None
    assert 0.5 < callback.estimate.total / callback.peak < 1.5


def test_cpu_processes_that_together_exceed_the_free_ram_are_one_line():
    from litforge.monitors.memory_budget import ram_problem

    gib = 2**30
    assert ram_problem(3 * gib, 4, available=16 * gib) is None
    assert ram_problem(5 * gib, 1, available=1 * gib) is None  # one process: the budget's own
    assert ram_problem(5 * gib, 4, available=16 * gib) == (
        "memory budget: 4 CPU processes need about 20.0 GiB (5.0 GiB each), more than the "
        "16.0 GiB of RAM available; use fewer trainer.devices, or processes.oversubscribe=true "
        "to start them anyway"
    )


def test_frozen_parameters_count_as_weights_without_gradients_or_optimizer_state(make_cfg):
    full = subject(make_cfg, "experiment=digits_cnn").row("32", None)
    frozen = subject(make_cfg, "experiment=digits_cnn", "model.freeze=[net.features.*]")
    row = frozen.row("32", None)
    features = sum(p.nbytes for n, p in frozen.module.named_parameters() if ".features." in n)
    assert features > 0
    assert row.weights == full.weights
    assert row.gradients == full.gradients - features
    assert row.optimizer == full.optimizer - 2 * features - 4 * 4  # AdamW: two moments, a step
    assert row.activations < full.activations  # the frozen convolutions keep no input

"""The step breakdown with faults injected into plain Lightning runs: each fault's share of the
profiled steps, timed as it happened in the same run, is where the breakdown puts it (within
5 percentage points). Then the trace arithmetic on a GPU-shaped trace, debug=profile through
train.py, and its bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset

from litforge import training as train_entry
from litforge.monitors.step_breakdown import StepBreakdown
from litforge.monitors.step_breakdown_report import advice
from litforge.monitors.step_breakdown_trace import analyse, host_segments
from tests.helpers import ROOT, run_entry
from tests.test_bad_input import assert_one_line_error, run
from tests.test_step_breakdown_hta import TRACE

SRC = ROOT / "src" / "litforge"

WAIT, WARMUP, ACTIVE = 2, 1, 4
TOLERANCE = 0.05


class Spans:
    """perf_counter (start, end) of each injected fault, and of each batch's start."""

    def __init__(self) -> None:
        self.faults: list[tuple[float, float]] = []
        self.batch_starts: list[float] = []

    def timed(self, work) -> None:
        start = time.perf_counter()
        work()
        self.faults.append((start, time.perf_counter()))

    def share(self) -> float:
        """The faults' share of the profiled steps: from the start of batch WAIT + WARMUP to
        that of the batch after the last recorded one (where the profiler steps)."""
        t0 = self.batch_starts[WAIT + WARMUP]
        t1 = self.batch_starts[WAIT + WARMUP + ACTIVE]
        inside = sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in self.faults)
        return inside / (t1 - t0)


class BatchStarts(L.Callback):
    def __init__(self, spans: Spans) -> None:
        self.spans = spans

    def on_train_batch_start(self, *args) -> None:
        self.spans.batch_starts.append(time.perf_counter())


class Batches(Dataset):
    """Whole batches of random regression data; `sleep_s` per batch, timed."""

    def __init__(self, spans: Spans | None, sleep_s: float, width: int) -> None:
        self.spans, self.sleep_s, self.width = spans, sleep_s, width

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.spans is not None:
            self.spans.timed(lambda: time.sleep(self.sleep_s))
        gen = torch.Generator().manual_seed(index)
        return torch.randn(32, self.width, generator=gen), torch.randn(32, 1, generator=gen)


class Data(L.LightningDataModule):
    def __init__(self, dataset: Dataset) -> None:
        super().__init__()
        self.dataset = dataset

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_size=None)


class Regression(L.LightningModule):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def fit(tmp_path: Path, data: L.LightningDataModule, width: int, *callbacks: L.Callback,
        spans: Spans) -> StepBreakdown:  # fmt: skip
    breakdown = StepBreakdown(wait_steps=WAIT, warmup_steps=WARMUP, active_steps=ACTIVE)
    trainer = L.Trainer(
        max_steps=WAIT + WARMUP + ACTIVE + 2, default_root_dir=tmp_path, logger=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks), enable_progress_bar=False, enable_model_summary=False,
        # marks first: the profiler's step at the last batch also writes and reads the trace
        callbacks=[BatchStarts(spans), breakdown, *callbacks],
    )  # fmt: skip
    trainer.fit(Regression(width), datamodule=data)
    assert breakdown.breakdown is not None
    assert breakdown.breakdown.steps == ACTIVE
    assert sum(breakdown.breakdown.shares.values()) == pytest.approx(1.0)
    return breakdown


def test_a_slow_loader_shows_as_data_wait(tmp_path):
    spans = Spans()
    found = fit(tmp_path, Data(Batches(spans, 0.05, 64)), 64, spans=spans)
    shares = found.breakdown.shares
    injected = spans.share()
    assert injected > 2 * TOLERANCE  # a fault the breakdown put elsewhere would show
    assert shares["data_wait"] == pytest.approx(injected, abs=TOLERANCE)
    assert "raise data.num_workers (the DataLoader has num_workers=0" in advice(
        found.breakdown, {"loader": "num_workers=0"}
    )
    assert found.trace_path == tmp_path / "step_trace" / "rank0.pt.trace.json"
    assert found.trace_path.stat().st_size < 5e6


class Nap(L.Callback):
    def __init__(self, spans: Spans) -> None:
        self.spans = spans

    def on_train_batch_end(self, *args) -> None:
        self.spans.timed(lambda: time.sleep(0.02))


def test_a_slow_callback_shows_as_callbacks_under_its_name(tmp_path):
    spans = Spans()
    found = fit(tmp_path, Data(Batches(None, 0.0, 64)), 64, Nap(spans), spans=spans)
    injected = spans.share()
    assert injected > 2 * TOLERANCE
    assert found.breakdown.shares["callbacks"] == pytest.approx(injected, abs=TOLERANCE)
    assert found.breakdown.parts["callbacks", "Nap"] == pytest.approx(injected, abs=TOLERANCE)
    assert found.breakdown.shares["data_wait"] < TOLERANCE
    said = advice(found.breakdown, {"callback_keys": {"Nap": "nap"}})
    assert "most of it Nap" in said and "drop it with callbacks.nap=null" in said


class TimedCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint saving at every step, its saving hook timed."""

    def __init__(self, spans: Spans, dirpath: Path) -> None:
        super().__init__(dirpath=dirpath, every_n_train_steps=1, save_top_k=-1)
        self.spans = spans

    def on_train_batch_end(self, *args, **kwargs) -> None:
        self.spans.timed(lambda: super(TimedCheckpoint, self).on_train_batch_end(*args, **kwargs))


def test_a_checkpoint_every_step_shows_as_checkpoint(tmp_path):
    spans = Spans()
    saver = TimedCheckpoint(spans, tmp_path / "ckpts")
    width = 512  # ~3 MB of weights and Adam state a save: a share the test can see
    found = fit(tmp_path, Data(Batches(None, 0.0, width)), width, saver, spans=spans)
    injected = spans.share()
    assert len(list((tmp_path / "ckpts").glob("*.ckpt"))) == WAIT + WARMUP + ACTIVE + 2
    assert injected > 2 * TOLERANCE
    assert found.breakdown.shares["checkpoint"] == pytest.approx(injected, abs=TOLERANCE)
    assert found.breakdown.shares["callbacks"] < TOLERANCE
    assert advice(found.breakdown, {}).startswith("checkpoint saves are")  # the largest


def test_on_a_gpu_idle_time_belongs_to_what_the_host_did_and_hidden_communication_to_none():
    # One step of 100 µs: 40 waiting for data and 10 launching while the GPU idles, 40 of
    # compute, the all-reduce's last 5 µs alone, then 5 idle in Lightning's loop.
    trace = TRACE
    found = analyse(trace, {})
    assert found is not None and found.steps == 1 and found.step_s == pytest.approx(1e-4)
    assert found.device_idle == pytest.approx(0.55)  # 0-50 and 95-100
    assert found.device == pytest.approx(
        {"compute": 0.40, "communication": 0.05, "copy": 0.0, "idle": 0.55}
    )
    assert found.shares == pytest.approx(
        {
            "data_wait": 0.40,
            "forward": 0.30,
            "backward": 0.20,
            "communication": 0.05,
            "other": 0.05,
        }  # fmt: skip
    )


def test_a_range_the_breakdown_does_not_know_leaves_its_time_to_the_range_around_it():
    ranges = [(0, 10, "forward", ""), (2, 4, "optimizer", ""), (5, 12, "backward", "")]
    # backward outlives forward: clipped to it; 10-12 falls back to the step (other)
    assert host_segments(ranges, 0, 12) == [
        (0, 2, "forward", ""), (2, 4, "optimizer", ""), (4, 5, "forward", ""),
        (5, 10, "backward", ""), (10, 12, "other", ""),
    ]  # fmt: skip


def test_debug_profile_through_train_py_writes_the_trace_and_run_json(tmp_path, capfd):
    run_dir = tmp_path / "run"
    code, out, err = run(train_entry.main, [
        "trainer=cpu", "debug=profile", "trainer.limit_train_batches=7",
        "callbacks.step_breakdown.wait_steps=2", "callbacks.step_breakdown.active_steps=3",
        "test=false",
    ], run_dir, capfd)  # fmt: skip
    assert code == 0, err[-3000:]
    record = json.loads((run_dir / "run.json").read_text())["step_breakdown"]
    assert record["steps"] == 3
    assert sum(record["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    assert record["shares"]["forward"] > 0 and record["shares"]["backward"] > 0
    trace = json.loads(Path(record["trace"]).read_text())
    assert len([e for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")]) == 3
    screen = out + err
    assert "step breakdown: 3 training steps" in screen and "advice: " in screen


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["callbacks.step_breakdown.active_steps=0"], "callbacks.step_breakdown.active_steps=0"),
        (["callbacks.step_breakdown.wait_steps=-1"], "callbacks.step_breakdown.wait_steps=-1"),
        (["trainer.profiler=simple"], "callbacks.step_breakdown"),
    ],
)
def test_bad_values_get_one_line(tmp_path, capfd, args, key):
    run_dir = tmp_path / "run"
    code, out, err = run(train_entry.main, ["trainer=cpu", "debug=profile", *args], run_dir, capfd)
    assert_one_line_error(code, out, err, key)


@pytest.mark.slow
def test_two_processes_each_write_a_trace_and_rank_zero_reports(tmp_path):
    result = run_entry(
        "train.py", "debug=profile", "trainer=ddp", "trainer.devices=2",
        "trainer.accelerator=cpu", "callbacks.step_breakdown.wait_steps=2",
        "callbacks.step_breakdown.active_steps=3", "test=false", run_dir=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    traces = sorted(p.name for p in (tmp_path / "step_trace").iterdir())
    assert traces == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    assert (result.stdout + result.stderr).count("step breakdown: 3 training steps") == 1
    record = json.loads((tmp_path / "run.json").read_text())["step_breakdown"]
    # gloo's all-reduce of the gradients, and the ranks agreeing each step on a signal
    assert record["shares"]["communication"] > 0

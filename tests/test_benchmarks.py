"""The benchmark harness itself: how figures are judged and paired, how the checkpoint
stall benchmark reads save timings, and the GPU script's code paths (its --smoke mode,
tiny models on the CPU). `make bench` runs the real thing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.stats import Figure, interleaved, ratios

ROOT = Path(__file__).resolve().parents[1]


def test_figure_judges_its_goal_on_the_median():
    assert Figure.of([1.2, 1.0, 1.01], "x", "<= 1.03").met is True  # median 1.01
    assert Figure.of([1.04], "x", "<= 1.03").met is False
    assert Figure.of([97.5], "%", ">= 97").met is True
    assert Figure.of([1.0, 2.0], "x").met is None  # reported only
    assert Figure.of([3.0, 1.0, 2.0], "x").to_json()["min"] == 1.0


def test_sides_alternate_order_and_pair_by_repeat():
    calls: list[str] = []

    def side(name: str, value: float):
        def one() -> float:
            calls.append(name)
            return value

        return one

    values = interleaved({"a": side("a", 2.0), "b": side("b", 4.0)}, repeats=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert ratios(values, "a", "b") == [0.5, 0.5, 0.5]


def test_checkpoint_stall_reads_each_save_timing_through_a_config_callback(tmp_path):
    from benchmarks.checkpoint_stall import SaveTimings
    from litforge.cli import compose
    from litforge.training import train

    SaveTimings.last = []
    overrides = [
        "trainer.max_steps=2", "checkpoint.every_n_train_steps=1", "test=false", "resume=never",
        "+callbacks.save_timings._target_=benchmarks.checkpoint_stall.SaveTimings",
    ]  # fmt: skip
    train(compose(overrides, tmp_path / "run"))
    # A save per step; the end of training finds step 2 saved already and adds none.
    assert [t.step for t in SaveTimings.last] == [1, 2]
    assert all(t.wall_s > 0 and t.cpu_s > 0 and t.bytes > 0 for t in SaveTimings.last)


def test_gpu_script_code_paths_run_on_the_cpu(tmp_path):
    # A subprocess: the benchmark harness sets process-wide state (threads, log levels).
    out = tmp_path / "gpu.json"
    args = ["--smoke", "--steps", "2", "--warmup", "1", "--repeats", "1", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| model | setting | tokens/s |" in result.stdout
    rows = json.loads(out.read_text())["rows"]
    settings = [r["setting"] for r in rows]
    assert {"32-true", "16-mixed", "bf16-mixed"} <= set(settings)
    assert all(r["tokens_per_s"] > 0 and r["tflops"] >= 0 for r in rows if "tokens_per_s" in r)
    (cmp,) = [r for r in rows if r["setting"].startswith("template / raw")]
    assert cmp["ratio_median"] > 0


def _burn(seconds: float) -> None:
    import time

    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_hook_timer_charges_a_nested_call_to_itself_not_to_its_caller():
    from benchmarks.hook_costs import HookTimer, _Exclusive

    inner = _Exclusive(lambda: _burn(0.03), "inner")

    def outer_work() -> None:
        _burn(0.01)
        inner()

    HookTimer.spent, HookTimer._stack = {}, []
    _Exclusive(outer_work, "outer")()
    assert HookTimer.spent["inner"] >= 0.03
    assert 0.01 <= HookTimer.spent["outer"] < HookTimer.spent["inner"]
    assert not HookTimer._stack


def test_hook_shares_of_a_real_run_name_the_default_callbacks(tmp_path):
    from benchmarks.hook_costs import SAVES, shares

    found = shares(["experiment=digits_cnn", "trainer.max_epochs=-1"], steps=20, repeats=1)
    for name in ("NumericsWatch", "ThroughputMFU", "MemoryBudget", "LearningRateMonitor",
                 SAVES, "logger ResumableCSVLogger"):  # fmt: skip
        assert name in found, sorted(found)
    assert all(0 <= share[0] < 0.5 for share in found.values())
    assert 0 < sum(share[0] for share in found.values()) < 1

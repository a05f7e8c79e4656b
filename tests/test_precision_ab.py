"""Precision A/B: a real sweep writes the report; the verdict on made-up curves."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from omegaconf import OmegaConf

from litforge.errors import ConfigError
from litforge.precision_checks.training_ab.compare import compare, trailing_mean
from litforge.precision_checks.training_ab.experiment import (
    PrecisionReport,
    build_report,
    mixed_precisions,
    sweep_values,
)
from litforge.precision_checks.training_ab.probe import PROBE_FILE, PrecisionProbe
from litforge.precision_checks.training_ab.write import markdown, plot
from litforge.validation.checks import check_config
from tests.helpers import run_entry

VERDICT = re.compile(r"tracks float32 within [\d.]+%|diverges after step \d+")


def _run_sweep(sweep, *args: str, timeout: int = 300):
    # run_entry appends hydra.run.dir, which a sweep ignores: its jobs go to hydra.sweep.dir.
    return run_entry(
        "train.py", "experiment=precision_ab", f"hydra.sweep.dir={sweep}", *args,
        run_dir=sweep / "unused", env={"CI": "1"}, timeout=timeout,
    )  # fmt: skip


def test_sweep_writes_curves_speed_memory_and_a_verdict(tmp_path):
    sweep = tmp_path / "ab"
    result = _run_sweep(sweep, "trainer.max_steps=6", "precision_ab.smooth_steps=2")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((sweep / "precision_ab.json").read_text())
    rows = report["precisions"]
    expected = ["32", *mixed_precisions("auto")]  # bf16-mixed, fp8 here; 16-mixed on a GPU
    assert [r["precision_requested"] for r in rows] == expected
    assert "fp8" in expected  # torchao is in litforge[all]; its float8 runs on this CPU
    ran_as = ["32-true", *(_ran_as(p) for p in expected[1:])]
    assert [r["precision_effective"] for r in rows] == ran_as
    for row in rows:
        assert row["steps"] == [1, 2, 3, 4, 5, 6]
        assert len(row["loss"]) == 6 and all(math.isfinite(x) for x in row["loss"])
        assert row["timed_steps"] == 5 and row["steps_per_s"] > 0
        assert row["activation_bytes"] > 0
    assert rows[0]["verdict"] == "reference" and rows[0]["gap"] is None
    for row in rows[1:]:
        assert VERDICT.fullmatch(row["verdict"]), row["verdict"]
        assert len(row["gap"]["values"]) == 6
        assert row["gap"]["largest"] >= row["gap"]["final"] >= 0
    # Autocast saves bfloat16 activations: fewer bytes wait for backward than in float32.
    assert rows[1]["activation_bytes"] < rows[0]["activation_bytes"]
    page = (sweep / "precision_ab.md").read_text()
    assert all(f"| {r['precision_requested']} |" in page and r["verdict"] in page for r in rows)
    assert (sweep / "precision_ab.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "precision A/B: " in result.stdout  # the table and where the files are
    # Each job is an ordinary run: its own directory, with a logged loss per step.
    header = (sweep / "0" / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/loss_step" in header


def test_bad_key_stops_the_sweep_before_any_job(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    sweep = tmp_path / "ab"
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep)}},
         "precision_ab": {"compare": "auto", "threshold": 0, "smooth_steps": 10}}
    )  # fmt: skip
    with pytest.raises(SystemExit) as stop:
        PrecisionReport().on_multirun_start(config)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: precision_ab.threshold=0 is invalid; must be a number > 0\n"
    assert not sweep.exists()


def test_fewer_steps_than_the_smoothing_window_stop_the_sweep_before_any_job(tmp_path):
    sweep = tmp_path / "ab"
    result = _run_sweep(sweep, "trainer.max_steps=5")  # smooth_steps is 10
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "error: trainer.max_steps=5 is fewer than precision_ab.smooth_steps=10, too few steps "
        "for a verdict; set trainer.max_steps>=10 or precision_ab.smooth_steps<=5"
    )
    assert not list(sweep.glob(f"*/{PROBE_FILE}")) and not (sweep / "0").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("precision_ab.threshold=-0.1", "precision_ab.threshold=-0.1 is invalid; must be a number > 0"),
        ("precision_ab.smooth_steps=0", "precision_ab.smooth_steps=0 is invalid; must be an integer >= 1"),
        ("precision_ab.compare=[fp16]", "precision_ab.compare=['fp16'] is invalid; must be one of auto, or"),
    ],
)  # fmt: skip
def test_each_job_checks_the_keys_too(make_cfg, override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        check_config(make_cfg("experiment=precision_ab", override))


def test_the_probe_refuses_an_unknown_precision():
    with pytest.raises(
        ConfigError, match=r"^callbacks.precision_probe.requested='fp8' is not one of: 32, "
    ):
        PrecisionProbe("fp8")  # fp8 is bf16-mixed plus precision.fp8, its own argument
    with pytest.raises(
        ConfigError, match=r"^callbacks.precision_probe.fp8='fast' is not one of: off, tensorwise"
    ):
        PrecisionProbe("bf16-mixed", fp8="fast")
    assert PrecisionProbe("bf16-mixed", fp8="rowwise").requested == "fp8-rowwise"


def test_a_rerun_starts_from_a_clean_report_and_keeps_the_old_one(tmp_path, capsys):
    """A stable sweep directory: records of an earlier sweep's jobs are not reported again,
    and its report moves to previous/<time>/ rather than being overwritten."""
    sweep = tmp_path / "ab"
    (sweep / "2").mkdir(parents=True)
    (sweep / "2" / PROBE_FILE).write_text("{}")
    (sweep / "precision_ab.md").write_text("old")
    (sweep / "2" / "metrics.json").write_text("{}")
    config = OmegaConf.create(
        {"hydra": {"sweep": {"dir": str(sweep)}},
         "precision_ab": {"compare": "auto", "threshold": 0.05, "smooth_steps": 10}}
    )  # fmt: skip
    PrecisionReport().on_multirun_start(config)
    (kept,) = (sweep / "previous").iterdir()
    assert sorted(str(p.relative_to(sweep)) for p in sweep.rglob("*") if p.is_file()) == [
        "2/metrics.json", f"previous/{kept.name}/precision_ab.md"
    ]  # fmt: skip
    assert (kept / "precision_ab.md").read_text() == "old"
    assert f"precision A/B: the previous report moved to {kept}" in capsys.readouterr().out


def _ran_as(precision: str) -> str:
    """What the probe records a precision ran as: fp8 is bf16 autocast plus float8 layers
    (experiment=precision_ab's GPT has 5 Linear layers, all but lm_head in float8)."""
    return "bf16-mixed + float8 in 4 Linear layers" if precision == "fp8" else precision


def test_sweep_values_put_float32_first_and_quote_it():
    assert sweep_values("auto", "cpu") == "'32',bf16-mixed,fp8"
    listed = ["16-mixed", "32", "16-mixed", "bf16-true"]  # 32 is always there, once and first
    assert sweep_values(listed, "cpu") == "'32',16-mixed,bf16-true"
    # 16-mixed would run as bf16-mixed on CPU; float8 runs through torch._scaled_mm
    assert mixed_precisions("cpu") == ["bf16-mixed", "fp8"]


@pytest.mark.slow
def test_the_shipped_defaults_find_bf16_tracking_float32(tmp_path):
    """`make compare-precision` as shipped (150 steps): bfloat16 autocast stays within 5%."""
    sweep = tmp_path / "ab"
    result = _run_sweep(sweep, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((sweep / "precision_ab.json").read_text())["precisions"]
    assert [len(r["loss"]) for r in rows] == [150] * len(rows)
    for name in ("bf16-mixed", "fp8"):
        row = next(r for r in rows if r["precision_requested"] == name)
        assert row["tracks"] is True, row["verdict"]
        assert row["verdict"] == "tracks float32 within 5%"


@pytest.mark.gpu
def test_on_a_gpu_the_sweep_adds_16_mixed_and_records_peak_memory(tmp_path):
    expected = ["bf16-mixed", "16-mixed"] if torch.cuda.is_bf16_supported() else ["16-mixed"]
    if torch.cuda.get_device_capability() >= (8, 9):
        expected.append("fp8")  # FP8 tensor cores (Ada, Hopper and newer)
    assert mixed_precisions("auto") == expected
    assert mixed_precisions("cpu") == ["bf16-mixed", "fp8"]
    sweep = tmp_path / "ab"
    result = _run_sweep(sweep, "trainer.max_steps=20")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((sweep / "precision_ab.json").read_text())["precisions"]
    ran_as = ["32-true", *(_ran_as(p) for p in expected)]  # none swapped
    assert [r["precision_effective"] for r in rows] == ran_as
    assert all(r["peak_memory_bytes"] > 0 and len(r["loss"]) == 20 for r in rows)
    assert "| peak memory |" in (sweep / "precision_ab.md").read_text()


# Made-up curves: a loss decaying from 3 to about 1 over 100 steps.
STEPS = list(range(1, 101))
REF = [1.0 + 2.0 * math.exp(-s / 30) for s in STEPS]


def test_a_curve_within_the_threshold_tracks():
    wobble = [x * (1 + 0.02 * math.sin(s)) for s, x in zip(STEPS, REF, strict=True)]
    gap = compare(STEPS, REF, wobble, threshold=0.05, window=1)
    assert gap.tracks and gap.exceeded_at is None
    assert gap.verdict() == "tracks float32 within 5%"
    assert gap.largest[0] == pytest.approx(0.02, abs=1e-3)  # where |sin(s)| is nearly 1


def test_a_curve_that_drifts_away_diverges_at_the_first_step_past_the_threshold():
    # From step 30 on, 2% more per step: 4% at step 32, 6% at step 33.
    drift = [x * (1 + 0.02 * max(0, s - 30)) for s, x in zip(STEPS, REF, strict=True)]
    gap = compare(STEPS, REF, drift, threshold=0.05, window=1)
    assert gap.exceeded_at == 33 and gap.verdict() == "diverges after step 33"
    assert gap.largest == (pytest.approx(1.4), 100)
    # Averaged over 5 steps: 4% at step 34 (0..8%), 6% at step 35 (2..10%).
    assert compare(STEPS, REF, drift, threshold=0.05, window=5).exceeded_at == 35


def test_smoothing_ignores_a_one_step_spike_but_not_a_lasting_gap():
    spike = [x * (1.3 if s == 50 else 1.0) for s, x in zip(STEPS, REF, strict=True)]
    assert compare(STEPS, REF, spike, threshold=0.05, window=1).exceeded_at == 50
    smoothed = compare(STEPS, REF, spike, threshold=0.05, window=10)
    assert smoothed.tracks and smoothed.largest[0] == pytest.approx(0.03, rel=0.1)


def test_a_loss_that_is_not_finite_is_a_divergence_and_float32_s_own_is_no_verdict():
    broken = [None if s >= 12 else x for s, x in zip(STEPS, REF, strict=True)]
    gap = compare(STEPS, REF, broken, threshold=0.05, window=10)
    assert gap.verdict() == "diverges after step 12" and gap.final == math.inf
    assert compare(STEPS, broken, REF, 0.05, 10).verdict() == (
        "no verdict: the float32 loss is not finite at step 12"
    )


def test_runs_shorter_than_the_window_get_no_verdict_unless_a_loss_broke():
    """A run cut short (max_epochs, a crash) reports too few steps to smooth, not 'tracks';
    a non-finite loss is no jitter, so that still diverges."""
    runs = [
        {"precision_requested": p, "steps": STEPS[:5], "loss": losses}
        for p, losses in [("32", REF[:5]), ("bf16-mixed", REF[:5]), ("16-true", [*REF[:4], None])]
    ]
    rows = build_report(runs, threshold=0.05, window=10)["precisions"]
    assert [(r["verdict"], r["tracks"]) for r in rows[1:]] == [
        ("no verdict: 5 steps in common, fewer than precision_ab.smooth_steps=10", None),
        ("diverges after step 5", False),
    ]
    assert compare(STEPS[:10], REF[:10], REF[:10], 0.05, 10).verdict() == (
        "tracks float32 within 5%"
    )  # a full window is enough


def test_trailing_mean():
    assert trailing_mean([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


def test_report_from_records_orders_rows_and_writes_page_and_figure(tmp_path):
    def run(precision, effective, losses, job):
        return {
            "precision_requested": precision, "precision_effective": effective,
            "run_dir": str(tmp_path / job), "steps": STEPS, "loss": losses, "timed_steps": 99,
            "steps_per_s": 10.0, "activation_bytes": 3 << 20, "peak_memory_bytes": None,
            "processes": 1, "device": "CPU",
        }  # fmt: skip

    drift = [x * (1 + 0.02 * max(0, s - 30)) for s, x in zip(STEPS, REF, strict=True)]
    runs = [run("bf16-mixed", "bf16-mixed", REF, "1"), run("16-true", "16-true", drift, "2"),
            run("32", "32-true", REF, "0")]  # fmt: skip
    report = build_report(runs, threshold=0.05, window=1)
    order = [r["precision_requested"] for r in report["precisions"]]
    assert order == ["32", "bf16-mixed", "16-true"]  # float32 first, then job order
    assert [r["verdict"] for r in report["precisions"]] == [
        "reference", "tracks float32 within 5%", "diverges after step 33",
    ]  # fmt: skip
    assert report["precisions"][2]["tracks"] is False and report["steps"] == 100
    json.dumps(report, allow_nan=False)  # valid JSON: no NaN or Infinity
    page = markdown(report)
    assert "| 16-true | 16-true | 2.5712 | 140% | 140% (step 100) |" in page and "| 3 MiB |" in page
    assert "peak memory" not in page  # CPU runs: no CUDA peak to show
    plot(report, tmp_path / "ab.png")
    assert (tmp_path / "ab.png").stat().st_size > 10_000
    assert build_report(runs[:2], 0.05, 1) is None  # no float32 run: nothing to compare with

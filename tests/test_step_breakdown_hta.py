"""benchmarks/hta_compare.py's CPU-runnable parts on a GPU-shaped trace: litforge's device
split over its own window and over HTA's span. HTA itself runs from its own interpreter
(benchmarks/gpu.sh makes one); LITFORGE_HTA_PYTHON names one to compare against here too."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import hta_compare


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


# One step of 100 µs: the GPU idles 50 µs while the host waits for data and launches, then
# computes 40 µs, and 5 of the all-reduce's 10 µs are not under compute.
TRACE = {
    "schemaVersion": 1, "deviceProperties": [],
    "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
    "traceEvents": [
        _x("ProfilerStep#3", 1000, 100),
        _x("[_TrainingEpochLoop].train_dataloader_next", 1000, 40),
        _x("[Strategy]DDPStrategy.training_step", 1040, 20),
        _x("cudaLaunchKernel", 1045, 1, cat="cuda_runtime", correlation=1),
        _x("[Strategy]DDPStrategy.backward", 1060, 20),
        _x("cudaLaunchKernel", 1065, 1, cat="cuda_runtime", correlation=2),
        _x("cudaLaunchKernel", 1066, 1, cat="cuda_runtime", correlation=3),
        _x("sgemm", 1050, 20, cat="kernel", tid=7, stream=7, device=0, correlation=1),
        _x("sgemm_backward", 1070, 20, cat="kernel", tid=7, stream=7, device=0, correlation=2),
        _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1085, 10, cat="kernel", tid=8, stream=8,
           device=0, correlation=3),
        # Kineto's copy of the step range on the device's timeline: not the host's window
        _x("ProfilerStep#3", 1050, 60, cat="gpu_user_annotation", tid=7),
    ],
}  # fmt: skip


def test_over_the_steps_and_over_the_kernels_span():
    ours = hta_compare.ours(TRACE)
    assert ours["steps"] == pytest.approx(
        {"compute": 0.40, "communication": 0.05, "copy": 0.0, "idle": 0.55}
    )
    # HTA's span is 1050-1095: the idle start of the step is outside it
    assert ours["kernel_span"] == pytest.approx(
        {"compute": 40 / 45, "communication": 5 / 45, "copy": 0.0, "idle": 0.0}
    )
    rows = hta_compare.table(ours, None).splitlines()
    assert rows[2] == "| idle | 55.0% | 0.0% | not run |"
    assert rows[4] == "| non_compute | 5.0% | 11.1% | not run |"


def test_a_trace_without_kernels_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="no profiled steps with GPU kernels"):
        hta_compare.ours({"traceEvents": TRACE["traceEvents"][:3]})


@pytest.mark.skipif(not os.environ.get("LITFORGE_HTA_PYTHON"), reason="no HTA interpreter")
def test_hta_splits_the_same_span_the_same_way(tmp_path):
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_text(json.dumps(TRACE))
    theirs = hta_compare.hta(trace, os.environ["LITFORGE_HTA_PYTHON"])
    ours = hta_compare.ours(TRACE)["kernel_span"]
    assert theirs["idle"] == pytest.approx(ours["idle"], abs=1e-3)
    assert theirs["compute"] == pytest.approx(ours["compute"], abs=1e-3)
    assert theirs["non_compute"] == pytest.approx(ours["communication"] + ours["copy"], abs=1e-3)

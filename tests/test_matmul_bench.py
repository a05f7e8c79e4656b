"""`python -m litforge.matmul_bench`: output a machine can read, bad input in one line."""

from __future__ import annotations

import json

import pytest
import torch

from litforge.toolkit import matmul_bench


def _bench(capsys, *args: str) -> tuple[int, str, str]:
    """What `python -m litforge.matmul_bench *args` exits with and prints (run in-process:
    a subprocess would spend seconds importing torch)."""
    code = matmul_bench.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_on_cpu_has_float32_and_bfloat16_with_ratios(capsys):
    code, out, err = _bench(capsys, "--json", "--sizes", "64,128")
    assert code == 0, err
    report = json.loads(out)
    assert report["device"] == "cpu" and report["card"] is None
    rows = {(r["dtype"], r["size"]): r["tflops"] for r in report["rows"]}
    assert set(rows) == {(d, n) for d in ("float32", "bfloat16") for n in (64, 128)}
    assert all(t > 0 for t in rows.values())
    summary = {s["dtype"]: s for s in report["summary"]}
    assert summary["float32"]["vs_float32"] == 1.0
    best_bf16 = max(rows["bfloat16", 64], rows["bfloat16", 128])
    assert summary["bfloat16"]["tflops"] == best_bf16
    assert summary["bfloat16"]["vs_float32"] == pytest.approx(
        best_bf16 / summary["float32"]["tflops"]
    )
    assert summary["bfloat16"]["vs_peak"] is None  # no listed peak for a CPU


def test_table_by_default(capsys):
    code, out, err = _bench(
        capsys, "--sizes", "32", "--dtypes", "float32,float16", "--seconds", "0.01"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("matmul throughput on cpu, torch ")
    assert any(line.split()[:2] == ["float16", "32"] for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sizes", "0,512"], "error: --sizes='0,512' must be comma-separated matrix sizes"),
        (["--sizes", "big"], "error: --sizes='big' must be comma-separated matrix sizes"),
        (
            ["--dtypes", "tf32"],
            "error: --dtypes='tf32': 'tf32' is not one of: float32, float16, bfloat16 (on cpu)",
        ),
        (["--seconds", "-1"], "error: --seconds=-1.0 must be in (0, 60]"),
        (["--seconds", "x"], "error: argument --seconds: invalid float value: 'x'"),
        (["--size", "8"], "error: unrecognized arguments: --size 8"),
    ],
)
def test_bad_input_is_one_line(capsys, args, message):
    code, out, err = _bench(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


def test_tf32_switch_is_restored():
    before = torch.get_float32_matmul_precision()
    with matmul_bench.matmul_precision("tf32"):
        assert torch.get_float32_matmul_precision() == "high"
    with matmul_bench.matmul_precision("float32"):
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == before


@pytest.mark.gpu
def test_bf16_is_at_least_twice_strict_float32_on_gpu():
    device = torch.device("cuda")
    report = matmul_bench.run((4096, 8192), ("float32", "bfloat16"), device, min_seconds=0.2)
    summary = {s["dtype"]: s for s in report["summary"]}
    assert summary["bfloat16"]["vs_float32"] >= 2.0, report["summary"]
    if report["card"]:  # measured below the listed dense peak
        assert 0 < summary["bfloat16"]["vs_peak"] <= 1.0, report["summary"]

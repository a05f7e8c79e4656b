"""`python -m litforge.matmul_bench`: output a machine can read, bad input in one line."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys

import pytest
import torch

from litforge.planning import matmul_bench


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


# The benchmark's process may map at most this much (`ulimit -v`): 30000 needs 10.1 GiB of
# float32 matrices, and nothing this test starts can take more than the limit.
ADDRESS_SPACE = 4 * 2**30


def _limited(*command: str) -> subprocess.CompletedProcess:
    """`python *command` on the CPU under ADDRESS_SPACE."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, resource.RLIM_INFINITY))

    env = os.environ | {"CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, env=env,
        preexec_fn=limit, timeout=120,
    )  # fmt: skip


def test_a_size_beyond_memory_is_one_line_before_allocating():
    done = _limited("-m", "litforge.matmul_bench", "--sizes", "30000")
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert re.fullmatch(
        r"error: --sizes=30000 needs 10\.1 GiB \(3 30000x30000 float32 matrices\), but only "
        r"[0-9.]+ GiB of address space is left under ulimit -v; pick sizes up to \d+\n",
        done.stderr,
    ), done.stderr


def test_the_widest_dtype_sizes_the_need():
    done = _limited("-m", "litforge.matmul_bench", "--sizes", "30000", "--dtypes", "bfloat16")
    assert done.returncode == 2 and "needs 5.0 GiB (3 30000x30000 bfloat16" in done.stderr


def test_an_allocation_that_fails_anyway_is_one_line():
    """Past the check (memory taken meanwhile): torch's own refusal, caught as it comes."""
    code = (
        "import resource, sys, torch\n"
        "from litforge.errors import ConfigError\n"
        "from litforge.planning import matmul_bench\n"
        "from litforge.planning.bench_memory import address_space_left\n"
        "# Room for less than the first matrix: it fails at once, nothing is filled.\n"
        "room = address_space_left() - 2**30\n"
        "resource.setrlimit(resource.RLIMIT_AS, (resource.getrlimit(resource.RLIMIT_AS)[0] - room, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    matmul_bench.run((30000,), ('float32',), torch.device('cpu'), 0.01)\n"
        "except ConfigError as err:\n"
        "    sys.exit(f'error: {err}')\n"
    )
    done = _limited("-c", code)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr == (
        "error: --sizes=30000: out of cpu memory for the float32 matrices (tried to allocate "
        "3600000000 bytes); pick smaller sizes\n"
    )

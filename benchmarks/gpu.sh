#!/usr/bin/env bash
# GPU benchmarks: tokens/s, TFLOP/s, MFU, peak memory and template-vs-raw-loop overhead
# for a GPT-2-small-shaped (124M) and a ~350M GPT at sequence 1024 (benchmarks/gpu.py).
# About 5-8 minutes on one H100/H200. Prints a markdown table; full numbers go to
# benchmarks/results/gpu.json. Extra arguments go to benchmarks/gpu.py (--help).
#   benchmarks/gpu.sh                    # all figures
#   PYTHON=python3 benchmarks/gpu.sh     # another interpreter than .venv/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "benchmarks/gpu.sh: no CUDA device visible to $PY (torch.cuda.is_available() is False);" \
         "run it on a GPU machine with a CUDA build of torch. Nothing was measured." >&2
    exit 2
fi
mkdir -p benchmarks/results
exec "$PY" -m benchmarks.gpu "$@"

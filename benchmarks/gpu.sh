#!/usr/bin/env bash
# GPU benchmarks: tokens/s, TFLOP/s, MFU, peak memory and template-vs-raw-loop overhead
# for a GPT-2-small-shaped (124M) and a ~350M GPT at sequence 1024 (benchmarks/gpu.py).
# About 5-8 minutes on one H100/H200. Prints a markdown table; full numbers go to
# benchmarks/results/gpu.json. Extra arguments go to benchmarks/gpu.py (--help).
# fp8 against bf16 for both GPTs: tokens/s, MFU and peak memory in torchao float8
# (tensorwise, rowwise; compiled), beside `litforge plan`'s prediction; needs the
# litforge[fp8] extra and FP8 tensor cores (L4, L40S, RTX 4090, H100, H200): one line
# says why the fp8 rows are skipped otherwise.
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
# The step breakdown of one GPT run (debug=profile) beside HTA's temporal breakdown of the
# same trace: benchmarks/results/hta_compare.json. HTA pulls jupyter and plotly, so it gets
# a venv of its own outside the repository; without a network, the breakdown alone.
HTA_VENV="${HTA_VENV:-${TMPDIR:-/tmp}/litforge-hta-venv}"
if [ ! -x "$HTA_VENV/bin/python" ]; then
    { python3 -m venv "$HTA_VENV" && "$HTA_VENV/bin/pip" install -q HolisticTraceAnalysis==0.5.0; } \
        || { echo "benchmarks/gpu.sh: HTA could not be installed; the breakdown alone" >&2; rm -rf "$HTA_VENV"; }
fi
HTA_ARGS=(--json benchmarks/results/hta_compare.json)
[ -x "$HTA_VENV/bin/python" ] && HTA_ARGS+=(--hta-python "$HTA_VENV/bin/python")
"$PY" -m benchmarks.hta_compare --run "${HTA_ARGS[@]}" \
    || echo "benchmarks/gpu.sh: the step breakdown comparison failed; the other figures follow" >&2
exec "$PY" -m benchmarks.gpu "$@"

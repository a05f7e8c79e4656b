"""Ratio benchmarks for litforge: `make bench` (CPU) and `benchmarks/gpu.sh` (CUDA).

Every timed figure is a ratio of two sides measured in the same process, interleaved
(A B A B ...), in CPU time on one thread; see `benchmarks/stats.py`.
"""

"""Figures `restart_compile_warm` and `restart_compile_cold`: what compiling costs a run
that resumes on a fresh machine, with and without the compile cache from the store.

Per repeat, three `python train.py compile.enabled=true` processes of the default
experiment, each with an empty inductor cache directory of its own (a fresh machine):
the first trains 4 steps and checkpoints to a local store; two copies of that store are
then resumed to step 6, one with `compile.cache=true` (the first run's archive is fetched
before the first step), one with `compile.cache=false`. The figure is each resumed run's
compile phase (run.json's `restart_phases_s.compile`: the first step's wall time beyond
the second's) over the first run's. Wall time, not CPU time: inductor builds its C++ in
worker processes. Inductor where a C compiler is on PATH, else aot_eager (which keeps no
files, so the cache has nothing to carry and the figure shows it).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, scratch_dir
from benchmarks.stats import Figure

FIRST_STEPS, RESUMED_STEPS = 4, 6


# The archive is used only when signed with this key (one per benchmark process).
_KEY = secrets.token_hex(32)


def _backend() -> str:
    return "inductor" if any(shutil.which(c) for c in ("cc", "gcc", "clang")) else "aot_eager"


def _run(root: Path, name: str, store: Path, steps: int, *extra: str) -> dict[str, Any]:
    """One train.py process on an empty cache directory; its run.json."""
    env = {**os.environ, "CI": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           "TORCHINDUCTOR_CACHE_DIR": str(root / f"inductor-{name}"),
           "LITFORGE_COMPILE_CACHE_KEY": _KEY}  # fmt: skip
    argv = [
        sys.executable, "train.py", "compile.enabled=true", f"compile.backend={_backend()}",
        f"trainer.max_steps={steps}", "trainer.limit_val_batches=2", "test=false",
        "run_name=restart", f"checkpoint.dir={store}", f"hydra.run.dir={root / name}", *extra,
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads((root / name / "run.json").read_text())


def _trio(root: Path) -> dict[str, dict[str, Any]]:
    store = root / "store"
    runs = {"first": _run(root, "first", store, FIRST_STEPS)}
    for side, cache in (("warm", "true"), ("cold", "false")):
        copy = root / f"store-{side}"
        shutil.copytree(store, copy)
        runs[side] = _run(root, side, copy, RESUMED_STEPS, f"compile.cache={cache}")
    return runs


def measure(repeats: int = 1) -> dict[str, Figure]:
    trios = []
    for _ in range(repeats):
        root = scratch_dir()
        try:
            trios.append(_trio(root))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def compile_s(run: dict[str, Any]) -> float:
        return float(run["restart_phases_s"]["compile"])

    seconds = {
        side: [round(compile_s(t[side]), 2) for t in trios] for side in ("first", "warm", "cold")
    }
    fetched = [t["warm"].get("compile_cache", {}).get("fetched_files", 0) for t in trios]
    common = f"compile.backend={_backend()}, default experiment, {repeats} trio(s) of processes"
    return {
        "restart_compile_warm": Figure.of(
            [compile_s(t["warm"]) / compile_s(t["first"]) for t in trios],
            "x first run",
            "<= 0.5",
            note=f"compile phase of a run resumed on an empty local cache with compile.cache "
            f"fetching the store's archive / the first run's ({common})",
            extra={"compile_s": seconds, "fetched_files": fetched},
        ),  # fmt: skip
        "restart_compile_cold": Figure.of(
            [compile_s(t["cold"]) / compile_s(t["first"]) for t in trios],
            "x first run",
            note=f"the same resume with compile.cache=false ({common})",
            extra={"compile_s": seconds},
        ),  # fmt: skip
    }


if __name__ == "__main__":
    for name, figure in measure(int(sys.argv[1]) if len(sys.argv) > 1 else 1).items():
        print(name, json.dumps(figure.to_json()))

"""A plain Hydra app (no litforge model) for `hydra/launcher=gpus`: each job writes what it
saw (its devices, threads, pid, start and end) to job.json in its directory, sleeps
`sleep` (+ `sleep_x` times x, + `lengths[job number % len(lengths)]`) seconds (and until
the file `hold`, or `gates`/<job number>, exists), and returns x squared; the job whose x is `fail_on` raises instead,
and the one whose x is `exit_on` ends its process without a word. With `prune: true` (under
litforge's Optuna sweeper) a job first reports x squared to its trial (trial number = job
number) and, when the study's pruner says so, stops there: pruned.

For the lifecycle tests: `children` processes of its own (pids in job.json), each ignoring
SIGTERM; the job whose x is `stubborn_on` ignores SIGTERM; the one whose x is `blocked_on`
waits in native code (a read of a pipe nobody writes) with SIGTERM blocked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

_STUBBORN_CHILD = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
)


@hydra.main(version_base="1.3", config_path=".", config_name="config")
def main(cfg: DictConfig) -> float:
    out = Path(HydraConfig.get().runtime.output_dir) / "job.json"
    seen = {
        "pid": os.getpid(),
        "start": time.time(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "devices": os.environ.get("LITFORGE_TRIAL_DEVICES"),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "num": HydraConfig.get().job.num,
    }
    if _is(cfg.x, cfg.stubborn_on):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    children = [
        subprocess.Popen([sys.executable, "-c", _STUBBORN_CHILD]) for _ in range(cfg.children)
    ]
    seen["children"] = [c.pid for c in children]
    out.write_text(json.dumps(seen))
    if cfg.prune and _pruned(seen["num"], float(cfg.x) ** 2):
        out.write_text(json.dumps({**seen, "end": time.time(), "pruned": True}))
        return float(cfg.x) ** 2
    if _is(cfg.x, cfg.blocked_on):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        os.read(os.pipe()[0], 1)  # never returns: nothing writes to the pipe
    by_number = float(cfg.lengths[seen["num"] % len(cfg.lengths)]) if cfg.lengths else 0.0
    time.sleep(float(cfg.sleep) + float(cfg.sleep_x) * float(cfg.x) + by_number)
    gate = cfg.hold or (cfg.gates and Path(cfg.gates) / str(seen["num"]))
    while gate and not Path(gate).exists() and time.time() - seen["start"] < 300:
        time.sleep(0.05)  # until the test says (another sweep is waiting for this device)
    out.write_text(json.dumps({**seen, "end": time.time()}))
    if cfg.fail_on is not None and float(cfg.x) == float(cfg.fail_on):
        raise RuntimeError(f"job with x={cfg.x} fails")
    if cfg.exit_on is not None and float(cfg.x) == float(cfg.exit_on):
        os._exit(3)  # no outcome reported: the launcher judges by the exit status
    return float(cfg.x) ** 2


def _pruned(number: int, value: float) -> bool:
    """Report `value` at step 0 to this job's trial; whether the pruner stopped it (recorded
    on the trial as litforge's pruning callback does)."""
    from litforge.sweeps.study import STOPPED, trial_of_this_job

    trial = trial_of_this_job(number)
    trial.report(value, 0)
    if not trial.should_prune():
        return False
    trial.storage.set_trial_system_attr(trial._trial_id, STOPPED, f"pruned at step 0 ({value})")
    return True


def _is(x: float, value: float | None) -> bool:
    return value is not None and float(x) == float(value)


if __name__ == "__main__":
    main()

"""A plain Hydra app (no litforge model) for `hydra/launcher=gpus`: each job writes what it
saw (its devices, threads, pid, start and end) to job.json in its directory, sleeps
`sleep` seconds, and returns x squared; the job whose x is `fail_on` raises instead."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


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
    out.write_text(json.dumps(seen))
    time.sleep(float(cfg.sleep))
    out.write_text(json.dumps({**seen, "end": time.time()}))
    if cfg.fail_on is not None and float(cfg.x) == float(cfg.fail_on):
        raise RuntimeError(f"job with x={cfg.x} fails")
    return float(cfg.x) ** 2


if __name__ == "__main__":
    main()

"""A SkyPilot managed-job task (`sky jobs launch job.yaml`) for one plan option.

What a spot job needs and a hand-written one gets wrong: one stable `run_name`, so the job
SkyPilot relaunches on a new VM (with an empty disk) resumes instead of starting over;
`checkpoint.dir` on a bucket, not the VM's disk; the checkpoint interval the plan works
out; and a recovery policy that relaunches on a preemption or litforge's own
interruptions, never on a config error, a NaN stop or an out-of-memory exit, which would
fail the same way again.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ENGINES = ("skypilot",)

# litforge's exit codes and what SkyPilot does with each under this file's policy.
# SkyPilot relaunches a preempted VM whatever the code; these are for a job whose VM is
# still up. 137 is SkyPilot's own (it ends the other nodes' processes with it): not used.
RECOVERED = {
    75: "interrupted: the data or checkpoint store was unreachable, or another run holds the lock",
    143: "stopped by SIGTERM (a spot notice): checkpoint saved, the same command resumes",
    130: "stopped by SIGINT: checkpoint saved",
}
NOT_RECOVERED = {
    1: "an uncaught error in the user's code",
    2: "a config error (bad key, value, file or URL), said in one line before training",
    65: "stopped on a NaN/Inf loss (callbacks.numerics): the rerun would diverge again",
    66: "out of device memory: the same card fails the same way",
}

# litforge.planning.hardware's names -> SkyPilot's accelerator names.
ACCELERATORS = {
    "H200 NVL": "H200", "H200": "H200", "H100 NVL": "H100-NVL", "H100 PCIe": "H100",
    "H100": "H100", "A100 40GB": "A100", "A100": "A100-80GB", "L40S": "L40S", "L4": "L4",
    "A10": "A10G", "RTX 4090": "RTX4090", "V100S PCIe": "V100", "V100 PCIe 32GB": "V100-32GB",
    "V100 PCIe": "V100", "V100 32GB": "V100-32GB", "V100": "V100", "T4": "T4",
}  # fmt: skip

SETUP = "make install  # the project's own install, into .venv"


@dataclass(frozen=True)
class Job:
    """What the task runs: `overrides` (the user's and the plan setting's), on `nodes`
    machines of `count` x `card`, checkpoints every `every_n_steps` at `bucket`."""

    overrides: list[str]
    card: str
    count: int
    nodes: int
    bucket: str
    run_name: str
    every_n_steps: int | None
    clouds: list[dict[str, str]]


def stable_run_name(overrides: list[str], project_root: Path) -> str:
    """`run_name=` if given; else `<project>-<digest>`: the project's name, and a digest of
    that name, its directory's name and the overrides. Another project or another config
    (other overrides) sharing the bucket gets another name, so never its checkpoints; the
    same command in the same project gets the same one, so a relaunch resumes."""
    for item in overrides:
        if item.startswith("run_name="):
            return item.split("=", 1)[1]
    name = project_name(project_root)
    key = "\0".join([name, project_root.name, *sorted(overrides)])
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40].strip("-") or "job"
    return f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def project_name(root: Path) -> str:
    """`[project] name` of root/pyproject.toml, else the directory's name."""
    # Read by pattern, not with tomllib: Python 3.10 has none, and the name must come out
    # the same whichever Python writes the job again.
    try:
        text = (root / "pyproject.toml").read_text(errors="replace")
    except OSError:
        text = ""
    table = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    found = table and re.search(r"""^name\s*=\s*["']([^"'\n]+)["']""", table.group(1), re.M)
    return found.group(1).strip() if found and found.group(1).strip() else root.name


def train_command(job: Job) -> str:
    """The `run:` command: train.py (under torchrun from SkyPilot's node variables on
    several nodes) with the run name, bucket and checkpoint interval."""
    given = {o.split("=", 1)[0].lstrip("+~") for o in job.overrides}
    extra = [f"run_name={job.run_name}", f"checkpoint.dir={job.bucket}"]
    if job.every_n_steps and "checkpoint.every_n_train_steps" not in given:
        extra.append(f"checkpoint.every_n_train_steps={job.every_n_steps}")
    args = [o for o in job.overrides if not o.startswith("run_name=")] + extra
    quoted = " ".join(shlex.quote(a) for a in args)
    if job.nodes == 1:
        return f".venv/bin/python train.py {quoted}\n"
    # One run directory over all nodes, as litforge's torchrun path makes it.
    return (
        'MASTER=$(echo "$SKYPILOT_NODE_IPS" | head -n1)\n'
        ".venv/bin/torchrun --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK "
        "--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE --master_addr=$MASTER "
        f"--master_port=${{MASTER_PORT:-29500}} train.py {quoted} trainer.num_nodes={job.nodes}\n"
    )


def task(job: Job) -> dict[str, Any]:
    resources: dict[str, Any] = {
        "accelerators": f"{ACCELERATORS.get(job.card, job.card.replace(' ', ''))}:{job.count}",
        "use_spot": True,
        "job_recovery": {
            "strategy": "EAGER_NEXT_REGION",  # a preempted region is often out of spot
            "max_restarts_on_errors": 0,
            "recover_on_exit_codes": sorted(RECOVERED),
        },
    }
    if job.clouds:
        resources["any_of"] = job.clouds
    return {
        "name": f"litforge-{job.run_name}",
        "resources": resources,
        "num_nodes": job.nodes,
        "workdir": ".",
        "setup": SETUP + "\n",
        "run": train_command(job),
    }


def render(job: Job) -> str:
    """The YAML, with the exit codes in a comment above it."""
    lines = ["# SkyPilot managed job written by `litforge plan --launch skypilot`.",
             "# Launch: sky jobs launch THIS_FILE. A preempted VM is relaunched and resumes",
             f"# from {job.bucket}/{job.run_name} (the same run_name on every relaunch).",
             "# litforge's exit codes:"]  # fmt: skip
    for code, why in sorted({**RECOVERED, **NOT_RECOVERED}.items()):
        verdict = "recovered" if code in RECOVERED else "not recovered"
        lines.append(f"#   {code:>3}: {verdict:<13} {why}")
    lines.append("#   137 is SkyPilot's own (cancelled); litforge does not use it.")
    return "\n".join(lines) + "\n" + yaml.safe_dump(task(job), sort_keys=False, width=100)

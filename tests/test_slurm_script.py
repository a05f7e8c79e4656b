"""scripts/slurm/train.sbatch: its srun line composes, and it asks SLURM for what we rely on."""

from __future__ import annotations

import re
import shlex
import subprocess

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "slurm" / "train.sbatch"
JOB = {"SLURM_JOB_NAME": "litforge", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "4",
       "CHECKPOINT_DIR": "s3://my-bucket/litforge", "PYTHON": ".venv/bin/python"}  # fmt: skip


def srun_overrides() -> list[str]:
    (line,) = [ln for ln in SCRIPT.read_text().splitlines() if ln.startswith("srun ")]
    words = shlex.split(line.rstrip(" &"))
    args = words[words.index("train.py") + 1 :]
    expand = lambda w: re.sub(r"\$\{?(\w+)\}?", lambda m: JOB[m.group(1)], w)  # noqa: E731
    return [expand(w) for w in args if w != "$@"]


def test_the_srun_line_composes_into_a_multi_node_run(make_cfg):
    cfg = make_cfg(*srun_overrides())
    assert cfg.run_name == "litforge"  # requeued jobs find their run directory and resume
    assert cfg.checkpoint.dir == "s3://my-bucket/litforge"
    assert (cfg.trainer.num_nodes, cfg.trainer.devices) == (2, 4)


def test_the_job_asks_for_a_warning_signal_and_requeue():
    directives = [
        ln.split()[1] for ln in SCRIPT.read_text().splitlines() if ln.startswith("#SBATCH")
    ]
    assert "--signal=B:USR1@120" in directives and "--requeue" in directives
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0  # it parses

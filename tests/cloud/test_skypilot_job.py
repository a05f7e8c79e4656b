"""`litforge plan --launch skypilot`: the job file from the plan, and what SkyPilot does
on recovery, simulated here: run its `run:` command as written, kill -9 it mid-run, run it
again on an empty "machine", and end bitwise where an uninterrupted run ends."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from litforge.commands.plan import main as plan
from litforge.launch.skypilot_task import stable_run_name
from tests.checkpointing.test_resume_exact import assert_bitwise_equal
from tests.helpers import ROOT

PRICES = """cards:
  H100: {on_demand: 2.99, spot: 1.60, mtbf_hours: 6}
  L4:   {on_demand: 0.80, spot: 0.30, mtbf_hours: 24}
  T4:   {on_demand: 0.35}
clouds:
  - {cloud: aws, region: us-east-1}
  - {cloud: gcp}
"""
RUN = ["trainer.max_steps=12", "checkpoint.every_n_train_steps=4", "test=false",
       "trainer.deterministic=true", "run_name=digits-spot"]  # fmt: skip


def write_job(tmp_path: Path, *extra: str) -> dict:
    (tmp_path / "prices.yaml").write_text(PRICES)
    plan([*RUN, "--launch", "skypilot", "--bucket", "s3://litforge/jobs", "--prices",
          str(tmp_path / "prices.yaml"), "--out", str(tmp_path / "job.yaml"), *extra])  # fmt: skip
    return yaml.safe_load((tmp_path / "job.yaml").read_text())


def test_the_job_file_holds_resources_run_name_bucket_and_recovery(s3, tmp_path, capsys):
    job = write_job(tmp_path)
    resources = job["resources"]
    assert resources["accelerators"] == "L4:1"  # the cheapest on spot for a digits run
    assert resources["use_spot"] is True
    assert resources["any_of"] == [{"cloud": "aws", "region": "us-east-1"}, {"cloud": "gcp"}]
    recovery = resources["job_recovery"]
    assert recovery["max_restarts_on_errors"] == 0  # a config error, NaN or OOM: not again
    assert recovery["recover_on_exit_codes"] == [75, 130, 143] and 137 not in recovery.values()
    assert job["setup"].startswith("make install")
    run = job["run"]
    assert run.startswith(".venv/bin/python train.py ") and "run_name=digits-spot" in run
    assert "checkpoint.dir=s3://litforge/jobs" in run and "trainer.devices=1" in run
    assert "checkpoint.every_n_train_steps=4" in run  # the user's interval wins the plan's
    text = (tmp_path / "job.yaml").read_text()
    assert "#    66: not recovered" in text and "#   143: recovered" in text
    said = capsys.readouterr().out
    assert "wrote " in said
    assert "not checked with SkyPilot's parser: it is not installed here" in said  # not in dev


def test_several_nodes_start_torchrun_from_skypilots_node_variables(s3, tmp_path):
    job = write_job(tmp_path, "--nodes", "2", "--card", "H100", "--count", "4")
    assert job["num_nodes"] == 2 and job["resources"]["accelerators"] == "H100:4"
    run = job["run"]
    for part in ("--nnodes=$SKYPILOT_NUM_NODES", "--node_rank=$SKYPILOT_NODE_RANK",
                 "--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE", "trainer.num_nodes=2",
                 'head -n1'):  # fmt: skip
        assert part in run
    assert "--master_port=${MASTER_PORT:-29500}" in run


def test_two_nodes_halve_the_micro_batch_when_there_is_no_accumulation_to_divide(s3, tmp_path):
    run = write_job(tmp_path, "--nodes", "2")["run"]  # digits: 64 a step, accumulation 1
    assert "data.batch_size=32" in run and "trainer.accumulate_grad_batches=1" in run


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--launch", "k8s"], "error: --launch k8s: not an engine litforge writes jobs for"),
        (["--launch", "skypilot", "--nodes", "0"], "error: --nodes=0 must be a number of machines"),
        (
            ["--launch", "skypilot", "--prices", "P", "--bucket", "/tmp/ckpt"],
            "error: --bucket /tmp/ckpt: a local path, and a spot VM's disk does not survive",
        ),
        (
            ["--launch", "skypilot", "--prices", "P", "--bucket", "s3://no-such-bucket/x"],
            "error: checkpoint.dir=s3://no-such-bucket/x: cannot write there",
        ),
        (
            [
                "--launch",
                "skypilot",
                "--prices",
                "P",
                "--bucket",
                "s3://litforge/x",
                "--card",
                "A10",
            ],
            "error: --card 'A10' is not in --prices",
        ),
        (
            ["--launch", "skypilot", "--prices", "BAD", "--bucket", "s3://litforge/x"],
            "clouds must be a list of {cloud: ..., region: ...}",
        ),
        (
            [
                "--launch",
                "skypilot",
                "--prices",
                "P",
                "--bucket",
                "s3://litforge/x",
                "--out",
                "{tmp}",
            ],
            "error: --out {tmp}: a directory; give the job file's name",
        ),
        (
            [
                "--launch",
                "skypilot",
                "--prices",
                "P",
                "--bucket",
                "s3://litforge/x",
                "--out",
                "{tmp}/missing/job.yaml",
            ],
            "error: --out {tmp}/missing/job.yaml: directory {tmp}/missing does not exist",
        ),
        (
            ["--bucket", "s3://litforge/x"],
            "error: --bucket s3://litforge/x is an option of a job file, and without --launch",
        ),
        (["--out", "job.yaml"], "error: --out job.yaml is an option of a job file"),
        (["--nodes", "2"], "error: --nodes 2 is an option of a job file"),
    ],  # fmt: skip
)
def test_bad_launch_input_is_one_line(s3, tmp_path, capsys, extra, said):
    (tmp_path / "prices.yaml").write_text(PRICES)
    (tmp_path / "bad.yaml").write_text(PRICES.replace("- {cloud: gcp}", "- gcp"))
    named = {"P": str(tmp_path / "prices.yaml"), "BAD": str(tmp_path / "bad.yaml")}
    extra = [named.get(e, e).replace("{tmp}", str(tmp_path)) for e in extra]
    said = said.replace("{tmp}", str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        plan(extra)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_an_existing_job_file_is_not_overwritten(s3, tmp_path, capsys):
    job = write_job(tmp_path)  # the same job written again: nothing changes, and it says so
    capsys.readouterr()
    assert write_job(tmp_path) == job
    assert "unchanged: " in capsys.readouterr().out
    (tmp_path / "job.yaml").write_text("# another job of mine\n")
    with pytest.raises(SystemExit) as stop:
        write_job(tmp_path, "data.batch_size=32")
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"error: --out {tmp_path / 'job.yaml'} exists and holds another job" in err, err
    assert (tmp_path / "job.yaml").read_text() == "# another job of mine\n"


def test_the_default_run_name_differs_across_projects_and_configs_and_stays_put(tmp_path):
    one, other = tmp_path / "vision", tmp_path / "speech"
    for root, name in ((one, "lab-vision"), (other, "lab-speech")):
        root.mkdir()
        (root / "pyproject.toml").write_text(f'[build-system]\nrequires = []\n\n[project]\n'
                                             f'version = "0.1"\nname = "{name}"\n')  # fmt: skip
    names = {
        stable_run_name([], one), stable_run_name([], other),
        stable_run_name(["experiment=gpt_char"], one), stable_run_name(["model=big"], one),
    }  # fmt: skip
    assert len(names) == 4 and not any(n.startswith("job-e3b0c44298") for n in names)
    assert stable_run_name([], one).startswith("lab-vision-")
    # The same project and overrides, in any order: the same name on every relaunch.
    assert stable_run_name(["a=1", "b=2"], one) == stable_run_name(["b=2", "a=1"], one)
    renamed = tmp_path / "copy-of-vision"  # another checkout: the name says which project
    one.rename(renamed)
    assert stable_run_name([], renamed) != stable_run_name([], tmp_path / "vision")
    bare = tmp_path / "no_pyproject"
    bare.mkdir()
    assert stable_run_name([], bare).startswith("no-pyproject-")
    assert stable_run_name(["run_name=mine"], one) == "mine"


def test_a_job_without_run_name_is_named_after_the_project(s3, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the project (and SkyPilot's workdir) is where plan runs
    (tmp_path / "prices.yaml").write_text(PRICES)
    overrides = [o for o in RUN if not o.startswith("run_name=")]
    plan([*overrides, "--launch", "skypilot", "--bucket", "s3://litforge/jobs", "--prices",
          str(tmp_path / "prices.yaml"), "--out", str(tmp_path / "job.yaml")])  # fmt: skip
    run = yaml.safe_load((tmp_path / "job.yaml").read_text())["run"]
    name = stable_run_name(overrides, ROOT)
    assert name.startswith("litforge-") and f"run_name={name}" in run


def machine(tmp_path: Path, name: str) -> Path:
    """An empty working directory holding the project (what SkyPilot syncs), no outputs."""
    vm = tmp_path / name
    vm.mkdir()
    for part in (".venv", "train.py", "conf", "src"):
        (vm / part).symlink_to(ROOT / part)
    return vm


def run_as_written(command: str, vm: Path, env: dict, kill_after: str | None = None, s3=None):
    process = subprocess.Popen(["bash", "-c", command], cwd=vm, env=env, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    if kill_after is None:
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out[-3000:]
        return out
    deadline = time.monotonic() + 300
    while kill_after not in s3.keys(prefix="jobs/"):  # a checkpoint is in the bucket
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the VM is gone
    process.wait()
    return None


def load(s3, key: str) -> dict:
    import fsspec

    data = fsspec.filesystem("s3").cat_file(f"litforge/{key}")
    return torch.load(io.BytesIO(data), weights_only=True)


# Slow: three training runs; make test covers the job file itself above, and resuming from
# the bucket in a new run directory in tests/checkpointing/test_s3_runs.py.
@pytest.mark.slow
def test_a_relaunched_job_resumes_from_the_bucket_and_ends_bitwise(s3, tmp_path):
    run = write_job(tmp_path)["run"]
    env = {**os.environ, **s3.env(), "PYTHONUNBUFFERED": "1"}
    reference = run.replace("run_name=digits-spot", "run_name=reference")
    run_as_written(reference, machine(tmp_path, "vm0"), env)
    run_as_written(run, machine(tmp_path, "vm1"), env,
                   kill_after="jobs/digits-spot/step-00000004.ckpt.complete", s3=s3)  # fmt: skip
    assert "jobs/digits-spot/step-00000012.ckpt" not in s3.keys(prefix="jobs/")
    said = run_as_written(run, machine(tmp_path, "vm2"), env)  # a new VM, an empty disk
    assert "resuming from s3://litforge/jobs/digits-spot/step-0000000" in said
    expected = load(s3, "jobs/reference/step-00000012.ckpt")
    got = load(s3, "jobs/digits-spot/step-00000012.ckpt")
    assert_bitwise_equal(expected["state_dict"], got["state_dict"], "state_dict")
    assert_bitwise_equal(expected["optimizer_states"], got["optimizer_states"], "optimizer")


def node_env(env: dict, rank: int, port: int) -> dict:
    """What SkyPilot sets on node `rank` of a two-node job of one GPU each (both nodes are
    this machine), plus the rendezvous port the `run:` command reads (a free one here)."""
    return {**env, "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.1", "SKYPILOT_NODE_RANK": str(rank),
            "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NUM_GPUS_PER_NODE": "1", "MASTER_PORT": str(port)}  # fmt: skip


def run_nodes(command: str, vms: list[Path], env: dict, kill_after: str | None = None, s3=None):
    """The `run:` command on each node at once, as SkyPilot starts it; rank 0's output."""
    port = free_port()
    nodes = [
        subprocess.Popen(
            ["bash", "-c", command],
            cwd=vm,
            env=node_env(env, rank, port),
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for rank, vm in enumerate(vms)
    ]
    if kill_after is None:
        outs = [node.communicate(timeout=400)[0] for node in nodes]
        assert [n.returncode for n in nodes] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
        return outs[0]
    deadline = time.monotonic() + 400
    while kill_after not in s3.keys(prefix="jobs/"):
        assert all(n.poll() is None for n in nodes) and time.monotonic() < deadline
        time.sleep(0.2)
    # Both VMs are gone: every process of theirs, torchrun's workers too (they run in
    # sessions of their own, so a process group's kill misses them).
    doomed = [pid for node in nodes for pid in (node.pid, *descendants(node.pid))]
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for node in nodes:
        node.wait()
    return None


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    found, todo = [], [pid]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                kids = [int(c) for c in children.read_text().split()]
                found += kids
                todo += kids
    return found


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Slow: three two-node runs (six torchrun agents); make test covers the command's torchrun
# form above, and tests/e2e/test_launchers.py's torchrun case the one run directory.
@pytest.mark.slow
def test_a_relaunched_two_node_job_resumes_from_the_bucket_and_ends_bitwise(s3, tmp_path):
    run = write_job(tmp_path, "--nodes", "2")["run"]
    assert "data.batch_size=32" in run  # 64 per step over 2 nodes: the micro-batch halves
    env = {**os.environ, **s3.env(), "PYTHONUNBUFFERED": "1"}
    reference = run.replace("run_name=digits-spot", "run_name=reference")
    run_nodes(reference, [machine(tmp_path, "ref0"), machine(tmp_path, "ref1")], env)
    run_nodes(run, [machine(tmp_path, "a0"), machine(tmp_path, "a1")], env,
              kill_after="jobs/digits-spot/step-00000004.ckpt.complete", s3=s3)  # fmt: skip
    assert "jobs/digits-spot/step-00000012.ckpt" not in s3.keys(prefix="jobs/")
    said = run_nodes(run, [machine(tmp_path, "b0"), machine(tmp_path, "b1")], env)
    assert "resuming from s3://litforge/jobs/digits-spot/step-0000000" in said
    expected = load(s3, "jobs/reference/step-00000012.ckpt")
    got = load(s3, "jobs/digits-spot/step-00000012.ckpt")
    assert_bitwise_equal(expected["state_dict"], got["state_dict"], "state_dict")
    assert_bitwise_equal(expected["optimizer_states"], got["optimizer_states"], "optimizer")


# Slow: installs litforge[cloud,s3] into a venv of its own (~1.5 min). SkyPilot cannot join
# the project's: skypilot 0.14 pins click<8.2, wandb 0.31 and huggingface-hub 2.4 need
# click>=8.2. make test covers the same command without SkyPilot installed, above.
@pytest.mark.slow
def test_skypilots_own_task_parser_reads_the_job_file(s3, tmp_path):
    venv = tmp_path / "launch-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "torch==2.13.0",
                    "-e", f"{ROOT}[cloud,s3]"], check=True, timeout=900, capture_output=True)  # fmt: skip
    site = subprocess.run([python, "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    Path(site, "litforge-project.pth").write_text(f"{ROOT / 'src'}\n")  # as make install does
    (tmp_path / "prices.yaml").write_text(PRICES)
    planned = subprocess.run(
        [python, "-m", "litforge.plan", *RUN, "--launch", "skypilot", "--bucket",
         "s3://litforge/jobs", "--prices", str(tmp_path / "prices.yaml"), "--out",
         str(tmp_path / "job.yaml"), "--nodes", "2", "--card", "H100", "--count", "4"],
        cwd=ROOT, env={**os.environ, **s3.env()}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert (
        "checked with SkyPilot 0.14.1's task parser: 2 node(s), accelerators {'H100': 4}, spot True"
        in planned.stdout
    ), planned.stdout[-2000:]
    parse = (
        "import json, sys, sky\n"
        "task = sky.Task.from_yaml(sys.argv[1])\n"
        "r = sorted(task.resources, key=lambda r: str(r.cloud))\n"
        "print(json.dumps({'name': task.name, 'nodes': task.num_nodes, 'run': task.run,\n"
        "  'accelerators': [x.accelerators for x in r], 'spot': [x.use_spot for x in r],\n"
        "  'clouds': [str(x.cloud) for x in r], 'recovery': r[0].job_recovery}))\n"
    )
    done = subprocess.run([python, "-c", parse, str(tmp_path / "job.yaml")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    task = json.loads(done.stdout.strip().splitlines()[-1])
    assert task["name"] == "litforge-digits-spot" and task["nodes"] == 2
    assert task["accelerators"] == [{"H100": 4}, {"H100": 4}] and task["spot"] == [True, True]
    assert task["clouds"] == ["AWS", "GCP"]
    assert task["recovery"]["recover_on_exit_codes"] == [75, 130, 143]
    assert "checkpoint.dir=s3://litforge/jobs" in task["run"]
    # A file SkyPilot refuses is one ConfigError line naming the file and SkyPilot's reason.
    (tmp_path / "bad.yaml").write_text("name: x\nbogus_key: 1\nrun: echo hi\n")
    refuse = (
        "import sys\n"
        "from litforge.commands.plan_launch import check_with_skypilot\n"
        "from litforge.errors import ConfigError\n"
        "try:\n"
        "    check_with_skypilot(__import__('pathlib').Path(sys.argv[1]))\n"
        "except ConfigError as err:\n"
        "    print(err)\n"
    )
    refused = subprocess.run([python, "-c", refuse, str(tmp_path / "bad.yaml")],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 0, refused.stderr[-3000:]
    said = refused.stdout.strip()
    assert said.startswith(f"{tmp_path / 'bad.yaml'}: SkyPilot 0.14.1 refuses the job file"), said
    assert "bogus_key" in said and "\n" not in said, said

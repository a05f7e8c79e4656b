"""W&B offline, for real: no key means offline and no prompt, files stay in the run
directory, keys never land anywhere, a resumed run continues the same W&B run."""

from __future__ import annotations

import logging
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import wandb

from litforge import build
from litforge.errors import ConfigError
from litforge.tracking.wandb_logger import ID_FILE, wandb_logger
from litforge.training import train
from tests.helpers import ROOT

PLANTED = "wandb-key-planted-0123456789abcdef0123456789abcdef"


@pytest.fixture
def no_key(tmp_path, monkeypatch) -> Path:
    """No API key anywhere: a fresh HOME (no ~/.netrc) and none in the environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    return home


@pytest.fixture
def seen(monkeypatch) -> dict:
    """What the real W&B run holds (config, summary, exit code) when it is finished."""
    record: dict = {}
    real_finish = wandb.finish

    def finish(exit_code=None, **kw):
        if wandb.run is not None:
            record.update(config=dict(wandb.run.config), summary=dict(wandb.run.summary),
                          id=wandb.run.id, exit_code=exit_code, offline=wandb.run.offline)  # fmt: skip
        return real_finish(exit_code=exit_code, **kw)

    monkeypatch.setattr(wandb, "finish", finish)
    return record


def test_without_a_key_it_runs_offline_in_the_run_directory(make_cfg, no_key, seen, tmp_path):
    metrics = train(make_cfg("logger=wandb", "debug=limit"))
    run_dir = tmp_path / "run"
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    run_id = (run_dir / ID_FILE).read_text().strip()
    assert offline.name.endswith(run_id) and seen["id"] == run_id and seen["offline"]
    assert not any("wandb" in str(p) for p in no_key.rglob("*"))  # nothing in the home dir
    run, config = seen["config"]["run"], seen["config"]["config"]
    assert run["effective_batch_size"] == 64 and run["precision_effective"] == "32-true"
    assert run["params_total"] > 0 and run["run_dir"] == str(run_dir) and "git_commit" in run
    assert run["checkpoint_location"].endswith("checkpoints")
    assert config["model"]["optimizer"]["lr"] == 3e-3
    assert seen["summary"]["best_checkpoint"] == metrics["best_checkpoint"]
    assert seen["summary"]["test/acc"] == pytest.approx(metrics["test/acc"])
    assert seen["summary"]["trainer/global_step"] == 6 and seen["exit_code"] == 0


def test_a_rerun_continues_the_same_wandb_run(make_cfg, no_key, seen, tmp_path):
    cfg = make_cfg("logger=wandb", "debug=limit", "test=false")
    train(cfg)
    first = seen["id"]
    train(make_cfg("logger=wandb", "debug=limit", "test=false", "trainer.max_epochs=3"))
    assert seen["id"] == first
    # Each segment gets its own offline directory (joined at sync), named by its start
    # second; one that starts in the first's second gets a "-1" suffix, nothing overwritten.
    assert len(list((tmp_path / "run" / "wandb").glob(f"offline-run-*-{first}*"))) == 2


def test_a_key_in_the_environment_never_lands_in_a_file(make_cfg, no_key, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_API_KEY", PLANTED)
    train(make_cfg("logger=wandb", "logger.wandb.mode=offline", "debug=limit"))
    leaked = [
        p
        for p in (tmp_path / "run").rglob("*")
        if p.is_file() and PLANTED.encode() in p.read_bytes()
    ]
    assert leaked == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "online"}, "logger.wandb.mode=online needs an API key"),
        (
            {"mode": "bogus"},
            "logger.wandb.mode=bogus is not one of: auto, online, offline, disabled",
        ),
        ({"project": "a/b"}, "logger.wandb.project='a/b': W&B refuses"),
    ],
)
def test_mistakes_name_the_key(no_key, tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        wandb_logger(save_dir=str(tmp_path), **kwargs)


def test_no_prompt_in_a_terminal_without_a_key(no_key, tmp_path):
    """A pseudo-terminal, as a person at a shell: wandb would prompt for a key there."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "CI")}
    env.update(HOME=str(no_key), NETRC=str(no_key / ".netrc"))
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "train.py", "logger=wandb", "debug=limit", "test=false",
         f"hydra.run.dir={tmp_path / 'tty'}"],
        cwd=ROOT, env=env, stdin=follower, stdout=follower, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    output, deadline = b"", time.monotonic() + 300
    while time.monotonic() < deadline:  # a prompt would wait forever: the deadline fails it
        if not select.select([leader], [], [], 1.0)[0]:
            continue
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    process.kill()
    assert process.wait(timeout=30) == 0, output[-2000:]
    assert b"wandb: logging offline" in output and b"API key" in output
    assert b"Enter your choice" not in output and b"Paste an API key" not in output


def test_a_run_resumed_on_another_machine_continues_its_wandb_run(make_cfg, no_key, seen, tmp_path):
    """The run directory is gone (a lost spot instance); the checkpoints and the id are in
    the store, beside each other."""
    common = ["logger=wandb", "debug=limit", "test=false", "run_name=spot",
              f"checkpoint.dir={tmp_path / 'store'}"]  # fmt: skip
    train(make_cfg(*common, run_dir=tmp_path / "first-machine"))
    first = seen["id"]
    assert (tmp_path / "store" / "spot" / ID_FILE).read_text().strip() == first
    train(make_cfg(*common, "trainer.max_epochs=3", run_dir=tmp_path / "second-machine"))
    assert seen["id"] == first


def test_the_best_checkpoint_can_be_a_reference_artifact(make_cfg, no_key, monkeypatch):
    logged = []
    real = wandb.sdk.wandb_run.Run.log_artifact

    def log_artifact(run, artifact, *args, **kwargs):
        logged.append(
            (artifact.type, [(e.path, e.ref) for e in artifact.manifest.entries.values()])
        )
        return real(run, artifact, *args, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log_artifact", log_artifact)
    metrics = train(
        make_cfg("logger=wandb", "logger.wandb.checkpoint_reference=true", "debug=limit")
    )
    best = Path(metrics["best_checkpoint"])
    assert logged == [("model", [(best.name, best.as_uri())])]


def test_the_resumed_history_starts_after_the_checkpoints_step(make_cfg, no_key, monkeypatch):
    steps: list[list[int]] = []
    real = wandb.sdk.wandb_run.Run.log

    def log(run, data, *args, **kwargs):
        if "trainer/global_step" in data:
            steps[-1].append(int(data["trainer/global_step"]))
        return real(run, data, *args, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", log)
    for epochs in (2, 3):  # the second run resumes from the first one's step-6 checkpoint
        steps.append([])
        train(make_cfg("logger=wandb", "debug=limit", "test=false", f"trainer.max_epochs={epochs}"))
    # Lightning logs step N as N-1: 0..5 before the step-6 checkpoint, 6..8 after it.
    assert max(steps[0]) == 5 and min(steps[1]) == 6 and max(steps[1]) == 8


def test_mlflow_without_its_extra_is_one_line_with_the_pip_command(monkeypatch, tmp_path):
    from litforge.tracking.mlflow_logger import mlflow_logger

    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[mlflow\]"'):
        mlflow_logger(save_dir=str(tmp_path), tracking_uri=f"sqlite:///{tmp_path}/m.db")


def test_the_users_wandb_mode_decides_even_with_a_key(make_cfg, no_key, seen, monkeypatch):
    # Without this, a key in the environment made the run go online (and, with no network,
    # die after wandb's init timeout) although the user had asked for offline.
    monkeypatch.setenv("WANDB_API_KEY", PLANTED)
    monkeypatch.setenv("WANDB_MODE", "offline")
    train(make_cfg("logger=wandb", "debug=limit", "test=false"))
    assert seen["offline"] and seen["exit_code"] == 0


def test_without_the_wandb_package_logger_wandb_is_one_line(make_cfg, no_key, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(ConfigError, match=r"^logger=wandb needs the wandb package.*pip install"):
        build.build_trainer(make_cfg("logger=wandb"))


def test_an_unreachable_wandb_server_is_one_warning_and_the_run_logs_offline(
    make_cfg, no_key, seen, monkeypatch, tmp_path, caplog
):
    monkeypatch.setenv("WANDB_API_KEY", PLANTED)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    with caplog.at_level(logging.WARNING, "litforge"):
        metrics = train(make_cfg("logger=wandb", "debug=limit", "test=false",
                                 "logger.wandb.init_timeout_s=3"))  # fmt: skip
    assert metrics["global_step"] == 6 and seen["offline"]
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wandb:")]
    assert len(warnings) == 1 and "cannot reach the W&B server" in warnings[0]
    assert "logging offline to" in warnings[0] and PLANTED not in caplog.text
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))


def test_the_users_wandb_dirs_are_kept_and_ours_follow_each_run(no_key, monkeypatch, tmp_path):
    from litforge.tracking import wandb_logger as module

    monkeypatch.setattr(module, "_SET_BY_US", {})  # restored, with the variables, afterwards
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "mine"))
    monkeypatch.delenv("WANDB_CACHE_DIR", raising=False)
    monkeypatch.delenv("WANDB_CONFIG_DIR", raising=False)
    wandb_logger(save_dir=str(tmp_path / "a"), mode="offline")
    wandb_logger(save_dir=str(tmp_path / "b"), mode="offline")  # the next job of a sweep
    assert os.environ["WANDB_DATA_DIR"] == str(tmp_path / "mine")
    assert os.environ["WANDB_CACHE_DIR"] == str(tmp_path / "b" / "wandb" / "cache")

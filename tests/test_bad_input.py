"""Every mistake gets one line: the key, the value given and what is valid; no traceback,
no config dump, no run directory left behind. Run through the real entry points in-process."""

from __future__ import annotations

import json
import logging
import pickle
import sys
from pathlib import Path

import pytest
import torch

from litforge import evaluation as eval_entry
from litforge import training as train_entry
from litforge.checkpointing.store import Manifest, checkpoint_name, sha256_of

CNN = "litforge_examples.models.classifier.Classifier"
GPT = "litforge_examples.models.language_model.LanguageModel"


class Payload:
    """A pickled object inside a checkpoint: what weights_only loading must refuse."""


def run(main, args: list[str], run_dir: Path | None, capfd) -> tuple[int, str, str]:
    """`python train.py|eval.py *args` in this process; (exit status, stdout, stderr).
    run_dir None: where the config puts it."""
    capfd.readouterr()
    sys.argv = ["x.py", *args, *([f"hydra.run.dir={run_dir}"] if run_dir else [])]
    root = logging.getLogger()
    handlers = root.handlers[:]
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:  # Hydra's job logging writes to this test's captured stdout, closed after it
        root.handlers[:] = handlers
    out, err = capfd.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, Path]:
    """Checkpoint files that must each be refused with one line."""
    root = tmp_path_factory.mktemp("bad-ckpts")
    files = {name: root / f"{name}.ckpt" for name in FILE_CASES}
    files["random"].write_bytes(bytes(range(256)) * 8)  # no pickle at all
    torch.save({"state_dict": {"w": torch.ones(64)}}, files["truncated"])
    whole = files["truncated"].read_bytes()
    files["truncated"].write_bytes(whole[: len(whole) // 2])
    torch.save({"state_dict": {}, "payload": Payload()}, files["pickled"])
    # pickle.dump's own protocol: torch reports only "Unsupported operand", not the class.
    files["pickled_raw"].write_bytes(pickle.dumps({"state_dict": {}, "payload": Payload()}, 4))
    files["text"].write_text("not a checkpoint\n")
    torch.save(
        {"state_dict": {}, "litforge_model": {"_target_": GPT, "net": {}}},
        files["gpt"],
    )
    return files


# (arguments, the key the one line must name). Each fails before training starts.
TRAIN_CASES = [
    (
        ["logger=bogus"],
        "logger=bogus is not an option of pkg://litforge.conf/logger/: csv, many, mlflow, none",
    ),
    (["model=cnnn"], "model=cnnn is not an option of conf/model/: cnn, gpt"),
    (["trainer.max_epochs=abc"], "trainer.max_epochs=abc"),
    (["trainer.max_epochs=-5"], "trainer.max_epochs=-5"),
    (["trainer.max_time=abc"], "trainer.max_time=abc"),
    (["trainer.max_steps=0"], "trainer.max_steps=0"),
    (["trainer.min_epochs=-1"], "trainer.min_epochs=-1"),
    (["trainer.val_check_interval=0"], "trainer.val_check_interval=0"),
    (["trainer.val_check_interval=abc"], "trainer.val_check_interval=abc"),
    (["trainer.check_val_every_n_epoch=0"], "trainer.check_val_every_n_epoch=0"),
    (["trainer.limit_train_batches=-1"], "trainer.limit_train_batches=-1"),
    (["trainer.limit_train_batches=1.5"], "trainer.limit_train_batches=1.5"),
    (["trainer.limit_val_batches=0"], "trainer.limit_val_batches=0"),
    (["trainer.overfit_batches=-1"], "trainer.overfit_batches=-1"),
    (["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps=0"),
    (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0"),
    (["trainer.accumulate_grad_batches=abc"], "trainer.accumulate_grad_batches=abc"),
    (["trainer.gradient_clip_val=-1"], "trainer.gradient_clip_val=-1"),
    (["trainer.gradient_clip_algorithm=clip"], "trainer.gradient_clip_algorithm=clip"),
    (["trainer.num_nodes=0"], "trainer.num_nodes=0"),
    (["trainer.devices=0"], "trainer.devices=0"),
    (["trainer.devices=abc"], "trainer.devices=abc"),
    (["trainer.accelerator=quantum"], "trainer.accelerator=quantum"),
    (["trainer.precision=fp8"], "trainer.precision=fp8"),
    (["trainer.num_sanity_val_steps=-2"], "trainer.num_sanity_val_steps=-2"),
    (["trainer.deterministic=maybe"], "trainer.deterministic=maybe"),
    (["trainer.fast_dev_run=-1"], "trainer.fast_dev_run=-1"),
    (["trainer.detect_anomaly=sometimes"], "trainer.detect_anomaly=sometimes"),
    (["+trainer.max_epoch=3"], "trainer.max_epoch"),
    (["seed=abc"], "seed=abc"),
    (["seed=-1"], "seed=-1"),
    (["test=maybe"], "test=maybe"),
    (["resume=maybe"], "resume=maybe"),
    (["run_name=../../etc"], "run_name=../../etc"),
    (["run_name=a/b"], "run_name=a/b"),
    ([f"run_name={'x' * 300}"], "must be a name of up to 200 letters"),
    (
        ["+run_note=${oc.env:LITFORGE_UNSET_VAR}"],
        "run_note reads the environment variable LITFORGE_UNSET_VAR, which is not set",
    ),
    (["model=null"], "model=null: a run needs a model; pick one of conf/model/: cnn"),
    (["debug=null"], "debug=null: leave debug out (by default none is picked), or pick one of"),
    (["optimized_mode=maximum"], "optimized_mode=maximum"),
    (["data.batch_size=0"], "data.batch_size=0"),
    (["data.batch_size=abc"], "data.batch_size=abc"),
    (["data.num_workers=-1"], "data.num_workers=-1"),
    (["data.shuffle=maybe"], "data.shuffle=maybe"),
    (["data.val_size=1000", "data.test_size=900"], "data.val_size=1000"),
    (["data.split_seed=-3"], "data.split_seed=-3"),
    (["data=text"], "data="),
    (["model.optimizer.lr=0"], "model.optimizer.lr=0"),
    (["model.optimizer.lr=abc"], "model.optimizer.lr=abc"),
    (["model.optimizer.betas=[0.9]"], "model.optimizer.betas=[0.9]"),
    (["model.optimizer.eps=0"], "model.optimizer.eps=0"),
    (["model.optimizer.weight_decay=-1"], "model.optimizer.weight_decay=-1"),
    (["model.net.dropout=1.5"], "model.net.dropout=1.5"),
    (["model.net.channels=[0,64]"], "model.net.channels=[0, 64]"),
    (["model.net.hidden=0"], "model.net.hidden=0"),
    (["model.scheduler.warmup_steps=-1"], "model.scheduler.warmup_steps=-1"),
    (["model.scheduler.min_lr_ratio=2"], "model.scheduler.min_lr_ratio=2"),
    (["experiment=gpt_char", "model.net.n_head=3"], "n_head=3"),
    (["experiment=gpt_char", "data.block_size=0"], "data.block_size=0"),
    (["experiment=gpt_char", "data.train_fraction=0.99"], "data.train_fraction=0.99"),
    (["checkpoint.keep_last=abc"], "checkpoint.keep_last=abc"),
    (["checkpoint.keep_last=-1"], "checkpoint.keep_last=-1"),
    (["checkpoint.upload_retries=-1"], "checkpoint.upload_retries=-1"),
    (["checkpoint.train_time_interval=0"], "checkpoint.train_time_interval=0"),
    (["checkpoint.every_n_train_steps=-5"], "checkpoint.every_n_train_steps=-5"),
    (["checkpoint.mode=up"], "checkpoint.mode=up"),
    (["checkpoint.async_upload=2"], "checkpoint.async_upload=2"),
    (["checkpoint.final_upload_timeout_s=-1"], "checkpoint.final_upload_timeout_s=-1"),
    (["checkpoint.dir=s3://"], "checkpoint.dir=s3://"),
    (["checkpoint.dir=ftp://x"], "checkpoint.dir=ftp://x"),
    (["checkpoint.dir=nosuchproto://bucket/x"], "checkpoint.dir=nosuchproto://bucket/x"),
    (["ckpt_path=/nonexistent/x.ckpt"], "ckpt_path=/nonexistent/x.ckpt"),
    (["model.freeze=['*']"], "model.freeze=['*'] freezes all 151,306 parameters, so nothing is "
     "left to train; leave some out (names start with: net.features.0, "),
]  # fmt: skip
FILE_CASES = ["truncated", "pickled", "pickled_raw", "text", "gpt", "random"]


def assert_one_line_error(code: int, out: str, err: str, key: str) -> None:
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in out + err
    error = err[err.index("error: ") :].strip().splitlines()
    assert len(error) <= 2, error
    assert key in error[0], error
    assert "config:" not in out  # the composed config is not dumped before the error


@pytest.mark.parametrize(("args", "key"), TRAIN_CASES, ids=[" ".join(a) for a, _ in TRAIN_CASES])
def test_train_refuses_bad_input_with_one_line(tmp_path, capfd, args, key):
    run_dir = tmp_path / "run"
    code, out, err = run(train_entry.main, ["trainer=cpu", *args], run_dir, capfd)
    assert_one_line_error(code, out, err, key)
    assert not run_dir.exists()  # a failed start leaves no run directory behind


@pytest.mark.parametrize("kind", FILE_CASES)
def test_train_and_eval_refuse_bad_checkpoint_files(tmp_path, capfd, bad_files, kind):
    path = bad_files[kind]
    for main in (train_entry.main, eval_entry.main):
        code, out, err = run(main, [f"ckpt_path={path}"], tmp_path / "run", capfd)
        assert_one_line_error(code, out, err, f"ckpt_path={path}")
        if kind.startswith("pickled"):  # named, without torch's advice to load it anyway
            assert "Payload" in err and "weights_only=False" not in err
        assert "weights_only` set to `False`" not in err  # never torch's advice
        if kind == "gpt":
            assert GPT in err and CNN in err


def test_auto_resume_of_another_models_checkpoint_is_refused(tmp_path, capfd, bad_files):
    store = tmp_path / "store" / "mixed"
    store.mkdir(parents=True)
    name = checkpoint_name(7)
    (store / name).write_bytes(bad_files["gpt"].read_bytes())
    manifest = Manifest(name, 7, (store / name).stat().st_size, sha256_of(store / name))
    (store / f"{name}.complete").write_text(manifest.to_json())
    args = [f"checkpoint.dir={tmp_path / 'store'}", "run_name=mixed"]
    code, out, err = run(train_entry.main, args, tmp_path / "run", capfd)
    assert_one_line_error(code, out, err, f"{store}/{name}")
    assert "resume=never" in err


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ([], "ckpt_path is required"),
        (["ckpt_path=/nonexistent/x.ckpt"], "ckpt_path=/nonexistent/x.ckpt"),
        (["ckpt_path=x.ckpt", "sample.max_new_tokens=0"], "sample.max_new_tokens=0"),
        (["ckpt_path=x.ckpt", "sample.temperature=0"], "sample.temperature=0"),
        (["ckpt_path=x.ckpt", "sample.top_k=0"], "sample.top_k=0"),
        (["ckpt_path=x.ckpt", "seed=abc"], "seed=abc"),
    ],
)
def test_eval_refuses_bad_input_with_one_line(tmp_path, capfd, args, key):
    code, out, err = run(eval_entry.main, args, tmp_path / "run", capfd)
    assert_one_line_error(code, out, err, key)
    assert not (tmp_path / "run").exists()


def test_a_run_name_too_long_for_a_directory_is_one_line_before_hydra_makes_it(
    tmp_path, capfd, monkeypatch
):
    """The default run directory is outputs/<task>/<run_name>: a name over the file system's
    255 bytes fails Hydra's mkdir, before the config's own check, unless caught first."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITFORGE_CONF", str(Path(__file__).resolve().parents[1] / "conf"))
    sys.argv = ["train.py", "trainer=cpu", f"run_name={'x' * 260}"]
    with pytest.raises(SystemExit) as exit_:
        train_entry.main()
    out, err = capfd.readouterr()
    assert_one_line_error(
        exit_.value.code, out, err, "run_name=" + "x" * 40 + "... (260 characters)"
    )
    assert "up to 200 letters" in err and not (tmp_path / "outputs").exists()


def test_an_unwritable_run_directory_is_one_line(tmp_path, capfd):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the run directory's parent should be")
    code, out, err = run(train_entry.main, ["debug=fdr"], blocker / "run", capfd)
    assert code != 0 and "Traceback" not in out + err
    assert str(blocker / "run") in err


def test_a_good_run_after_bad_ones_still_trains(tmp_path, capfd):
    code, out, err = run(train_entry.main, ["debug=fdr", "trainer=cpu"], tmp_path / "ok", capfd)
    assert code == 0, err[-2000:]
    assert json.loads((tmp_path / "ok" / "metrics.json").read_text())["global_step"] == 1


def test_an_unreachable_store_for_ckpt_path_is_one_line(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore retries take seconds each
    import fsspec

    fsspec.filesystem("s3").clear_instance_cache()
    url = "s3://litforge/run/step-00000001.ckpt"
    for main in (train_entry.main, eval_entry.main):
        code, out, err = run(main, [f"ckpt_path={url}"], tmp_path / "run", capfd)
        assert_one_line_error(code, out, err, f"ckpt_path={url} cannot be read (")


def test_a_local_checkpoint_dir_that_cannot_be_written_blames_no_credentials(tmp_path, capfd):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    args = [f"checkpoint.dir={blocker / 'ckpts'}"]
    code, out, err = run(train_entry.main, args, tmp_path / "run", capfd)
    assert_one_line_error(
        code, out, err, f"checkpoint.dir={blocker / 'ckpts'}/run: cannot write there"
    )
    assert "AWS" not in err and "a directory this user may write to" in err


def test_a_logger_save_dir_on_a_read_only_filesystem_is_one_line(tmp_path, capfd, read_only_dir):
    args = ["logger=tensorboard", f"logger.tensorboard.save_dir={read_only_dir / 'tb'}"]
    code, out, err = run(train_entry.main, args, tmp_path / "run", capfd)
    assert_one_line_error(
        code, out, err,
        f"logger.tensorboard.save_dir={read_only_dir / 'tb'}: cannot write there "
        f"({read_only_dir} is not writable)",
    )  # fmt: skip


def test_a_read_only_checkpoint_dir_blames_no_credentials(tmp_path, capfd, read_only_dir):
    code, out, err = run(
        train_entry.main, [f"checkpoint.dir={read_only_dir}"], tmp_path / "r", capfd
    )
    assert_one_line_error(code, out, err, f"checkpoint.dir={read_only_dir}/r: cannot write there")
    assert "AWS" not in err and "Read-only file system" in err

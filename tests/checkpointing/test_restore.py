"""restore.mode=finetune | hotstart | continue from another run's checkpoint (a local
file or a URL), partial loads, model.freeze, and the same command resuming its own
checkpoints once it has some."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from litforge.errors import ConfigError
from litforge.training import train
from tests.helpers import run_entry

BASE = ["trainer=cpu", "test=false", "checkpoint.every_n_train_steps=5", "model.net.dropout=0",
        "trainer.val_check_interval=5"]  # fmt: skip
RECORD = "+callbacks.start._target_=tests.helpers.RecordStart"


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    from tests.conftest import compose

    run_dir = tmp_path_factory.mktemp("pretrain") / "run"
    train(compose([*BASE, "trainer.max_steps=10"], run_dir, "train"))
    return next(run_dir.rglob("step-00000010.ckpt"))


def start_of(run_dir: Path) -> dict:
    return torch.load(run_dir / "start.pt", weights_only=False)


def restore(mode: str, source: Path | str, *more: str) -> list[str]:
    return [f"restore.mode={mode}", f"restore.from={source}", *more]


def test_finetune_starts_from_the_weights_with_a_new_optimizer_at_step_0(
    make_cfg, tmp_path, pretrained
):
    metrics = train(
        make_cfg(*BASE, "trainer.max_steps=3", RECORD, *restore("finetune", pretrained))
    )
    saved = torch.load(pretrained, weights_only=False)
    start = start_of(tmp_path / "run")
    for name, tensor in saved["state_dict"].items():
        assert torch.equal(start["weights"][name], tensor), name
    assert start["optimizer"]["state"] == {}  # new optimizer
    assert metrics["global_step"] == 3  # from step 0


def test_hotstart_keeps_the_optimizer_state_and_starts_a_new_schedule(
    make_cfg, tmp_path, pretrained
):
    train(make_cfg(*BASE, "trainer.max_steps=3", RECORD, *restore("hotstart", pretrained)))
    hot = start_of(tmp_path / "run")
    saved = torch.load(pretrained, weights_only=False)["optimizer_states"][0]
    assert hot["optimizer"]["state"].keys() == saved["state"].keys()
    for index, moments in saved["state"].items():
        assert torch.equal(hot["optimizer"]["state"][index]["exp_avg"], moments["exp_avg"])
    # The schedule is the new run's: warm-up from its first step, not where the old one was.
    fresh = train(make_cfg(*BASE, "trainer.max_steps=3", RECORD, "resume=never"))
    assert fresh["global_step"] == 3
    assert hot["optimizer"]["param_groups"][0]["lr"] == start_of(tmp_path / "run")[
        "optimizer"]["param_groups"][0]["lr"]  # fmt: skip
    assert hot["optimizer"]["param_groups"][0]["lr"] != saved["param_groups"][0]["lr"]


def test_continue_resumes_the_whole_state(make_cfg, pretrained):
    metrics = train(make_cfg(*BASE, "trainer.max_steps=13", *restore("continue", pretrained)))
    assert metrics["global_step"] == 13


def test_continue_refuses_a_changed_model_shape(make_cfg, pretrained):
    with pytest.raises(ConfigError, match=(
        r"restore.from=.* was trained with model.net.hidden=128, but the config has "
        r"model.net.hidden=64"
    )):  # fmt: skip
        train(make_cfg(*BASE, "model.net.hidden=64", *restore("continue", pretrained)))


def test_a_restored_run_resumes_its_own_checkpoints_once_it_has_some(make_cfg, caplog, pretrained):
    first = train(make_cfg(*BASE, "trainer.max_steps=5", *restore("finetune", pretrained)))
    assert first["global_step"] == 5
    with caplog.at_level(logging.INFO, logger="litforge"):
        again = train(make_cfg(*BASE, "trainer.max_steps=8", *restore("finetune", pretrained)))
    assert again["global_step"] == 8  # went on from its own step 5
    assert "resuming from" in caplog.text and "restore.mode=finetune" not in caplog.text


def test_weights_that_do_not_fit_are_one_block_or_with_strict_false_a_warning(
    make_cfg, caplog, pretrained
):
    wider = ["model.net.hidden=64", "trainer.max_steps=2"]
    with pytest.raises(ConfigError) as refused:
        train(make_cfg(*BASE, *wider, *restore("finetune", pretrained)))
    lines = str(refused.value).splitlines()
    assert lines[0] == f"restore.from={pretrained}: 5 of 8 weights loaded"
    assert lines[1].startswith(
        "  other shapes (kept as initialised): net.head.2.weight (128, 1024)"
    )
    assert lines[-1] == "  set restore.strict=false to train with what fits"
    with caplog.at_level(logging.WARNING):
        metrics = train(make_cfg(*BASE, *wider, *restore("finetune", pretrained,
                                                          "restore.strict=false")))  # fmt: skip
    assert metrics["global_step"] == 2
    assert "5 of 8 weights loaded" in caplog.text


def test_a_checkpoint_of_another_model_names_both(make_cfg, pretrained):
    with pytest.raises(ConfigError, match=(
        r"is a checkpoint of model=litforge_examples.models.classifier.Classifier, but this "
        r"run's model is litforge_examples.models.language_model.LanguageModel"
    )):  # fmt: skip
        train(make_cfg("experiment=gpt_char", "trainer=cpu", *restore("finetune", pretrained)))


def test_freeze_keeps_the_matching_parameters_as_they_were(make_cfg, tmp_path, pretrained):
    train(make_cfg(*BASE, "trainer.max_steps=5", RECORD, "model.freeze=[net.features.*]",
                   *restore("finetune", pretrained)))  # fmt: skip
    start = start_of(tmp_path / "run")["weights"]
    end = torch.load(next((tmp_path / "run").rglob("step-00000005.ckpt")), weights_only=False)
    for name, tensor in end["state_dict"].items():
        assert torch.equal(tensor, start[name]) == name.startswith("net.features."), name
    with pytest.raises(ConfigError, match=r"model.freeze: 'net.body.\*' matches no parameter; "
                                          r"names start with: net.features.0, "):  # fmt: skip
        train(make_cfg(*BASE, "model.freeze=[net.body.*]", "resume=never"))


def test_restore_from_object_storage(make_cfg, s3, pretrained):
    s3.client().upload_file(str(pretrained), "litforge", "pretrain/step-10.ckpt")
    metrics = train(make_cfg(*BASE, "trainer.max_steps=2",
                             *restore("finetune", "s3://litforge/pretrain/step-10.ckpt")))  # fmt: skip
    assert metrics["global_step"] == 2


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["restore.mode=finetune"], "restore.mode=finetune needs restore.from=CHECKPOINT"),
        (["restore.mode=hotstart", "restore.from=x.ckpt", "ckpt_path=y.ckpt"],
         "restore.mode=hotstart and ckpt_path=y.ckpt both name where to start"),
        # Without a mode the checkpoint would be ignored and the run train from scratch.
        (["restore.from=x.ckpt"],
         "restore.from=x.ckpt needs restore.mode=finetune | hotstart | continue (its weights "
         "| its weights and optimizer state | its whole training state)"),
        (["restore.mode=finetune", "restore.from=/missing/x.ckpt"],
         "restore.from=/missing/x.ckpt: no such file"),
        (["restore.mode=continue", "restore.from=/missing/x.ckpt"],
         "restore.from=/missing/x.ckpt: no such file"),
        (["restore.mode=continue", "restore.from=/missing/x.ckpt", "checkpoint=none"],
         "restore.from=/missing/x.ckpt: no such file"),
    ],
)  # fmt: skip
def test_bad_restore_settings_are_one_line_before_training(make_cfg, tmp_path, overrides, said):
    with pytest.raises(ConfigError) as err:
        train(make_cfg(*base_for(overrides), *overrides))
    assert str(err.value).startswith(said) and "\n" not in str(err.value)
    assert not list(tmp_path.rglob("step-*.ckpt"))  # nothing trained


def test_continue_from_a_file_that_is_not_a_checkpoint_names_restore_from(make_cfg, tmp_path):
    junk = tmp_path / "junk.ckpt"
    junk.write_text("not a checkpoint")
    for more in ([], ["checkpoint=none"]):
        with pytest.raises(ConfigError, match=rf"^restore.from={junk} is not a readable"):
            train(make_cfg(*base_for(more), *more, *restore("continue", junk)))


def base_for(overrides: list[str]) -> list[str]:
    """BASE, less its checkpoint.* keys where checkpoint=none has none."""
    if "checkpoint=none" in overrides:
        return [a for a in BASE if not a.startswith("checkpoint.")]
    return BASE


@pytest.mark.slow
def test_finetune_under_ddp_and_from_a_sharded_fsdp_checkpoint(tmp_path, pretrained):
    ddp = run_entry("train.py", *BASE, "trainer=ddp", "trainer.devices=2", "trainer.max_steps=2",
                    *restore("finetune", pretrained), run_dir=tmp_path / "ddp")  # fmt: skip
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    gpt = ["experiment=gpt_char", "data.block_size=32", "model.net.n_layer=2",
           "model.net.n_embd=32", "model.net.n_head=2", "test=false", "trainer.max_steps=2",
           "checkpoint.every_n_train_steps=2"]  # fmt: skip
    sharded = run_entry("train.py", *gpt, "trainer=fsdp", "trainer.devices=2",
                        run_dir=tmp_path / "fsdp")  # fmt: skip
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    shards = next(p for p in (tmp_path / "fsdp").rglob("step-00000002.ckpt") if p.is_dir())
    tuned = run_entry("train.py", *gpt, "trainer=cpu", "trainer.max_steps=4",
                      *restore("finetune", shards), run_dir=tmp_path / "tuned")  # fmt: skip
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    assert "restore.mode=finetune from" in tuned.stdout + tuned.stderr

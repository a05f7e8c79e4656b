"""eval.py's recipe: round trip with train, precision changes, sampling, bad checkpoints."""

from __future__ import annotations

import io
import json
import math
import pickle
from pathlib import Path

import pytest
import torch

from litforge.cli import compose
from litforge.errors import ConfigError
from litforge.evaluation import evaluate
from litforge.training import train
from tests.helpers import TINY_GPT


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("cnn")
    return train(compose(["debug=limit", "precision=bf16-true"], run_dir))


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("gpt")
    return train(compose([*TINY_GPT, "debug=limit"], run_dir))


def eval_cfg(make_cfg, ckpt: str | Path, *overrides: str):
    return make_cfg(f"ckpt_path={ckpt}", *overrides, config_name="eval")


def test_eval_reproduces_train_test_metrics_in_another_precision(make_cfg, tmp_path, cnn_run):
    # Trained in bf16-true (bf16 weights), evaluated in float32: the weights are cast.
    metrics = evaluate(eval_cfg(make_cfg, cnn_run["best_checkpoint"], "precision=32"))
    assert metrics["precision_effective"] == "32-true"
    assert metrics["test/acc"] == pytest.approx(cnn_run["test/acc"], abs=0.02)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["test/acc"] == metrics["test/acc"]
    assert saved["ckpt_path"] == cnn_run["best_checkpoint"]


def test_eval_same_precision_matches_exactly(make_cfg, cnn_run):
    metrics = evaluate(
        eval_cfg(make_cfg, cnn_run["best_checkpoint"], "precision=bf16-true", "debug=limit")
    )
    assert metrics["test/acc"] == cnn_run["test/acc"]
    assert metrics["test/loss"] == cnn_run["test/loss"]


def test_sampling_from_a_gpt_checkpoint(make_cfg, tmp_path, gpt_run):
    cfg = eval_cfg(
        make_cfg,
        gpt_run["best_checkpoint"],
        *TINY_GPT,
        "sample.prompt=def",
        "sample.max_new_tokens=20",
    )
    metrics = evaluate(cfg)
    assert math.isfinite(metrics["test/loss"])
    text = (tmp_path / "run" / "sample.txt").read_text()
    assert text.startswith("def") and len(text) == 23


def test_missing_checkpoint(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"ckpt_path=.*nothing.ckpt: no such file"):
        evaluate(eval_cfg(make_cfg, tmp_path / "nothing.ckpt"))


def test_unreadable_checkpoint(make_cfg, tmp_path):
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ConfigError, match="is not a readable checkpoint"):
        evaluate(eval_cfg(make_cfg, garbage))


class Payload:
    """Stands for arbitrary code hidden in a checkpoint."""


def test_checkpoint_with_pickled_object_is_refused(make_cfg, tmp_path, cnn_run):
    checkpoint = torch.load(cnn_run["best_checkpoint"], weights_only=True)
    checkpoint["extra"] = Payload()
    crafted = tmp_path / "crafted.ckpt"
    torch.save(checkpoint, crafted)
    with pytest.raises(ConfigError, match=r"pickled [\w.]*Payload object; it is refused"):
        evaluate(eval_cfg(make_cfg, crafted))
    buffer = io.BytesIO()
    pickle.dump({"state_dict": {}}, buffer)  # plain pickle, not a torch zip file
    (tmp_path / "plain.ckpt").write_bytes(buffer.getvalue())
    with pytest.raises(ConfigError, match="ckpt_path="):
        evaluate(eval_cfg(make_cfg, tmp_path / "plain.ckpt"))


def test_checkpoint_of_another_model(make_cfg, gpt_run):
    with pytest.raises(
        ConfigError, match="holds a litforge_examples.models.language_model.LanguageModel"
    ):
        evaluate(eval_cfg(make_cfg, gpt_run["best_checkpoint"]))  # configured: the CNN


def test_checkpoint_of_another_net_shape(make_cfg, gpt_run):
    cfg = eval_cfg(make_cfg, gpt_run["best_checkpoint"], *TINY_GPT, "model.net.n_layer=2")
    with pytest.raises(
        ConfigError, match=r"model.net.n_layer=1, but the config has model.net.n_layer=2"
    ):
        evaluate(cfg)


def test_another_models_checkpoint_names_the_command_its_run_records(make_cfg, tmp_path, capfd):
    """eval.py with the wrong model: the one line ends with the command that evaluates the
    checkpoint as its run was trained (from Hydra's record of the run's overrides)."""
    from litforge import training
    from tests.test_bad_input import run

    run_dir = tmp_path / "gpt"
    code, _, err = run(training.main, [*TINY_GPT, "debug=fdr", "test=false"], run_dir, capfd)
    assert code == 0, err[-2000:]
    (ckpt,) = (run_dir / "checkpoints").glob("*.ckpt")
    with pytest.raises(ConfigError) as refused:
        evaluate(eval_cfg(make_cfg, ckpt))  # configured: the CNN
    expected = f"as its run was trained: python eval.py {' '.join(TINY_GPT)} debug=fdr"
    assert expected in str(refused.value) and f"ckpt_path={ckpt}" in str(refused.value)
    (run_dir / ".hydra" / "overrides.yaml").write_text("{a: !!python/name:os.system}\n")
    with pytest.raises(ConfigError) as refused:  # a record that is not a list: no hint
        evaluate(eval_cfg(make_cfg, ckpt))
    assert "as its run was trained" not in str(refused.value)

"""eval.py inference.precisions=[...]: one checkpoint tested in each precision, its gaps to
float32 and a verdict, as md/json/png."""

from __future__ import annotations

import json

import pytest
import torch

from litforge.errors import ConfigError
from litforge.evaluation import evaluate
from litforge.precision_checks.inference_ab import compare
from litforge.training import train

DIGITS = ["trainer=cpu", "trainer.max_epochs=1", "test=false"]


@pytest.fixture
def checkpoint(make_cfg, tmp_path) -> str:
    train(make_cfg(*DIGITS, run_dir=tmp_path / "train"))
    return str(sorted((tmp_path / "train").rglob("*.ckpt"))[-1])


def test_each_precision_against_float32(make_cfg, tmp_path, checkpoint, capsys):
    cfg = make_cfg(
        "trainer=cpu", f"ckpt_path={checkpoint}", "inference.threshold=1e-6",
        "inference.precisions=[bf16-true,32,int8-dynamic]",
        config_name="eval", run_dir=tmp_path / "eval",
    )  # fmt: skip
    found = evaluate(cfg)
    rows = {row["precision"]: row for row in found["precisions"]}
    assert list(rows) == ["32", "bf16-true", "int8-dynamic"]  # float32 first, once
    assert rows["32"]["verdict"] == "reference" and set(rows["32"]["gaps"].values()) == {0.0}
    for name in ("bf16-true", "int8-dynamic"):
        row, reference = rows[name], rows["32"]["metrics"]
        for key, value in row["metrics"].items():
            assert row["gaps"][key] == pytest.approx((value - reference[key]) / abs(reference[key]))
        worst = max(row["gaps"].values(), key=abs)
        safe = row["verdict"].startswith("safe")
        assert safe == (abs(worst) <= 1e-6)
    # torchao's int8 where it is installed (litforge[fp8] brings it), else torch.ao's.
    backend = compare.int8_backend(torch.device("cpu"))
    assert rows["int8-dynamic"]["ran_as"].endswith(f"int8 Linear ({backend})")
    assert rows["bf16-true"]["metrics"] != rows["32"]["metrics"]
    out = tmp_path / "eval"
    written = json.loads((out / "inference_precision.json").read_text())
    assert written["precisions"] == json.loads(json.dumps(found["precisions"]))
    assert (out / "inference_precision.png").stat().st_size > 1000
    page = (out / "inference_precision.md").read_text()
    assert "| int8-dynamic | 32-true + int8 Linear" in page and page in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test/loss@int8-dynamic"] == rows["int8-dynamic"]["metrics"]["test/loss"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "inference.precisions=[32,fp8]",
            r"inference.precisions=\[32, 'fp8'\] is invalid; must be a list of 1 or more values, "
            r"each one of 32, 32-true, 16-mixed, bf16-mixed, 16-true, bf16-true, int8-dynamic "
            r"\(or null\)$",
        ),
        ("inference.precisions=[32,bf16-true]", None),
    ],
)
def test_bad_precision_names_fail_before_testing(make_cfg, tmp_path, override, message):
    cfg = make_cfg("trainer=cpu", "ckpt_path=/nonexistent.ckpt", override, config_name="eval")
    if message is None:  # a valid list gets as far as the checkpoint
        with pytest.raises(ConfigError, match="nonexistent.ckpt"):
            evaluate(cfg)
        return
    with pytest.raises(ConfigError, match=message) as err:
        evaluate(cfg)
    assert "int8-dynamic" in str(err.value) and "\n" not in str(err.value)


def test_bad_threshold(make_cfg):
    cfg = make_cfg("ckpt_path=x.ckpt", "inference.precisions=[32]", "inference.threshold=2",
                   config_name="eval")  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"inference.threshold=2 is invalid; must be a number > 0 and < 1"
    ):
        evaluate(cfg)


def test_int8_on_cuda_needs_torchao(monkeypatch):
    monkeypatch.setattr(compare.importlib.util, "find_spec", lambda name: None)
    assert compare.int8_backend(torch.device("cuda")) is None
    assert compare.int8_backend(torch.device("cpu")) == "torch.ao.quantization.quantize_dynamic"

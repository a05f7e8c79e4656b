"""litforge.validation.targets: a `_target_` node against its signature and annotations."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
from typing_extensions import TypedDict, Unpack

from litforge.errors import ConfigError
from litforge.validation.targets import check_node, conforms


@pytest.mark.parametrize(
    ("hint", "good", "bad"),
    [
        (int, [0, -3], [1.5, True, "1", None]),
        (float, [1, 0.5], ["x", False, None]),
        (bool, [True], [1, "true"]),
        (str, ["gelu"], [1, None]),
        (list[int], [[], [1, 2]], [[1.5], "1,2", 3]),
        (tuple[float, float], [[0.9, 0.999]], [[0.9], [0.9, "x"]]),
        (int | None, [None, 3], ["x"]),
        (Literal["step", "epoch"], ["step"], ["steps"]),
        (dict[str, int], [{"a": 1}], [[1]]),
    ],
)
def test_conforms_accepts_and_refuses(hint, good, bad):
    assert [v for v in good if conforms(v, hint) is not True] == []
    assert [v for v in bad if conforms(v, hint) is not False] == []


def test_what_a_config_value_cannot_be_checked_against_is_left_alone():
    assert conforms({"a": 1}, torch.nn.Module) is None
    assert conforms(3, torch.nn.Module | None) is None


def make(width: int, *, act: str = "relu", **extra) -> None:
    """A target with **kwargs: any key is an argument."""


def test_a_target_with_var_keywords_takes_any_key_but_still_needs_its_required_ones():
    check_node({"_target_": f"{__name__}.make", "width": 2, "anything": 1}, "model.net")
    check_node({"_target_": f"{__name__}.make", "_partial_": True}, "model.net")  # caller gives it
    with pytest.raises(ConfigError, match=r"^model.net: tests.test_targets.make requires width"):
        check_node({"_target_": f"{__name__}.make"}, "model.net")
    with pytest.raises(ConfigError, match=r"^model.net.act=1 is invalid; .* takes a string$"):
        check_node({"_target_": f"{__name__}.make", "width": 2, "act": 1}, "model.net")


def test_a_nested_target_counts_as_given_and_a_typo_gets_its_close_match():
    adamw = {"_target_": "litforge.optim.adamw", "_partial_": True}
    classifier = {"_target_": "litforge_examples.models.classifier.Classifier",
                  "net": {"_target_": "litforge_examples.nets.cnn.CNN"}, "optimizer": adamw}  # fmt: skip
    check_node(classifier, "model")  # net and optimizer are nodes: given, and not type-checked
    with pytest.raises(ConfigError, match="did you mean model.optimizer.momentum"):
        check_node({"_target_": "torch.optim.SGD", "_partial_": True, "momentm": 0.9},
                   "model.optimizer")  # fmt: skip


@pytest.mark.parametrize("where", ["litforge_examples.data.digits.DigitsDataModule",
                                   "litforge_examples.data.text.TextDataModule"])  # fmt: skip
def test_loader_args_passed_on_as_unpacked_keywords_are_checked_by_name_and_type(where):
    """`**loader: Unpack[LoaderArgs]` (PEP 692) takes exactly LoaderArgs' keys."""
    check_node({"_target_": where, "shuffle_seed": 3, "shuffle": False, "num_workers": 0}, "data")
    with pytest.raises(ConfigError, match=r"^data.shufle is not an argument .*did you mean data.shuffle\?$"):  # fmt: skip
        check_node({"_target_": where, "shufle": True}, "data")
    with pytest.raises(ConfigError, match=r"^data.num_workers=two is invalid; .* takes an integer$"):  # fmt: skip
        check_node({"_target_": where, "num_workers": "two"}, "data")


class Settings(TypedDict, total=False):
    workers: int
    pin: bool


def user_loader(batch: int, **settings: Unpack[Settings]) -> None:
    """A user's own function handing on its settings the PEP 692 way."""


def test_a_users_own_unpacked_keywords_are_checked_too():
    check_node({"_target_": f"{__name__}.user_loader", "batch": 2, "workers": 1}, "data")
    with pytest.raises(ConfigError, match=r"did you mean data.workers\?$"):
        check_node({"_target_": f"{__name__}.user_loader", "batch": 2, "worker": 1}, "data")
    with pytest.raises(ConfigError, match=r"^data.pin=1 is invalid; .* takes true or false$"):
        check_node({"_target_": f"{__name__}.user_loader", "batch": 2, "pin": 1}, "data")


@pytest.mark.parametrize(
    ("override", "said"),
    [
        # what a lightning-hydra-template experiment leaves when it sets a logger's or a
        # callback's keys and the run has not selected that logger or callback
        ("+logger.mlflow.experiment_name=x", "logger.mlflow sets experiment_name but has no "
         "_target_, so nothing would be built from it: select it (logger=mlflow)"),
        ("+callbacks.early_stopping.patience=3", "callbacks.early_stopping sets patience but "
         "has no _target_, so nothing would be built from it: select it "
         "('callbacks=[default,early_stopping]')"),
    ],
)  # fmt: skip
def test_a_logger_or_callback_block_without_target_is_one_line(make_cfg, override, said):
    from litforge.validation.checks import check_config

    with pytest.raises(ConfigError) as refused:
        check_config(make_cfg(override))
    assert said in str(refused.value) and "\n" not in str(refused.value)
    group = override.split(".")[0].lstrip("+")
    selected = "logger=mlflow" if group == "logger" else "callbacks=[default,early_stopping]"
    check_config(make_cfg(selected, override.lstrip("+")))  # selected, the same keys build


def test_a_block_for_a_logger_that_is_no_option_is_not_sent_to_select_it(tmp_path, capfd):
    """An experiment's `logger.comet` block, when litforge has no logger=comet: the line
    names the options there are instead of one there is not."""
    from litforge import training as train_entry
    from tests.helpers import ROOT
    from tests.test_bad_input import assert_one_line_error, run

    lht = [f"hydra.searchpath=[file://{ROOT}/tests/user_project/conf]", "experiment=lht_loggers",
           "trainer=cpu"]  # fmt: skip
    code, out, err = run(train_entry.main, lht, tmp_path / "run", capfd)
    assert_one_line_error(code, out, err, "logger.comet sets project_name but has no _target_, "
                          "and logger has no option comet (csv, many, mlflow, none, "
                          "tensorboard, wandb): remove the block, or give "
                          "logger.comet._target_=package.Class")  # fmt: skip
    code, out, err = run(train_entry.main, [*lht, "~logger.comet"], tmp_path / "run", capfd)
    assert_one_line_error(code, out, err, "logger.tensorboard sets name but has no _target_, "
                          "so nothing would be built from it: select it (logger=tensorboard)")  # fmt: skip

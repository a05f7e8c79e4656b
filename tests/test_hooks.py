"""litforge.hooks declares every hook litforge looks up by name on objects it did not
write, and its Protocols recognise plain Lightning classes by what they define."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

from litforge import hooks
from tests.helpers import ROOT
from tests.user_project.datamodule import DigitsDataModule
from tests.user_project.lit_module import LitClassifier
from tests.user_project.nets import MLP

SRC = ROOT / "src" / "litforge"

# Names litforge probes with getattr/hasattr that are not hooks, by why not. Dunders are
# Python's own protocols and not listed.
NOT_HOOKS = {
    "the standard library's, PyYAML's, Hydra's and OmegaConf's attributes (a platform, "
    "version or error detail)": {
        "sched_getaffinity", "ps1", "Unpack", "keywords", "name", "reason", "strerror",
        "problem", "problem_mark", "full_key", "hydra_context", "config_loader", "group",
        "value", "path",
    },
    "torch's, torchdata's and Lightning's own attributes and hooks (Lightning declares "
    "them)": {
        "to_local", "numel", "reset_parameters", "load_state_dict", "batch_sampler", "dataset",
        "scaler", "monitor", "_can_stop_early", "hparams", "get", "trainer",
        "lightning_module", "strict_loading", "on_load_checkpoint", "_trainer",
        "_logger_connector",
    },
    "transformers' names, read off a Hugging Face model": {
        "is_activation_checkpointing", "_no_split_modules", "get_output_embeddings",
        "vocab_size",
    },
    "litforge's own objects and flags, set and read inside litforge (LitforgeError's "
    "fields, the checkpoints' store, the pool launcher's job result, a wrapper's marker)": {
        "interrupts", "exit_code", "signum", "store", "litforge_checkpoint_reference",
        "received", "devices", "device_uuids", "duration_s", "_litforge_fast_path", "on",
        "active", "calls", "iteration",
    },
    "the module's network, as lightning-hydra-template names it: read to reach the net's "
    "own hooks": {"net"},
}  # fmt: skip
ALLOWED = {name: reason for reason, names in NOT_HOOKS.items() for name in names}

PROTOCOLS = [
    v for v in vars(hooks).values()
    if isinstance(v, type) and getattr(v, "_is_protocol", False) and v.__module__ == hooks.__name__
]  # fmt: skip


def _members(protocol: type) -> set[str]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(vars(protocol).get("__annotations__", {}))


DECLARED = {name: protocol for protocol in PROTOCOLS for name in _members(protocol)}


def _probes() -> dict[str, list[str]]:
    """{attribute name: ["file:line", ...]} for each getattr/hasattr of a literal name."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                name = node.args[1].value
                if not (name.startswith("__") and name.endswith("__")):
                    found[name].append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_name_litforge_probes_is_a_declared_hook_or_a_listed_non_hook():
    undeclared = {n: where for n, where in _probes().items() if n not in DECLARED | ALLOWED}
    assert undeclared == {}, "declare the hook in litforge/hooks.py, or list it in NOT_HOOKS"


def test_the_non_hook_list_holds_only_names_still_probed_and_no_hook():
    probed = set(_probes())
    assert set(ALLOWED) - probed == set(), "drop names no code probes any more"
    assert set(ALLOWED) & set(DECLARED) == set()


def test_each_hook_is_one_documented_runtime_checkable_protocol():
    assert len(DECLARED) == sum(len(_members(p)) for p in PROTOCOLS)  # no name twice
    for protocol in PROTOCOLS:
        assert getattr(protocol, "_is_runtime_protocol", False), protocol.__name__
        assert "Example" in protocol.__doc__ or "    def " in protocol.__doc__, protocol.__name__


def test_importing_the_hooks_loads_no_torch_or_lightning():
    code = "import json, sys, litforge.hooks; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(result.stdout))
    assert "torch" not in loaded and "lightning" not in loaded
    assert {m for m in loaded if m.startswith("litforge")} == {"litforge", "litforge.hooks"}


# -- plain classes, written as users write them ---------------------------------------------


class RefusesTwoProcesses(L.Callback):
    def check_before_fit(self, trainer: L.Trainer, datamodule: Any) -> None:
        if trainer.world_size > 1:
            raise ValueError("one process only")

    def final_metrics(self, trainer: L.Trainer) -> dict[str, float]:
        return {"mine": 1.0}


class TextData(L.LightningDataModule):
    provides = "token windows"
    shards_itself = False

    def __init__(self, batch_size: int = 8, block_size: int = 16) -> None:
        super().__init__()
        self.batch_size, self.block_size = batch_size, block_size
        self.train_set: Dataset | None = None

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return bytes(int(i) for i in ids).decode()


class Block(nn.Linear):
    pass


class TinyLM(L.LightningModule):
    consumes = "token windows"
    shard_unit = Block

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(Block(4, 4), Block(4, 4))

    def sample(self, prompt_ids: torch.Tensor, max_new_tokens: int, temperature: float,
               top_k: int | None) -> torch.Tensor:  # fmt: skip
        return prompt_ids


class AdapterNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.adapters_only = True

    def base_identity(self) -> dict[str, str] | None:
        return {"pretrained": "/base", "sha256": "0" * 64}

    def merged(self) -> nn.Module:
        return self.linear


class Streamed(Dataset):
    def stall_advice(self) -> str:
        return "raise data.cache_bytes"


IMPLEMENTS = {
    RefusesTwoProcesses: {hooks.ChecksBeforeFit, hooks.ReportsFinalMetrics},
    TextData: {hooks.Provides, hooks.ShardsItself, hooks.BatchSized, hooks.HasBlockSize,
               hooks.KeepsTrainSet, hooks.DecodesText},
    TinyLM: {hooks.Consumes, hooks.Shardable, hooks.SamplesText},
    AdapterNet: {hooks.AdaptersOnly, hooks.KnowsItsBase, hooks.Mergeable},
    Streamed: {hooks.AdvisesOnStalls},
}  # fmt: skip


def _plain_objects() -> list[Any]:
    """Classes that implement no hook: Lightning's bases, and the lightning-hydra-template
    style module and DataModule of tests/user_project (batch_size in hparams only)."""
    net = MLP(in_features=64, hidden_sizes=[8], num_classes=10)
    return [
        L.Callback(), L.LightningDataModule(), L.LightningModule(), nn.Linear(2, 2),
        Dataset(), DigitsDataModule(), LitClassifier(net, optimizer=None, scheduler=None),
        net,
    ]  # fmt: skip


@pytest.mark.parametrize("cls", list(IMPLEMENTS), ids=lambda c: c.__name__)
def test_a_plain_class_is_each_hook_it_defines_and_no_other(cls):
    obj = cls()
    assert {p for p in PROTOCOLS if isinstance(obj, p)} == IMPLEMENTS[cls]


def test_a_class_that_defines_no_hook_is_taken_for_none():
    for obj in _plain_objects():
        assert [p.__name__ for p in PROTOCOLS if isinstance(obj, p)] == [], type(obj)


def test_a_hook_set_to_none_is_not_implemented():
    callback = L.Callback()
    callback.final_metrics = None  # type: ignore[attr-defined]
    assert not isinstance(callback, hooks.ReportsFinalMetrics)
    assert hooks.final_metrics_of(callback) is None


def test_the_accessors_read_a_hook_or_say_none():
    callback, data, model, net, dataset = (cls() for cls in IMPLEMENTS)
    assert hooks.final_metrics_of(callback)(None) == {"mine": 1.0}
    assert hooks.check_before_fit_of(callback) is not None
    assert hooks.provides_of(TextData) == hooks.consumes_of(TinyLM) == "token windows"
    assert hooks.shard_unit_of(model) is Block
    assert hooks.shards_itself(data) is False
    assert hooks.adapters_only(net) is True
    assert hooks.base_identity_of(net)["pretrained"] == "/base"
    assert hooks.merged_of(net)() is net.linear
    assert hooks.stall_advice_of(dataset)() == "raise data.cache_bytes"
    for plain in _plain_objects():
        assert hooks.check_before_fit_of(plain) is hooks.final_metrics_of(plain) is None
        assert hooks.provides_of(plain) is hooks.consumes_of(plain) is None
        assert hooks.shard_unit_of(plain) is hooks.base_identity_of(plain) is None
        assert hooks.merged_of(plain) is hooks.stall_advice_of(plain) is None
        assert hooks.adapters_only(plain) is hooks.shards_itself(plain) is False


def test_litforge_own_classes_implement_the_hooks_they_are_called_for():
    from litforge.callbacks.auto_microbatch import AutoMicrobatch
    from litforge.callbacks.early_stopping import EarlyStop
    from litforge.callbacks.effective_batch import EffectiveBatch
    from litforge.data.loaders import SplitDataModule
    from litforge.data.shards.mixture import MixtureDataset
    from litforge.data.shards.reader import ShardedDataset
    from litforge.models.base import LitforgeModule

    assert issubclass(AutoMicrobatch, hooks.ChecksBeforeFit)
    assert issubclass(EarlyStop, hooks.ReportsFinalMetrics)
    assert issubclass(EffectiveBatch, hooks.ReportsFinalMetrics)
    assert issubclass(ShardedDataset, hooks.AdvisesOnStalls)
    assert issubclass(MixtureDataset, hooks.AdvisesOnStalls)
    data = SplitDataModule(batch_size=4)
    for protocol in (hooks.ShardsItself, hooks.BatchSized, hooks.KeepsTrainSet):
        assert isinstance(data, protocol), protocol.__name__
    assert hooks.shards_itself(data) is True
    assert isinstance(LitforgeModule(), hooks.Shardable)

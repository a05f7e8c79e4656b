"""Every hook litforge looks for on objects it did not write: a callback's, a
LightningModule's, a DataModule's, a net's (the `nn.Module` a model holds as `net`) or a
dataset's. Nothing has to subclass these: litforge asks whether an object has the
attribute (structural typing), so a plain Lightning class implements a hook by defining it.

Each Protocol is `@runtime_checkable`, so `isinstance(obj, hooks.ChecksBeforeFit)` says
whether `obj` implements it. The `*_of` accessors read a hook as litforge's call sites do
(None when the object does not implement it). Importing this module imports no torch or
Lightning (they are named for type checkers only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import lightning as L
    from torch import Tensor, nn

# -- callbacks (any `lightning.Callback` of the config's callbacks group) -------------------


@runtime_checkable
class ChecksBeforeFit(Protocol):
    """A callback's refusals that need the built Trainer, before any process starts or any
    data loads. `litforge.build.build_trainer` calls it once the Trainer is built; raise a
    `litforge.ConfigError` (one line naming the key) to stop the run; return None.

        def check_before_fit(self, trainer, datamodule):
            if trainer.world_size > 1:
                raise ConfigError("callbacks.mine runs in one process; set trainer.devices=1")
    """

    def check_before_fit(
        self, trainer: L.Trainer, datamodule: L.LightningDataModule | None
    ) -> None: ...


@runtime_checkable
class ReportsFinalMetrics(Protocol):
    """What a callback adds to metrics.json: `litforge.run_record.final_metrics` calls it
    after fit and merges the returned {name: value} (JSON values) into the record.

        def final_metrics(self, trainer):
            return {"effective_batch_size": self.size}
    """

    def final_metrics(self, trainer: L.Trainer) -> Mapping[str, Any]: ...


# -- the LightningModule (model=) and its net (model.net=) ----------------------------------


@runtime_checkable
class Consumes(Protocol):
    """A model class's name for the batches it takes, checked before anything is built
    (`validation.checks`) against the DataModule's `provides`: different names are one
    line. A class attribute: litforge reads it off the class. Example:
    `consumes = "labelled images"`.
    """

    consumes: str


@runtime_checkable
class Shardable(Protocol):
    """The repeated block class (`shard_unit`) of a LightningModule, or of its net (a
    LitforgeModule takes its net's). trainer=fsdp shards one such block at a time,
    compile.enabled compiles each, and the memory budget measures one and scales by depth.
    None, or no attribute: the model is whole (trainer=fsdp refuses it). Example:
    `shard_unit = Block` (the GPT example), a Hugging Face model's decoder layer class.
    """

    shard_unit: type[nn.Module] | None


@runtime_checkable
class SamplesText(Protocol):
    """A language model that continues a prompt: eval.py calls it when `sample.prompt` is
    set (with a DataModule that `DecodesText`), on rank 0 after testing. Takes the 1-D
    prompt ids; returns the prompt's ids followed by the new ones (1-D).

        def sample(self, prompt_ids, max_new_tokens, temperature, top_k):
            return self.net.generate(prompt_ids[None], max_new_tokens, temperature, top_k)[0]
    """

    def sample(
        self, prompt_ids: Tensor, max_new_tokens: int, temperature: float, top_k: int | None
    ) -> Tensor: ...


@runtime_checkable
class AdaptersOnly(Protocol):
    """A net whose checkpoints hold only its adapters (LoRA), the base model loading from
    its own files: LitforgeModule then loads checkpoints with `strict_loading=False`.
    Example: `self.adapters_only = bool(lora)` (`litforge.hf.HFCausalLM`).
    """

    adapters_only: bool


@runtime_checkable
class KnowsItsBase(Protocol):
    """A net of adapters names the base model they were trained on: LitforgeModule stores
    it in every checkpoint and, on loading, refuses adapters trained on another base (one
    line naming both); `litforge.export` writes its sha256 beside the merged model. Returns
    {"pretrained": dir, "sha256": hex}, or None when the net holds every weight itself.

        def base_identity(self):
            return litforge.hf.lora.base_identity(self.pretrained) if self.adapters_only else None
    """

    def base_identity(self) -> dict[str, str] | None: ...


@runtime_checkable
class Mergeable(Protocol):
    """A net `litforge.export` can write as one plain model: returns a copy with its
    adapters merged into the weights (a transformers model, saved with `save_pretrained`;
    export also reads the net's `pretrained` directory for its tokenizer).

        def merged(self):
            return copy.deepcopy(self.model).merge_and_unload()
    """

    def merged(self) -> nn.Module: ...


# -- the DataModule (data=) and its datasets -------------------------------------------------


@runtime_checkable
class Provides(Protocol):
    """A DataModule class's name for the batches it gives; the model's `consumes` must
    match it, and `litforge shards write` records it in the shards' index. A class
    attribute. Example: `provides = "token windows"`.
    """

    provides: str


@runtime_checkable
class BatchSized(Protocol):
    """The micro-batch (samples per step and process), printed in the effective batch and
    used by the memory budget. litforge reads `batch_size` (an attribute, or
    `self.hparams.batch_size` as lightning-hydra-template keeps it), else the train
    loader's; with none, the budget draws a batch to measure. Example:
    `self.batch_size = batch_size`.
    """

    batch_size: int


@runtime_checkable
class KeepsTrainSet(Protocol):
    """Where a DataModule keeps its training samples after `setup("fit")` (None before):
    the memory budget measures a few of them instead of drawing a batch, and `litforge
    shards write` writes `train_set`, `val_set` and `test_set` (or lightning-hydra-template's
    `data_train`, ...). Example: `self.train_set = TokenWindows(ids, block_size)`.
    """

    train_set: Sequence[Any] | None


@runtime_checkable
class ShardsItself(Protocol):
    """True: the DataModule's train loader builds its own distributed sampler, so with
    `trainer.use_distributed_sampler=null` Lightning does not replace it (litforge's
    SplitDataModule: a resumable global order). Example: `shards_itself = True`.
    """

    shards_itself: bool


@runtime_checkable
class DecodesText(Protocol):
    """A DataModule that turns token ids back into text, for eval.py's `sample.prompt`
    (with a model that `SamplesText`); eval.py then also calls its `encode(text) ->
    Tensor` for the prompt. Example: `return self.tokenizer.decode([int(i) for i in ids])`.
    """

    def decode(self, ids: Tensor | list[int]) -> str: ...


@runtime_checkable
class HasBlockSize(Protocol):
    """A text DataModule's window length: `litforge shards write` records it in the shards'
    index, so a stream reading them can check its own `block_size` against it. Example:
    `self.block_size = block_size`.
    """

    block_size: int


@runtime_checkable
class AdvisesOnStalls(Protocol):
    """A dataset (the train loader's `.dataset`) that says what to tune when the throughput
    monitor warns that training waits on data; the sentence is appended to the warning.

        def stall_advice(self):
            return "raise data.cache_bytes, or put data.cache_dir on a local disk"
    """

    def stall_advice(self) -> str: ...


# -- Hydra launchers (hydra.launcher) ------------------------------------------------------


@runtime_checkable
class LaunchesEach(Protocol):
    """A Hydra launcher that takes a sweep's trials one by one rather than in batches:
    litforge's Optuna sweeper hands it a feed (`litforge.sweeps.pool.feed.Feed`: `ask` the
    next trial's overrides, `told` each outcome) and at most `at_once` trials run at once
    (`hydra/launcher=gpus` has it; any other launcher gets batches of n_jobs).

        def launch_each(self, feed, at_once):
            ...
    """

    def launch_each(self, feed: Any, at_once: int) -> None: ...


def launch_each_of(launcher: Any) -> Callable[[Any, int], None] | None:
    """The launcher's `launch_each`, or None."""
    return _method(launcher, "launch_each")


# -- accessors: a hook read as litforge's call sites read it ------------------------------


def _method(obj: Any, name: str) -> Callable[..., Any] | None:
    found = getattr(obj, name, None)
    return found if callable(found) else None


def check_before_fit_of(callback: Any) -> Callable[[Any, Any], None] | None:
    """The callback's `check_before_fit`, or None."""
    return _method(callback, "check_before_fit")


def final_metrics_of(callback: Any) -> Callable[[Any], Mapping[str, Any]] | None:
    """The callback's `final_metrics`, or None."""
    return _method(callback, "final_metrics")


def consumes_of(model: Any) -> str | None:
    """A model's (or model class's) `consumes`, or None."""
    return getattr(model, "consumes", None)


def provides_of(data: Any) -> str | None:
    """A DataModule's (or DataModule class's) `provides`, or None."""
    return getattr(data, "provides", None)


def shard_unit_of(module: Any) -> type[nn.Module] | None:
    """The `shard_unit` a module or net declares (as declared: a caller that must have a
    class checks `isinstance(unit, type)`), or None."""
    return getattr(module, "shard_unit", None)


def shards_itself(datamodule: Any) -> bool:
    """Whether a DataModule builds its own distributed sampler."""
    return bool(getattr(datamodule, "shards_itself", False))


def adapters_only(net: Any) -> bool:
    """Whether a net's checkpoints hold its adapters only."""
    return bool(getattr(net, "adapters_only", False))


def base_identity_of(net: Any) -> dict[str, str] | None:
    """The base model a net of adapters was trained on (calls `base_identity()`), or None."""
    return getattr(net, "base_identity", lambda: None)()


def merged_of(net: Any) -> Callable[[], nn.Module] | None:
    """The net's `merged`, or None (a net export cannot write)."""
    return _method(net, "merged")


def stall_advice_of(dataset: Any) -> Callable[[], str] | None:
    """The dataset's `stall_advice`, or None."""
    return _method(dataset, "stall_advice")

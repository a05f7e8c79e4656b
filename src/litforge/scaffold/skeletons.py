"""The files `experiment NAME [--model] [--data]` writes. Placeholders: __PKG__ (package),
__NAME__ (experiment), __MODEL__ / __DATA__ (classes),
__MODEL_CONF__ / __DATA_CONF__ (config options the experiment picks)."""

from __future__ import annotations

EXPERIMENT = """\
# @package _global_
# Experiment __NAME__: python train.py experiment=__NAME__
defaults:
  - override /data: __DATA_CONF__
  - override /model: __MODEL_CONF__
optimized_metric: val/loss   # what checkpoints are ranked by and a sweep optimizes
optimized_mode: min
"""

MODEL_CONF = """\
# __MODEL__ (__PKG__.models.__NAME__): fill in the net's sizes your data needs. Each
# `_target_` node's keys are checked against its constructor before training.
_target_: __PKG__.models.__NAME__.__MODEL__
net:                   # built first, passed to __MODEL__ as a module
  _target_: __PKG__.models.__NAME__.MLP
  in_features: 64      # 1 x 8 x 8 images, flattened
  hidden: 64
  num_classes: 10
  activation: relu
optimizer:             # any torch.optim optimizer, called with the parameters
  _target_: torch.optim.AdamW
  _partial_: true
  lr: 3.0e-3
  weight_decay: 1.0e-4
scheduler: null        # or {_target_: torch.optim.lr_scheduler.StepLR, _partial_: true, step_size: 1}
scheduler_interval: epoch  # step | epoch
"""

MODEL = '''\
"""__MODEL__: experiment __NAME__'s LightningModule (loss, metrics) around its net; the
optimizer and LR schedule are config (conf/model/__NAME__.yaml), built by LitforgeModule."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from litforge import LitforgeModule, OptimizerFactory, SchedulerFactory


class MLP(nn.Module):
    """TODO: your net (a plain nn.Module, e.g. in __PKG__/nets/) in place of this one."""

    def __init__(
        self, in_features: int, hidden: int, num_classes: int, activation: str = "relu"
    ) -> None:
        super().__init__()
        acts = {"relu": nn.ReLU, "gelu": nn.GELU}
        if activation not in acts:
            raise ValueError(f"activation={activation!r}: one of {', '.join(acts)}")
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, hidden),
            acts[activation](),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layers(inputs)


class __MODEL__(LitforgeModule):
    """net: inputs -> logits; optimizer, scheduler, scheduler_interval: see LitforgeModule."""

    consumes = "labelled images"  # must equal the DataModule's `provides`

    def __init__(
        self,
        net: nn.Module,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: str = "epoch",
    ) -> None:
        super().__init__()
        # The partials stay in hparams; checkpoints store them as their config.
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)

    def _step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        # TODO: your loss and metrics; `stage` is train, val or test.
        inputs, targets = batch
        logits = self(inputs)
        loss = F.cross_entropy(logits.float(), targets)
        acc = (logits.argmax(dim=-1) == targets).float().mean()
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, sync_dist=True)
        self.log(f"{stage}/acc", acc, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch, batch_idx: int) -> None:
        self._step(batch, "test")
'''

DATA_CONF = """\
# __DATA__ (__PKG__.data.__NAME__): replace the stand-in data in its setup().
_target_: __PKG__.data.__NAME__.__DATA__
batch_size: 64
dataset_size: 512      # stand-in examples in all; drop once setup() loads real data
val_size: 64
test_size: 64
split_seed: 0          # fixes the split; independent of the training seed
shuffle_seed: ${seed}  # training order per epoch
shuffle: true
num_workers: 0
"""

DATA = '''\
"""__DATA__: experiment __NAME__'s data. Loaders come from SplitDataModule: resumable
mid-epoch (StatefulDataLoader) and sharded across DDP ranks."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from typing_extensions import Unpack

from litforge import ConfigError, LoaderArgs, SplitDataModule


class __DATA__(SplitDataModule):
    """A fixed train/val/test split from `split_seed`; batches are (inputs, targets)."""

    provides = "labelled images"  # must equal the model's `consumes`

    def __init__(
        self,
        batch_size: int = 64,
        dataset_size: int = 512,
        val_size: int = 64,
        test_size: int = 64,
        split_seed: int = 0,
        **loader: Unpack[LoaderArgs],  # shuffle_seed, shuffle, num_workers
    ) -> None:
        super().__init__(batch_size=batch_size, **loader)
        if val_size + test_size >= dataset_size:
            raise ConfigError(
                f"data.val_size={val_size} + data.test_size={test_size} leave no training "
                f"examples; their sum must be < data.dataset_size={dataset_size}"
            )
        self.dataset_size = dataset_size
        self.val_size = val_size
        self.test_size = test_size
        self.split_seed = split_seed

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        # TODO: load your data here. Stand-in: random 1x8x8 images, labelled by the position
        # of their brightest pixel (mod 10), so a model can learn something.
        gen = torch.Generator().manual_seed(self.split_seed)
        inputs = torch.rand(self.dataset_size, 1, 8, 8, generator=gen)
        targets = inputs.flatten(1).argmax(dim=1) % 10
        order = torch.randperm(self.dataset_size, generator=gen)
        test, val, train = order.split(
            [self.test_size, self.val_size, self.dataset_size - self.test_size - self.val_size]
        )
        self.train_set = TensorDataset(inputs[train], targets[train])
        self.val_set = TensorDataset(inputs[val], targets[val])
        self.test_set = TensorDataset(inputs[test], targets[test])
'''

TEST = '''\
"""Experiment __NAME__: its config passes the checks and one fast_dev_run trains and tests."""

from __future__ import annotations

import math

from litforge import train

ARGS = ["experiment=__NAME__", "debug=fdr", "trainer=cpu", "logger=none"]


def test___NAME___trains_one_batch(make_cfg):
    metrics = train(make_cfg(*ARGS))
    assert math.isfinite(metrics["test/loss"])
'''

TEST_DATA = """

def test___NAME___data_splits_are_disjoint_and_fixed():
    from __PKG__.data.__NAME__ import __DATA__

    sizes = []
    for _ in range(2):
        data = __DATA__()
        data.setup()
        sizes.append([len(data.train_set), len(data.val_set), len(data.test_set)])
    assert sizes[0] == sizes[1] and sum(sizes[0]) == data.dataset_size
"""

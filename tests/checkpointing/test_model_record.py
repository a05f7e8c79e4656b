"""ModelRecord's plain hyperparameters: what would not load with weights_only becomes its
config, or is left out when it has none."""

from __future__ import annotations

import functools
import io

import torch

from litforge.checkpointing.model_record import is_plain, plain_hparams


def test_unloadable_values_become_their_config_or_are_left_out():
    config = {"optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1}}
    hparams = {
        "optimizer": functools.partial(torch.optim.SGD, lr=0.1),
        "hook": lambda x: x,  # no config to store instead
        "sizes": [1, 2],
        "dtype": torch.bfloat16,
    }
    plain, dropped = plain_hparams(hparams, config, "model")
    assert plain == {"optimizer": config["optimizer"], "sizes": [1, 2], "dtype": torch.bfloat16}
    assert dropped == ["model.hook (a function)"]
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == plain  # what the record is for


def test_is_plain_looks_inside_containers():
    assert is_plain({"a": [1, (2.0, "x")], "t": torch.zeros(2)})
    assert not is_plain({"a": [functools.partial(print)]})

"""What a checkpoint says about the model that wrote it, in plain values only.

A module written the lightning-hydra-template way keeps partials (its optimizer and
scheduler factories) and sometimes modules in `self.hparams`; Lightning pickles them into
every checkpoint, and `torch.load(weights_only=True)` (the default since torch 2.6) then
refuses the file. `ModelRecord` stores such values as the config they were built from,
and the model's whole config under `litforge_model`, which `eval.py` and resume compare
against the configured model. Whatever reloads a checkpoint rebuilds the objects from the
run's config.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from litforge import console

RECORD_KEY = "litforge_model"
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.Tensor, torch.dtype,
          torch.device, torch.Size)  # fmt: skip


def is_plain(value: Any) -> bool:
    """Whether `value` loads with weights_only=True: tensors, plain scalars and containers."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple, set)):
        return all(is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(is_plain(k) and is_plain(v) for k, v in value.items())
    return False


def plain_hparams(
    hparams: Any, config: dict[str, Any], what: str
) -> tuple[dict[str, Any], list[str]]:
    """`hparams` with each value that would not load replaced by `config[key]` (the config
    it was built from); keys without one are left out. Returns (plain, keys left out)."""
    if not isinstance(hparams, dict):  # an OmegaConf container: its plain form
        from omegaconf import OmegaConf

        hparams = OmegaConf.to_container(hparams, resolve=True)
    plain, dropped = {}, []
    for key, value in dict(hparams).items():
        if is_plain(value):
            plain[key] = value
        elif key in config and is_plain(config[key]):
            plain[key] = config[key]
        else:
            dropped.append(f"{what}.{key} (a {type(value).__name__})")
    return plain, dropped


class ModelRecord(L.Callback):
    """Every checkpoint this trainer writes gets the model's config and plain hyperparameters.

    model_config, data_config: the resolved `model` and `data` groups.
    """

    def __init__(self, model_config: dict[str, Any], data_config: dict[str, Any]) -> None:
        self.model_config = model_config
        self.data_config = data_config
        self._warned = False

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        dropped: list[str] = []
        for key, config, what in (
            ("hyper_parameters", self.model_config, "model"),
            ("datamodule_hyper_parameters", self.data_config, "data"),
        ):
            if key in checkpoint:
                checkpoint[key], left_out = plain_hparams(checkpoint[key], config, what)
                dropped += left_out
        checkpoint.pop("hparams_type", None)  # OmegaConf's type: not loadable
        checkpoint.pop("datamodule_hparams_type", None)
        checkpoint[RECORD_KEY] = self.model_config
        if dropped and not self._warned and trainer.is_global_zero:
            self._warned = True
            console.warn(
                "checkpoints leave out hyperparameters that are neither plain values nor built "
                f"from the config: {', '.join(dropped)} (they would not load with "
                "weights_only=True)"
            )


def model_config(trainer: L.Trainer) -> dict[str, Any] | None:
    """The `model` config of the module this trainer trains (None: not built by litforge)."""
    record = next((c for c in trainer.callbacks if isinstance(c, ModelRecord)), None)
    return None if record is None else record.model_config

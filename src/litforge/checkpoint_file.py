"""Reading a checkpoint file safely, with errors that say what is wrong with it."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from litforge.errors import ConfigError
from litforge.models.base import model_class_name


def load(path: str) -> dict[str, Any]:
    """torch.load(weights_only=True): tensors and plain values only, never arbitrary code."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"ckpt_path={path}: no such file")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if unsafe:
            raise ConfigError(
                f"ckpt_path={path} contains a pickled {unsafe.group(1)} object; it is refused "
                "because loading it could run arbitrary code (only tensors and plain values "
                "load with weights_only=True)"
            ) from err
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint: {_first_line(err)}"
        ) from err
    except (OSError, RuntimeError, EOFError) as err:
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint: {_first_line(err)}"
        ) from err
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict)")
    return checkpoint


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def check_matches(checkpoint: dict[str, Any], module: torch.nn.Module, path: str) -> None:
    """The checkpoint must come from the configured model class with the same net shape."""
    expected = model_class_name(type(module))
    found = checkpoint.get("litforge_model_class")
    if found != expected:
        raise ConfigError(
            f"ckpt_path={path} holds a {found or 'non-litforge'} checkpoint, but model= "
            f"configures {expected}; pass the model/experiment it was trained with "
            "(e.g. experiment=gpt_char)"
        )
    saved = checkpoint.get("hyper_parameters", {}).get("net", {})
    configured = dict(getattr(module, "hparams", {}).get("net", {}))
    differing = sorted(k for k in set(saved) | set(configured) if saved.get(k) != configured.get(k))
    if differing:
        key = differing[0]
        raise ConfigError(
            f"ckpt_path={path} was trained with model.net.{key}={saved.get(key)}, but the "
            f"config has model.net.{key}={configured.get(key)} (differing: {', '.join(differing)})"
        )

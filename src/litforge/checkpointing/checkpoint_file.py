"""Reading one checkpoint (a local file or any fsspec URL) safely, with errors that say
what is wrong with it."""

from __future__ import annotations

import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from litforge.checkpointing.store import CheckpointStore, download_dir
from litforge.errors import ConfigError
from litforge.models.base import model_class_name

# What Lightning's ModelParallelStrategy writes beside the shards (strategies/model_parallel.py
# _METADATA_FILENAME): the loops', callbacks' and hyperparameters' state.
SHARDED_META = "meta.pt"


def fetch(url: str, staging_dir: Path) -> Path:
    """`ckpt_path=` as a local file: itself, or a per-process download of an fsspec URL."""
    if "://" not in str(url) or str(url).startswith("file://"):
        return Path(str(url).removeprefix("file://"))
    parent, _, name = str(url).rpartition("/")
    store = CheckpointStore(parent)
    try:
        return store.download(name, download_dir(staging_dir, "explicit") / name)
    except FileNotFoundError as err:
        raise ConfigError(f"ckpt_path={url}: no such object") from err


def check_resumable(path: Path, model: DictConfig, what: str, sharded: bool = False) -> None:
    """A checkpoint to resume must load safely, match the configured `model` group, and be
    of this run's kind: a directory of shards for a `sharded` (trainer=fsdp) run, else a file.
    """
    if path.is_dir() and not sharded:
        raise ConfigError(
            f"{what} is a sharded checkpoint (a directory of one file per process, written by "
            "trainer=fsdp), but this run is not sharded: resume it with trainer=fsdp. "
            "(eval.py reads it as it is; `python -m litforge.consolidate` makes one file of it)"
        )
    if sharded and not path.is_dir():
        raise ConfigError(
            f"{what} is a single-file checkpoint (written without trainer=fsdp), but this run "
            "is sharded (trainer=fsdp): resume it with the trainer it was written by (e.g. "
            "trainer=ddp), or start a new lineage with resume=never"
        )
    checkpoint = load(str(path))
    net = OmegaConf.to_container(model.get("net") or {}, resolve=True)
    check_matches(checkpoint, str(model._target_), dict(net), what)  # type: ignore[arg-type]


def load_weights(module: torch.nn.Module, url: str, staging_dir: Path) -> None:
    """Fetch, check and load a checkpoint's weights into `module` (eval.py's one call).

    Casts as needed: a bf16-true checkpoint evaluates in float32 and vice versa.
    """
    local = fetch(url, staging_dir)
    checkpoint = load(str(local))
    net = dict(getattr(module, "hparams", {}).get("net", {}))
    check_matches(checkpoint, model_class_name(type(module)), net, f"ckpt_path={url}")
    state = sharded_weights(local) if local.is_dir() else checkpoint["state_dict"]
    module.load_state_dict(state)


def sharded_weights(path: Path) -> dict[str, torch.Tensor]:
    """The full weights of a sharded checkpoint (trainer=fsdp), gathered in this process."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        single = Path(tmp) / "consolidated.pt"
        dcp_to_torch_save(path, single)  # one process, no process group
        return torch.load(single, map_location="cpu", weights_only=True)["state_dict"]


def load(path: str) -> dict[str, Any]:
    """torch.load(weights_only=True): tensors and plain values only, never arbitrary code.

    A sharded checkpoint's directory: its `meta.pt` (everything but weights and optimizer
    state, which stay in the shards).
    """
    file = Path(path)
    sharded = file.is_dir()
    if sharded:
        file = file / SHARDED_META
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
        # torch's other refusals open with advice to load with weights_only=False: never ours.
        detail = re.search(r"WeightsUnpickler error: ([^\n]+)", str(err))
        if detail:
            raise ConfigError(
                f"ckpt_path={path} is refused: it holds more than tensors and plain values "
                f"({detail.group(1).strip()})"
            ) from err
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint: {_first_line(err)}"
        ) from err
    except Exception as err:  # noqa: BLE001 - a text file raises KeyError, a truncated one RuntimeError
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint ({type(err).__name__}: "
            f"{_first_line(err)})"
        ) from err
    if not isinstance(checkpoint, dict) or ("state_dict" not in checkpoint and not sharded):
        raise ConfigError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict)")
    return checkpoint


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def check_matches(
    checkpoint: dict[str, Any], expected: str, configured: dict[str, Any], what: str
) -> None:
    """The checkpoint must come from the `expected` model class (`model._target_`) with the
    same net shape (`configured`: the model.net keys). `what` names it in the error."""
    found = checkpoint.get("litforge_model_class")
    if found != expected:
        raise ConfigError(
            f"{what} holds a {found or 'non-litforge'} checkpoint, but model= "
            f"configures {expected}; pass the model/experiment it was trained with "
            "(e.g. experiment=gpt_char)"
        )
    saved = checkpoint.get("hyper_parameters", {}).get("net", {})
    differing = sorted(k for k in set(saved) | set(configured) if saved.get(k) != configured.get(k))
    if differing:
        key = differing[0]
        raise ConfigError(
            f"{what} was trained with model.net.{key}={saved.get(key)}, but the "
            f"config has model.net.{key}={configured.get(key)} (differing: {', '.join(differing)})"
        )

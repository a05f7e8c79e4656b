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

from litforge.checkpointing import shards, zip_integrity
from litforge.checkpointing.model_record import RECORD_KEY
from litforge.checkpointing.store import CheckpointStore, download_dir
from litforge.checkpointing.trained_with import eval_command
from litforge.errors import ConfigError, redact_url
from litforge.validation.schema import leaves

# What Lightning's ModelParallelStrategy writes beside the shards (strategies/model_parallel.py
# _METADATA_FILENAME): the loops', callbacks' and hyperparameters' state.
SHARDED_META = "meta.pt"


def fetch(url: str, staging_dir: Path) -> Path:
    """`ckpt_path=` as a local file: itself, or a per-process download of an fsspec URL."""
    if "://" not in str(url) or str(url).startswith("file://"):
        return Path(str(url).removeprefix("file://"))
    parent, _, name = str(url).rpartition("/")
    store = CheckpointStore(parent)
    shown = redact_url(str(url))
    try:
        return store.download(name, download_dir(staging_dir, "explicit") / name)
    except FileNotFoundError as err:
        raise ConfigError(f"ckpt_path={shown}: no such object") from err
    except Exception as err:  # noqa: BLE001 - each fsspec backend raises its own types
        raise ConfigError(
            f"ckpt_path={shown} cannot be read ({type(err).__name__}: {_first_line(err)}); "
            "check the endpoint (AWS_ENDPOINT_URL for S3-compatible stores), the credentials "
            "in the environment and the network"
        ) from None


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
    check_matches(checkpoint, OmegaConf.to_container(model, resolve=True), what)  # type: ignore[arg-type]


def load_weights(module: torch.nn.Module, model: DictConfig, url: str, staging_dir: Path) -> None:
    """Fetch, check against the configured `model` and load a checkpoint's weights into
    `module` (eval.py's one call).

    Casts as needed: a bf16-true checkpoint evaluates in float32 and vice versa.
    """
    local = fetch(url, staging_dir)
    checkpoint = load(str(local))
    what = f"ckpt_path={url}"
    try:
        check_matches(checkpoint, OmegaConf.to_container(model, resolve=True), what)  # type: ignore[arg-type]
    except ConfigError as err:
        command = eval_command(url)  # its run's record, printed, never built from
        if command is None:
            raise
        raise ConfigError(f"{err}; as its run was trained: {command}") from None
    # As Lightning's load_from_checkpoint does, the module's own hook sees the checkpoint
    # first (a LoRA module checks there that its base is the one the adapters trained on).
    if callable(hook := getattr(module, "on_load_checkpoint", None)):
        hook(checkpoint)
    state = sharded_weights(local) if local.is_dir() else checkpoint["state_dict"]
    # A module that saves part of itself (LoRA adapters; the base from its own directory)
    # says so as Lightning asks: strict_loading=False.
    strict = bool(getattr(module, "strict_loading", True))
    try:
        result = module.load_state_dict(state, strict=strict)
        if not strict and (unexpected := list(result.unexpected_keys)):
            raise RuntimeError(f"Unexpected key(s): {', '.join(unexpected[:5])}")
    except RuntimeError as err:  # missing / unexpected keys, size mismatches
        detail = " ".join(line.strip() for line in str(err).splitlines()[1:4])
        raise ConfigError(
            f"{what} does not fit model={model._target_}: {detail or err}; configure the model "
            "it was trained with"
        ) from None


def sharded_weights(path: Path) -> dict[str, torch.Tensor]:
    """The full weights of a sharded checkpoint (trainer=fsdp), gathered in this process;
    a checkpoint without its `.metadata`, or with shards missing, cut short or unreadable,
    is one line naming the damaged files in shard order."""
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    if not (path / shards.METADATA).is_file():
        raise ConfigError(
            f"ckpt_path={path} is a sharded checkpoint without its .metadata file (written "
            "last, so the save did not finish); use an earlier complete checkpoint"
        )
    try:
        metadata = shards.read_metadata(path)
    except Exception as err:  # noqa: BLE001 - a torn pickle raises many kinds
        raise _damaged(path, [f".metadata does not load ({type(err).__name__})"]) from None
    # Checked before reading: torch names only the first file it fails on, in its own order.
    if problems := shards.missing_or_short(path, metadata):
        raise _damaged(path, problems)
    with tempfile.TemporaryDirectory() as tmp:
        single = Path(tmp) / "consolidated.pt"
        try:
            dcp_to_torch_save(path, single)  # one process, no process group
        # CheckpointException is a BaseException (torch/distributed/checkpoint/api.py).
        except (Exception, CheckpointException) as err:  # noqa: BLE001 - many kinds
            raise _damaged(
                path, shards.unloadable(path, metadata) or [_shard_problem(err)]
            ) from None
        return torch.load(single, map_location="cpu", weights_only=True)["state_dict"]


def _damaged(path: Path, problems: list[str]) -> ConfigError:
    return ConfigError(
        f"ckpt_path={path} is a damaged sharded checkpoint: {shards.summary(problems)}; "
        "use an earlier complete checkpoint"
    )


def _shard_problem(err: BaseException) -> str:
    """The first line of what went wrong reading a shard: the cause DCP wraps per rank."""
    for line in str(err).splitlines()[::-1]:
        if re.match(r"\w*(Error|Exception): ", line.strip()):
            return line.strip().split(". ")[0]
    return _first_line(err)  # type: ignore[arg-type]


def load(path: str, mmap: bool = False, verify: bool | None = None) -> dict[str, Any]:
    """torch.load(weights_only=True): tensors and plain values only, never arbitrary code.

    A sharded checkpoint's directory: its `meta.pt` (everything but weights and optimizer
    state, which stay in the shards). `mmap`: tensors stay in the file until read (a
    checkpoint read more than once, or only in part, is not copied into memory each time).
    `verify` (default: unless `mmap`, whose callers verify at their first load): every
    member's CRC-32 is checked first, so damaged bytes are one line, never other weights.
    """
    file = Path(path)
    sharded = file.is_dir()
    if sharded:
        file = file / SHARDED_META
    if not file.is_file():
        raise ConfigError(f"ckpt_path={path}: no such file")
    if (not mmap if verify is None else verify) and (wrong := zip_integrity.damage(file)):
        raise ConfigError(f"ckpt_path={path} is damaged: {wrong}; use an intact copy")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as err:
        raise _refused(path, file, err) from err
    except Exception as err:  # noqa: BLE001 - a text file raises KeyError, a truncated one RuntimeError
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint ({type(err).__name__}: "
            f"{_first_line(err)})"
        ) from err
    if not isinstance(checkpoint, dict) or ("state_dict" not in checkpoint and not sharded):
        raise ConfigError(f"ckpt_path={path} is not a Lightning checkpoint (no state_dict)")
    return checkpoint


def _refused(path: str, file: Path, err: pickle.UnpicklingError) -> ConfigError:
    """Why torch's safe loader refused `file`, in one line naming `path`."""
    unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
    named = unsafe.group(1) if unsafe else _pickled_class(file)
    if named:
        return ConfigError(
            f"ckpt_path={path} contains a pickled {named} object; it is refused because "
            "loading it could run arbitrary code (only tensors and plain values load "
            "with weights_only=True)"
        )
    # torch's other refusals open with advice to load with weights_only=False: never ours.
    detail = re.search(r"WeightsUnpickler error:\s*([^\n]+)", str(err))
    if detail and detail.group(1).startswith("Unsupported operand"):  # random bytes
        return ConfigError(
            f"ckpt_path={path} is not a readable checkpoint (not a file torch.save "
            f"wrote, or a damaged one: {detail.group(1).strip()})"
        )
    if detail:
        return ConfigError(
            f"ckpt_path={path} is refused: it holds more than tensors and plain values "
            f"({detail.group(1).strip()})"
        )
    return ConfigError(f"ckpt_path={path} is not a readable checkpoint ({type(err).__name__})")


def _pickled_class(file: Path) -> str | None:
    """The first class a pickle names that torch's safe loader does not allow, read from
    its opcodes without running any (torch names it only for protocol-2 pickles)."""
    import pickletools

    try:
        strings: list[str] = []
        for op, arg, _ in pickletools.genops(_pickle_of(file)):
            name = None
            if op.name == "GLOBAL":
                name = str(arg).replace(" ", ".")
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                name = f"{strings[-2]}.{strings[-1]}"
            elif isinstance(arg, str):
                strings.append(arg)
            if name and not name.startswith(("torch.", "collections.OrderedDict")):
                return name
    except Exception:  # noqa: BLE001 - not a pickle we can read: the caller says so
        return None
    return None


def _pickle_of(file: Path) -> bytes:
    """The pickle of a torch.save file: its zip's `data.pkl`, or the whole (legacy) file."""
    import zipfile

    if not zipfile.is_zipfile(file):
        return file.read_bytes()
    with zipfile.ZipFile(file) as archive:
        inner = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
        return archive.read(inner) if inner else b""


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def check_matches(checkpoint: dict[str, Any], configured: dict[str, Any], what: str) -> None:
    """The checkpoint's model (its `litforge_model` record) must be the configured one: the
    same `model._target_`, and the same keys in every built part (`_target_` nodes that are
    not partials, such as the net); optimizer and schedule may differ. A checkpoint without
    the record (not written by litforge) is left to `load_state_dict`. `what` names it."""
    saved = checkpoint.get(RECORD_KEY)
    if not isinstance(saved, dict):
        return
    if saved.get("_target_") != configured.get("_target_"):
        raise ConfigError(
            f"{what} holds a {saved.get('_target_')} checkpoint, but model= configures "
            f"{configured.get('_target_')}; pass the model= or experiment= it was trained with"
        )
    for part in sorted(set(_built_parts(saved)) | set(_built_parts(configured))):
        old = dict(leaves(saved.get(part) or {}, f"model.{part}"))
        new = dict(leaves(configured.get(part) or {}, f"model.{part}"))
        differing = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if _identified_by_content(checkpoint):
            # Adapters name their base by content: the module checks the base's sha256
            # when it loads the checkpoint, so a bit-identical copy elsewhere is the same base.
            differing = [k for k in differing if k != "model.net.pretrained"]
        if differing:
            key = differing[0]
            raise ConfigError(
                f"{what} was trained with {key}={old.get(key)}, but the config has "
                f"{key}={new.get(key)} (differing: {', '.join(differing)})"
            )


def _identified_by_content(checkpoint: dict[str, Any]) -> bool:
    """Whether the checkpoint records its base model's content hash (LoRA adapters)."""
    from litforge.hf.lora import BASE_KEY  # torch only: transformers is not imported

    base = checkpoint.get(BASE_KEY)
    return isinstance(base, dict) and bool(base.get("sha256"))


def _built_parts(model: dict[str, Any]) -> list[str]:
    """Keys of `model` whose value is built from a `_target_` (not a partial): the net."""
    return [
        k for k, v in model.items()
        if isinstance(v, dict) and "_target_" in v and not v.get("_partial_", False)
    ]  # fmt: skip

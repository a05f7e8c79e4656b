"""`python -m litforge.export CKPT OUT [key=value ...]`: a checkpoint of a Hugging Face
model as a Hugging Face directory (`save_pretrained`, safetensors) that
`AutoModelForCausalLM.from_pretrained` loads, LoRA adapters merged into the weights, with
the base model's tokenizer.

A checkpoint is data, never code: the model is rebuilt from the project's own config and
the overrides given (as `eval.py` does), and the checkpoint's model record is only compared
with it. The directory is written beside OUT and renamed into place when complete (with
`litforge-export.json` last), so an interrupted export leaves no half model at OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from litforge import hooks
from litforge.errors import ConfigError
from litforge.exits import report_user_errors
from litforge.paths import unwritable

MARKER = "litforge-export.json"  # written last: its presence says the directory is complete
_PARTIAL = ".{name}.litforge-partial"


def export(
    checkpoint_path: str,
    out: Path,
    overrides: list[str] | None = None,
    overwrite: bool = False,
    conf_dir: str | Path | None = None,
) -> Path:
    """Write the merged model of `checkpoint_path` to `out`; `overrides` configure the
    model it was trained with (`experiment=hf_finetune model.net.pretrained=...`)."""
    from litforge import build
    from litforge.checkpointing import checkpoint_file
    from litforge.cli import compose

    out = Path(out).absolute()
    check_destination(out, checkpoint_path, overwrite)
    partial = out.parent / _PARTIAL.format(name=out.name)
    shutil.rmtree(partial, ignore_errors=True)  # what an earlier, killed export left
    try:
        partial.mkdir(parents=True)
        cfg = compose(list(overrides or []), partial / "run", conf_dir=conf_dir)
        module = build.build_module(cfg, compiled=False)
        net = getattr(module, "net", None)
        if hooks.merged_of(net) is None:
            raise ConfigError(
                f"model={cfg.model.get('_target_')} with net {type(net).__name__} is not a "
                "Hugging Face model: export writes model=hf_causal_lm checkpoints (pass "
                "experiment=hf_finetune and the model.net.* the run was trained with)"
            )
        check_not_base(out, str(net.pretrained))
        checkpoint_file.load_weights(module, cfg.model, checkpoint_path, partial / "run")
        shutil.rmtree(partial / "run", ignore_errors=True)
        written = _write_model(net, partial)
        _put_in_place(partial, out)
    except OSError as err:
        shutil.rmtree(partial, ignore_errors=True)
        raise ConfigError(
            f"cannot write the export to {out}: {err.strerror or err} "
            f"({err.filename or partial}); pick a writable OUT"
        ) from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    print(f"wrote {out}: {', '.join(written)}")
    return out


def check_destination(out: Path, checkpoint_path: str, overwrite: bool) -> None:
    """OUT must be new or empty (or `--overwrite`), writable, and not hold the checkpoint."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"OUT={out} is a file, not a directory; give a directory to write")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(
            f"OUT={out} is not empty; give a new directory, or pass --overwrite to replace it"
        )
    local = Path(checkpoint_path.removeprefix("file://")).absolute()
    if "://" not in checkpoint_path.removeprefix("file://") and local.is_relative_to(out):
        raise ConfigError(f"OUT={out} holds the checkpoint {local}; export somewhere else")
    problem = unwritable(out.parent)
    if problem:
        raise ConfigError(f"OUT={out} cannot be written ({problem}); pick a writable OUT")


def check_not_base(out: Path, pretrained: str) -> None:
    """Never over the base model: its weights are what the adapters need."""
    base = Path(pretrained).expanduser().absolute()
    if base.exists() and (out == base or base.is_relative_to(out)):
        raise ConfigError(
            f"OUT={out} is the base model's directory (model.net.pretrained={pretrained}); "
            "export to a new directory"
        )


def _write_model(net: Any, into: Path) -> list[str]:
    """The merged weights, config and tokenizer into `into`; the marker last."""
    merged = net.merged()
    merged.save_pretrained(into, safe_serialization=True)
    wrote = ["weights (safetensors)", "config"]
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(net.pretrained)).save_pretrained(into)
        wrote.append("tokenizer")
    except (OSError, ValueError):
        wrote.append("no tokenizer (the base has none)")
    umask = os.umask(0)
    os.umask(umask)
    for path in into.iterdir():  # safetensors writes 0600: readable as the user's files are
        path.chmod(0o666 & ~umask)
    identity = hooks.base_identity_of(net)
    marker = {"base": str(net.pretrained), "base_sha256": (identity or {}).get("sha256")}
    (into / MARKER).write_text(json.dumps(marker, indent=1) + "\n")
    return wrote


def _put_in_place(partial: Path, out: Path) -> None:
    """Rename the finished directory to `out`, replacing what was there."""
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced-", dir=out.parent))
        out.rename(old / out.name)
        partial.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        partial.rename(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint file or URL")
    parser.add_argument("out", type=Path, help="the Hugging Face directory to write")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="the model it was trained with, as train.py takes it (experiment=hf_finetune "
        "model.net.pretrained=DIR ...)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT")
    args = parser.parse_args(argv)
    from litforge.exits import silence_known_upstream_warnings

    silence_known_upstream_warnings()
    with report_user_errors():
        export(args.checkpoint, args.out, args.overrides, args.overwrite)


if __name__ == "__main__":
    main()

"""`python -m litforge.consolidate CKPT OUT`: one file from a sharded (trainer=fsdp) checkpoint.

CKPT is the checkpoint's directory, local or at any fsspec URL (e.g. s3://bucket/run/
step-00000120.ckpt). OUT gets the full weights and the hyperparameters (no optimizer state):
a file for `eval.py ckpt_path=OUT`, for sharing, or for loading with `torch.load`.
eval.py also reads the sharded directory as it is.

Lightning's own `python -m lightning.pytorch.utilities.consolidate_checkpoint` reads only
FSDPStrategy's layout: on ModelParallelStrategy's (ours) it fails with KeyError: 'model'
(lightning 2.6.6).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from litforge.checkpointing import checkpoint_file
from litforge.errors import ConfigError
from litforge.exits import report_user_errors, silence_known_upstream_warnings

KEPT = (
    "hyper_parameters",
    "litforge_model",
    "pytorch-lightning_version",
    "epoch",
    "global_step",
)


def consolidate(source: str, out: Path) -> Path:
    """Write the sharded checkpoint at `source` as one file at `out`."""
    with tempfile.TemporaryDirectory() as staging:
        local = checkpoint_file.fetch(source, Path(staging))
        if not local.is_dir():
            raise ConfigError(
                f"{source} is a single-file checkpoint already; consolidate takes a sharded one "
                "(a directory written by trainer=fsdp)"
            )
        meta = checkpoint_file.load(str(local))  # meta.pt: refused if unsafe
        single = {key: meta[key] for key in KEPT if key in meta}
        single["state_dict"] = checkpoint_file.sharded_weights(local)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(single, out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m litforge.consolidate",
        description="One checkpoint file (weights, no optimizer state) from a sharded one.",
    )
    parser.add_argument("checkpoint", help="a sharded checkpoint's directory or URL")
    parser.add_argument("out", type=Path, help="the file to write")
    args = parser.parse_args(argv)
    silence_known_upstream_warnings()
    with report_user_errors():
        written = consolidate(args.checkpoint, args.out)
        size = written.stat().st_size / 2**20
        print(f"wrote {written} ({size:.1f} MiB): eval.py ckpt_path={written}")


if __name__ == "__main__":
    main()

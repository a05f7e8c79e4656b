"""`litforge shards write [train.py overrides] --url URL`: the configured DataModule's
train, val and test sets as shards at URL/train, URL/val and URL/test.

    litforge shards write data=digits --url s3://my-bucket/digits
    python train.py data=digits_stream data.url=s3://my-bucket/digits

A dataset of your own from Python: `litforge.data.shards.writer.write_shards(dataset, url)`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from litforge import hooks
from litforge.data.shards.datamodule import SPLITS
from litforge.errors import ConfigError

# Where a DataModule keeps each split after setup: litforge's SplitDataModule, then
# lightning-hydra-template's names.
DATASET_NAMES = {split: (f"{split}_set", f"data_{split}") for split in SPLITS}


def main(argv: list[str] | None = None) -> None:
    from litforge.exits import report_user_errors, silence_known_upstream_warnings

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "write":
        asked = argv[:1] in (["-h"], ["--help"])
        print("usage: litforge shards write [train.py overrides] --url URL",
              file=sys.stdout if asked else sys.stderr)  # fmt: skip
        sys.exit(0 if asked else 2)
    write = argparse.ArgumentParser(
        prog="litforge shards write", description=__doc__.splitlines()[0]
    )
    write.add_argument("overrides", nargs="*", help="train.py overrides (data=digits)")
    write.add_argument("--url", required=True, help="a directory URL: local, s3://, gs://, az://")
    write.add_argument("--samples-per-shard", type=int, default=4096)
    write.add_argument("--samples-per-block", type=int, default=64)
    write.add_argument("--overwrite", action="store_true")
    args = write.parse_intermixed_args(argv[1:])
    silence_known_upstream_warnings()
    with report_user_errors():
        _write(args)


def _write(args: argparse.Namespace) -> None:
    from litforge.build import construct
    from litforge.cli import compose
    from litforge.data.shards.writer import write_shards

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = compose(args.overrides, run_dir)
    datamodule = construct(cfg.data, "data")
    for stage in ("fit", "test"):
        datamodule.setup(stage)
    provides = hooks.provides_of(type(datamodule))
    # What a reader must match (TextStream checks its block_size against it).
    meta = (
        {"block_size": datamodule.block_size} if isinstance(datamodule, hooks.HasBlockSize) else {}
    )
    for split in SPLITS:
        names = DATASET_NAMES[split]
        dataset = next((d for n in names if (d := getattr(datamodule, n, None)) is not None), None)
        if dataset is None:
            raise ConfigError(
                f"data: {type(datamodule).__name__} has no {' or '.join(names)} after setup "
                "to write (a map-style dataset or an iterable of samples)"
            )
        index = write_shards(
            dataset, f"{args.url.rstrip('/')}/{split}", provides=provides, meta=meta,
            samples_per_shard=args.samples_per_shard, samples_per_block=args.samples_per_block,
            overwrite=args.overwrite,
        )  # fmt: skip
        print(
            f"{split}: {index.samples} samples in {len(index.shards)} shard(s) at {args.url.rstrip('/')}/{split}"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()

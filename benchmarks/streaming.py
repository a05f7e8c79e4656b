"""Figures `stream_resume_90_vs_10` / `stream_mixture_resume_90_vs_10`: the time from a
loader's state loaded to its first batch, resumed at 90% of an epoch over resumed at 10%
(a 200,000-sample dataset in 50 shards; one stream, and a mixture of two); and
`stream_warm_throughput`: the streamed digits loader with its local cache warm (a fresh
dataset, as after a restart) over the in-memory digits loader, samples/s at 0 workers.

CPU time of this process, sides interleaved (A B B A), median of paired ratios.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import torch
from torch.utils.data import Dataset, TensorDataset

from benchmarks.harness import scratch_dir
from benchmarks.stats import Figure
from litforge.data.loaders import ResumableLoader
from litforge.data.shards.mixture import MixtureDataset, MixtureSampler
from litforge.data.shards.order import BlockOrderSampler, LazyOrderSampler
from litforge.data.shards.reader import ShardedDataset
from litforge.data.shards.writer import write_shards

SAMPLES, PER_SHARD, BATCH = 200_000, 4_000, 64


def _write_large(root: Path, name: str) -> str:
    url = str(root / name)
    samples = (torch.full((4,), float(i)) for i in range(SAMPLES))
    write_shards(samples, url, samples_per_shard=PER_SHARD, samples_per_block=64)
    return url


def _sampler(data: Dataset, at: float) -> LazyOrderSampler:
    if isinstance(data, MixtureDataset):
        sampler: LazyOrderSampler = MixtureSampler(data, [2.0, 1.0], len(data), seed=1)
    else:
        assert isinstance(data, ShardedDataset)
        sampler = BlockOrderSampler(data.counts, data.index.samples_per_block, seed=1)
    sampler.load_state_dict({"epoch": 0, "position": int(at * sampler.size)})
    return sampler


def _resume_s(urls: list[str], at: float) -> float:
    """CPU seconds from a saved loader state to the first batch, in a fresh dataset."""
    start = time.process_time()
    streams = [ShardedDataset(u) for u in urls]
    data: Dataset = streams[0] if len(streams) == 1 else MixtureDataset(streams)
    loader = ResumableLoader(data, batch_size=BATCH, sampler=_sampler(data, at))
    next(iter(loader))
    return time.process_time() - start


def _ratio(urls: list[str], repeats: int) -> list[float]:
    ratios = []
    for r in range(repeats):
        order = (0.1, 0.9) if r % 2 == 0 else (0.9, 0.1)
        times = {at: _resume_s(urls, at) for at in order}
        ratios.append(times[0.9] / times[0.1])
    return ratios


def _epoch_rate(data: Dataset) -> float:
    """Samples per CPU second over one epoch of a shuffled train loader."""
    n = len(data)  # type: ignore[arg-type]
    sampler = (
        BlockOrderSampler(data.counts, data.index.samples_per_block, seed=0)
        if isinstance(data, ShardedDataset)
        else torch.utils.data.RandomSampler(data, generator=torch.Generator().manual_seed(0))
    )
    start = time.process_time()
    for _ in ResumableLoader(data, batch_size=BATCH, sampler=sampler):
        pass
    return n / (time.process_time() - start)


def measure(repeats: int = 7) -> dict[str, Figure]:
    from litforge_examples.data.digits import DigitsDataModule

    root = scratch_dir()
    try:
        one = [_write_large(root, "a")]
        two = [*one, _write_large(root, "b")]
        digits = DigitsDataModule(batch_size=BATCH)
        digits.setup("fit")
        images, labels = zip(
            *(digits.train_set[i] for i in range(len(digits.train_set))), strict=True
        )
        in_memory = TensorDataset(torch.stack(images), torch.stack(labels))
        write_shards(digits.train_set, str(root / "digits"))
        cache = str(root / "cache")
        _epoch_rate(ShardedDataset(str(root / "digits"), cache_dir=cache))  # fills the cache
        rates = []
        for r in range(repeats):
            sides = ("stream", "memory") if r % 2 == 0 else ("memory", "stream")
            got = {
                side: _epoch_rate(
                    ShardedDataset(str(root / "digits"), cache_dir=cache) if side == "stream"
                    else in_memory
                )
                for side in sides
            }  # fmt: skip
            rates.append(got["stream"] / got["memory"])
        single, mixed = _ratio(one, repeats), _ratio(two, repeats)
        return {
            "stream_resume_90_vs_10": Figure.of(
                single, "x at 10%", "<= 1.1",
                note=f"a loader's state loaded to its first batch at 90% / 10% of an epoch: "
                f"{SAMPLES:,} samples in {SAMPLES // PER_SHARD} shards, a fresh dataset each",
            ),
            "stream_mixture_resume_90_vs_10": Figure.of(
                mixed, "x at 10%", "<= 1.1",
                note="the same for a 2:1 mixture of two such streams",
            ),
            "stream_warm_throughput": Figure.of(
                rates, "x in memory", ">= 0.9",
                note="streamed digits (local cache warm, fresh dataset) / in-memory digits, "
                "samples/s of a shuffled epoch at 0 workers, batch 64",
                extra={"median_ratio": statistics.median(rates)},
            ),
        }  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    for name, figure in measure(3).items():
        print(name, round(figure.median, 3), figure.min, figure.max)

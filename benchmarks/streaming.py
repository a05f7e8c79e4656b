"""Figures `stream_resume_90_vs_10` / `stream_mixture_resume_90_vs_10`: the time from a
loader's state loaded to its first batch, resumed at 90% of an epoch over resumed at 10%
(a 200,000-sample dataset in 50 shards; one stream, and a mixture of two); and
`stream_warm_throughput`: the streamed digits loader with its local cache warm (a fresh
dataset, as after a restart) over the in-memory digits loader, samples/s at 0 workers;
`stream_cold_vs_download` / `stream_cold_vs_per_block`: a first epoch from the S3 test
server with an empty cache, over a plain sequential download of the same shards through
the same fsspec filesystem, and over the same epoch read one request per block (the read
path before read-ahead, `readahead_bytes=0`), with the requests of each; the
`stream_cold_link_*` figures the same through a model of a rented machine's link to the
store (benchmarks/link.py: a per-connection rate and a first-byte latency).

CPU time of this process, sides interleaved (A B B A), median of paired ratios; the cold
figures in wall time (they wait on the store, not the CPU).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import threading
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


COLD_SAMPLES, COLD_PER_SHARD, COLD_FLOATS = 20_000, 1_000, 1_024  # 80 MB in 20 shards


class _Counted(ShardedDataset):
    """A dataset that counts its requests to the store (from any thread)."""

    def _fetch(self, name, start=None, end=None, **kwargs):  # type: ignore[no-untyped-def]
        with self.lock:
            self.requests += 1
        return super()._fetch(name, start, end, **kwargs)

    def _read_index(self):  # type: ignore[no-untyped-def]
        self.lock, self.requests = threading.Lock(), 0
        return super()._read_index()


def _cold_epoch(url: str, cache: Path, readahead_bytes: int) -> tuple[float, int]:
    """Wall seconds of a first epoch (empty cache, fresh dataset, 0 workers) and its
    requests to the store."""
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    data = _Counted(url, cache_dir=str(cache), readahead_bytes=readahead_bytes)
    sampler = BlockOrderSampler(data.counts, data.index.samples_per_block, seed=0)
    for _ in ResumableLoader(data, batch_size=BATCH, sampler=sampler):
        pass
    return time.perf_counter() - start, data.requests


def _download_s(url: str) -> float:
    """Wall seconds to read every shard whole, one after another, through the filesystem
    the dataset opens (its options), with a fresh instance as a fresh dataset has."""
    import fsspec

    from litforge.data.shards.reader import _one_try

    start = time.perf_counter()
    fs, root = fsspec.core.url_to_fs(url, skip_instance_cache=True, **_one_try(url, {}))
    for name in sorted(p for p in fs.ls(root, detail=False) if p.endswith(".lfs")):
        fs.cat_file(name)
    return time.perf_counter() - start


LINK_RATE, LINK_LATENCY = 64e6, 0.02  # bytes/s per connection, seconds to a first byte


def _linked(port: int) -> tuple[subprocess.Popen[str], str]:
    """The link model (benchmarks/link.py) in front of the store on `port`: its endpoint."""
    proxy = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.link", "--target", str(port),
         "--rate", str(LINK_RATE), "--latency", str(LINK_LATENCY)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert proxy.stdout is not None
    return proxy, f"http://127.0.0.1:{proxy.stdout.readline().strip()}"


def _cold_sides(url: str, cache: Path, sides: tuple[str, ...], repeats: int) -> tuple[
    dict[str, list[float]], dict[str, int]]:  # fmt: skip
    """Wall seconds of each side per repeat, sides interleaved, and each side's requests."""
    times: dict[str, list[float]] = {side: [] for side in sides}
    requests: dict[str, int] = {}
    for r in range(repeats):
        for side in sides if r % 2 == 0 else reversed(sides):
            if side == "download":
                times[side].append(_download_s(url))
            else:
                took, requests[side] = _cold_epoch(url, cache, 64 << 20 if side == "ahead" else 0)
                times[side].append(took)
    return times, requests


def _warm_epoch_s(url: str, cache: Path) -> float:
    """Wall seconds of the same epoch with the disk cache full: what the reader's own work
    (checking, decoding, collating) takes when the store costs nothing."""
    data = ShardedDataset(url, cache_dir=str(cache))
    sampler = BlockOrderSampler(data.counts, data.index.samples_per_block, seed=0)
    start = time.perf_counter()
    for _ in ResumableLoader(data, batch_size=BATCH, sampler=sampler):
        pass
    return time.perf_counter() - start


def measure_cold(repeats: int) -> dict[str, Figure]:
    """The cold figures, on a moto S3 server started here (tests/s3server.py): on loopback,
    and through the link model (benchmarks/link.py)."""
    import os

    from tests.s3server import S3Server

    root = scratch_dir()
    server = S3Server(root)
    saved = {k: os.environ.get(k) for k in server.env()}
    proxy = None
    try:
        server.start()
        os.environ.update(server.env())
        url = "s3://litforge/cold"
        samples = (torch.full((COLD_FLOATS,), float(i)) for i in range(COLD_SAMPLES))
        write_shards(samples, url, samples_per_shard=COLD_PER_SHARD, samples_per_block=64)
        cache = root / "cache"
        _download_s(url), _cold_epoch(url, cache, 64 << 20)  # warm up the server and imports
        loop, requests = _cold_sides(url, cache, ("download", "ahead", "per_block"), repeats)
        _cold_epoch(url, cache, 64 << 20)
        ceiling = [_download_s(url) / _warm_epoch_s(url, cache) for _ in range(3)]
        proxy, os.environ["AWS_ENDPOINT_URL"] = _linked(server.port)
        link, link_requests = _cold_sides(
            url, cache, ("download", "ahead", "per_block"), min(repeats, 3)
        )
        mb = COLD_SAMPLES * COLD_FLOATS * 4 / 1e6
        shards = COLD_SAMPLES // COLD_PER_SHARD
        made = f"{requests['ahead']} requests per epoch"
        return {
            "stream_cold_vs_download": Figure.of(
                _pairs(loop, "download", "ahead"), "x download", ">= 0.8",
                note=f"a first epoch from the S3 test server (moto, loopback), empty cache, 0 "
                f"workers, read ahead 64 MiB on 8 threads, over reading its {shards} shards "
                f"({mb:.0f} MB, {COLD_SAMPLES:,} samples) whole one after another through the "
                f"same fsspec filesystem; wall time; {made}. On loopback the store costs "
                f"little: the reader's own work (the same epoch from a full disk cache) "
                f"takes {1 / statistics.median(ceiling):.2f}x the download's time, and "
                "checking, caching and decoding share the cores with the fetches",
                extra={"requests_per_epoch": requests["ahead"],
                       "ceiling_download_over_warm_epoch": statistics.median(ceiling)},
            ),
            "stream_cold_link_vs_download": Figure.of(
                _pairs(link, "download", "ahead"), "x download", ">= 0.8",
                note=f"the same through a link model (benchmarks/link.py: "
                f"{LINK_RATE / 1e6:.0f} MB/s per connection, {LINK_LATENCY * 1e3:.0f} ms to "
                f"each request's first byte, S3's shape): the read-ahead's parallel ranges "
                f"against one stream of whole shards; {made}",
            ),
            "stream_cold_link_vs_per_block": Figure.of(
                _pairs(link, "per_block", "ahead"), "x per block", ">= 3",
                note=f"through the link model, over the epoch read one request per block: "
                f"{link_requests['ahead']} requests against {link_requests['per_block']}, "
                "each waiting for its first byte",
            ),
            "stream_cold_vs_per_block": Figure.of(
                _pairs(loop, "per_block", "ahead"), "x per block", ">= 3",
                note="the loopback first epoch over it read one range request per block (the "
                f"read path before read-ahead, readahead_bytes=0): {made}, against "
                f"{requests['per_block']}",
                extra={"requests_per_epoch": requests["ahead"],
                       "requests_per_epoch_per_block": requests["per_block"]},
            ),
        }  # fmt: skip
    finally:
        if proxy is not None:
            proxy.kill()
            proxy.wait()
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(root, ignore_errors=True)


def _pairs(times: dict[str, list[float]], num: str, den: str) -> list[float]:
    return [a / b for a, b in zip(times[num], times[den], strict=True)]


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
            **measure_cold(repeats),
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

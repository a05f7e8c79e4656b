"""The parts of a streamed resume that make test checks without training: a loader's
state loads into another number of workers, and the audit drops what a checkpoint lacks."""

from __future__ import annotations

import pytest
from torch.utils.data import Dataset

from litforge.data.loaders import ResumableLoader
from litforge.data.shards.audit import SampleIdLog, read_ids
from litforge.data.shards.order import BlockOrderSampler


class Indices(Dataset):
    def __len__(self) -> int:
        return 100

    def __getitem__(self, i: int) -> int:
        return i


def loader(workers: int) -> ResumableLoader:
    sampler = BlockOrderSampler([40, 60], 8, seed=1)
    sampler.record = True
    return ResumableLoader(Indices(), batch_size=6, sampler=sampler, num_workers=workers,
                           persistent_workers=workers > 0)  # fmt: skip


@pytest.mark.parametrize(("before", "after"), [(0, 2), (2, 1), (2, 0)])
def test_a_loader_state_loads_into_another_number_of_workers(before, after):
    whole = [int(i) for batch in loader(0) for i in batch]
    first = loader(before)
    batches = iter(first)
    seen = [int(i) for _ in range(3) for i in next(batches)]
    resumed = loader(after)
    resumed.load_state_dict(first.state_dict())
    rest = [int(i) for batch in resumed for i in batch]
    assert seen + rest == whole  # the same order, nothing repeated or skipped
    assert resumed.sampler.yielded[:6] == rest[:6]  # what the audit reads per batch


def test_the_audit_keeps_only_the_steps_a_checkpoint_holds(tmp_path):
    ids = [("s3://b/train/shard-00000.lfs", i) for i in range(4)]
    for rank in range(3):  # a run on 3 processes, killed after step 5 (checkpoint at 4)
        log = SampleIdLog(tmp_path, rank, 3, 0)
        for step in range(6):
            log.append(step, 0, [ids[step % 4]])
        log.close()
    with open(tmp_path / "sample_ids" / "rank-2.tsv", "a") as f:
        f.write("6\t0\ts3://b/train/shard")  # cut by the kill mid-line
    SampleIdLog(tmp_path, 0, 1, 4).close()  # resumed on 1 process from step 4
    counts = read_ids(tmp_path)[0]
    assert sum(counts.values()) == 3 * 4  # steps 0-3 of each of the 3 ranks, nothing after
    for rank in range(3):
        steps = [int(line.split("\t")[0]) for line in
                 (tmp_path / "sample_ids" / f"rank-{rank}.tsv").read_text().splitlines()]  # fmt: skip
        assert steps == [0, 1, 2, 3]

"""The sample-id audit (`data.record_ids=true`): each rank appends the ids of the samples
it trained on to `RUN_DIR/sample_ids/rank-R.tsv`, one line per sample:

    step <TAB> epoch <TAB> shard URL <TAB> index in the shard

`step` is the optimizer step the sample went into. A resumed run first drops the lines of
steps its checkpoint does not hold (what a killed attempt trained on after its last
checkpoint is trained on again), in every rank's file, so the files always hold what the
run's model has seen: the multiset of ids of an epoch, over all ranks, shows repeats and
skips directly (`read_ids`).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable
from pathlib import Path

DIRECTORY = "sample_ids"


def _lines_before(path: Path, step: int) -> list[str]:
    """The complete lines of `path` for steps before `step` (a kill may cut the last)."""
    kept = []
    for line in path.read_text().splitlines(keepends=True):
        fields = line.rstrip("\n").split("\t")
        if line.endswith("\n") and len(fields) == 4 and int(fields[0]) < step:
            kept.append(line)
    return kept


class SampleIdLog:
    """Rank `rank`'s audit file under `run_dir`, cut back to the steps before `step`."""

    def __init__(self, run_dir: str | Path, rank: int, world_size: int, step: int) -> None:
        self.directory = Path(run_dir) / DIRECTORY
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"rank-{rank}.tsv"
        # Rank 0 also cuts the files of ranks this run does not have (a resume on fewer).
        ranks = [rank]
        if rank == 0:
            ranks += [int(p.stem.split("-")[1]) for p in self.directory.glob("rank-*.tsv")]
        for other in sorted({r for r in ranks if r == rank or r >= world_size}):
            path = self.directory / f"rank-{other}.tsv"
            if path.exists():
                kept = _lines_before(path, step)
                partial = path.with_suffix(".partial")
                partial.write_text("".join(kept))
                os.replace(partial, path)
        self._file = open(self.path, "a")  # noqa: SIM115 - open for the run's length

    def append(self, step: int, epoch: int, ids: Iterable[tuple[str, int]]) -> None:
        """One batch's ids, in one write, flushed: a kill loses at most that batch's line."""
        self._file.write("".join(f"{step}\t{epoch}\t{src}\t{i}\n" for src, i in ids))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_ids(run_dir: str | Path) -> dict[int, collections.Counter[tuple[str, int]]]:
    """Per epoch, how often each (shard, index) was trained on, over all ranks' files."""
    seen: dict[int, collections.Counter[tuple[str, int]]] = collections.defaultdict(
        collections.Counter
    )
    for path in sorted((Path(run_dir) / DIRECTORY).glob("rank-*.tsv")):
        for line in path.read_text().splitlines():
            step, epoch, source, index = line.split("\t")
            seen[int(epoch)][(source, int(index))] += 1
    return dict(seen)

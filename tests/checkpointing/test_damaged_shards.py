"""A sharded checkpoint (trainer=fsdp's directory) that lost a file or was cut short:
eval.py and `python -m litforge.consolidate` say so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

from litforge.checkpointing.checkpoint_file import sharded_weights
from litforge.checkpointing.consolidate import main as consolidate_main
from litforge.errors import ConfigError


def sharded(tmp_path: Path) -> Path:
    """A real distributed checkpoint, written by this one process (no process group)."""
    path = tmp_path / "step-00000004.ckpt"
    dcp.save({"state_dict": {"w": torch.arange(4096.0), "b": torch.ones(3)}}, checkpoint_id=path)
    torch.save({"global_step": 4}, path / "meta.pt")
    return path


def several_shards(tmp_path: Path, count: int) -> Path:
    """A real distributed checkpoint in `count` shard files `__0_0.distcp`.. (one tensor
    each: the writer's threads each write one file)."""
    path = tmp_path / "step-00000004.ckpt"
    weights = {f"w{i}": torch.full((1024,), float(i)) for i in range(count)}
    dcp.save({"state_dict": weights}, storage_writer=FileSystemWriter(path, thread_count=count))
    torch.save({"global_step": 4}, path / "meta.pt")
    assert len(list(path.glob("*.distcp"))) == count
    return path


def shard(path: Path, i: int) -> Path:
    return path / f"__0_{i}.distcp"


def cut_short(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:100])


def damaged_line(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        sharded_weights(path)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_an_intact_one_reads(tmp_path):
    assert torch.equal(sharded_weights(sharded(tmp_path))["w"], torch.arange(4096.0))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: (p / ".metadata").unlink(), "without its .metadata file"),
        (lambda p: [f.unlink() for f in p.glob("*.distcp")], "is a damaged sharded checkpoint"),
        (lambda p: [f.write_bytes(f.read_bytes()[:100]) for f in p.glob("*.distcp")],
         "is a damaged sharded checkpoint"),
    ],
    ids=["no-metadata", "no-shard", "truncated-shard"],
)  # fmt: skip
def test_damage_is_one_line_for_eval_and_consolidate(tmp_path, capfd, damage, message):
    path = sharded(tmp_path)
    damage(path)
    with pytest.raises(ConfigError, match=message):
        sharded_weights(path)
    with pytest.raises(SystemExit) as exit_:
        consolidate_main([str(path), str(tmp_path / "one.ckpt")])
    err = capfd.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")][0].count(message) == 1


def test_the_truncated_shard_is_named_not_the_first_listed(tmp_path):
    path = several_shards(tmp_path, 4)
    cut_short(shard(path, 1))
    line = damaged_line(path)
    assert ": __0_1.distcp is cut short (100 of " in line
    assert "__0_0.distcp" not in line and "__0_2.distcp" not in line


def test_a_missing_shard_is_named(tmp_path):
    path = several_shards(tmp_path, 4)
    shard(path, 2).unlink()
    line = damaged_line(path)
    assert line.endswith(
        "is a damaged sharded checkpoint: __0_2.distcp is missing; "
        "use an earlier complete checkpoint"
    )


def test_several_damaged_are_listed_in_shard_order(tmp_path):
    """`__0_10` comes after `__0_2` (numbers, not text), whichever torch reads first."""
    path = several_shards(tmp_path, 11)
    shard(path, 10).unlink()
    cut_short(shard(path, 2))
    shard(path, 3).unlink()
    named = damaged_line(path).split(": ", 1)[1].split("; ")
    assert named[0].startswith("__0_2.distcp is cut short (100 of ")
    assert named[1:3] == ["__0_3.distcp is missing", "__0_10.distcp is missing"]


def test_many_damaged_name_the_first_and_count_the_rest(tmp_path):
    path = several_shards(tmp_path, 6)
    for i in range(6):
        shard(path, i).unlink()
    line = damaged_line(path)
    assert "__0_3.distcp is missing; and 2 more damaged shards; use an earlier" in line
    assert "__0_4" not in line


def test_a_shard_of_the_right_length_with_damaged_bytes_is_named(tmp_path):
    path = several_shards(tmp_path, 3)
    size = shard(path, 1).stat().st_size
    shard(path, 1).write_bytes(b"x" * size)
    assert ": __0_1.distcp does not load (" in damaged_line(path)


def test_a_torn_metadata_file_is_named(tmp_path):
    path = several_shards(tmp_path, 2)
    (path / ".metadata").write_bytes((path / ".metadata").read_bytes()[:50])
    assert ": .metadata does not load (" in damaged_line(path)


def test_consolidate_names_the_damaged_shard(tmp_path, capfd):
    path = several_shards(tmp_path, 3)
    cut_short(shard(path, 1))
    with pytest.raises(SystemExit) as exit_:
        consolidate_main([str(path), str(tmp_path / "one.ckpt")])
    err = capfd.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert exit_.value.code == 2 and "Traceback" not in err and len(errors) == 1
    assert "damaged sharded checkpoint: __0_1.distcp is cut short" in errors[0]

"""A sharded checkpoint (trainer=fsdp's directory) that lost a file or was cut short:
eval.py and `python -m litforge.consolidate` say so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from litforge.checkpointing.checkpoint_file import sharded_weights
from litforge.checkpointing.consolidate import main as consolidate_main
from litforge.errors import ConfigError


def sharded(tmp_path: Path) -> Path:
    """A real distributed checkpoint, written by this one process (no process group)."""
    path = tmp_path / "step-00000004.ckpt"
    dcp.save({"state_dict": {"w": torch.arange(4096.0), "b": torch.ones(3)}}, checkpoint_id=path)
    torch.save({"global_step": 4}, path / "meta.pt")
    return path


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

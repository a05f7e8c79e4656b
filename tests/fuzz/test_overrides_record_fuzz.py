"""The run's record of its overrides (`.hydra/overrides.yaml`), read by eval.py for its
hint: damaged, it gives the right command or none, never a traceback, never code run."""

from __future__ import annotations

import shlex
from pathlib import Path

from litforge.checkpointing.trained_with import eval_command
from tests.fuzz.damage import damaged_copies

RECORD = b"- experiment=gpt_char\n- data.block_size=32\n- trainer.max_steps=5\n"
HOSTILE = [
    b"!!python/object/apply:os.system ['touch pwned']\n",
    b"[" * 5000 + b"]" * 5000 + b"\n",  # nesting deep enough to exhaust a recursive parser
    b"- " + b"x" * 200_000 + b"\n",  # larger than any record
    b"\xff\xfe not text\n",
]


def test_a_damaged_overrides_record_gives_the_command_or_none(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "step-1.ckpt"
    record = tmp_path / "run" / ".hydra" / "overrides.yaml"
    record.parent.mkdir(parents=True)
    record.write_bytes(RECORD)
    expected = eval_command(str(ckpt))
    assert expected == shlex.join(
        ["python", "eval.py", "experiment=gpt_char", "data.block_size=32",
         "trainer.max_steps=5", f"ckpt_path={ckpt}"]
    )  # fmt: skip
    damages = [*damaged_copies(RECORD, seed=7, count=60), *(("hostile", h) for h in HOSTILE)]
    for label, data in damages:
        if data is None:
            record.unlink(missing_ok=True)
        else:
            record.write_bytes(data)
        got = eval_command(str(ckpt))
        assert got is None or (got.startswith("python eval.py ") and str(ckpt) in got), label
    assert not Path("pwned").exists()  # the hostile tag would have run `touch pwned` here

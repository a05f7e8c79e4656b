"""Where a run starts, as a table: config values and what the store lists -> the start and
its console line (litforge.checkpointing.start.decide, no files, milliseconds)."""

from __future__ import annotations

import pytest

from litforge.checkpointing.start import Asked, Start, decide

STORE = "s3://bucket/runs/demo"
NEWEST = "step-00000006.ckpt"
OWN_WHAT = f"the checkpoint to resume, {STORE}/{NEWEST} (resume=never starts over),"
NONE_SAVED = " (checkpoint=none: nothing new is saved)"
NEVER = f"resume=never: starting fresh; checkpoints go to {STORE}"
FINETUNE = ("finetune", "pre.ckpt", True)
HOTSTART = ("hotstart", "pre.ckpt", False)
CONTINUE = ("continue", "pre.ckpt", True)
FROM = "restore.from=pre.ckpt"


def asked(store: str | None = STORE, **values) -> Asked:
    return Asked(store, **values)


CASES = {
    # a store, nothing asked
    "fresh store": (asked(), None, Start("fresh", message=f"no checkpoint in {STORE}: starting fresh")),
    "own newest": (asked(), NEWEST, Start("own", NEWEST, OWN_WHAT, message=f"resuming from {STORE}/{NEWEST}")),
    # ckpt_path beats everything, and sets the store's checkpoints aside
    "explicit": (asked(ckpt_path="x.ckpt"), None, Start("explicit", "x.ckpt", "ckpt_path=x.ckpt", True, "resuming from ckpt_path=x.ckpt")),
    "explicit over own": (asked(ckpt_path="x.ckpt"), NEWEST, Start("explicit", "x.ckpt", "ckpt_path=x.ckpt", True, "resuming from ckpt_path=x.ckpt")),
    "explicit over never": (asked(ckpt_path="x.ckpt", resume="never"), NEWEST, Start("explicit", "x.ckpt", "ckpt_path=x.ckpt", True, "resuming from ckpt_path=x.ckpt")),
    # resume=never sets the store's aside; restore.from still applies
    "never": (asked(resume="never"), None, Start("fresh", set_aside=True, message=NEVER)),
    "never over own": (asked(resume="never"), NEWEST, Start("fresh", set_aside=True, message=NEVER)),
    "never, finetune": (asked(resume="never", restore=FINETUNE), NEWEST, Start("restore-weights", "pre.ckpt", FROM, True, NEVER)),
    "never, continue": (asked(resume="never", restore=CONTINUE), None, Start("restore-continue", "pre.ckpt", FROM, True, NEVER)),
    # the run's own checkpoint beats restore.from: a restored run goes on from its own
    "own over finetune": (asked(restore=FINETUNE), NEWEST, Start("own", NEWEST, OWN_WHAT, message=f"resuming from {STORE}/{NEWEST}")),
    "own over continue": (asked(restore=CONTINUE), NEWEST, Start("own", NEWEST, OWN_WHAT, message=f"resuming from {STORE}/{NEWEST}")),
    # nothing of its own: restore.from, said by restore's own line only
    "finetune": (asked(restore=FINETUNE), None, Start("restore-weights", "pre.ckpt", FROM)),
    "hotstart": (asked(restore=HOTSTART), None, Start("restore-weights", "pre.ckpt", FROM)),
    "continue": (asked(restore=CONTINUE), None, Start("restore-continue", "pre.ckpt", FROM)),
    # checkpoint=none: no store lists anything, sets anything aside or is announced
    "none": (asked(None), None, Start("fresh")),
    "none, never": (asked(None, resume="never"), None, Start("fresh")),
    "none, explicit": (asked(None, ckpt_path="x.ckpt"), None, Start("explicit", "x.ckpt", "ckpt_path=x.ckpt", message=f"resuming from ckpt_path=x.ckpt{NONE_SAVED}")),
    "none, explicit, never": (asked(None, ckpt_path="x.ckpt", resume="never"), None, Start("explicit", "x.ckpt", "ckpt_path=x.ckpt", message=f"resuming from ckpt_path=x.ckpt{NONE_SAVED}")),
    "none, finetune": (asked(None, restore=FINETUNE), None, Start("restore-weights", "pre.ckpt", FROM)),
    "none, hotstart, never": (asked(None, resume="never", restore=HOTSTART), None, Start("restore-weights", "pre.ckpt", FROM)),
    "none, continue": (asked(None, restore=CONTINUE), None, Start("restore-continue", "pre.ckpt", FROM, message=f"resuming from {FROM}{NONE_SAVED}")),
}  # fmt: skip


@pytest.mark.parametrize(("given", "newest", "start"), CASES.values(), ids=CASES.keys())
def test_the_start_and_its_line(given: Asked, newest: str | None, start: Start):
    assert decide(given, newest) == start


@pytest.mark.parametrize(
    ("given", "reads"),
    [
        (asked(), True),
        (asked(restore=CONTINUE), True),  # its own checkpoints first
        (asked(ckpt_path="x.ckpt"), False),
        (asked(resume="never"), False),
        (asked(None), False),
    ],
)
def test_the_store_is_probed_only_where_its_listing_can_decide(given: Asked, reads: bool):
    assert given.reads_store == reads
    # and where it is not probed, what it would list changes nothing
    if not reads:
        assert decide(given, NEWEST) == decide(given, None)


def test_the_saver_records_the_name_only_of_its_own_checkpoint():
    assert decide(asked(), NEWEST).own_name == NEWEST
    assert decide(asked(ckpt_path=NEWEST), None).own_name is None
    assert decide(asked(restore=CONTINUE), None).own_name is None

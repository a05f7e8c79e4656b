"""Where a run starts, decided as data: a pure function of a few config values and what the
run's checkpoint store lists. Nothing here reads a file or a store; `configure.setup`
probes the store first and carries the decision out after (fetch, check, set aside, say).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["fresh", "own", "explicit", "restore-continue", "restore-weights"]
NOTHING_SAVED = " (checkpoint=none: nothing new is saved)"


@dataclass(frozen=True)
class Asked:
    """What the config says about the start.

    `store` is the run's checkpoint location (credentials cut), None under checkpoint=none;
    `restore` is restore's (mode, from, strict) as `restore.requested` checked it, or None.
    """

    store: str | None
    ckpt_path: str | None = None
    resume: str = "auto"  # auto | never
    restore: tuple[str, str, bool] | None = None

    @property
    def reads_store(self) -> bool:
        """Whether the store's own newest checkpoint can decide the start: there is a
        store, no ckpt_path, and resume is not never (the only start that probes it)."""
        return self.store is not None and not self.ckpt_path and self.resume != "never"


@dataclass(frozen=True)
class Start:
    """The decision: which checkpoint the run starts from and what is said about it.

    `source`: ckpt_path, the store's newest checkpoint's name, or restore.from (None when
    fresh). `what`: how a check of that checkpoint names it in an error. `set_aside`: the
    checkpoints already in the store move aside (a new lineage). `message`: the console line.
    """

    kind: Kind
    source: str | None = None
    what: str | None = None
    set_aside: bool = False
    message: str | None = None

    @property
    def own_name(self) -> str | None:
        """The store's checkpoint the run resumes, by name (None for any other start)."""
        return self.source if self.kind == "own" else None


def decide(asked: Asked, newest: str | None = None) -> Start:
    """The start of a run whose store's newest complete checkpoint is `newest` (None: the
    store lists none, or there is no store). The first that applies wins:

    1. ckpt_path: resume from that file (a store's checkpoints are set aside);
    2. resume=never: the store's checkpoints are set aside, the run starts without them
       (restore.from still applies, below);
    3. the store's own newest complete checkpoint: resume from it;
    4. restore.from: resume its whole state (restore.mode=continue), or load its weights
       (finetune, hotstart);
    5. fresh.

    checkpoint=none is the same with no store: nothing is listed, set aside or announced as
    a store's, and a resume says that nothing new is saved.
    """
    store = asked.store
    if asked.ckpt_path:
        key = f"ckpt_path={asked.ckpt_path}"
        return Start("explicit", asked.ckpt_path, key, bool(store), _resuming(key, store))
    if store is None:
        return _restored(asked, set_aside=False, message=None)
    if asked.resume == "never":
        said = f"resume=never: starting fresh; checkpoints go to {store}"
        return _restored(asked, set_aside=True, message=said)
    if newest:
        what = own_what(store, newest)
        return Start("own", newest, what, message=f"resuming from {store}/{newest}")
    fresh = None if asked.restore else f"no checkpoint in {store}: starting fresh"
    return _restored(asked, set_aside=False, message=fresh)


def own_what(store: str, name: str) -> str:
    """How a check of the store's own newest checkpoint names it in an error."""
    return f"the checkpoint to resume, {store}/{name} (resume=never starts over),"


def _restored(asked: Asked, set_aside: bool, message: str | None) -> Start:
    """restore.from's start when it is set (steps 4 and 5 of `decide`), else fresh."""
    if asked.restore is None:
        return Start("fresh", set_aside=set_aside, message=message)
    mode, source, _ = asked.restore
    what = f"restore.from={source}"
    if mode != "continue":
        return Start("restore-weights", source, what, set_aside, message)
    if asked.store is None:
        message = _resuming(what, None)
    return Start("restore-continue", source, what, set_aside, message)


def _resuming(key: str, store: str | None) -> str:
    """The line of a resume from a checkpoint named by `key` (ckpt_path=, restore.from=)."""
    return f"resuming from {key}" + ("" if store else NOTHING_SAVED)

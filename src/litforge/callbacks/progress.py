"""The progress bar, chosen for where the output goes (conf/callbacks/progress_bar.yaml)."""

from __future__ import annotations

from lightning.pytorch.callbacks import ProgressBar, RichProgressBar

from litforge import console


def progress_bar() -> ProgressBar:
    """Rich bars in a terminal a person watches; none under CI, pipes and log files.

    Carriage-return bars garble logs; there, EpochLog's plain lines are the progress.
    `NoProgressBar` still counts as the Trainer's bar, so Lightning adds no tqdm bar of its
    own, and unlike a disabled tqdm bar it has no per-batch hooks.
    """
    return RichProgressBar() if console.interactive() else NoProgressBar()


class NoProgressBar(ProgressBar):
    """The Trainer's progress bar, showing nothing: no hooks beyond Lightning's base class."""

    @property
    def is_enabled(self) -> bool:
        return False

    def disable(self) -> None:
        pass

    def enable(self) -> None:
        pass

"""The progress bar, chosen for where the output goes (conf/callbacks/progress_bar.yaml)."""

from __future__ import annotations

from lightning.pytorch.callbacks import ProgressBar, RichProgressBar, TQDMProgressBar

from litforge import console


def progress_bar() -> ProgressBar:
    """Rich bars in a terminal a person watches; none under CI, pipes and log files.

    Carriage-return bars garble logs; there, EpochLog's plain lines are the progress. A
    disabled bar (refresh_rate=0) still counts as the Trainer's bar, so Lightning adds no
    tqdm bar of its own.
    """
    return RichProgressBar() if console.interactive() else TQDMProgressBar(refresh_rate=0)

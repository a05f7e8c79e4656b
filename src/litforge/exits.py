"""How a litforge process ends: a user error as one line and its exit status, the run
directory a failed start leaves removed, and upstream warnings that say nothing about the run.

Foundation: any capability may use it (the recipes, sweeps, the toolkit's commands).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shutil
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from litforge.errors import LitforgeError

# Set while a sweeper runs a trial: errors go back to it instead of ending the process.
_ERRORS_TO_CALLER = contextvars.ContextVar("litforge_errors_to_caller", default=False)


@contextlib.contextmanager
def errors_to_caller() -> Iterator[None]:
    """Within this block `report_user_errors` re-raises (a sweep decides what a trial's
    error means for the trials after it)."""
    token = _ERRORS_TO_CALLER.set(True)
    try:
        yield
    finally:
        _ERRORS_TO_CALLER.reset(token)


_EXPLANATION = "litforge_explanation"


def explain_with(err: BaseException, explanation: LitforgeError) -> None:
    """Attach a callback's reading of a failure it saw (the out-of-memory block) to `err`:
    `explained()` raises it in the error's place, and a traceback shows it as a note."""
    setattr(err, _EXPLANATION, explanation)
    err.add_note(str(explanation))


@contextlib.contextmanager
def explained() -> Iterator[None]:
    """Around a recipe (the entry point's job): a failure with an explanation attached
    (`explain_with`) ends as that explanation, a LitforgeError with its own exit status."""
    try:
        yield
    except BaseException as err:
        explanation = getattr(err, _EXPLANATION, None)
        if not isinstance(explanation, LitforgeError):
            raise
        raise explanation from err


@contextlib.contextmanager
def report_user_errors(run_dir: Path | None = None) -> Iterator[None]:
    """Turn a `LitforgeError` into one `error: ...` line and its exit status; a run
    directory the failed start left with nothing in it but its start-up records goes too.

    HYDRA_FULL_ERROR=1 (Hydra's own switch) lets the full traceback through.
    """
    try:
        yield
    except LitforgeError as err:
        if run_dir is not None and _rank_zero():
            _remove_if_unused(run_dir)
        if user_wants_tracebacks() or _ERRORS_TO_CALLER.get():
            raise
        from litforge.job_return import record_error  # here: `import litforge.cli` stays light

        record_error(err)  # for the launcher of this job's process, if one asked
        print(f"error: {err}", file=sys.stderr)
        _exit(err.exit_code)


# Set beside HYDRA_FULL_ERROR when litforge, not the user, set it (litforge.hydra_start:
# while Hydra starts a run); inherited by processes started meanwhile, which drop both.
PRE_JOB_MARK = "LITFORGE_PRE_JOB"


def user_wants_tracebacks() -> bool:
    """HYDRA_FULL_ERROR=1 as the user's own choice."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1" and PRE_JOB_MARK not in os.environ


def _exit(code: int) -> None:
    """sys.exit, unless one of our I/O threads (named `litforge-...`, e.g. an upload to a
    store that hangs) is still busy: Python would join it at exit and the process would
    outlive a preemption's grace period. What such a thread writes is staged locally first
    (with its marker), so leaving it behind loses nothing."""
    busy = [t for t in threading.enumerate() if t.name.startswith("litforge-") and not t.daemon]
    if not busy:
        sys.exit(code)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def remove_unused_run_dir() -> None:
    """Rank 0: delete this Hydra run's directory if it holds only start-up records (a
    process about to leave through os._exit, which skips report_user_errors)."""
    from hydra.core.hydra_config import HydraConfig

    if _rank_zero() and HydraConfig.initialized():
        _remove_if_unused(Path(HydraConfig.get().runtime.output_dir))


def _rank_zero() -> bool:
    """Whether this is rank 0: Lightning's record once it is loaded (a strategy updates it),
    else the launcher's environment as Lightning reads it. Not imported here: a sweep's
    own process (hydra/launcher=gpus) never needs lightning, whose import takes seconds."""
    lightning = sys.modules.get("lightning.fabric.utilities.rank_zero")
    if lightning is not None:
        return lightning.rank_zero_only.rank == 0
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if key in os.environ:
            return int(os.environ[key]) == 0
    return True


# What Hydra and run_record write before anything is trained.
_START_RECORDS = {"config.yaml", "run.json", "overrides.yaml", "hydra.yaml", "hparams.yaml"}


def _remove_if_unused(run_dir: Path) -> None:
    """Delete run_dir if Hydra made it (.hydra/) and every file in it is a start-up record,
    a log or hidden bookkeeping (a lock): checkpoints, metrics or anything else keep it."""
    if not (run_dir / ".hydra").is_dir():
        return
    files = [p for p in run_dir.rglob("*") if not p.is_dir()]
    if all(p.name in _START_RECORDS or p.suffix == ".log" or p.name.startswith(".") for p in files):
        shutil.rmtree(run_dir, ignore_errors=True)


class _DropLightningTips(logging.Filter):
    """Lightning 2.6 advertises its cloud products ("💡 Tip: ...") on every run, and says it
    skips its default model summary when the config (conf/callbacks) brings one."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(
            ("💡 Tip:", "Trainer already configured with model summary callbacks")
        )


class _DropTorchaoImportNotes(logging.Filter):
    """torchao 0.18, whenever it is imported (transformers and peft import it where it is
    installed): a warning for each kernel its wheel ships that a CPU build of torch cannot
    load (cutlass sm90a, mxfp8), and torch 2.13's deprecation note on each Enum it
    registers with pytree; none concerns float8 training or the run."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Failed to load ")
            or "is an Enum subclass and is now natively supported by torch.compile" in message
        )


def silence_known_upstream_warnings() -> None:
    """Messages every run would print that say nothing about the user's run."""
    # torch 2.13 + lightning 2.6.6, on every fit; Lightning's to fix.
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
    )
    # torchdata 0.11's StatefulDataLoader calls torch.set_vital, deprecated in torch 2.13.
    warnings.filterwarnings("ignore", message=r"'set_vital' is deprecated", category=UserWarning)
    # peft 0.21 asks transformers 5 for the old name of activation checkpointing.
    warnings.filterwarnings(
        "ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning
    )
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_DropLightningTips())
    for name in ("torchao", "torch.utils._pytree"):
        found = logging.getLogger(name)
        if not any(isinstance(f, _DropTorchaoImportNotes) for f in found.filters):
            found.addFilter(_DropTorchaoImportNotes())

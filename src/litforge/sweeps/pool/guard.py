"""A trial's guard: the process the sweep starts for each trial, which starts the trial and
makes sure nothing of it outlives the sweep.

    python guard.py LIFELINE_FD KILL_AFTER_S -- TRIAL COMMAND...

The guard leads a process group of its own (the sweep starts it in a new session): the
trial, its DDP ranks and its dataloader workers are all in it. It
- passes SIGTERM/SIGUSR1/SIGINT on to the trial (which checkpoints and stops);
- reads the lifeline, a pipe only the sweep holds open for writing: end of file means the
  sweep is gone (kill -9 included; a pipe, unlike PR_SET_PDEATHSIG, does not depend on
  which of the sweep's threads started it), and the trial gets SIGTERM as above;
- KILL_AFTER_S after the first such signal, kills the whole group (SIGKILL), whatever the
  trial is doing: ignoring SIGTERM, blocked in native code;
- once the trial's process has ended, gives what it left in the group (ranks, workers)
  KILL_AFTER_S to end, then kills them;
- ends with the trial's own exit status.
The trial gets PR_SET_PDEATHSIG=SIGKILL from this single-threaded process, so a guard
killed on its own takes its trial along.

Run as a script, standard library only: it starts in milliseconds and imports nothing of
the sweep's (not even litforge), so it holds almost no memory beside a trial.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time

PASSED_ON = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 0.1


def group_members() -> list[int]:
    """The other live processes of this process's group, by /proc (Linux)."""
    mine, me, found = os.getpgrp(), os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # after the command's ")": state, ppid, pgrp
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == mine and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return found


class Guard:
    def __init__(self, lifeline: int, kill_after_s: float, command: list[str]) -> None:
        self.lifeline, self.kill_after_s = lifeline, kill_after_s
        self.deadline: float | None = None  # when the group is killed
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4

        guard = os.getpid()

        def die_with_guard() -> None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != guard:  # the guard died before prctl took effect
                os.kill(os.getpid(), signal.SIGKILL)

        self.trial: subprocess.Popen | None = None
        self.pending: int | None = None  # a signal that came before the trial started
        for sig in PASSED_ON:
            signal.signal(sig, self._pass_on)
        self.trial = subprocess.Popen(command, preexec_fn=die_with_guard)
        if self.pending is not None:
            self.trial.send_signal(self.pending)

    def _pass_on(self, signum: int, frame: object = None) -> None:
        if self.trial is None:
            self.pending = signum
        elif self.trial.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.trial.send_signal(signum)
        if self.deadline is None:
            self.deadline = time.monotonic() + self.kill_after_s

    def _sweep_gone(self) -> bool:
        ready, _, _ = select.select([self.lifeline], [], [], POLL_S)
        return bool(ready) and os.read(self.lifeline, 1) == b""

    def run(self) -> int:
        while self.trial.poll() is None:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                os.killpg(0, signal.SIGKILL)  # the guard too: the sweep sees SIGKILL
            if self.lifeline >= 0 and self._sweep_gone():
                os.close(self.lifeline)
                self.lifeline = -1
                self._pass_on(signal.SIGTERM)
            elif self.lifeline < 0:
                time.sleep(POLL_S)
        # What the trial left in the group (DDP ranks, workers): until the deadline when
        # stopping, else kill_after_s to end by themselves.
        until = self.deadline or time.monotonic() + self.kill_after_s
        while group_members() and time.monotonic() < until:
            time.sleep(POLL_S)
        for pid in group_members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return self.trial.returncode


def main(argv: list[str]) -> None:
    lifeline, kill_after_s, sep, *command = argv
    assert sep == "--" and command, "usage: guard.py LIFELINE_FD KILL_AFTER_S -- COMMAND..."
    code = Guard(int(lifeline), float(kill_after_s), command).run()
    sys.stdout.flush()
    if code < 0:  # died by a signal: the same, so the sweep reads what happened to it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])

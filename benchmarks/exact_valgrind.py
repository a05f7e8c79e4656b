"""Instructions counted by valgrind's callgrind in a window of a Python process.

callgrind's client requests (valgrind/callgrind.h) are C macros: a tiny shared library
built here with the system's C compiler exposes them to Python through ctypes. Outside
valgrind they do nothing. A process run by `count()` starts uninstrumented
(`--instr-atstart=no`, several times faster than instrumented), calls `lf_start()` and
`lf_zero()` where its window opens and `lf_dump(b"label")` where it closes (a dump also
zeroes the counters: the next window starts there); `count()` reads the instructions of
each labelled dump.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

VALGRIND = "valgrind"
SOURCE = """
#include <valgrind/callgrind.h>
void lf_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void lf_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void lf_zero(void) { CALLGRIND_ZERO_STATS; }
void lf_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""
LIBRARY_ENV = "LITFORGE_CALLGRIND_CLIENT"


def missing() -> str | None:
    """Why counting cannot run here (no valgrind, no C compiler, no callgrind.h), or None."""
    if shutil.which(VALGRIND) is None:
        return "valgrind is not installed (Debian/Ubuntu: apt-get install valgrind)"
    if shutil.which("cc") is None:
        return "no C compiler (cc) to build the callgrind client"
    if not Path("/usr/include/valgrind/callgrind.h").exists():
        return "no /usr/include/valgrind/callgrind.h (the valgrind package installs it)"
    return None


def build(directory: Path) -> Path:
    """Compile the client library into `directory`; returns its path."""
    source, library = directory / "callgrind_client.c", directory / "callgrind_client.so"
    source.write_text(SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@cache
def client() -> ctypes.CDLL:
    """The client library a counting process was given (by `count()`, in its environment)."""
    return ctypes.CDLL(os.environ[LIBRARY_ENV])


def count(argv: list[str], library: Path, env: dict[str, str] | None = None) -> dict[str, int]:
    """label -> instructions of each window `python argv...` dumped under callgrind."""
    with tempfile.TemporaryDirectory(prefix="litforge-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            VALGRIND, "--tool=callgrind", "--instr-atstart=no", "--dump-line=no",
            "--compress-strings=no", f"--callgrind-out-file={out}",
            sys.executable, *argv,
        ]  # fmt: skip
        child_env = {**os.environ, **(env or {}), LIBRARY_ENV: str(library)}
        done = subprocess.run(command, env=child_env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed under callgrind:\n{done.stderr[-3000:]}")
        found = windows(Path(tmp))
    if not found:
        raise RuntimeError(f"{' '.join(argv)}: no window dump (its marks were never reached)")
    return found


def windows(directory: Path) -> dict[str, int]:
    """label -> instruction count of each dump a client request asked for."""
    found = {}
    for dump in sorted(directory.glob("callgrind.out*")):
        text = dump.read_text(errors="replace")
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.MULTILINE)
        total = re.search(r"^summary:\s*(\d+)", text, re.MULTILINE)
        if label and total:
            found[label.group(1)] = int(total.group(1))
    return found

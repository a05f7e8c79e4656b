"""The counting machinery of `make bench-exact` (benchmarks/exact*.py): call counts and
callgrind's window counts are deterministic, and the window leaves start-up out."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_call_count_is_deterministic_and_charges_the_innermost_label():
    from benchmarks.exact_calls import REST, CallCount

    def counted() -> dict[str, int]:
        counter = CallCount()
        inner = counter.label(lambda: [abs(i) for i in range(3)], "inner")
        outer = counter.label(lambda: (len("ab"), inner()), "outer")
        counter.start()
        for _ in range(5):
            outer()
            max(1, 2)
        counter.stop()
        return counter.calls

    first = counted()
    assert first == counted()  # the same work, the same counts
    # Each round: outer's lambda and len in "outer"; inner's lambda, its list
    # comprehension and 3 abs in "inner" (range is a type: no C function call); max in
    # REST; the labelling wrappers nowhere.
    assert first["outer"] == 5 * 2 and first["inner"] == 5 * 5
    assert first[REST] >= 5


_VALGRIND_WHY = None
try:
    from benchmarks.exact_valgrind import missing as _missing

    _VALGRIND_WHY = _missing()
except ImportError as _err:  # pragma: no cover - the module is plain stdlib
    _VALGRIND_WHY = str(_err)


@pytest.mark.skipif(_VALGRIND_WHY is not None, reason=str(_VALGRIND_WHY))
def test_callgrind_window_count_repeats_exactly_and_leaves_start_up_out(tmp_path):
    from benchmarks.exact_valgrind import build, count

    script = tmp_path / "windows.py"
    script.write_text(
        "from benchmarks.exact_valgrind import client\n"
        "import json, decimal  # start-up work no window may hold\n"
        "cg = client()\n"
        "def work():\n"
        "    return sum(i * i for i in range(1000))\n"
        "cg.lf_start(); cg.lf_zero()\n"
        "for _ in range(20):\n"
        "    work()\n"
        "cg.lf_dump(b'twenty')\n"
        "for _ in range(40):\n"
        "    work()\n"
        "cg.lf_dump(b'forty'); cg.lf_stop()\n"
    )
    library = build(tmp_path)
    env = {"PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    first, second = (count([str(script)], library, env) for _ in range(2))
    assert first == second  # counted, not timed: the same in every process
    # A window holds its own loop only: twice the loop, twice the count.
    assert 1.99 < first["forty"] / first["twenty"] < 2.01, first

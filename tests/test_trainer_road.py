"""The road from the composed config to `lightning.Trainer`: which litforge modules the
precision and `trainer.devices` pass through, and the one spelling of DDP and FSDP.

The road is traced (`sys.setprofile`) while the training recipe runs from the composed
config until `build_trainer` has returned. A litforge module is on a value's road when
one of its functions

* is called with the value as an argument, or with a mapping that holds it under its key
  (the trainer node, its plain copy, the Trainer's arguments), or
* reads the key from the config node that holds it (counted for the innermost litforge
  function on the stack: `cfg.trainer.items()` in build, `cfg.precision.get(...)`).

Three rules of counting. The config check (`check_config`: litforge's table of rules walked
over every key of the config, which hands nothing on) is one stop, whatever modules it
spans. So is the value's schema, its one home (the kit, `litforge.settings` with its
rules, and the group's `*settings` module): code reads the typed settings through it. The callbacks' `check_before_fit` look at the built Trainer (Lightning's own
`trainer.precision`), after the road, and are left out.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, OmegaConf, dictconfig

from litforge import steps
from litforge.launch import processes
from litforge.launch.ddp import BoundedDDPStrategy
from litforge.launch.fsdp import ShardedStrategy
from litforge.training import train
from tests.helpers import ROOT

CONFIG_CHECK = "config check"
SCHEMA = "its schema"
MOST_STOPS = 4
# The road each value takes, as this test finds it; a module that starts reading one of
# them on the way shows up here.
ROADS = {
    "precision": {CONFIG_CHECK, SCHEMA, "litforge.build", "litforge.precision"},
    "trainer.devices": {CONFIG_CHECK, "litforge.build", "litforge.launch.processes"},
}
# The config's keys for each value: `precision=` sets trainer.precision and the float32
# matmul precision that the Trainer's matmuls run with (conf/precision/*.yaml).
KEYS = {
    "precision": ("trainer.precision", "precision.matmul"),
    "trainer.devices": ("trainer.devices",),
}
# A device count no other key of these configs holds (2 and 3 are taken), so a function that
# receives it received trainer.devices.
DEVICES = 7
CPU_DDP = ["trainer=ddp", f"trainer.devices={DEVICES}", "trainer.accelerator=cpu",
           "processes.oversubscribe=true"]  # fmt: skip
CASES = {
    "bf16-mixed": (["precision=bf16-mixed", "trainer=cpu"], "precision"),
    "ddp": (CPU_DDP, "trainer.devices"),
    "ddp, 16-mixed": ([*CPU_DDP, "precision=16-mixed"], "precision"),
    "ddp under torchrun": (CPU_DDP, "trainer.devices"),  # the launcher's world decides too
}
# A rank of `torchrun --nproc_per_node=DEVICES` as its agent starts it (no process group yet).
TORCHRUN = {"TORCHELASTIC_RUN_ID": "road", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999",
            "WORLD_SIZE": str(DEVICES), "LOCAL_WORLD_SIZE": str(DEVICES), "RANK": "0",
            "LOCAL_RANK": "0", "GROUP_RANK": "0"}  # fmt: skip
NAMES = re.compile(r"\b(BoundedDDPStrategy|ShardedStrategy)\b")  # litforge's strategies
_READS = {"_get_node", "_get_impl"}  # every read of a DictConfig's key passes one of them


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if name == "litforge" or name.startswith("litforge.") else None


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an array, a tensor: not the value
        return False


def _holds(mapping: Any, key: str, value: Any) -> bool:
    if not isinstance(mapping, (dict, DictConfig)):
        return False
    try:
        return key in mapping and _same(mapping[key], value)
    except Exception:  # an unresolvable interpolation elsewhere in the node
        return False


def _arguments(frame: FrameType) -> Iterator[Any]:
    """The arguments of a call that has just begun, those of *args and **kwargs one by one."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    local = frame.f_locals
    yield from (local[name] for name in names if name in local)
    if code.co_flags & inspect.CO_VARARGS:
        yield from local.get(code.co_varnames[count], ())
        count += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        yield from local.get(code.co_varnames[count], {}).values()


class Road:
    """Which litforge modules touch the watched (node, key) pairs while `run()` runs."""

    def __init__(self, watched: dict[str, tuple[DictConfig, str]]) -> None:
        self.watched = {label: (node, key, node[key]) for label, (node, key) in watched.items()}
        self.stops: dict[str, set[str]] = {label: set() for label in watched}
        self._gate: FrameType | None = None  # check_config's frame while it runs
        self._after: FrameType | None = None  # a check_before_fit's frame while it runs

    def trace(self, run: Callable[[], Any]) -> Any:
        sys.setprofile(self._hook)
        try:
            return run()
        finally:
            sys.setprofile(None)

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "return":
            if frame is self._gate:
                self._gate = None
            if frame is self._after:
                self._after = None
            return
        if event != "call" or self._after is not None:
            return
        code = frame.f_code
        if code.co_name == "check_before_fit":
            self._after = frame
            return
        if code.co_filename == dictconfig.__file__:
            if code.co_name in _READS:
                self._read(frame)
            return
        module = _module(frame)
        if module is None:
            return
        if module == "litforge.validation.checks" and code.co_name == "check_config":
            self._gate = self._gate or frame
        arguments = list(_arguments(frame))
        for label, (_, key, value) in self.watched.items():
            if any(_same(a, value) or _holds(a, key, value) for a in arguments):
                self._stop(label, module)

    def _read(self, frame: FrameType) -> None:
        local = frame.f_locals
        for label, (node, key, _) in self.watched.items():
            if local.get("self") is node and local.get("key") == key:
                caller = frame.f_back
                while caller is not None and _module(caller) is None:
                    caller = caller.f_back
                if caller is not None:
                    self._stop(label, _module(caller) or "")

    def _stop(self, label: str, module: str) -> None:
        if self._gate is not None:
            module = CONFIG_CHECK
        elif module.startswith("litforge.settings") or module.endswith("settings"):
            module = SCHEMA
        self.stops[label].add(module)


class BuiltTrainer(Exception):
    """Ends the recipe where the road ends: build_trainer has returned."""


def _road(make_cfg, monkeypatch, overrides: list[str], value: str) -> tuple[set[str], Any]:
    """The stops of `value` in the training recipe up to the built Trainer, and the Trainer."""
    monkeypatch.setenv(processes.LAUNCHER_PID, "0")  # what prepare sets for DDP, restored
    cfg = make_cfg(*overrides)
    watched = {key: (OmegaConf.select(cfg, key.rsplit(".", 1)[0]), key.rsplit(".", 1)[1])
               for key in KEYS[value]}  # fmt: skip
    leaves = list(_leaves(OmegaConf.to_container(cfg, resolve=True)))
    for key, (node, name) in watched.items():  # one key holds it: a match is this value
        assert [k for k, v in leaves if _same(v, node[name])] == [key]
    setups, setup_checkpoints, build_trainer = [], steps.setup_checkpoints, steps.build_trainer

    def setup(cfg: DictConfig) -> Any:
        setups.append(setup_checkpoints(cfg))  # released below: the run ends unfinished
        return setups[-1]

    def built(*args: Any, **kwargs: Any) -> None:
        raise BuiltTrainer(build_trainer(*args, **kwargs))

    monkeypatch.setattr(steps, "setup_checkpoints", setup)
    monkeypatch.setattr(steps, "build_trainer", built)
    road = Road(watched)
    try:
        with pytest.raises(BuiltTrainer) as ended:
            road.trace(lambda: train(cfg))
    finally:
        for checkpoints in setups:
            checkpoints.release()
    return set().union(*road.stops.values()), ended.value.args[0]


def _leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


@pytest.fixture(autouse=True)
def _restore_matmul_precision():
    yield
    torch.set_float32_matmul_precision("highest")  # process-wide: leave torch's default


@pytest.mark.parametrize("case", list(CASES))
def test_a_value_reaches_the_trainer_through_at_most_four_modules(make_cfg, monkeypatch, case):
    overrides, value = CASES[case]
    for name, setting in (TORCHRUN if "torchrun" in case else {}).items():
        monkeypatch.setenv(name, setting)
    stops, trainer = _road(make_cfg, monkeypatch, overrides, value)
    assert stops == ROADS[value]
    assert len(stops) <= MOST_STOPS
    assert trainer.num_devices == (DEVICES if "trainer=ddp" in overrides else 1)


def test_the_trace_sees_a_module_that_takes_a_value_off_the_road(make_cfg, monkeypatch):
    # build_module's compile step handing the precision to the console: the console shows
    # up, so a road that leaves a module out is one the value does not take.
    from litforge import compiling, console

    real = compiling.options

    def options(cfg: DictConfig) -> Any:
        console.info("compiling for %s", cfg.trainer.precision)
        return real(cfg)

    monkeypatch.setattr(compiling, "options", options)
    stops, _ = _road(make_cfg, monkeypatch, ["precision=bf16-mixed", "trainer=cpu"], "precision")
    assert stops == ROADS["precision"] | {"litforge.console"}


# -- one spelling of DDP and FSDP --------------------------------------------------------------
@pytest.mark.parametrize(("option", "name"), [("ddp", "ddp"), ("fsdp", "fsdp")])
def test_trainer_options_set_the_strategy_names_lightning_users_write(make_cfg, option, name):
    assert make_cfg(f"trainer={option}").trainer.strategy == name


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        (["trainer=ddp"], BoundedDDPStrategy),
        (["trainer=cpu", "trainer.strategy=ddp"], BoundedDDPStrategy),
        (["trainer=cpu", "trainer.strategy=auto"], BoundedDDPStrategy),  # several processes
        (["trainer=fsdp"], ShardedStrategy),
        (["trainer=cpu", "trainer.strategy=fsdp"], ShardedStrategy),
        # The spelling of earlier versions, and any strategy object of a user's: as given.
        (["trainer=cpu", "trainer.strategy={_target_:litforge.launch.ddp.BoundedDDPStrategy,"
          "rendezvous_timeout_s:7}"], BoundedDDPStrategy),
        (["trainer=cpu", "trainer.strategy={_target_:litforge.launch.fsdp.ShardedStrategy,"
          "rendezvous_timeout_s:7}"], ShardedStrategy),
    ],
)  # fmt: skip
def test_each_spelling_builds_the_bounded_strategy(make_cfg, monkeypatch, overrides, kind):
    monkeypatch.setenv(processes.LAUNCHER_PID, "0")
    cfg = make_cfg(*overrides, "trainer.accelerator=cpu", "trainer.devices=2",
                   "processes.rendezvous_timeout_s=7", "processes.collective_timeout_s=9")  # fmt: skip
    trainer = steps.build_trainer(cfg)
    assert type(trainer.strategy) is kind
    assert trainer.strategy.rendezvous_timeout_s == 7.0
    if "_target_" not in overrides[-1]:  # the processes settings reach the named strategies
        assert trainer.strategy._timeout.total_seconds() == 9.0


def test_one_module_maps_strategy_names_to_litforge_strategies():
    # Kept honest by a grep: the classes are built in launch.processes only, and no config
    # of litforge's names them (a user's `_target_` still may).
    built = re.compile(rf"{NAMES.pattern}\(")
    src = ROOT / "src" / "litforge"
    places = sorted(
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if any(built.search(line) for line in path.read_text().splitlines()
               if not line.lstrip().startswith(("class ", "#")))
    )  # fmt: skip
    assert places == ["launch/processes.py"]
    named = [p.name for p in (src / "conf").rglob("*.yaml") if NAMES.search(p.read_text())]
    assert named == []

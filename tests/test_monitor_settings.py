"""The monitor callbacks' and the gpus launcher's keys have one home, their schemas: the YAML
Hydra composes is generated from them, the classes take their defaults from them, and a bad
value is refused by the schema's rule in the words the class has always used."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
import yaml
from hydra import compose
from omegaconf import OmegaConf

from litforge.commands.config import CONF
from litforge.errors import ConfigError
from litforge.launch.settings import ProcessSettings
from litforge.monitors.memory_budget import MemoryBudget
from litforge.monitors.memory_budget_settings import MemoryBudgetSettings
from litforge.monitors.numerics.callback import NumericsWatch
from litforge.monitors.numerics.settings import NumericsSettings
from litforge.monitors.throughput import ThroughputMFU
from litforge.monitors.throughput_settings import ThroughputSettings
from litforge.settings import SCHEMAS, all_schemas
from litforge.sweeps.pool import settings as pool_settings
from litforge.sweeps.pool.devices import device_ids
from litforge.sweeps.pool.settings import LauncherSettings
from litforge.validation import schema
from litforge.validation.config_search import hydra_configs, project_conf_dir

CALLBACKS = [
    (NumericsSettings, NumericsWatch),
    (MemoryBudgetSettings, MemoryBudget),
    (ThroughputSettings, ThroughputMFU),
]


def _signature_defaults(cls: type) -> dict[str, object]:
    params = inspect.signature(cls.__init__).parameters.values()
    return {p.name: p.default for p in params if p.name != "self"}


@pytest.mark.parametrize(("settings", "callback"), CALLBACKS)
def test_a_callbacks_defaults_are_its_schemas(settings, callback):
    expected = settings.defaults()
    if settings is MemoryBudgetSettings:
        # The schema's is `${processes.oversubscribe}`; outside Hydra, that key's default.
        assert expected["oversubscribe"] == "${processes.oversubscribe}"
        expected["oversubscribe"] = ProcessSettings.oversubscribe
    assert _signature_defaults(callback) == expected


@pytest.mark.parametrize(("settings", "callback"), CALLBACKS)
def test_the_composed_node_is_the_schemas_and_builds_its_class(make_cfg, settings, callback):
    cfg = make_cfg()
    node = OmegaConf.select(cfg, settings.GROUP)
    assert OmegaConf.to_container(node) == {"_target_": settings.TARGET, **settings.defaults()}
    assert f"{callback.__module__}.{callback.__qualname__}" == settings.TARGET
    typed = settings.of(cfg)  # resolved: oversubscribe is processes.oversubscribe's value
    built = callback(**{k: v for k, v in OmegaConf.to_container(node, resolve=True).items()
                        if k != "_target_"})  # fmt: skip
    for name in settings.defaults():
        assert getattr(built, name) == getattr(typed, name), name


def test_the_launchers_composed_node_is_the_schemas():
    with hydra_configs(project_conf_dir(None)):
        cfg = compose("train", overrides=["hydra/launcher=gpus"], return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher)
    assert launcher == {"_target_": LauncherSettings.TARGET, **LauncherSettings.defaults()}
    assert pool_settings.check(launcher) == LauncherSettings()


def test_the_generated_files_nest_their_keys_under_the_node_with_the_target_first():
    numerics = yaml.safe_load((CONF / NumericsSettings.GROUP_FILE).read_text())
    assert list(numerics) == ["numerics"]
    assert list(numerics["numerics"])[0] == "_target_"
    gpus_text = (CONF / LauncherSettings.GROUP_FILE).read_text()
    gpus = yaml.safe_load(gpus_text)
    assert list(gpus)[0] == "_target_" and "hydra" not in gpus and "launcher" not in gpus
    # the header's lines as written: the command line keeps its indent and stays one line
    line = "#   python train.py -m hparams_search=digits_optuna hydra/launcher=gpus"
    assert f"\n{line} hydra.sweeper.n_jobs=4\n" in gpus_text


def test_a_target_nodes_keys_are_checked_by_its_class_not_before_the_build():
    """validation's table leaves them to the class (its own words; a user's `_target_` there
    takes other arguments): `callbacks.*` stays the rule that matches them."""
    for settings in (*(s for s, _ in CALLBACKS), LauncherSettings):
        assert settings.rules() == {}
        assert not any(name.startswith(settings.GROUP) for name in schema.RULES)
    assert schema.rule_for("callbacks.numerics.policy") is schema.RULES["callbacks.*"]


@pytest.mark.parametrize(
    ("settings", "values", "line"),
    [
        (NumericsSettings, {"policy": "x"},
         "callbacks.numerics.policy='x' is not one of: warn, skip, stop"),
        (NumericsSettings, {"min_loss_scale": float("nan")},
         "callbacks.numerics.min_loss_scale=nan must be a number >= 0 (0: never)"),
        (ThroughputSettings, {"available_flops": float("inf")},
         "callbacks.throughput.available_flops=inf must be a number of FLOP/s per device >= 0 "
         "(e.g. 989.4e12), 0 to log no MFU, or null to use litforge.planning.hardware's table"),
        (ThroughputSettings, {"data_wait_warn": 0},
         "callbacks.throughput.data_wait_warn=0 must be a share of step time in (0, 1] "
         "(1: never warn)"),
        (MemoryBudgetSettings, {"oversubscribe": "yes"},
         "callbacks.memory_budget.oversubscribe='yes' is invalid; must be true or false"),
        (LauncherSettings, {"kill_after_s": 0},
         "hydra.launcher.kill_after_s=0: give the seconds a trial has to stop after SIGTERM "
         "before it is killed, a number above 0 and at most 3600 (default 60)"),
        (LauncherSettings, {"margin": 1},
         "hydra.launcher.margin=1: give the share of usable memory kept free, a number from 0 "
         "to below 1 (default 0.1)"),
        (LauncherSettings, {"lease_dir": " "},
         "hydra.launcher.lease_dir= : give a directory on this machine's local disk for the "
         "device leases (default /tmp/litforge-devices)"),
    ],
)  # fmt: skip
def test_a_refused_value_is_the_fields_own_line(settings, values, line):
    with pytest.raises(ConfigError) as caught:
        settings.checked(**values)
    assert str(caught.value) == line


@pytest.mark.parametrize(("settings", "callback"), CALLBACKS)
def test_the_class_and_the_schema_refuse_in_the_same_words(make_cfg, settings, callback):
    name, bad = {NumericsSettings: ("max_skipped_in_row", 0),
                 MemoryBudgetSettings: ("compare_after_steps", 0),
                 ThroughputSettings: ("window_size", 1)}[settings]  # fmt: skip
    with pytest.raises(ConfigError) as by_class:
        callback(**{name: bad})
    with pytest.raises(ConfigError) as by_schema:
        settings.of(make_cfg(f"{settings.GROUP}.{name}={bad}"))
    assert str(by_class.value) == str(by_schema.value)
    assert str(by_class.value).startswith(f"{settings.GROUP}.{name}={bad} ")


def test_the_launcher_takes_its_typed_settings_from_the_schema():
    given = pool_settings.check({"_target_": LauncherSettings.TARGET, "devices": [1, 0],
                                 "per_device": "auto", "share_devices": True})  # fmt: skip
    assert isinstance(given, LauncherSettings)
    assert (given.devices, given.per_device, given.share_devices) == ([1, 0], "auto", True)
    assert given.kill_after_s == LauncherSettings.kill_after_s == 60.0  # the rest: defaults
    assert device_ids(OmegaConf.create({"d": [0, 1]}).d) == [0, 1]  # Hydra's ListConfig
    assert device_ids(3) == [3] and device_ids("auto") is None and device_ids(None) is None
    for bad in ([], [-1], [0, 0], [True], "all", 1.5):
        with pytest.raises(ConfigError, match=r"^hydra\.launcher\.devices=.*: give auto"):
            device_ids(bad)


def test_a_plain_hydra_apps_launcher_node_is_the_schemas():
    # Stored only where litforge.cli is not loaded (this test process has it): a subprocess.
    code = (
        "import json, hydra_plugins.litforge_gpus.gpus_launcher\n"
        "from hydra.core.config_store import ConfigStore\n"
        "from omegaconf import OmegaConf\n"
        "node = ConfigStore.instance().repo['hydra']['launcher']['gpus.yaml'].node\n"
        "print(json.dumps(OmegaConf.to_container(node)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {
        "_target_": LauncherSettings.TARGET,
        **LauncherSettings.defaults(),
    }


def test_a_deleted_capabilitys_schema_is_left_out_and_any_other_missing_module_is_an_error(
    monkeypatch, tmp_path
):
    import litforge.settings as kit

    known = len(all_schemas())
    # A capability deleted whole: the package above the schema's module is what is missing.
    monkeypatch.setattr(kit, "SCHEMAS", (*SCHEMAS, "litforge.no_such_capability.x.settings:X"))
    assert len(kit.all_schemas()) == known
    # A schema whose module needs a package that is not installed: that is a bug, said.
    (tmp_path / "capability_x").mkdir()
    (tmp_path / "capability_x" / "settings.py").write_text("import no_such_dependency_x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kit, "SCHEMAS", (*SCHEMAS, "capability_x.settings:X"))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_x"):
        kit.all_schemas()


def test_the_four_schemas_are_registered():
    names = {s.__name__ for s in all_schemas()}
    assert {"NumericsSettings", "MemoryBudgetSettings", "ThroughputSettings",
            "LauncherSettings"} <= names  # fmt: skip

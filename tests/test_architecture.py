"""The package map: capabilities in layers that import only downwards, each optional one
removable (its code, its configs, its extra's packages) with the core recipe still working."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from litforge import build
from litforge.training import train
from tests.helpers import ROOT

SRC = ROOT / "src" / "litforge"
BARE = ["checkpoint=none", "callbacks=none", "logger=none", "debug=fdr", "trainer=cpu"]

# Each top-level unit of the package and its layer: a unit imports only lower layers
# (docs/architecture.md draws the same map).
LAYERS = {
    0: {
        "settings",  # the schema kit and its rules: every layer declares its keys with it
        "run_settings",
        "compiling_settings",
        "precision_settings",
        "evaluation_settings",
        "hooks",  # the extension points, declared
        "errors",
        "exits",
        "hydra_start",
        "console",
        "paths",
        "extras",
        "precision",
        "run_record",
        "job_return",
        "optim",
        "datamodule_facts",
        "compiling",
        "compile_cache",  # attaches as a callback; finds the saver by what it holds
        "conf",
        "callbacks",
        "models",
        "data",
        "hf",
    },  # fmt: skip
    1: {"validation", "scaffold"},
    2: {"launch"},
    3: {"checkpointing"},
    4: {"tracking"},
    5: {"planning", "precision_checks"},
    6: {"monitors"},
    7: {"sweeps"},
    # The recipes and commands: the only units that may import any capability.
    9: {
        "build",
        "cli",
        "commands",
        "training",
        "steps",
        "evaluation",
        "budget",
        "plan",
        "matmul_bench",
        "consolidate",
        "export",
        "grid_check",
        "__init__",
    },  # fmt: skip
}
LAYER_OF = {unit: layer for layer, units in LAYERS.items() for unit in units}
# Within these layers units may import each other (Python refuses a cycle at import).
OPEN_LAYERS = {0, 9}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports() -> list[tuple[str, str, str]]:
    """(importing file, its unit, imported unit) for every litforge import in the package."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if "project_files" in path.parts:  # what new-project writes into a project, not ours
            continue
        rel = path.relative_to(SRC.parent).with_suffix("")
        unit = _unit(".".join(rel.parts).removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "litforge":
                    names = [f"litforge.{a.name}" for a in node.names]
                elif node.module.startswith("litforge."):
                    names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("litforge.")]
            # `from litforge import NAME` of a public name (not a module): the package's API
            units = [_unit(n) if _unit(n) in LAYER_OF else "__init__" for n in names]
            found += [(str(rel), unit, u) for u in units if u != unit]
    return found


def test_every_unit_has_a_layer():
    units = {p.stem if p.is_file() else p.name for p in SRC.iterdir()}
    units = {u for u in units if not u.startswith(("__pycache__", "."))} - {"py"}
    assert units - set(LAYER_OF) == set(), "add each new module or subpackage to LAYERS"
    assert set(LAYER_OF) - units == set(), "LAYERS names a unit that no longer exists"


def test_no_two_units_import_each_other():
    """Open layers may import sideways, but not in a circle (a lazy import hides one)."""
    pairs = {(unit, target) for _, unit, target in _imports()}
    assert sorted(p for p in pairs if p[::-1] in pairs and p[0] < p[1]) == []


def test_capabilities_import_only_downwards():
    upward = [
        f"{file} imports litforge.{target} (layer {LAYER_OF[target]} >= its own {LAYER_OF[unit]})"
        for file, unit, target in _imports()
        if LAYER_OF[target] > LAYER_OF[unit]
        or (LAYER_OF[target] == LAYER_OF[unit] and LAYER_OF[unit] not in OPEN_LAYERS)
    ]
    assert upward == []


def _loaded_by(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`."""
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(json.loads(result.stdout))


def test_importing_litforge_loads_nothing_else():
    loaded = _loaded_by("import litforge")
    assert [m for m in loaded if m.startswith("litforge")] == ["litforge"]
    assert "torch" not in loaded and "lightning" not in loaded


def test_the_optuna_sweeper_of_a_plain_hydra_app_loads_no_lightning():
    # A plain Hydra app's sweep imported Lightning through the run lock (~8 s a start).
    loaded = _loaded_by(
        "import hydra_plugins.litforge_optuna.optuna_sweeper, litforge.sweeps.sweep"
    )
    assert "lightning" not in loaded and "torch" not in loaded


def test_the_entry_point_module_loads_no_capability_until_a_run():
    ours = {m for m in _loaded_by("import litforge.cli") if m.startswith("litforge")}
    # `compose()` in a notebook: the foundation, the config search and the resolvers only.
    assert ours <= {"litforge", "litforge.cli", "litforge.conf", "litforge.errors",
                    "litforge.exits", "litforge.hydra_start", "litforge.paths",
                    "litforge.validation",
                    "litforge.validation.config_search",
                    "litforge.validation.monitor_mode"}  # fmt: skip


def test_public_names_resolve():
    import litforge

    for name in litforge.__all__:
        assert getattr(litforge, name) is not None, name


def test_the_checkpointing_packages_names_are_its_functions_in_any_import_order():
    # The package's names load lazily; a submodule of the same name would replace one.
    import litforge.checkpointing.configure
    from litforge import checkpointing

    for name in checkpointing.__all__:
        assert callable(getattr(checkpointing, name)), name
    assert checkpointing.setup is litforge.checkpointing.configure.setup


def test_one_place_asks_whether_a_run_is_fsdp():
    askers = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if '== "fsdp"' in p.read_text() or "== STRATEGY_NAME" in p.read_text()
    ]
    assert askers == ["launch/fsdp.py"]


def test_no_module_is_over_300_lines():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines())) > 300}  # fmt: skip
    assert long == {}


def test_bare_run_attaches_no_litforge_callback_but_the_model_record(make_cfg):
    cfg = make_cfg(*BARE)
    trainer = build.build_trainer(cfg)
    ours = [type(c).__qualname__ for c in trainer.callbacks if "litforge" in type(c).__module__]
    # Not a capability: whatever writes a checkpoint (a user's ModelCheckpoint too) must
    # write one that loads with weights_only=True.
    assert ours == ["ModelRecord"]
    assert trainer.loggers == []
    metrics = train(cfg)
    assert metrics["best_checkpoint"] is None  # nothing saved: the weights in memory tested
    assert 0.0 <= metrics["test/acc"] <= 1.0


def test_default_run_gets_every_callback_from_config(make_cfg):
    trainer = build.build_trainer(make_cfg("trainer=cpu"))
    names = {type(c).__name__ for c in trainer.callbacks}
    # callbacks/default.yaml's, and the one logger/csv.yaml brings along.
    assert {"LearningRateMonitor", "EpochLog", "CsvLogPosition", "ThroughputMFU"} <= names


def _run(copy: Path, *overrides: str, preload: str = "") -> subprocess.CompletedProcess:
    """`python train.py *overrides` in `copy` (its src/ first on the path), after `preload`."""
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "CI": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    code = f"{preload}\nimport runpy, sys\nsys.argv = ['train.py', *sys.argv[1:]]\nrunpy.run_path('train.py', run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", code, *overrides],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "project"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("src", "conf"):
        shutil.copytree(ROOT / part, copy / part, ignore=ignore)
    shutil.copy(ROOT / "train.py", copy / "train.py")
    return copy


# The optional capabilities: code and the configs that name it.
OPTIONAL = {
    "sweeps": [
        "src/litforge/sweeps",
        "src/hydra_plugins/litforge_optuna",
        "src/litforge/conf/hydra/sweeper/optuna.yaml",
        "src/litforge/conf/callbacks/optuna_pruning.yaml",
        "conf/hparams_search",
    ],
    "monitors": [
        "src/litforge/monitors",
        "src/litforge/conf/callbacks/memory_budget.yaml",
        "src/litforge/conf/callbacks/numerics.yaml",
        "src/litforge/conf/callbacks/throughput.yaml",
        "src/litforge/conf/callbacks/out_of_memory.yaml",
        "src/litforge/conf/callbacks/step_breakdown.yaml",
        "src/litforge/conf/debug/profile.yaml",
    ],
    "planning": ["src/litforge/planning"],
    "precision checks": ["src/litforge/precision_checks", "conf/experiment/precision_ab.yaml"],
    "tracking beyond csv": [
        "src/litforge/tracking/wandb_logger.py",
        "src/litforge/tracking/mlflow_logger.py",
        "src/litforge/tracking/tensorboard_logger.py",
        "src/litforge/conf/logger/wandb.yaml",
        "src/litforge/conf/logger/mlflow.yaml",
        "src/litforge/conf/logger/tensorboard.yaml",
        "src/litforge/conf/logger/many.yaml",
    ],
    "scaffold": ["src/litforge/scaffold"],
}
# callbacks/default.yaml without the monitors
NO_MONITOR_CALLBACKS = (
    "callbacks=[lr_monitor,epoch_log,progress_bar,model_summary,final_validation,auto_microbatch]"
)


def test_the_core_recipe_runs_with_every_optional_capability_deleted(tmp_path):
    copy = _copy(tmp_path)
    for paths in OPTIONAL.values():
        for path in paths:
            target = copy / path
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)  # a project made without the part lacks it
    run_dir = tmp_path / "run"
    result = _run(
        copy, "debug=fdr", "trainer=cpu", NO_MONITOR_CALLBACKS, f"hydra.run.dir={run_dir}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 1
    assert (run_dir / "checkpoints").is_dir()  # checkpointing, validation, launch: the core


# What each extra installs, as the process that lacks them sees it: an import that fails.
BLOCK_EXTRAS = """
import importlib.abc, sys
BLOCKED = ("wandb", "mlflow", "tensorboard", "tensorboardX", "optuna", "cmaes", "s3fs",
           "copier", "submitit", "hydra_plugins.hydra_joblib_launcher",
           "hydra_plugins.hydra_submitit_launcher")
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
"""


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ([], None),  # the default run: csv, checkpoints, the monitors
        (["logger=wandb"], "the wandb package is not installed: pip install 'litforge[wandb]'"),
        (["logger=tensorboard"], "pip install 'litforge[tensorboard]'"),
        (["checkpoint.dir=s3://bucket/runs"], "the s3fs package is not installed: pip install 'litforge[s3]'"),
    ],
)  # fmt: skip
def test_without_the_extras_a_run_works_or_names_the_extra(tmp_path, overrides, error):
    run_dir = tmp_path / "run"
    result = _run(
        ROOT,
        "debug=fdr",
        "trainer=cpu",
        *overrides,
        f"hydra.run.dir={run_dir}",
        preload=BLOCK_EXTRAS,
    )
    if error is None:
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((run_dir / "metrics.json").read_text())["global_step"] == 1
    else:
        assert result.returncode != 0
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("error: ") and error in last, result.stderr[-2000:]


def test_a_hugging_face_model_without_the_extra_names_it(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    result = _run(
        ROOT, "experiment=hf_finetune", f"model.net.pretrained={model_dir}",
        f"data.path={ROOT / 'README.md'}", "trainer=cpu", f"hydra.run.dir={tmp_path / 'run'}",
        # Not the import blocker: torchmetrics imports transformers whenever its metadata
        # is installed (Lightning-AI/torchmetrics#2242), so the package goes missing only
        # after Lightning is imported, where litforge's model imports it.
        preload="import lightning, sys; sys.modules.update(transformers=None, peft=None)",
    )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last == "error: the transformers package is not installed: pip install 'litforge[hf]'", (
        result.stderr[-2000:]
    )


def test_in_a_project_that_pins_litforge_the_missing_extra_goes_into_its_pin(tmp_path, monkeypatch):
    from litforge.extras import missing_extra

    missing = ModuleNotFoundError("No module named 'transformers'", name="transformers")
    monkeypatch.chdir(tmp_path)
    assert missing_extra(missing).endswith("pip install 'litforge[hf]'")  # no project here
    (tmp_path / "Makefile").write_text("train:\n")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "my_exp"\ndependencies = ["litforge[sweeps,scaffold]==0.1.0"]\n'
    )
    # A plain `pip install 'litforge[hf]'` there could fetch another litforge than the pin.
    assert missing_extra(missing) == (
        "the transformers package is not installed: add hf to litforge[...] in "
        "pyproject.toml, then make train installs it"
    )
    monkeypatch.chdir(ROOT)  # litforge's own pyproject names litforge[...] in its extras
    assert missing_extra(missing).endswith("pip install 'litforge[hf]'")

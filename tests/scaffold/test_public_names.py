"""A generated project names only litforge's public API (docs/architecture.md, "Public
API"), so moving the pin cannot break its own files; and every experiment it ships composes
(and, in the slow tier, trains a step), full and --minimal."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

import litforge
import litforge.hf
import litforge.steps
from tests.helpers import ROOT
from tests.scaffold.conftest import git, run_in

LIBRARY_CONF = ROOT / "src" / "litforge" / "conf"
# Config targets documented as public beside litforge.__all__ (the model configs' defaults).
PUBLIC_TARGETS = {
    "litforge.optim.adamw",
    "litforge.optim.warmup_cosine",
    # what trainer.strategy=ddp|fsdp runs; no YAML of litforge's names them any more
    "litforge.launch.ddp.BoundedDDPStrategy",
    "litforge.launch.fsdp.ShardedStrategy",
}
TARGET = re.compile(r"_target_:\s*['\"]?(litforge\.[\w.]+)")
RESOLVER = re.compile(r"\$\{(litforge\.\w+):")


def _public() -> set[str]:
    names = {f"litforge.{n}" for n in litforge.__all__}
    names |= {f"litforge.hf.{n}" for n in litforge.hf.__all__}
    names |= {"litforge.steps"} | {f"litforge.steps.{n}" for n in litforge.steps.__all__}
    for path in LIBRARY_CONF.rglob("*.yaml"):
        names |= set(TARGET.findall(path.read_text()))
    return names | PUBLIC_TARGETS


def _python_names(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "litforge":
                found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "litforge"}
    return found - {"litforge"}


def _named(project: Path) -> tuple[dict[str, set[str]], set[str]]:
    """{file: the litforge names it imports or targets}, and the resolvers it uses."""
    named: dict[str, set[str]] = {}
    resolvers: set[str] = set()
    for rel in filter(None, git("ls-files", cwd=project).split("\n")):
        path = project / rel
        if path.suffix == ".py":
            names = _python_names(path.read_text())
        elif path.suffix == ".ipynb":
            cells = json.loads(path.read_text())["cells"]
            code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
            lines = [line for line in code.splitlines() if not line.startswith(("%", "!"))]
            names = _python_names("\n".join(lines))
        elif path.suffix in (".yaml", ".yml"):
            text = path.read_text()
            names = set(TARGET.findall(text))
            resolvers |= set(RESOLVER.findall(text))
        else:
            continue
        if names:
            named[rel] = names
    return named, resolvers


@pytest.mark.parametrize("which", ["generated", "generated_minimal"])
def test_a_project_names_only_public_litforge(which, request):
    project = request.getfixturevalue(which)
    named, resolvers = _named(project)
    public = _public()
    private = {rel: sorted(n - public) for rel, n in named.items() if n - public}
    assert private == {}
    assert named, "the scan found no litforge name at all"
    # Resolvers: each is one litforge registers (`${litforge.NAME:...}` are public).
    import litforge.cli  # noqa: F401 - registers litforge.sweep_mode
    import litforge.launch.launchers  # noqa: F401 - litforge.stamp
    import litforge.precision_checks.training_ab.experiment  # noqa: F401 - litforge.precision_ab

    assert all(OmegaConf.has_resolver(r) for r in resolvers), resolvers


def test_the_scan_sees_a_private_name(tmp_path):
    source = "from litforge.hf.lora import BASE_KEY\nfrom litforge import train\n"
    assert _python_names(source) - _public() == {"litforge.hf.lora.BASE_KEY"}


@pytest.mark.parametrize("which", ["generated", "generated_minimal"])
def test_no_generated_file_holds_an_absolute_path(which, request):
    project = request.getfixturevalue(which)
    # The answers file is copier's record of where the template is (what an update reads).
    rels = [r for r in git("ls-files", cwd=project).split("\n") if r and r != ".copier-answers.yml"]
    roots = {str(ROOT), str(ROOT.resolve()), str(project), str(Path.home())}
    for rel in rels:
        path = project / rel
        if path.suffix in (".whl",):
            continue
        text = path.read_text(errors="replace")
        assert not [r for r in roots if r in text], rel


# Every option of every group of the project's conf/ composes, and every `_target_` it
# holds (outside Hydra's own settings) imports: a file shipped without its module fails.
COMPOSE_EVERY_OPTION = """
import json
from pathlib import Path
from hydra.utils import get_object
from omegaconf import OmegaConf
from litforge import compose

def targets(node):
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            yield node["_target_"]
        for value in node.values():
            yield from targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from targets(value)

experiments, broken = [], {}
for group in sorted(p for p in Path("conf").iterdir() if p.is_dir()):
    for path in sorted(group.glob("*.yaml")):
        choice = f"{group.name}={path.stem}"
        try:
            cfg = OmegaConf.to_container(compose([choice], "/tmp/unused", conf_dir="conf"))
            for target in targets({k: v for k, v in cfg.items() if k != "hydra"}):
                get_object(target)
        except Exception as err:
            broken[choice] = (str(err).strip().splitlines() or [type(err).__name__])[0]
        else:
            experiments += [path.stem] if group.name == "experiment" else []
print(json.dumps({"experiments": experiments, "broken": broken}))
"""


@pytest.mark.parametrize(
    ("which", "expected"),
    [
        ("generated", {"digits_cnn", "gpt_char", "gpt_char_finetune", "hf_finetune", "precision_ab"}),
        ("generated_minimal", {"digits_cnn"}),
    ],
)  # fmt: skip
def test_every_option_of_a_project_composes_and_its_targets_import(which, expected, request):
    project = request.getfixturevalue(which)
    result = run_in(project, "-c", COMPOSE_EVERY_OPTION)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["broken"] == {}
    assert set(found["experiments"]) == expected


def _train(project: Path, run_dir: Path, *overrides: str) -> None:
    result = run_in(project, "train.py", "debug=fdr", "trainer=cpu", *overrides,
                    f"hydra.run.dir={run_dir}", f"hydra.sweep.dir={run_dir}")  # fmt: skip
    assert result.returncode == 0, (overrides, result.stderr[-3000:])


@pytest.mark.slow
def test_every_experiment_of_a_full_project_trains_a_step(generated, tmp_path, llama, text_file):
    _train(generated, tmp_path / "digits", "experiment=digits_cnn")
    _train(generated, tmp_path / "gpt", "experiment=gpt_char")
    (ckpt,) = (tmp_path / "gpt" / "checkpoints").glob("*.ckpt")
    _train(generated, tmp_path / "finetune", "experiment=gpt_char_finetune", f"restore.from={ckpt}")
    _train(generated, tmp_path / "hf", "experiment=hf_finetune", f"model.net.pretrained={llama}",
           f"data.path={text_file}")  # fmt: skip
    _train(
        generated,
        tmp_path / "ab",
        "experiment=precision_ab",
        "trainer.max_steps=2",
        "precision_ab.smooth_steps=1",
    )
    assert (tmp_path / "ab" / "precision_ab.md").is_file()


@pytest.mark.slow
def test_the_minimal_projects_experiment_trains_a_step(generated_minimal, tmp_path):
    _train(generated_minimal, tmp_path / "digits", "experiment=digits_cnn")

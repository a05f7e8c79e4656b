"""litforge's Optuna sweeper as a drop-in for hydra-optuna-sweeper: cases ported from its
tests and examples, run on a plain Hydra app (tests/sweeps/plain_app) and on the search
space directly. Each names the upstream behaviour it holds to."""

from __future__ import annotations

import csv
import logging
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from omegaconf import OmegaConf

from litforge.errors import ConfigError
from litforge.sweeps import samplers, search_space

APP = Path(__file__).with_name("plain_app")


def sweep_app(sweep_dir: Path, *overrides: str, **env_vars: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"} | env_vars
    return subprocess.run(
        [sys.executable, "app.py", *[o for o in overrides if o.startswith("-")],
         f"hydra.sweep.dir={sweep_dir}", *[o for o in overrides if not o.startswith("-")]],
        cwd=APP, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def rows(sweep_dir: Path) -> list[dict[str, str]]:
    with (sweep_dir / "trials.csv").open() as f:
        return list(csv.DictReader(f))


def test_plugin_discovery_imports_neither_torch_nor_lightning():
    code = (
        "import sys\n"
        "from hydra.core.plugins import Plugins\n"
        "from hydra.plugins.launcher import Launcher\n"
        "from hydra.plugins.search_path_plugin import SearchPathPlugin\n"
        "from hydra.plugins.sweeper import Sweeper\n"
        "for kind in (Sweeper, Launcher, SearchPathPlugin):\n"
        "    Plugins.instance().discover(kind)\n"
        "print(sorted(m for m in ('torch', 'lightning', 'optuna') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr[-2000:]


@pytest.mark.slow  # CI time; covered in make test by an lht sweep config: test_upstream_config
def test_a_plain_app_with_an_lht_style_config_sweeps(tmp_path):
    """No optimized_metric, a numpy float returned, `sampler: {_target_: TPESampler,
    seed, n_startup_trials}` and `study_name: null`, `hydra/sweeper=litforge_optuna`."""
    result = sweep_app(tmp_path / "s")
    assert result.returncode == 0, result.stderr[-3000:]
    found = rows(tmp_path / "s")
    assert len(found) == 6 and all(r["state"] == "COMPLETE" for r in found)
    assert (tmp_path / "s" / "best.yaml").is_file()
    again = sweep_app(tmp_path / "again")  # the same single-worker command: the same trials
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["x"] for r in rows(tmp_path / "again")] == [r["x"] for r in found]


# Slow for CI time; make test covers it by workers sharing a study: test_optuna_sweep's two workers started together.
@pytest.mark.slow
def test_workers_with_different_seeds_draw_different_trials(tmp_path):
    """Worker A (seed 1) with one trial done and worker B (seed 2) starting drew the same
    trial when the seed was `seed + trials in the study`."""
    random = ["hydra.sweeper.sampler=random", "hydra.sweeper.n_trials=1"]
    shared = tmp_path / "a"
    assert sweep_app(shared, *random, "hydra.sweeper.seed=1").returncode == 0
    assert sweep_app(shared, "hydra.sweeper.sampler=random", "hydra.sweeper.n_trials=2",
                     "hydra.sweeper.seed=1").returncode == 0  # fmt: skip
    assert sweep_app(tmp_path / "b", *random, "hydra.sweeper.seed=2").returncode == 0
    xs = [r["x"] for r in rows(shared)] + [r["x"] for r in rows(tmp_path / "b")]
    assert len(set(xs)) == 3, xs


def test_a_grid_sweep_that_completes_its_grid_is_done(tmp_path):
    result = sweep_app(
        tmp_path / "s", "hydra.sweeper.sampler=grid", "hydra.sweeper.n_trials=10",
        "x=choice(0.0, 0.5, 1.0)",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert sorted((r["x"], r["y"]) for r in rows(tmp_path / "s")) == [
        (x, y) for x in ("0.0", "0.5", "1.0") for y in ("0", "1")
    ]


def test_a_seeded_grid_runs_each_point_once():
    """Optuna's grid numbers its points in an order shuffled by its seed: with a seed per
    trial, trial 2 of `seed=choice(1, 2, 3)` ran a point again."""
    drawn = []
    for seed in (42, 7):  # two workers' seeds: one order, so one numbering
        study = optuna.create_study()
        build = samplers.sampler_factory(
            {"sampler": "grid", "seed": seed}, lambda: {"s": [1, 2, 3]}, "st"
        )
        for number in range(3):
            study.sampler = build(number)
            trial = study.ask()
            trial._suggest("s", optuna.distributions.CategoricalDistribution([1, 2, 3]))
            study.tell(trial, 1.0)
        drawn.append([t.params["s"] for t in study.trials])
    assert sorted(drawn[0]) == [1, 2, 3] and drawn[0] == drawn[1], drawn


def test_nothing_to_search_runs_n_trials_repeats_of_the_config(tmp_path):
    """hydra-optuna-sweeper's test_launch_jobs: with no parameter to sample, n_trials runs of
    the fixed config (a study of repeats), and one line that says so."""
    result = sweep_app(tmp_path / "s", "~hydra.sweeper.params", "hydra.sweeper.n_trials=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [(r["state"], r["value"]) for r in rows(tmp_path / "s")] == [("COMPLETE", "1.25")] * 3
    said = [line for line in (result.stdout + result.stderr).splitlines() if "nothing is" in line]
    assert len(said) == 1 and "runs n_trials=3 repeats of the same config" in said[0], said


def test_custom_search_space_adds_its_parameters(tmp_path):
    extend = "hydra.sweeper.custom_search_space=app.extend"
    result = sweep_app(tmp_path / "s", extend, "hydra.sweeper.n_trials=3")
    assert result.returncode == 0, result.stderr[-3000:]
    zs = [float(r["z"]) for r in rows(tmp_path / "s")]
    assert len(zs) == 3 and all(0.0 <= z <= 1.0 for z in zs)


# Slow for CI time; make test covers it by failed trials and their notes: test_optuna_sweep.
@pytest.mark.slow
def test_max_failure_rate_stops_the_sweep_and_all_failing_is_an_error(tmp_path):
    stopped = sweep_app(tmp_path / "a", "mode=fail", "hydra.sweeper.max_failure_rate=0.0")
    assert stopped.returncode != 0
    assert len(rows(tmp_path / "a")) == 1  # the first failed batch ends it
    assert "max_failure_rate=0.0" in stopped.stderr.strip().splitlines()[-1]
    every = sweep_app(tmp_path / "b", "mode=fail", "hydra.sweeper.n_trials=2")
    assert every.returncode == 1 and len(rows(tmp_path / "b")) == 2
    assert "no trial of study app finished" in every.stderr.strip().splitlines()[-1]


def test_an_unknown_sweeper_key_is_one_line(tmp_path):
    result = sweep_app(tmp_path / "s", "+hydra.sweeper.max_failure_rat=0.5")
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and last.startswith("error: hydra.sweeper.max_failure_rat ")
    assert "did you mean max_failure_rate?" in last


def test_switching_sampler_drops_the_other_samplers_options(caplog):
    settings = {"sampler": "random", "sampler_options": {"n_startup_trials": 5}, "seed": 3}
    with caplog.at_level(logging.WARNING, logger="litforge"):
        build = samplers.sampler_factory(settings, dict, "s")
    assert isinstance(build(0), optuna.samplers.RandomSampler)
    assert "RandomSampler takes no n_startup_trials; dropped" in caplog.text


CONFIG = OmegaConf.create({"model": {"net": {"hidden": 128}}, "x": 1, "y": "a"})


def test_a_key_pinned_on_the_command_line_leaves_the_search():
    params = {"model.net.hidden": "choice(64, 128, 256)", "x": "interval(0, 1)"}
    space = search_space.parse(params, ["model.net.hidden=64"], CONFIG)
    assert list(space.distributions) == ["x"] and space.pinned == ["model.net.hidden"]
    assert "model.net.hidden=64" in space.overrides({"x": 0.5})


def test_the_pinned_key_is_named_when_the_stored_study_searched_it(caplog):
    study = optuna.create_study(study_name="s")
    study.add_trial(optuna.trial.create_trial(
        params={"model.net.hidden": 128}, value=1.0,
        distributions={"model.net.hidden": optuna.distributions.CategoricalDistribution([64, 128])},
    ))  # fmt: skip
    space = search_space.parse({"model.net.hidden": "choice(64, 128)", "x": "interval(0, 1)"},
                               ["model.net.hidden=64"], CONFIG)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="litforge"):
        search_space.say_pinned(space, study)
    assert "model.net.hidden is fixed on the command line: it leaves the search" in caplog.text


def test_shuffle_searches_the_space_as_written():
    space = search_space.parse({"x": "shuffle(range(1,3))", "y": "shuffle(choice(a, b, c))"}, [],
                               CONFIG)  # fmt: skip
    assert space.distributions["x"] == optuna.distributions.IntDistribution(1, 2)
    assert space.distributions["y"] == optuna.distributions.CategoricalDistribution(["a", "b", "c"])


def test_range_says_it_leaves_out_its_stop(caplog):
    with caplog.at_level(logging.WARNING, logger="litforge"):
        space = search_space.parse({"x": "range(1, 4)"}, [], CONFIG)
    assert space.distributions["x"] == optuna.distributions.IntDistribution(1, 3)
    assert "searches 1..3" in caplog.text and "searched 1..4" in caplog.text


def test_a_sampler_object_that_refuses_its_arguments_is_one_line():
    node = {"_target_": "optuna.samplers.TPESampler", "n_startup_trial": 5}
    with pytest.raises(ConfigError, match=r"hydra.sweeper.sampler=optuna.samplers.TPESampler"):
        samplers.sampler_factory({"sampler": node, "seed": 1}, dict, "s")


# Slow for CI time; make test covers it by test_optuna_sweep's SIGTERM after a finished
# trial (no other trial launches) and test_upstream_config's rerun resuming.
@pytest.mark.slow
def test_a_signal_between_trials_stops_the_sweep_and_the_same_command_resumes(tmp_path):
    marker = str(tmp_path / "sent")
    stopped = sweep_app(tmp_path / "s", "hydra.sweeper.n_trials=3", TERM_ONCE=marker)
    assert stopped.returncode == 128 + 15, stopped.stderr[-3000:]
    assert "SIGTERM received: study app stopped before its next trial" in stopped.stderr
    assert [r["state"] for r in rows(tmp_path / "s")] == ["COMPLETE"]  # the running one ended
    resumed = sweep_app(tmp_path / "s", "hydra.sweeper.n_trials=3", TERM_ONCE=marker)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["state"] for r in rows(tmp_path / "s")] == ["COMPLETE"] * 3


# Slow for CI time; make test covers it by a sweep's one-line refusals: test_sweep_bad_input.
@pytest.mark.slow
def test_a_rerun_on_another_space_is_one_line_and_leaves_no_running_trial(tmp_path):
    assert sweep_app(tmp_path / "s", "hydra.sweeper.n_trials=1").returncode == 0
    changed = sweep_app(tmp_path / "s", "hydra.sweeper.n_trials=2", "y=choice(5, 6)")
    assert changed.returncode == 2
    last = changed.stderr.strip().splitlines()[-1]
    assert last.startswith("error: y: study app searched CategoricalDistribution(choices=(0, 1))")
    assert "hydra.sweeper.study_name" in last and "Traceback" not in changed.stderr
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "s" / "optuna.journal"))
    )
    states = [t.state for t in optuna.load_study(study_name="app", storage=storage).trials]
    assert states == [optuna.trial.TrialState.COMPLETE]


def test_a_global_package_group_sweeps_like_any_group(tmp_path):
    """`experiment=choice(a, b)`-style: an option of a `@package _global_` group per trial."""
    result = sweep_app(
        tmp_path / "s", "-m", "shape=choice(square, tenfold)", "hydra.sweeper.sampler=random",
        "hydra.sweeper.n_trials=6", "hydra.sweeper.seed=5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = rows(tmp_path / "s")
    assert {r["shape"] for r in found} == {"square", "tenfold"}
    for r in found:  # each trial composed its own option
        scale = 10.0 if r["shape"] == "tenfold" else 1.0
        expected = scale * ((float(r["x"]) - 0.5) ** 2 + int(r["y"]))
        assert float(r["value"]) == pytest.approx(expected)


@pytest.mark.parametrize(
    "sampler",
    [
        pytest.param("nsgaii", marks=pytest.mark.slow),
        "gp",
        pytest.param("qmc", marks=pytest.mark.slow),
    ],
)
def test_the_newer_samplers_are_seeded_and_reproducible(tmp_path, sampler):
    args = [f"hydra.sweeper.sampler={sampler}", "hydra.sweeper.n_trials=3", "hydra.sweeper.seed=7"]
    first, second = sweep_app(tmp_path / "a", *args), sweep_app(tmp_path / "b", *args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:]
    assert [r["x"] for r in rows(tmp_path / "a")] == [r["x"] for r in rows(tmp_path / "b")]
    other = sweep_app(tmp_path / "c", *args[:-1], "hydra.sweeper.seed=8")
    assert other.returncode == 0, other.stderr[-2000:]
    assert [r["x"] for r in rows(tmp_path / "c")] != [r["x"] for r in rows(tmp_path / "a")]


def test_a_multi_objective_study_leaves_its_pareto_front(tmp_path):
    result = sweep_app(
        tmp_path / "s", "mode=multi", "hydra.sweeper.direction=[minimize,maximize]",
        "hydra.sweeper.n_trials=6",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    found = rows(tmp_path / "s")
    assert len(found) == 6 and {"value_0", "value_1"} <= set(found[0])
    best = yaml.safe_load((tmp_path / "s" / "best.yaml").read_text())
    front = {p["trial"] for p in best["pareto_front"]}
    points = {int(r["number"]): (float(r["value_0"]), float(r["value_1"])) for r in found}
    for number, (low, high) in points.items():  # on the front: nothing beats it in both
        dominated = any(
            a <= low and b >= high and (a, b) != (low, high) for a, b in points.values()
        )
        assert (number in front) == (not dominated), number
    assert (tmp_path / "s" / "pareto_front.png").is_file()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["hydra.sweeper.direction=[minimize,maximize]", "hydra.sweeper.pruner=median"],
         "hydra.sweeper.pruner=median: Optuna cannot prune a multi-objective study"),
        (["hydra.sweeper.direction=[minimize,maximize]", "+optimized_metric=[a,b,c]"],
         "hydra.sweeper.direction has 2 entries and optimized_metric 3 (a, b, c)"),
    ],
)  # fmt: skip
def test_multi_objective_mistakes_are_one_line(tmp_path, overrides, message):
    result = sweep_app(tmp_path / "s", "mode=multi", *overrides)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and message in last, result.stderr[-2000:]

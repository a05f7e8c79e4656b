"""Entry-point plumbing shared by train.py and eval.py: Hydra, quoting, errors, warnings.

A recipe is a function `cfg -> metrics`; `entry_point(recipe, "train")` turns it into the
console command. `compose(...)` builds the same config in-process (tests, benchmarks).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra import compose as hydra_compose
from omegaconf import DictConfig, OmegaConf, open_dict

from litforge.errors import ConfigError
from litforge.exits import (  # noqa: F401 - errors_to_caller, remove_unused_run_dir: public here too
    errors_to_caller,
    explained,
    remove_unused_run_dir,
    report_user_errors,
    silence_known_upstream_warnings,
)
from litforge.hydra_start import errors_before_the_job, job_started
from litforge.paths import unwritable
from litforge.validation import monitor_mode
from litforge.validation.config_search import (
    group_options,
    hydra_configs,
    project_conf_dir,
    search_root,
)

Recipe = Callable[[DictConfig], dict[str, Any]]

# `${litforge.first:a,b}`: the first of its arguments that is not null (hydra.run.dir uses it
# to fall back from run_name to a timestamp).
OmegaConf.register_new_resolver(
    "litforge.first", lambda *args: next((a for a in args if a is not None), None), replace=True
)
# `${litforge.cwd:}`: the directory the command runs in (the `paths` group's root_dir; Hydra's
# `${hydra:runtime.cwd}` does not resolve in a config composed outside a Hydra app).
OmegaConf.register_new_resolver("litforge.cwd", lambda: str(Path.cwd()), replace=True)
# `${litforge.sweep_mode:min}`: optimized_mode's default, a sweep's direction else min.
monitor_mode.register()


def entry_point(
    recipe: Recipe, config_name: str, conf_dir: str | Path | None = None
) -> Callable[[], None]:
    """`python <config_name>.py [overrides]`: compose `config_name` from the project's
    `conf_dir` (default: $LITFORGE_CONF, else ./conf) and litforge's configs, run `recipe`.

    The recipe's value of `cfg.optimized_metric` is returned to Hydra (what a sweeper reads).
    """

    def hydra_run(cfg: DictConfig) -> float | list[float | None] | None:
        # Imported per run, not with the module: `import litforge.cli` (compose() in a
        # notebook) stays free of the launch and tracking layers.
        from litforge.launch import multirun
        from litforge.tracking.lifecycle import runs_end_with_job

        job_started()  # Hydra reports errors itself from here on
        silence_known_upstream_warnings()  # again: a launcher may run jobs in other processes
        with (
            report_user_errors(Path(cfg.run_dir)),
            multirun.job_scope(cfg),
            runs_end_with_job(),  # a run left open would take the next job's metrics
            explained(),  # a callback's explanation of a failure (out of memory) ends the job
        ):
            metrics = recipe(cfg)
        wanted = cfg.get("optimized_metric")
        if OmegaConf.is_list(wanted):  # a multi-objective sweep: one value per metric
            return [metrics.get(str(name)) for name in wanted]  # type: ignore[return-value]
        return metrics.get(wanted)

    def main() -> None:
        from litforge.launch import launchers

        sys.argv = quote_numeric_choices(sys.argv)
        silence_known_upstream_warnings()
        with report_user_errors():
            project = project_conf_dir(conf_dir)
            check_output_dir(sys.argv[1:])
            check_run_name(sys.argv[1:])
            check_group_choices(sys.argv[1:], config_name, project)
            if config_name == "train":
                from litforge.grid_check import check_grid_jobs

                check_grid_jobs(quote_numeric_choices(sys.argv[1:]), config_name, project)
            launchers.agree_on_stamp(sys.argv[1:])  # torchrun / srun ranks: one run dir
        root = search_root(project)
        # An unresolvable hydra.run.dir, a sweep callback's refusal: one line.
        with report_user_errors(), errors_before_the_job(sys.argv[1:]):
            hydra.main(version_base="1.3", config_path=root, config_name=config_name)(hydra_run)()

    return main


def compose(
    overrides: list[str],
    run_dir: str | Path,
    config_name: str = "train",
    conf_dir: str | Path | None = None,
) -> DictConfig:
    """The config `python {config_name}.py *overrides` would see, writing into run_dir;
    `conf_dir` is the project's conf/ (default: $LITFORGE_CONF, else ./conf)."""
    with hydra_configs(project_conf_dir(conf_dir)):
        cfg = hydra_compose(config_name=config_name, overrides=quote_numeric_choices(overrides))
    with open_dict(cfg):
        cfg.run_dir = str(run_dir)
    return cfg


def check_group_choices(
    overrides: list[str], config_name: str = "train", conf_dir: str | None = None
) -> None:
    """`logger=bogus`: one line naming the group and its options, where Hydra would print a
    block with its search path. Options come from every directory on Hydra's search path
    (conf/ and `hydra.searchpath`); sweeps (`a,b`, `choice(...)`) and Hydra's own groups
    (`hydra/launcher=...`) are left to Hydra."""
    # A search path that does not exist: one line.
    found = group_options(config_name, overrides, project_conf_dir(conf_dir))
    for item in overrides:
        key, sep, value = item.partition("=")
        group, value = key.lstrip("+~"), value.strip("'\"")
        if not sep or not group or "/" in group or "@" in group or "." in group:
            continue
        if value == "" or any(c in value for c in ",()[]{}"):
            continue
        if found is None or not found.is_group(group):
            continue
        options = found.options(group)
        if value == "null" and found.required(group):
            raise ConfigError(
                f"{group}=null: a run needs a {group}; pick one of "
                f"{', '.join(found.places(group))}: {', '.join(options)}"
            )
        if value == "null":  # Hydra answers a null group choice with a traceback
            raise ConfigError(
                f"{group}=null: leave {group} out (by default none is picked), or pick one of "
                f"{', '.join(found.places(group))}: {', '.join(options)}"
            )
        if value not in options:
            raise ConfigError(
                f"{group}={value} is not an option of {', '.join(found.places(group))}: "
                f"{', '.join(options)}"
            )


def check_output_dir(overrides: list[str]) -> None:
    """Hydra creates the run directory before any of our code runs and answers a path it
    cannot create with a traceback; check where it will go first (cheap: no composition)."""
    multirun = bool({"-m", "--multirun"} & set(overrides))
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    given = [item.split("=", 1)[1] for item in overrides if item.startswith(f"{key}=")]
    target = Path(given[-1] if given else ("multirun" if multirun else "outputs")).absolute()
    problem = unwritable(target)
    if problem:
        raise ConfigError(
            f"{key}={target}: cannot create the run directory there ({problem}); "
            f"pass {key}=PATH somewhere writable"
        )


def check_run_name(overrides: list[str]) -> None:
    """run_name names the run directory, which Hydra creates before the config is checked: a
    name past the file system's 255 bytes would fail there with a traceback. The last plain
    `run_name=NAME` (a sweep or an interpolation is left to the per-run check) gets its rule
    now."""
    from litforge.validation.schema import RULES

    given = [
        item.split("=", 1)[1] for item in overrides if item.lstrip("+").startswith("run_name=")
    ]
    name = given[-1].strip("'\"") if given else None
    if name is None or any(c in name for c in ",()[]{}$") or name == "null":
        return
    reason = RULES["run_name"].problem(name)
    if reason is not None:
        shown = name if len(name) <= 60 else f"{name[:40]}... ({len(name)} characters)"
        raise ConfigError(f"run_name={shown} is invalid; {reason}")


def quote_numeric_choices(
    overrides: list[str], groups: tuple[str, ...] = ("precision",)
) -> list[str]:
    """`precision=32` -> `precision='32'`.

    Hydra's override grammar parses 32 as an integer and then rejects it as a config-group
    choice ("Config group override must be a string"); quoting keeps `precision=32` typable.
    """
    quoted = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if sep and key.lstrip("+") in groups and value.isdigit():
            item = f"{key}='{value}'"
        quoted.append(item)
    return quoted

"""`python -m litforge.scaffold new-project | experiment | update | recipe | view`: see --help."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from litforge.errors import LitforgeError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    new = sub.add_parser("new-project", help="a standalone project from this template")
    new.add_argument("name", help="package name of the new project, e.g. my_exp")
    new.add_argument("dest", type=Path, help="directory to create (outside this repository)")
    new.add_argument("--minimal", action="store_true", help="digits only: no GPT, text, benchmarks")
    new.add_argument("--without", default="", help="optional parts to leave out, e.g. wandb,s3")
    new.add_argument(
        "--with", dest="with_extras", default="",
        help="litforge extras beyond those the project's files use, e.g. mlflow,s3",
    )  # fmt: skip
    new.add_argument("--force", action="store_true", help="replace a non-empty DEST")
    new.add_argument("--template", type=Path, help="template repository (default: this one)")
    exp = sub.add_parser("experiment", help="conf/experiment/NAME.yaml (+ model, data, test)")
    exp.add_argument("name", help="experiment name, e.g. my_task")
    exp.add_argument("--model", action="store_true", help="also a LightningModule skeleton")
    exp.add_argument("--data", action="store_true", help="also a DataModule skeleton")
    exp.add_argument("--project", type=Path, default=Path.cwd(), help="project root (default: .)")
    upd = sub.add_parser("update", help="take in template changes since this project was made")
    upd.add_argument("--template", type=Path, help="template repository if it moved")
    upd.add_argument("--conflict", choices=("inline", "rej"), default="inline")
    upd.add_argument("--project", type=Path, default=Path.cwd(), help="project root (default: .)")
    recipe = sub.add_parser("recipe", help="own the training loop: copy the recipe in, or diff it")
    recipe.add_argument(
        "action",
        choices=("copy", "diff"),
        help="copy: recipe.py + train.py; diff: against litforge's",
    )
    recipe.add_argument("--force", action="store_true", help="replace an earlier copy")
    recipe.add_argument(
        "--project", type=Path, default=Path.cwd(), help="project root (default: .)"
    )
    shown = sub.add_parser("view", help="build the template view of a repository; print it")
    shown.add_argument(
        "--template", type=Path, help="template repository (default: the recorded one, or this)"
    )
    return parser


def run(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    if args.command == "new-project":
        from litforge.scaffold.project import new_project

        new_project(
            args.name, args.dest, args.template, args.minimal, args.without, args.force,
            args.with_extras,
        )  # fmt: skip
    elif args.command == "experiment":
        from litforge.scaffold.experiment import new_experiment

        new_experiment(args.project, args.name, model=args.model, data=args.data)
    elif args.command == "update":
        from litforge.scaffold.project import update

        update(args.project, args.template, args.conflict)
    elif args.command == "recipe":
        from litforge.scaffold import recipe

        if args.action == "copy":
            recipe.copy_recipe(args.project, args.force)
        else:
            print(recipe.diff_recipe(args.project) or "recipe.py is litforge's recipe, unchanged")
    else:
        from litforge.scaffold import view
        from litforge.scaffold.project import default_template

        built = view.build(args.template or default_template())
        print(f"{built.path} {built.tag}")


def main(argv: list[str] | None = None) -> None:
    """Errors the user can act on print as one `error: ...` line (traceback with
    HYDRA_FULL_ERROR=1, as for train.py)."""
    try:
        run(sys.argv[1:] if argv is None else argv)
    except LitforgeError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()

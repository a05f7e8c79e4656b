"""`litforge plan ... --launch skypilot --bucket URL [--out job.yaml]`: the plan's cheapest
setting on spot (or `--card` / `--count`) as a SkyPilot managed-job file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from litforge.errors import ConfigError
from litforge.launch.skypilot_task import ENGINES, Job, render, stable_run_name
from litforge.planning.plan import prices
from litforge.planning.plan.table import Option

# The options that only shape a job file: without --launch nothing would read them.
LAUNCH_ONLY = ("bucket", "out", "card", "count")


def check_launch(args: argparse.Namespace) -> None:
    """Everything about the launch options that can be wrong, before the plan is worked out."""
    from litforge.checkpointing.store import CheckpointStore

    if args.launch is None:
        given = [f"--{k} {getattr(args, k)}" for k in LAUNCH_ONLY if getattr(args, k) is not None]
        given += [f"--nodes {args.nodes}"] if args.nodes != 1 else []
        if given:
            raise ConfigError(f"{given[0]} is an option of a job file, and without --launch "
                              "none is written: add --launch skypilot, or leave it out")  # fmt: skip
        return
    if args.launch not in ENGINES:
        raise ConfigError(f"--launch {args.launch}: not an engine litforge writes jobs for "
                          f"(one of: {', '.join(ENGINES)})")  # fmt: skip
    if args.nodes < 1:
        raise ConfigError(f"--nodes={args.nodes} must be a number of machines >= 1")
    if args.count is not None and args.count < 1:
        raise ConfigError(f"--count={args.count} must be a number of cards >= 1")
    if not args.prices:
        raise ConfigError("--launch needs --prices FILE: the job runs on spot, and the plan "
                          "picks the card by its price (conf/prices.example.yaml)")  # fmt: skip
    if not args.bucket:
        raise ConfigError("--launch needs --bucket URL (s3://, gs://, az://): where the job's "
                          "checkpoints go")  # fmt: skip
    store = CheckpointStore(args.bucket, timeout_s=30)
    if store.is_local:
        raise ConfigError(
            f"--bucket {args.bucket}: a local path, and a spot VM's disk does not survive "
            "its preemption; give a bucket URL (s3://BUCKET/prefix, gs://..., az://...)"
        )
    _check_out(Path(args.out or "job.yaml"))
    store.check_access()  # credentials and bucket, in one line, before any plan
    if args.card is not None:
        listed = prices.load(args.prices).cards
        if args.card not in listed:
            raise ConfigError(f"--card {args.card!r} is not in --prices {args.prices} "
                              f"(it lists: {', '.join(listed)})")  # fmt: skip
        args.cards = args.card


def _check_out(out: Path) -> None:
    """--out names a file to write, in a directory that exists."""
    if out.is_dir():
        raise ConfigError(f"--out {out}: a directory; give the job file's name, e.g. "
                          f"--out {out / 'job.yaml'}")  # fmt: skip
    if not out.absolute().parent.is_dir():
        raise ConfigError(f"--out {out}: directory {out.absolute().parent} does not exist; "
                          "create it first, or write the job file elsewhere")  # fmt: skip


def _write(out: Path, text: str) -> str:
    """Write the job file; one that exists is left alone unless it already says the same
    (a relaunch's job, written again). What was done, for the summary line."""
    try:
        with out.open("x") as f:  # exclusive: never over a file that appeared meanwhile
            f.write(text)
        return "wrote"
    except FileExistsError:
        pass
    except OSError as err:
        raise ConfigError(f"--out {out}: cannot write it ({err.strerror or err})") from None
    try:
        same = out.is_file() and out.read_text(errors="replace") == text
    except OSError:
        same = False
    if not same:
        raise ConfigError(f"--out {out} exists and holds another job; litforge does not "
                          "overwrite it: remove it, or give another --out")  # fmt: skip
    return "unchanged:"


def _clouds(path: str) -> list[dict[str, str]]:
    """The prices file's optional `clouds:` list ({cloud, region}) the job may run in."""
    data: Any = yaml.safe_load(Path(path).read_text())
    clouds = data.get("clouds") or []
    if not isinstance(clouds, list) or not all(
        isinstance(c, dict) and "cloud" in c for c in clouds
    ):
        raise ConfigError(f"--prices {path}: clouds must be a list of {{cloud: ..., region: ...}}")
    return [{k: str(v) for k, v in c.items() if k in ("cloud", "region", "zone")} for c in clouds]


def _pick(options: list[Option], args: argparse.Namespace) -> Option:
    fitting = [o for o in options if o.setting is not None]
    if args.count is not None:
        fitting = [o for o in fitting if o.count == args.count]
    priced = [o for o in fitting if o.spot_cost is not None]
    if not priced:
        what = (
            f"{args.count} x {args.card or 'any card'}" if args.count else args.card or "any card"
        )
        raise ConfigError(f"no setting of the run fits {what} with a spot price and "
                          f"mtbf_hours in --prices {args.prices}")  # fmt: skip
    return min(priced, key=lambda o: (o.spot_cost, o.count))


def write_job(args: argparse.Namespace, options: list[Option], price_list: Any) -> None:
    option = _pick(options, args)
    setting = option.setting
    assert setting is not None and option.spot is not None
    overrides = list(args.overrides) + setting.overrides(option.count).split()
    if args.nodes > 1:  # the same effective batch over nodes x count processes
        overrides = [o for o in overrides if not o.startswith(("trainer.accumulate_grad_batches=",
                                                               "data.batch_size="))]  # fmt: skip
        micro, accumulate = setting.micro_batch, setting.accumulate
        if accumulate % args.nodes == 0:
            accumulate //= args.nodes
        elif micro % args.nodes == 0:
            micro //= args.nodes
        else:
            raise ConfigError(
                f"--nodes={args.nodes} divides neither the plan's micro-batch ({micro}) nor "
                f"its gradient accumulation ({accumulate}) at the configured effective "
                "batch: give --nodes a divisor of one, or another data.batch_size"
            )
        overrides += [f"data.batch_size={micro}", f"trainer.accumulate_grad_batches={accumulate}"]
        if not any(o.startswith("trainer=") for o in overrides):
            overrides.append("trainer=ddp")
    job = Job(overrides, option.card, option.count, args.nodes, args.bucket.rstrip("/"),
              stable_run_name(list(args.overrides), Path.cwd()), option.spot.every_n_train_steps,
              _clouds(args.prices))  # fmt: skip
    out = Path(args.out or "job.yaml")
    done = _write(out, render(job))
    print(f"{done} {out}: {args.nodes} x {option.count} x {option.card} on spot, "
          f"{setting.brief(option.count)}, checkpoint every {option.spot.every_n_train_steps} steps to "
          f"{job.bucket}/{job.run_name}; launch with: sky jobs launch {out}")  # fmt: skip
    print(check_with_skypilot(out))
    sys.stdout.flush()


def check_with_skypilot(path: Path) -> str:
    """SkyPilot's own task parser on the written file, where it is installed
    (litforge[cloud]); what it read, in one line. A file it refuses is a ConfigError."""
    try:
        import sky
    except ImportError:
        return ("not checked with SkyPilot's parser: it is not installed here "
                "(pip install 'litforge[cloud]' where you launch from)")  # fmt: skip
    except Exception as err:  # noqa: BLE001 - e.g. installed beside a click it does not accept
        return f"not checked with SkyPilot's parser: it does not import here ({type(err).__name__}: {err})"
    try:
        task = sky.Task.from_yaml(str(path))
    except Exception as err:  # noqa: BLE001 - SkyPilot's own validation errors
        first = str(err).splitlines()[0] if str(err) else ""
        raise ConfigError(f"{path}: SkyPilot {sky.__version__} refuses the job file "
                          f"({type(err).__name__}: {first})") from None  # fmt: skip
    found = sorted({str(r.accelerators) for r in task.resources})
    return (f"checked with SkyPilot {sky.__version__}'s task parser: {task.num_nodes} node(s), "
            f"accelerators {', '.join(found)}, spot {all(r.use_spot for r in task.resources)}")  # fmt: skip

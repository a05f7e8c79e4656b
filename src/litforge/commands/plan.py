"""Which card to rent: `python -m litforge.plan [train.py overrides] [options]`.

For every card in `litforge.planning.hardware` (or `--cards H100,L4`) and 1, 2, 4 and 8 of
it: does the run fit (the memory budget, attention as CUDA's fused kernels save it), with
which setting (precision, gradient checkpointing, micro-batch x accumulation at the
configured effective batch, DDP or FSDP), how long a step and the run to
trainer.max_steps take (FLOPs over the dense peak x `--mfu`, or a measured matmul rate
from `python -m litforge.matmul_bench --json > rate.json`, `--matmul rate.json`), and
with `--prices FILE` what it costs on demand and on spot, with the checkpoint interval
that minimises the expected spot time (`litforge.planning.plan.economics`). Per card it
prints the cheapest setting that fits, then the fastest; `--json` gives every card and
count, `--png FILE` a plot of cost against time. An example prices file: conf/prices.example.yaml.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import torch
from hydra.errors import HydraException
from lightning.fabric.utilities.init import _EmptyInit

from litforge.cli import check_group_choices, compose
from litforge.commands.budget import from_config
from litforge.errors import ConfigError
from litforge.exits import report_user_errors, silence_known_upstream_warnings
from litforge.planning.budget.copies import rebuild
from litforge.planning.budget.estimate import fsdp_shards
from litforge.planning.budget.measure import Subject
from litforge.planning.flops import first_tensor, step_flops
from litforge.planning.hardware import CARDS, Card, find_card
from litforge.planning.plan import economics, prices, search, table
from litforge.validation.config_search import project_conf_dir


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m litforge.plan", description=__doc__.split("\n")[0]
    )
    parser.add_argument("overrides", nargs="*", help="the same overrides as train.py")
    parser.add_argument("--cards", help="comma-separated card names (default: every card)")
    parser.add_argument("--mfu", type=float, default=0.35, help="model FLOPs utilisation, (0, 1]")
    parser.add_argument("--scaling", type=float, default=0.9,
                        help="throughput kept per doubling of GPUs, (0, 1]")  # fmt: skip
    parser.add_argument("--matmul", help="matmul_bench --json output: its card's measured rates")
    parser.add_argument("--prices", help="YAML of card -> on_demand, spot, mtbf_hours")
    parser.add_argument("--mtbf", type=float, help="hours between spot preemptions (all cards)")
    parser.add_argument(
        "--from-run", help="a run directory whose run.json has save and restart times"
    )
    parser.add_argument("--json", action="store_true", help="every card and count as JSON")
    parser.add_argument("--png", help="write cost against time to this PNG")
    launch = parser.add_argument_group("a cloud job from the plan (docs/cloud.md)")
    launch.add_argument("--launch", help="write a job file for this engine: skypilot")
    launch.add_argument("--out", help="the job file to write (default: job.yaml)")
    launch.add_argument("--bucket", help="checkpoint.dir of the job: s3://, gs://, az://")
    launch.add_argument("--card", help="the card to launch on (default: the cheapest on spot)")
    launch.add_argument("--count", type=int, help="cards per machine (default: the plan's)")
    launch.add_argument("--nodes", type=int, default=1, help="machines (torchrun on each)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_intermixed_args(argv)  # overrides before or after the options
    silence_known_upstream_warnings()
    with report_user_errors():
        _plan(args)


def _check(args: argparse.Namespace) -> tuple[list[Card], prices.Prices | None]:
    for key, value in (("--mfu", args.mfu), ("--scaling", args.scaling)):
        if not (math.isfinite(value) and 0 < value <= 1):
            raise ConfigError(f"{key}={value} must be in (0, 1]")
    if args.mtbf is not None and not (math.isfinite(args.mtbf) and args.mtbf > 0):
        raise ConfigError(f"--mtbf={args.mtbf} must be a number of hours above 0")
    cards = list(CARDS)
    if args.cards:
        cards = []
        for name in args.cards.split(","):
            card = find_card(name)
            if card is None:
                known = ", ".join(c.name for c in CARDS)
                raise ConfigError(
                    f"--cards: {name!r} is not a card of litforge.planning.hardware ({known})"
                )
            cards.append(card)
    return cards, prices.load(args.prices) if args.prices else None


def _work(subject: Subject, effective_batch: int) -> search.Work:
    x = first_tensor(subject.batch(1))
    if x is None:
        raise ConfigError("the plan counts FLOPs on the batch's first tensor; the batch holds none")
    counts = {}
    for checkpointing in (False, True) if subject.checkpointing is not None else (None,):
        changes = {} if checkpointing is None else {"gradient_checkpointing": checkpointing}
        with torch.device("meta"), _EmptyInit():
            model = rebuild(subject.module, subject.config, **changes)
        counts[checkpointing] = step_flops(model.train(), x)
    model_flops = counts.get(False, counts.get(None))
    return search.Work(effective_batch, model_flops, counts.get(True, model_flops))


def _plan(args: argparse.Namespace) -> None:
    from litforge.commands.plan_launch import check_launch

    check_launch(args)  # also: a launch option without --launch is one line
    cards, price_list = _check(args)
    measured = _measured_rates(args.matmul) if args.matmul else {}
    restarts = economics.from_run(args.from_run) if args.from_run else economics.estimated()
    check_group_choices(args.overrides, "train", project_conf_dir())
    with tempfile.TemporaryDirectory() as run_dir:
        try:
            cfg = compose(args.overrides, run_dir)
        except HydraException as err:
            raise ConfigError(str(err).strip().splitlines()[0]) from None
        subject = from_config(cfg)
    subject.attention = "fused"
    processes = fsdp_shards(cfg.trainer.get("devices", "auto"), cfg.trainer.num_nodes)
    effective = subject.batch_size * subject.accumulate * processes
    steps = _steps(cfg, subject, effective)
    work = _work(subject, effective)
    options = []
    for card in cards:
        price = price_list.cards.get(card.name) if price_list else None
        for count in search.COUNTS:
            found = search.settings(subject, work, card, count, args.mfu, args.scaling,
                                    measured.get(card.name))  # fmt: skip
            options.append(_option(card, count, found[0] if found else None, steps, price,
                                   args.mtbf, restarts, subject))  # fmt: skip
    currency = price_list.currency if price_list else "USD"
    if args.launch is not None:
        from litforge.commands.plan_launch import write_job

        write_job(args, options, price_list)
        return
    if args.png:
        table.write_png(options, Path(args.png), currency)
    if args.json:
        print(json.dumps({"effective_batch": effective, "max_steps": steps,
                          "mfu": args.mfu, "restarts": restarts.source,
                          "options": table.as_json(options)}, indent=2))  # fmt: skip
        return
    print(f"plan for {type(subject.module).__name__}: effective batch {effective}, {steps} "
          f"optimizer steps, MFU {args.mfu:g}, {args.scaling:g} of the throughput kept per "
          "doubling of GPUs")  # fmt: skip
    print("\n".join(["", *table.lines(options, currency, max(search.COUNTS)), ""]))
    if price_list:
        print(
            f"prices: {price_list.source} ({price_list.date or 'undated'}); spot: {restarts.source}"
        )
    else:
        print("no prices: --prices FILE adds on-demand and spot costs (conf/prices.example.yaml)")
    print("not modelled: communication beyond --scaling, data loading, the CUDA context")
    sys.stdout.flush()


def _option(card, count, setting, steps, price, mtbf_hours, restarts, subject) -> table.Option:  # noqa: ANN001
    if setting is None:
        return table.Option(card.name, count, None)
    total = setting.step_s * steps
    on_demand = spot = spot_cost = None
    if price is not None and price.on_demand is not None:
        on_demand = total / 3600 * count * price.on_demand
    mtbf = mtbf_hours or (price.mtbf_hours if price else None)
    if price is not None and price.spot is not None and mtbf:
        states = subject.states(search.measured_as(setting.precision))
        save = economics.save_seconds(restarts, states.weights + states.optimizer)
        spot = economics.spot(total, setting.step_s, save, restarts.restart_s, mtbf * 3600)
        spot_cost = spot.wall_s / 3600 * count * price.spot
    return table.Option(card.name, count, setting, total, on_demand, spot, spot_cost)


def _steps(cfg, subject: Subject, effective: int) -> int:  # noqa: ANN001
    steps = int(cfg.trainer.get("max_steps", -1) or -1)
    if steps > 0:
        return steps
    epochs = int(cfg.trainer.get("max_epochs", -1) or -1)
    if epochs <= 0:
        raise ConfigError("the plan needs trainer.max_steps or trainer.max_epochs to time the run")
    return epochs * math.ceil(len(subject.samples) / effective)


def _measured_rates(path: str) -> dict[str, dict[str, float]]:
    try:
        result = json.loads(Path(path).read_text())
        card = result["card"]
        rates = {row["dtype"]: float(row["tflops"]) for row in result["summary"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"--matmul {path}: not the JSON of matmul_bench --json ({err})") from None
    if not card:
        raise ConfigError(f"--matmul {path}: measured on {result.get('device')}, not a known card")
    return {card: rates}


if __name__ == "__main__":
    main()

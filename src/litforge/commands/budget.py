"""Memory budget: will this training run fit, and what to change when it does not.

    python -m litforge.budget [train.py overrides] [--compare] [--device-memory 80GiB|H100]
                              [--attention fused|measured] [--json]

prints, for the configured model, micro-batch, precision, gradient checkpointing,
accumulation and optimizer, the bytes of weights, gradients, optimizer state and
activations (how: `litforge.planning.budget.measure`), their total and the device's memory.
`--compare` gives one row per precision the device runs, with and without gradient
checkpointing; `--device-memory` adds a "fits" column for a given size or card (its
usable memory, what CUDA reports). A question about a GPU counts attention as CUDA's
fused kernels save it, whatever this machine runs (`--attention measured` does not). A
large model is built on the meta device and measured on fake tensors by depth, so a 7B
or 175B model's budget takes seconds and under 0.5 GiB here. A measurement that fails
ends in one `error:` line.
Training runs log the same figures through `litforge.monitors.memory_budget`.

The overrides compose the project's conf/ ($LITFORGE_CONF, else ./conf) as train.py does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile

import torch
from hydra.errors import HydraException
from lightning.fabric.utilities.init import _EmptyInit
from omegaconf import DictConfig, OmegaConf

from litforge.build import build_datamodule, build_module
from litforge.cli import check_group_choices, compose
from litforge.errors import ConfigError
from litforge.exits import report_user_errors, silence_known_upstream_warnings
from litforge.launch.fsdp import is_fsdp_run
from litforge.models.freeze import KEY as FREEZE_KEY
from litforge.planning.budget import depth, failure, report
from litforge.planning.budget.estimate import (
    attention_for,
    device_limit,
    fsdp_shards,
    rows,
    subject_of,
)
from litforge.planning.budget.measure import SMALL_MODULE_BYTES, Row, Subject
from litforge.planning.hardware import parse_memory
from litforge.validation.checks import check_config
from litforge.validation.config_search import project_conf_dir


def from_config(cfg: DictConfig) -> Subject:
    """The module and data `train.py` would build from cfg, measured on its device."""
    check_config(cfg)
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    on_gpu = accelerator != "cpu" and torch.cuda.is_available()
    with torch.random.fork_rng():
        # On the meta device first: a 7B model's float32 weights do not fit in a laptop.
        with torch.device("meta"), _EmptyInit():
            module = build_module(cfg, compiled=False)  # frozen parameters: no gradients
        if depth.parameter_bytes(module) <= SMALL_MODULE_BYTES:
            module = build_module(cfg, compiled=False)  # small: measured on its real weights
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    accumulate = int(cfg.trainer.get("accumulate_grad_batches", 1))
    model = OmegaConf.to_container(cfg.model, resolve=True)
    model.pop(FREEZE_KEY, None)  # type: ignore[union-attr]  # litforge's key, not an argument
    subject = subject_of(module, datamodule, accumulate, device, model)  # type: ignore[arg-type]
    if is_fsdp_run(cfg):
        subject.shards = fsdp_shards(cfg.trainer.get("devices", "auto"), cfg.trainer.num_nodes)
    return subject


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m litforge.budget",
        description="Memory of a training run: weights, gradients, optimizer state, activations.",
    )
    parser.add_argument("overrides", nargs="*", help="the same overrides as train.py")
    parser.add_argument(
        "--compare", action="store_true", help="every precision, with and without checkpointing"
    )
    parser.add_argument(
        "--device-memory", help="the memory to fit in: 80GiB, 24GB or a card (H100)"
    )
    parser.add_argument(
        "--attention",
        choices=("fused", "measured"),
        help="count attention as CUDA's fused kernels save it (the default for a GPU "
        "question: --device-memory, or a run on CUDA) or as this machine's kernels do",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the configured setting's bytes as one JSON object (for scripts: "
        "hydra/launcher=gpus packs trials by it)",
    )
    args = parser.parse_intermixed_args(argv)  # overrides before or after the options
    silence_known_upstream_warnings()
    with report_user_errors():
        _print_budget(args.overrides, args.compare, args.device_memory, args.attention, args.json)


def _print_budget(
    overrides: list[str],
    compare: bool,
    device_memory: str | None,
    attention: str | None,
    as_json: bool = False,
) -> None:
    if device_memory is not None:
        parse_memory(device_memory)  # a typo fails before anything is built
    check_group_choices(overrides, "train", project_conf_dir())
    with tempfile.TemporaryDirectory() as run_dir:  # composition needs one; nothing is written
        try:
            cfg = compose(overrides, run_dir)
        except HydraException as err:
            raise ConfigError(str(err).strip().splitlines()[0]) from None
        subject = from_config(cfg)
    subject.attention = attention or attention_for(subject.device, device_memory)
    limit = device_limit(subject.device, device_memory, "--device-memory")
    with failure.one_line(type(subject.module).__name__):
        if as_json:
            row = _configured(cfg, subject)
            print(json.dumps({**dataclasses.asdict(row), "total": row.total}))
            sys.stdout.flush()
            return
        lines = _lines(cfg, subject, compare, limit)
    print("\n".join(lines))
    sys.stdout.flush()


def _lines(cfg: DictConfig, subject: Subject, compare: bool, limit: report.Limit) -> list[str]:
    """The table, the notes and (when it does not fit) the options."""
    precision = str(cfg.trainer.precision)
    found = rows(subject, compare, precision)
    averaged = "ema" in (cfg.get("callbacks") or {})
    if averaged:  # callbacks.ema keeps a second copy of the weights
        found = [report.with_average(r) for r in found]
    lines = [report.header(subject, precision), "", *report.table_lines(found, limit), ""]
    lines.append(f"device: {limit.label}")
    lines += [f"note: {n}" for n in report.notes(found, subject, limit)]
    if averaged:
        lines.append("note: weights include callbacks.ema's average, a second copy of them")
    configured = _configured(cfg, subject)
    if not limit.fits(configured.total):
        lines.append("the configured setting does not fit; options, in order:")
        lines += [f"  {option}" for option in report.options(subject, configured, limit)]
    return lines


def _configured(cfg: DictConfig, subject: Subject) -> Row:
    """The row of the setting cfg trains with (callbacks.ema's second copy included)."""
    row = subject.row(str(cfg.trainer.precision), subject.checkpointing)
    return report.with_average(row) if "ema" in (cfg.get("callbacks") or {}) else row


if __name__ == "__main__":
    main()

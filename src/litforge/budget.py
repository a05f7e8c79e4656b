"""Memory budget: will this training run fit, and what to change when it does not.

    python -m litforge.budget [train.py overrides] [--compare] [--device-memory 80GiB|H100]

prints, for the configured model, micro-batch, precision, gradient checkpointing,
accumulation and optimizer, the bytes of weights, gradients, optimizer state and
activations (how: `litforge.budget_measure`), their total and the device's memory.
`--compare` gives one row per precision the device runs, with and without gradient
checkpointing; `--device-memory` adds a "fits" column for a given size or card.
Training runs log the same figures through `litforge.callbacks.memory_budget`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

import torch
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from litforge import budget_report as report
from litforge import processes
from litforge.budget_measure import Row, Subject, precisions_for, saved_bytes
from litforge.build import build_datamodule, build_module
from litforge.checks import check_config
from litforge.cli import (
    check_group_choices,
    compose,
    report_user_errors,
    silence_known_upstream_warnings,
)
from litforge.datamodule_facts import batch_size_of, training_samples
from litforge.errors import ConfigError, LitforgeError
from litforge.hardware import parse_memory

__all__ = ["device_limit", "from_config", "main", "rows", "saved_bytes", "subject_of"]


def subject_of(
    module,
    datamodule,
    accumulate: int,
    device: torch.device,
    config: dict[str, Any] | None = None,
) -> Subject:
    """A Subject over a DataModule's training samples (after `setup("fit")`; see
    `litforge.datamodule_facts`); `config`: the model group the module was built from."""
    samples, loader = training_samples(datamodule)
    batch_size = batch_size_of(datamodule, loader)
    if batch_size is None or len(samples) < 2:
        raise LitforgeError(
            f"the memory budget needs the micro-batch size and 2 training samples; "
            f"{type(datamodule).__name__} gives neither a batch_size nor a train_set, and "
            "its train_dataloader() not a batch of 2 or more"
        )
    return Subject(module, samples, batch_size, accumulate, device, config=config)


def from_config(cfg: DictConfig) -> Subject:
    """The module and data `train.py` would build from cfg, measured on its device."""
    check_config(cfg)
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    on_gpu = accelerator != "cpu" and torch.cuda.is_available()
    with torch.random.fork_rng():
        module = build_module(cfg)
    datamodule = build_datamodule(cfg)
    datamodule.setup("fit")
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    accumulate = int(cfg.trainer.get("accumulate_grad_batches", 1))
    model = OmegaConf.to_container(cfg.model, resolve=True)
    subject = subject_of(module, datamodule, accumulate, device, model)  # type: ignore[arg-type]
    if cfg.trainer.get("strategy") == "fsdp":
        subject.shards = fsdp_shards(cfg.trainer.get("devices", "auto"), cfg.trainer.num_nodes)
    return subject


def fsdp_shards(devices: Any, num_nodes: int) -> int:
    """Processes a trainer=fsdp run shards over: trainer.devices (auto: every visible GPU,
    else 1) times trainer.num_nodes."""
    per_node = processes.parse_devices(devices)
    if per_node is None:
        per_node = max(torch.cuda.device_count(), 1)
    elif isinstance(per_node, list):
        per_node = len(per_node)
    return per_node * int(num_nodes)


def device_limit(device: torch.device, given: str | int | None, key: str) -> report.Limit:
    """The memory to fit in: `given` (a size or card name; `key` names it in errors and in
    the table), else the GPU's own memory; a CPU has no limit of its own."""
    if given is not None:
        size = parse_memory(str(given), key)
        return report.Limit(size, f"{key}={given}: {report.size(size)}")
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return report.Limit(props.total_memory, f"{props.name}: {report.size(props.total_memory)}")
    return report.Limit(None, "CPU (no limit)")


def rows(subject: Subject, compare: bool, precision: str) -> list[Row]:
    """The configured setting, or (compare) every precision x checkpointing the device runs."""
    if not compare:
        return [subject.row(precision, subject.checkpointing)]
    settings = (None,) if subject.checkpointing is None else (False, True)
    return [subject.row(p, c) for p in precisions_for(subject.device) for c in settings]


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
    args = parser.parse_args(argv)
    silence_known_upstream_warnings()
    with report_user_errors():
        _print_budget(args.overrides, args.compare, args.device_memory)


def _print_budget(overrides: list[str], compare: bool, device_memory: str | None) -> None:
    if device_memory is not None:
        parse_memory(device_memory)  # a typo fails before anything is built
    check_group_choices(overrides)
    with tempfile.TemporaryDirectory() as run_dir:  # composition needs one; nothing is written
        try:
            cfg = compose(overrides, run_dir)
        except HydraException as err:
            raise ConfigError(str(err).strip().splitlines()[0]) from None
        subject = from_config(cfg)
    limit = device_limit(subject.device, device_memory, "--device-memory")
    precision = str(cfg.trainer.precision)
    found = rows(subject, compare, precision)
    lines = [report.header(subject, precision), "", *report.table_lines(found, limit), ""]
    lines.append(f"device: {limit.label}")
    lines += [f"note: {n}" for n in report.notes(found, subject, limit)]
    configured = subject.row(precision, subject.checkpointing)
    if not limit.fits(configured.total):
        lines.append("the configured setting does not fit; options, in order:")
        lines += [f"  {option}" for option in report.options(subject, configured, limit)]
    print("\n".join(lines))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

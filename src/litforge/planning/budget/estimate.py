"""The memory budget of a built module and DataModule: the Subject the toolkit measures,
the device limit it is held against, the rows `python -m litforge.budget` prints.

The figures (weights, gradients, optimizer state, activations) are counted in
`litforge.planning.budget.measure`; training runs log them through
`litforge.monitors.memory_budget`; the command is `litforge.budget`.
"""

from __future__ import annotations

from typing import Any

import torch

from litforge.datamodule_facts import batch_size_of, training_samples
from litforge.errors import LitforgeError
from litforge.launch import processes
from litforge.planning.budget import report
from litforge.planning.budget.measure import Row, Subject, precisions_for, saved_bytes
from litforge.planning.hardware import find_card, parse_memory

__all__ = ["attention_for", "device_limit", "fsdp_shards", "rows", "saved_bytes", "subject_of"]


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
        card = find_card(str(given))
        if card is not None:
            label = (
                f"{key}={given}: {card.name}, {report.size(size)} usable of {card.memory_gb:g} GB"
            )
            return report.Limit(size, label)
        return report.Limit(size, f"{key}={given}: {report.size(size)}")
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return report.Limit(props.total_memory, f"{props.name}: {report.size(props.total_memory)}")
    return report.Limit(None, "CPU (no limit)")


def attention_for(device: torch.device, given: str | int | None) -> str:
    """How to count attention: on a GPU as it runs there; on a CPU asked about a GPU's
    memory (`given`) as CUDA's fused kernels save it; on a CPU alone as it runs here."""
    return "fused" if device.type == "cpu" and given is not None else "measured"


def rows(subject: Subject, compare: bool, precision: str) -> list[Row]:
    """The configured setting, or (compare) every precision x checkpointing the device runs."""
    if not compare:
        return [subject.row(precision, subject.checkpointing)]
    settings = (None,) if subject.checkpointing is None else (False, True)
    return [subject.row(p, c) for p in precisions_for(subject.device) for c in settings]

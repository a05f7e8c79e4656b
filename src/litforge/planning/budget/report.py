"""The memory budget in words: table, one-line rows, notes, and what to change when over."""

from __future__ import annotations

from dataclasses import dataclass, replace

from litforge.planning.budget.measure import Row, Subject, precisions_for
from litforge.planning.budget.units import size
from litforge.planning.hardware import CARDS
from litforge.precision import normalize

COLUMNS = (
    "precision",
    "checkpointing",
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "total",
)


@dataclass(frozen=True)
class Limit:
    """The memory to fit in: `size` bytes (None: no limit) and where that figure came from."""

    size: int | None
    label: str  # "CPU (no limit)", "NVIDIA H200: 139.8 GiB", "--device-memory=H100: 80.0 GiB"

    def fits(self, total: int) -> bool:
        return self.size is None or total <= self.size


@dataclass(frozen=True)
class Option:
    """One way to need less: the overrides (or the card) and the total it would reach."""

    change: str
    total: int
    fits: bool

    def __str__(self) -> str:
        return f"{self.change}: {size(self.total)}{'' if self.fits else ' (does not fit)'}"


def with_average(row: Row) -> Row:
    """The row with a weight average (callbacks.ema) kept beside the weights: twice them."""
    return replace(row, weights=2 * row.weights)


def _precision(row: Row) -> str:
    same = normalize(row.precision) == row.effective
    return row.precision if same else f"{row.precision} (runs {row.effective})"


def _checkpointing(row: Row) -> str:
    return "-" if row.checkpointing is None else ("on" if row.checkpointing else "off")


def cells(row: Row, limit: Limit) -> list[str]:
    sizes = (row.weights, row.gradients, row.optimizer, row.activations, row.total)
    fit = [] if limit.size is None else ["fits" if limit.fits(row.total) else "does not fit"]
    return [_precision(row), _checkpointing(row), *map(size, sizes), *fit]


def columns(limit: Limit) -> list[str]:
    return [*COLUMNS, *([] if limit.size is None else [f"fits in {size(limit.size)}"])]


def table_lines(rows: list[Row], limit: Limit) -> list[str]:
    """An aligned plain-text table (no box drawing: it stays readable in logs and pipes)."""
    grid = [columns(limit), *(cells(row, limit) for row in rows)]
    widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in grid
    ]


def row_line(row: Row, limit: Limit) -> str:
    """One `key=value` line for a log: what a table row says."""
    pairs = zip(columns(limit)[: len(COLUMNS)], cells(row, limit), strict=False)
    text = " ".join(f"{key}={value}" for key, value in pairs)
    fit = "" if limit.size is None else f" ({'fits' if limit.fits(row.total) else 'does not fit'})"
    return f"memory budget: {text}; device {limit.label}{fit}"


def header(subject: Subject, precision: str) -> str:
    module, names = subject.module, ", ".join(subject.states(precision).optimizers) or "none"
    params = sum(p.numel() for p in module.parameters())
    shape = list(subject.sample_shape())
    return (
        f"memory budget for {type(module).__name__} ({params:,} parameters, optimizer {names}): "
        f"micro-batch data.batch_size={subject.batch_size} of {shape}, "
        f"trainer.accumulate_grad_batches={subject.accumulate}, measured on {subject.device.type}"
    )


def notes(rows: list[Row], subject: Subject, limit: Limit) -> list[str]:
    n = subject.activation_model(rows[0].precision, rows[0].checkpointing).samples
    lines = [
        "activations: what autograd saves for backward in one training_step, measured at "
        f"{n} and {2 * n} samples and linear in the batch; per micro-batch, so "
        f"trainer.accumulate_grad_batches={subject.accumulate} does not change them",
        "not counted: the CUDA context, the caching allocator's slack, backward's temporaries",
    ]
    if subject.shards > 1:
        lines.append(
            f"trainer=fsdp: weights, gradients and optimizer state are per process, 1/"
            f"{subject.shards} of the model's; not counted: the full weights of the one or two "
            "blocks (model shard_unit) gathered at a time"
        )
    if any(normalize(r.precision) != r.effective for r in rows):
        lines.append("16-mixed on CPU: Lightning runs bfloat16 autocast (bf16-mixed) instead")
    lines += measurement_notes(subject, rows[0])
    return lines


def measurement_notes(subject: Subject, row: Row) -> list[str]:
    """How the activations were measured: whole or by depth, and which attention kernel
    the figure assumes."""
    found = subject.activation_model(row.precision, row.checkpointing)
    lines = []
    if found.layers is not None:
        unit = subject.module.shard_unit.__name__  # type: ignore[union-attr]
        lines.append(
            f"activations measured by depth: without and with one of the model's "
            f"{found.layers} {unit} blocks (its shard_unit), {size(found.per_layer or 0)} per "
            f"block and sample, times {found.layers}"
        )
    if found.fake:
        lines.append(
            "activations measured on fake tensors (shapes without data: no memory, no arithmetic)"
        )
    here = "this GPU's" if subject.device.type == "cuda" else "this machine's"
    if subject.attention == "measured":
        lines.append(f"attention: counted as {here} kernels save it")
    elif found.fused_calls:
        lines.append(
            "attention: counted as CUDA's fused kernels (flash / memory-efficient) save it: "
            f"inputs, output and log-sum-exp, whatever {here} kernel keeps "
            "(--attention measured counts that instead)"
        )
    else:
        lines.append(
            "attention: the model calls no scaled_dot_product_attention, so it is counted as "
            f"{here} kernels save it"
        )
    return lines


def rich_table(rows: list[Row], subject: Subject, limit: Limit) -> object:
    """The same table for an interactive terminal."""
    import rich.table

    title = header(subject, rows[0].precision)
    table = rich.table.Table(title=title, caption=f"device: {limit.label}")
    for name in columns(limit):
        table.add_column(name, justify="left" if name in COLUMNS[:2] else "right")
    for row in rows:
        table.add_row(*cells(row, limit))
    return table


def options(subject: Subject, row: Row, limit: Limit) -> list[Option]:
    """What lowers `row`'s total, in the order to try: same effective batch in smaller
    micro-batches, mixed precision, gradient checkpointing, then a card with more memory."""
    found = []
    budget = limit.size if limit.size is not None else row.total
    if row.batch_size > 1:
        smaller = [b for b in range(row.batch_size - 1, 0, -1) if row.batch_size % b == 0]
        reach = {b: subject.row(row.precision, row.checkpointing, b).total for b in smaller}
        pick = next((b for b in smaller if reach[b] <= budget), smaller[-1])
        steps = subject.accumulate * row.batch_size // pick
        change = (
            f"data.batch_size={pick} trainer.accumulate_grad_batches={steps} (same effective batch)"
        )
        found.append(Option(change, reach[pick], reach[pick] <= budget))
    if normalize(row.precision) == "32-true":
        mixed = "bf16-mixed" if "bf16-mixed" in precisions_for(subject.device) else "16-mixed"
        total = _total_or_none(subject, mixed, row.checkpointing)
        if total is not None:
            found.append(Option(f"precision={mixed}", total, total <= budget))
    if row.checkpointing is False:
        # None also for a module not built from its config: it cannot be rebuilt with it.
        total = _total_or_none(subject, row.precision, True)
        if total is not None:
            found.append(Option("model.gradient_checkpointing=true", total, total <= budget))
    bf16 = "bf16" in row.effective
    cards = [c for c in CARDS if not bf16 or "bfloat16" in c.peak_tflops]
    card = min(
        (c for c in cards if c.memory_bytes >= row.total),
        default=None,
        key=lambda c: c.memory_bytes,
    )
    if card is not None:
        name = f"a card with more memory: {card.name} ({card.usable_gib:g} GiB usable)"
        found.append(Option(name, row.total, True))
    return found


def _total_or_none(subject: Subject, precision: str, checkpointing: bool | None) -> int | None:
    """Another setting's total; None when measuring it fails (an option left out, the
    configured setting's figures stand)."""
    try:
        return subject.row(precision, checkpointing).total
    except Exception:  # noqa: BLE001 - the user's code under another setting
        return None


def exceeded(row: Row, limit: Limit, found: list[Option], key: str) -> str:
    """The one-line error when the configured setting does not fit."""
    parts = [str(o) for o in found]
    return (
        f"memory budget: this run needs about {size(row.total)} (weights {size(row.weights)}, "
        f"gradients {size(row.gradients)}, optimizer {size(row.optimizer)}, activations "
        f"{size(row.activations)}), more than the device memory ({limit.label}). Options, in order: "
        f"{'; '.join(parts) or 'none found'}. Or set {key}.enforce=false to start anyway"
    )

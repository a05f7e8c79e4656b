"""The hand-written PyTorch loop the template is compared with.

It does the work `litforge.training.train` does for one experiment, written out plainly:
the same net, datasets, batch size, AdamW parameter groups, warmup + cosine LR, seed;
the training loss (and accuracy for the classifier) logged every `log_every_n_steps`
steps to a CSV file, validation on the same schedule as the Trainer, and a best + last
checkpoint (state dicts) after each validation, as the default callbacks write.
"""

from __future__ import annotations

import contextlib
import csv
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from litforge_examples.nets.gpt import GPT

Batch = tuple[torch.Tensor, torch.Tensor]


def build_net(cfg: DictConfig) -> nn.Module:
    """The plain net of cfg.model, as the LightningModule builds it."""
    net = instantiate(cfg.model.net, _convert_="all")
    if isinstance(net, GPT):
        net.gradient_checkpointing = bool(cfg.model.get("gradient_checkpointing", False))
    return net


def loss_and_correct(net: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Cross-entropy in float32 (as the modules do); correct predictions for a classifier."""
    inputs, targets = batch
    logits = net(inputs)
    if logits.dim() == 3:  # language model: (B, T, V)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()), None
    return F.cross_entropy(logits.float(), targets), (logits.argmax(1) == targets).sum()


def adamw(net: nn.Module, opt: dict[str, Any]) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (as LitforgeModule.configure_optimizers)."""
    kwargs = dict(opt)
    decay = kwargs.pop("weight_decay", 0.0)
    params = [p for p in net.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, **kwargs)


def warmup_cosine(sched: dict[str, Any] | None, total: int) -> Callable[[int], float]:
    warmup = int(sched.get("warmup_steps", 0)) if sched else 0
    floor = float(sched.get("min_lr_ratio", 0.1)) if sched else 1.0

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


@torch.no_grad()
def validate(net: nn.Module, loader: DataLoader, limit: int | None) -> tuple[float, float]:
    """Mean loss and accuracy (nan for a language model) over the validation loader."""
    net.eval()
    total_loss, correct, seen = 0.0, 0, 0
    device = next(net.parameters()).device
    for i, batch in enumerate(loader):
        if limit is not None and i >= limit:
            break
        loss, right = loss_and_correct(net, (batch[0].to(device), batch[1].to(device)))
        total_loss += loss.item() * len(batch[0])
        correct += int(right) if right is not None else 0
        seen += len(batch[0])
    net.train()
    return total_loss / seen, (correct / seen if correct else math.nan)


def fit(
    cfg: DictConfig,
    datamodule: Any,
    steps: int,
    run_dir: Path,
    device: str = "cpu",
    autocast: torch.dtype | None = None,
    on_step: Callable[[int], None] | None = None,
) -> int:
    """Train cfg's model for `steps` optimizer steps the hand-written way; returns steps.

    device, autocast: where to train and the autocast dtype (None: float32), as
    Lightning's `bf16-mixed` does; on_step(step) is called after each optimizer step.
    """
    torch.manual_seed(cfg.seed)
    net = build_net(cfg).to(device)
    amp = (
        torch.autocast(torch.device(device).type, dtype=autocast)
        if autocast is not None
        else contextlib.nullcontext()
    )
    optimizer = adamw(net, {k: v for k, v in cfg.model.optimizer.items() if not k.startswith("_")})
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(cfg.model.get("scheduler"), steps)
    )
    datamodule.setup("fit")
    gen = torch.Generator().manual_seed(cfg.seed)
    train = DataLoader(datamodule.train_set, cfg.data.batch_size, shuffle=True, generator=gen)
    val = DataLoader(datamodule.val_set, cfg.data.batch_size)
    t = cfg.trainer
    val_every = t.val_check_interval if t.check_val_every_n_epoch is None else None
    limit_val = t.limit_val_batches
    log_every = int(t.log_every_n_steps)
    is_lm = isinstance(net, GPT)
    best = math.inf
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)

    def checkpoint(step: int, val_loss: float, val_acc: float) -> None:
        nonlocal best
        state = {"net": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        score = val_loss if is_lm else -val_acc  # lower is better
        if score < best:
            best = score
            torch.save(state, run_dir / "checkpoints" / "best.pt")
        torch.save(state, run_dir / "checkpoints" / "last.pt")

    net.train()
    step = 0
    with open(run_dir / "metrics.csv", "w", newline="") as log_file:
        log = csv.writer(log_file)
        log.writerow(["step", "train/loss", "lr"])
        while step < steps:
            correct = torch.zeros((), dtype=torch.long)
            for i, batch in enumerate(train):
                batch = (batch[0].to(device, non_blocking=True), batch[1].to(device))
                with amp:
                    loss, right = loss_and_correct(net, batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                step += 1
                if on_step is not None:
                    on_step(step)
                if right is not None:
                    correct += right  # train accuracy, reported per epoch
                if step % log_every == 0:
                    log.writerow([step, loss.item(), scheduler.get_last_lr()[0]])
                # Validate and checkpoint when the Trainer would: every `val_every` steps,
                # or at the end of each epoch (also when the last step ends the epoch).
                epoch_end = i == len(train) - 1
                if (val_every and step % int(val_every) == 0) or (epoch_end and not val_every):
                    checkpoint(step, *validate(net, val, limit_val))
                if step >= steps:
                    break
    return step

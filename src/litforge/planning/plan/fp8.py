"""precision=fp8 in the plan: its step time is bf16-mixed's times the predicted factor of
its float8 layers (litforge.planning.fp8_speed), per micro-batch; the layers are those
precision=fp8's filter picks at its defaults (precision.fp8_min_dim=2048, no fp8_skip)."""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_leaves

from litforge.planning.budget.copies import rebuild
from litforge.planning.budget.measure import Subject
from litforge.planning.fp8_speed import LinearUse, linear_uses, step_factor
from litforge.precision.fp8.layers import choose
from litforge.precision.fp8.training import DEFAULT_MIN_DIM

_USES: dict[int, list[LinearUse]] = {}  # by id(subject): one meta forward per plan


def uses_of(subject: Subject) -> list[LinearUse]:
    """The subject's Linear layers as a step uses them, from a meta copy (no memory)."""
    key = id(subject)
    if key not in _USES:
        with torch.random.fork_rng(), torch.device("meta"):
            copy = rebuild(subject.module, subject.config)
        picked = {x.name for x in choose(copy, DEFAULT_MIN_DIM) if x.fp8}
        sample = next(t for t in tree_leaves(subject.batch(1)) if isinstance(t, torch.Tensor))
        try:
            _USES[key] = linear_uses(copy, sample, picked)
        except RuntimeError:
            # A forward with data-dependent branches cannot run on meta tensors (Hugging
            # Face's causal mask asks whether its positions are packed). A model fed token
            # ids applies each Linear layer to every token: as many rows as the sample has.
            if sample.is_floating_point():
                raise
            _USES[key] = [LinearUse(name, sample.numel(), sub.in_features, sub.out_features,
                                    name in picked)
                          for name, sub in copy.named_modules()
                          if isinstance(sub, torch.nn.Linear)]  # fmt: skip
    return _USES[key]


def fp8_factor(subject: Subject, micro_batch: int, model_flops: float) -> float:
    """fp8's step time over bf16-mixed's at this micro-batch."""
    return step_factor(uses_of(subject), micro_batch, model_flops)

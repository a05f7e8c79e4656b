"""What litforge's own config keys accept: one table, checked before anything is built.

Only the keys litforge itself reads (the run, trainer, checkpoint, processes, precision):
the user's groups (`model`, `data`, and `_target_` objects in callbacks and loggers) are
checked against the signatures of what they build (litforge.validation.targets), never here.
A table rather than Hydra structured configs: those check types only, during composition,
and fail with Hydra's multi-line error; ranges, "what would be valid" and one-line errors
need code anyway. `tests/test_schema.py` composes every option of every group and fails
when one of litforge's keys has no rule here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import Any

from litforge.precision import PRECISIONS
from litforge.validation.rules import Bool, Either, Free, Int, ListOf, Num, OneOf, Rule, Text

FRACTION = Either((Int(0), Num(0.0, 1.0)))  # a batch count, or a share of the batches
# At most 200 characters: a file name (checkpoint.dir/NAME-<job>/..., NAME.log) has 255.
SAFE_NAME = Text(r"(?!\.{1,2}$)[A-Za-z0-9][A-Za-z0-9._=,+-]{0,199}", "a name of up to 200 letters, digits and ._=,+- (no / or ..)", null=True)  # fmt: skip
DEVICES = Either((Int(1), OneOf((-1, "auto")), ListOf(Int(0)), Text(r"\d+(,\d+)*,?", "'0,1'")))
MAX_TIME = Text(r"\d+:\d{1,2}:\d{1,2}:\d{1,2}", "DD:HH:MM:SS, e.g. 00:12:00:00", null=True)

# Most specific first: the first pattern that matches a key decides (fnmatch, * spans dots).
RULES: dict[str, Rule] = {
    # conf/train.yaml, conf/eval.yaml
    "task_name": Text(),
    "seed": Int(0, 2**32 - 1),
    "run_dir": Text(),
    "run_name": SAFE_NAME,
    "resume": OneOf(("auto", "never")),
    "resume_shape": OneOf(("adapt", "strict")),
    "microbatch.auto": Bool(),
    "restore.mode": OneOf(("finetune", "hotstart", "continue"), null=True),
    "restore.from": Text(null=True),
    "restore.strict": Bool(),
    "model.freeze": ListOf(Text(), null=True),
    "compile.enabled": Bool(),
    "compile.backend": Text(),
    "compile.mode": OneOf(
        ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"), null=True
    ),
    "compile.fullgraph": Bool(),
    "compile.dynamic": Bool(null=True),
    "compile.cache": Bool(),
    "compile.cache_key_file": Text(null=True),  # a path only: the key itself never in config
    "compile.cache_max_bytes": Int(1),
    "ckpt_path": Text(null=True),
    "test": Bool(),
    "print_config": Bool(),
    "optimized_metric": Either((Text(), ListOf(Text())), null=True),  # a list: multi-objective
    "optimized_mode": OneOf(("min", "max")),
    "processes.rendezvous_timeout_s": Num(0.0, open_lo=True),
    "processes.collective_timeout_s": Num(0.0, open_lo=True),
    "processes.oversubscribe": Bool(),
    "sample.prompt": Text(null=True),
    "inference.precisions": ListOf(OneOf((*PRECISIONS, 32, "int8-dynamic")), null=True),
    "inference.threshold": Num(0.0, 1.0, open_lo=True, open_hi=True),
    "sample.max_new_tokens": Int(1),
    "sample.temperature": Num(0.0, open_lo=True),
    "sample.top_k": Int(1, null=True),
    # conf/trainer: lightning.Trainer's arguments
    "trainer.accelerator": OneOf(("auto", "cpu", "gpu", "cuda", "mps", "tpu")),
    "trainer.strategy*": Free(),  # a name Lightning checks, or a {_target_: ...} object
    "trainer.devices": DEVICES,
    "trainer.num_nodes": Int(1),
    "trainer.precision": OneOf(PRECISIONS),
    "trainer.fast_dev_run": Either((Bool(), Int(1))),
    "trainer.max_epochs": Int(-1, null=True),
    "trainer.min_epochs": Int(0, null=True),
    "trainer.max_steps": Either((OneOf((-1,)), Int(1))),
    "trainer.min_steps": Int(0, null=True),
    "trainer.max_time": MAX_TIME,
    "trainer.max_time.*": Int(0),  # the {days: , hours: , minutes: , seconds: } form
    "trainer.limit_*_batches": Either((Int(0), Num(0.0, 1.0)), null=True),
    "trainer.overfit_batches": FRACTION,
    "trainer.val_check_interval": Either((Int(1), Num(0.0, 1.0, open_lo=True)), null=True),
    "trainer.check_val_every_n_epoch": Int(1, null=True),
    "trainer.num_sanity_val_steps": Int(-1, null=True),
    "trainer.log_every_n_steps": Int(1, null=True),
    "trainer.accumulate_grad_batches": Int(1),
    "trainer.gradient_clip_val": Num(0.0, null=True),
    "trainer.gradient_clip_algorithm": OneOf(("norm", "value"), null=True),
    "trainer.deterministic": Either((Bool(), OneOf(("warn",))), null=True),
    "trainer.reload_dataloaders_every_n_epochs": Int(0),
    "trainer.default_root_dir": Text(null=True),
    "trainer.model_registry": Text(null=True),
    "trainer.profiler*": Free(),  # null, a name, or a {_target_: ...} object
    "trainer.plugins": Free(),
    "trainer.enable_*": Bool(null=True),
    "trainer.*": Bool(null=True),  # the remaining switches (benchmark, inference_mode, ...)
    # conf/callbacks, conf/logger: `_target_` objects whose constructors check their kwargs
    "callbacks.*": Free(),
    "logger.*": Free(),
    # conf/checkpoint
    "checkpoint": Free(),  # null for checkpoint=none
    "checkpoint.dir": Text(r".*\S.*", "a local path or an fsspec URL such as s3://BUCKET/prefix"),
    "checkpoint.every_n_train_steps": Int(1, null=True),
    "checkpoint.train_time_interval": Num(0.0, open_lo=True, null=True),
    "checkpoint.save_on_validation": Bool(),
    "checkpoint.keep_last": Int(1),
    "checkpoint.monitor": Text(null=True),
    "checkpoint.mode": OneOf(("min", "max")),
    "checkpoint.async_upload": Bool(),
    "checkpoint.upload_retries": Int(1),
    "checkpoint.final_upload_timeout_s": Num(0.0),
    "checkpoint.timeout_s": Num(0.0, open_lo=True),
    "checkpoint.storage_options*": Free(),  # the fsspec filesystem's own keyword arguments
    "checkpoint.staging_dir": Text(),
    # conf/precision: GradScaler and matmul settings (issue 12, numerics)
    "precision.optimizer_eps": Num(0.0, open_lo=True),  # conf/model's optimizer eps
    "precision.matmul": OneOf(("highest", "high", "medium")),  # torch.set_float32_matmul_precision
    "precision.init_scale": Num(0.0, open_lo=True),
    "precision.growth_factor": Num(1.0, open_lo=True),
    "precision.backoff_factor": Num(0.0, 1.0, open_lo=True, open_hi=True),
    "precision.growth_interval": Int(1),
    # conf/train.yaml budget: the memory budget (issue 12, budget)
    # conf/experiment/precision_ab.yaml (issue 12, precision A/B)
    "precision_ab.compare": Either(
        (OneOf(("auto",)), ListOf(OneOf(("bf16-mixed", "16-mixed", "bf16-true", "16-true"))))
    ),
    "precision_ab.threshold": Num(0.0, open_lo=True),
    "precision_ab.smooth_steps": Int(1),
}


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every scalar, list, null or empty mapping in a plain config."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


def rule_for(key: str) -> Rule | None:
    for pattern, rule in RULES.items():
        if fnmatch.fnmatchcase(key, pattern):
            return rule
    return None


# The groups whose keys belong to the user's code: their signatures decide.
# Groups whose keys are the project's: `paths` is lightning-hydra-template's, which
# litforge only provides (src/litforge/conf/paths/default.yaml) and never reads.
USER_GROUPS = ("model", "data", "paths")


def litforge_leaves(config: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """leaves() of every key litforge reads (the user's groups left out)."""
    for key, value in config.items():
        if key not in USER_GROUPS:
            yield from leaves({key: value})
        elif key == "model" and isinstance(value, dict) and "freeze" in value:
            yield "model.freeze", value["freeze"]  # litforge's key in the user's group


def problems(config: dict[str, Any]) -> Iterator[tuple[str, Any, str]]:
    """(key, value, what is valid) for each value its rule refuses, in config order."""
    for key, value in litforge_leaves(config):
        rule = rule_for(key)
        if rule is not None and (reason := rule.problem(value)) is not None:
            yield key, value, reason

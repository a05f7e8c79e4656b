"""The evaluation recipe: test one checkpoint, optionally sample from a language model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from litforge import build, checkpoint_file, console, run_record
from litforge.checkpointing.resume import fetch_explicit
from litforge.checks import check_config
from litforge.cli import (
    CONF_DIR,
    quote_numeric_choices,
    report_user_errors,
    silence_known_upstream_warnings,
)
from litforge.errors import ConfigError


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    check_config(cfg)
    run_dir = Path(cfg.run_dir)
    # A local file or any fsspec URL (s3://bucket/run/step-00000120.ckpt).
    local = fetch_explicit(str(cfg.ckpt_path), run_dir / "downloaded")
    checkpoint = checkpoint_file.load(str(local))
    run_record.write_start(run_dir, cfg)

    datamodule = build.build_datamodule(cfg)
    module = build.build_module(cfg)
    checkpoint_file.check_matches(checkpoint, module, cfg.ckpt_path)
    if cfg.sample.prompt is not None and not hasattr(module, "sample"):
        raise ConfigError(f"sample.prompt is set, but {type(module).__name__} cannot generate text")
    # Casts as needed: a bf16-true checkpoint evaluates in float32 and vice versa.
    module.load_state_dict(checkpoint["state_dict"])
    loggers = build.build_loggers(cfg)
    callbacks = build.build_callbacks(cfg, with_logger=bool(loggers))
    trainer = build.build_trainer(cfg, callbacks, loggers, enable_checkpointing=False)
    results = trainer.test(module, datamodule=datamodule)
    metrics = {k: run_record.as_float(v) for k, v in results[0].items()}
    metrics.update(
        ckpt_path=str(cfg.ckpt_path),
        precision_requested=str(cfg.trainer.precision),
        precision_effective=build.effective_precision(trainer),
    )
    if trainer.is_global_zero:
        run_record.write_metrics(run_dir, metrics)
        if cfg.sample.prompt is not None:
            sample(module, cfg.sample, run_dir)
        console.info("run directory: %s", run_dir.resolve())
    return metrics


def sample(module: Any, opts: DictConfig, run_dir: Path) -> str:
    """Continue opts.prompt with the model; printed and saved as run_dir/sample.txt."""
    from litforge.data.text import decode, encode

    ids = module.sample(
        encode(opts.prompt).long(), opts.max_new_tokens, opts.temperature, opts.top_k
    )
    text = decode(ids)
    (run_dir / "sample.txt").write_text(text)
    print(text)
    return text


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="eval")
def _hydra_main(cfg: DictConfig) -> None:
    with report_user_errors():
        evaluate(cfg)


def main() -> None:
    """Console entry point (the root script calls this)."""
    sys.argv = quote_numeric_choices(sys.argv)
    silence_known_upstream_warnings()
    _hydra_main()

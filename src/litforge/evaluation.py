"""The evaluation recipe: test one checkpoint, optionally sample from a language model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge import build, checkpointing, console, run_record
from litforge.cli import entry_point
from litforge.errors import ConfigError
from litforge.validation.checks import check_config


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test `cfg.ckpt_path` (a local file or any fsspec URL) with the configured model."""
    check_config(cfg)
    if cfg.get("ckpt_path") is None:
        raise ConfigError("ckpt_path is required: python eval.py ckpt_path=FILE_OR_URL")
    run_dir = Path(cfg.run_dir)
    module = build.build_module(cfg)
    datamodule = build.build_datamodule(cfg)
    checkpointing.load_weights(module, cfg.model, str(cfg.ckpt_path), run_dir / "downloaded")
    if cfg.sample.prompt is not None and not (
        hasattr(module, "sample") and hasattr(datamodule, "decode")
    ):
        raise ConfigError(
            f"sample.prompt is set, but {type(module).__name__} on "
            f"{type(datamodule).__name__} cannot generate text (use experiment=gpt_char)"
        )
    run_record.write_start(run_dir, cfg)

    trainer = build.build_trainer(cfg, datamodule=datamodule, enable_checkpointing=False)
    results = trainer.test(module, datamodule=datamodule, verbose=console.interactive())
    metrics = run_record.floats(results[0])
    metrics.update(
        ckpt_path=str(cfg.ckpt_path),
        precision_requested=str(cfg.trainer.precision),
        precision_effective=build.effective_precision(trainer),
    )
    run_record.write_metrics(run_dir, metrics)
    if trainer.is_global_zero and cfg.sample.prompt is not None:
        sample(module, datamodule, cfg.sample, run_dir)
    return metrics


def sample(module: Any, datamodule: Any, opts: DictConfig, run_dir: Path) -> str:
    """Continue opts.prompt with the model; printed and saved as run_dir/sample.txt."""
    prompt = datamodule.encode(opts.prompt).long()
    ids = module.sample(prompt, opts.max_new_tokens, opts.temperature, opts.top_k)
    text = datamodule.decode(ids)
    (run_dir / "sample.txt").write_text(text)
    print(text)
    return text


main = entry_point(evaluate, config_name="eval")

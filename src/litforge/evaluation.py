"""The evaluation recipe: test one checkpoint, optionally sample from a language model, or
test it in several precisions (`inference.precisions`) and say which are safe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, open_dict

from litforge import build, checkpointing, console, hooks, run_record
from litforge.cli import entry_point
from litforge.errors import ConfigError
from litforge.evaluation_settings import InferenceSettings, SampleSettings
from litforge.precision import on_cuda, requested_precision
from litforge.validation.checks import check_config


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test `cfg.ckpt_path` (a local file or any fsspec URL) with the configured model."""
    check_config(cfg)
    inference = InferenceSettings.of(cfg)
    names = None
    if inference.precisions:
        from litforge.precision_checks.inference_ab import compare

        names = compare.check_precisions(list(inference.precisions))
    if cfg.get("ckpt_path") is None:
        raise ConfigError("ckpt_path is required: python eval.py ckpt_path=FILE_OR_URL")
    run_dir = Path(cfg.run_dir)
    module = build.build_module(cfg)
    datamodule = build.build_datamodule(cfg)
    checkpointing.load_weights(module, cfg.model, str(cfg.ckpt_path), run_dir / "downloaded")
    sampling = SampleSettings.of(cfg)
    if sampling.prompt is not None and not (
        isinstance(module, hooks.SamplesText) and isinstance(datamodule, hooks.DecodesText)
    ):
        raise ConfigError(
            f"sample.prompt is set, but {type(module).__name__} on "
            f"{type(datamodule).__name__} cannot generate text (use experiment=gpt_char)"
        )
    if names:
        run_record.write_start(run_dir, cfg)
        return compare_precisions(cfg, datamodule, names, inference.threshold)
    run_record.write_start(run_dir, cfg)

    trainer = build.build_trainer(cfg, datamodule=datamodule, enable_checkpointing=False)
    results = trainer.test(module, datamodule=datamodule, verbose=console.interactive())
    metrics = run_record.floats(results[0])
    metrics.update(
        ckpt_path=str(cfg.ckpt_path),
        precision_requested=requested_precision(cfg),
        precision_effective=build.effective_precision(trainer),
    )
    run_record.write_metrics(run_dir, metrics)
    if trainer.is_global_zero and sampling.prompt is not None:
        sample(module, datamodule, sampling, run_dir)
    return metrics


def compare_precisions(
    cfg: DictConfig, datamodule: Any, names: list[str], threshold: float
) -> dict[str, Any]:
    """Test the checkpoint in each precision (float32 first); write and print the report."""
    from litforge.precision_checks.inference_ab import compare, write

    run_dir = Path(cfg.run_dir)
    metrics, effective, unavailable = {}, {}, {}
    for name in names:
        run_cfg = cfg.copy()
        with open_dict(run_cfg):
            run_cfg.trainer.precision = "32" if name == compare.INT8 else name
            run_cfg.logger = {}  # one report, not a logged run per precision
        backend = None
        if name == compare.INT8:
            on_gpu = on_cuda(str(cfg.trainer.get("accelerator", "auto")))
            backend = compare.int8_backend(torch.device("cuda" if on_gpu else "cpu"))
            if backend is None:
                unavailable[name] = (
                    "torchao is not installed, and torch.ao's quantize_dynamic runs on CPU only"
                )
                continue
            if backend != "torchao":
                with open_dict(run_cfg):
                    run_cfg.trainer.accelerator = "cpu"
        module = build.build_module(run_cfg)
        checkpointing.load_weights(module, cfg.model, str(cfg.ckpt_path), run_dir / "downloaded")
        if backend is not None:
            module = compare.quantize(module, backend)
        trainer = build.build_trainer(run_cfg, datamodule=datamodule, enable_checkpointing=False)
        results = trainer.test(module, datamodule=datamodule, verbose=False)
        metrics[name] = run_record.floats(results[0])
        ran_as = build.effective_precision(trainer)
        effective[name] = f"{ran_as} + int8 Linear ({backend})" if backend else ran_as
    found = compare.report(metrics, effective, unavailable, threshold)
    found["checkpoint"] = str(cfg.ckpt_path)
    page = write.write(found, run_dir)
    print(page.read_text())
    summary = {f"{k}@{row['precision']}": v for row in found["precisions"]
               for k, v in row["metrics"].items()}  # fmt: skip
    run_record.write_metrics(run_dir, {**summary, "ckpt_path": str(cfg.ckpt_path)})
    return found


def sample(module: Any, datamodule: Any, opts: SampleSettings, run_dir: Path) -> str:
    """Continue opts.prompt with the model; printed and saved as run_dir/sample.txt."""
    prompt = datamodule.encode(opts.prompt).long()
    ids = module.sample(prompt, opts.max_new_tokens, opts.temperature, opts.top_k)
    text = datamodule.decode(ids)
    (run_dir / "sample.txt").write_text(text)
    print(text)
    return text


main = entry_point(evaluate, config_name="eval")

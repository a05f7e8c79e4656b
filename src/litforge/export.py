"""`python -m litforge.export CKPT OUT`: a checkpoint of a Hugging Face model as a Hugging
Face directory (`save_pretrained`, safetensors) that `AutoModelForCausalLM.from_pretrained`
loads, LoRA adapters merged into the weights, with the base model's tokenizer.

The module is rebuilt from the checkpoint's own model record (`litforge_model`), so no
config is needed; its net must say how to merge (`merged()`, as
`litforge.hf.HFCausalLM` does).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from omegaconf import OmegaConf

from litforge.build import construct
from litforge.checkpointing import checkpoint_file
from litforge.checkpointing.model_record import RECORD_KEY
from litforge.errors import ConfigError
from litforge.exits import report_user_errors


def export(checkpoint_path: str, out: Path) -> Path:
    local = checkpoint_file.fetch(checkpoint_path, out.parent / ".litforge-export")
    checkpoint = checkpoint_file.load(str(local))
    record = checkpoint.get(RECORD_KEY)
    if not isinstance(record, dict):
        raise ConfigError(f"{checkpoint_path} has no model record (not written by litforge)")
    module = construct(OmegaConf.create(record), "model")
    net = getattr(module, "net", None)
    if not callable(getattr(net, "merged", None)):
        raise ConfigError(
            f"{checkpoint_path} is a checkpoint of {record.get('_target_')} with net "
            f"{type(net).__name__}, not of a Hugging Face model (model=hf_causal_lm)"
        )
    module.load_state_dict(checkpoint["state_dict"], strict=bool(module.strict_loading))
    merged = net.merged()
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out, safe_serialization=True)
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(net.pretrained)).save_pretrained(out)
    except (OSError, ValueError):
        pass  # a base without a tokenizer of its own: the weights are what matter
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a checkpoint file or URL")
    parser.add_argument("out", type=Path, help="the Hugging Face directory to write")
    args = parser.parse_args(argv)
    with report_user_errors():
        written = export(args.checkpoint, args.out)
    print(f"wrote {written} (AutoModelForCausalLM.from_pretrained loads it)")


if __name__ == "__main__":
    main()

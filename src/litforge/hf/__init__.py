"""Hugging Face causal LMs for litforge (the `hf` extra): the model as a net
(`HFCausalLM`, with LoRA adapters through peft), a text DataModule tokenizing a local file
with its tokenizer (`HFTextDataModule`); `python -m litforge.export` writes one back as a
Hugging Face directory. transformers and peft are imported only when these are built."""

from litforge.hf.model import HFCausalLM, check_pretrained
from litforge.hf.text import HFTextDataModule

__all__ = ["HFCausalLM", "HFTextDataModule", "check_pretrained"]

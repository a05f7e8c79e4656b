"""Hugging Face models the tests build here, with no download: a tiny random-weight Llama
with a tokenizer trained on Python's own text, and a 7B-shaped Llama's config alone."""

from __future__ import annotations

from pathlib import Path

import torch


def tiny_llama(directory: Path, vocab: int = 300) -> Path:
    """A 2-layer Llama and a byte-level BPE tokenizer of about `vocab` tokens, saved."""
    return tiny_causal_lm(directory, "llama", vocab)


def tiny_causal_lm(directory: Path, kind: str, vocab: int = 300) -> Path:
    """A 2-layer random-weight causal LM of `kind` (llama, gpt2 or qwen2) and a byte-level
    BPE tokenizer of about `vocab` tokens, saved with save_pretrained."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,  # fmt: skip
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    text = [topics[k] for k in sorted(topics)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<eos>"]))  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>")
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    # Rows to spare beyond the tokenizer for the other kinds (Qwen2 counts one more token).
    size = len(tokenizer) + (0 if kind == "llama" else 16)
    if kind == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=size, n_embd=32, n_layer=2, n_head=2,
                                           n_positions=128))  # fmt: skip
    else:
        config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM),
                                     "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[kind]  # fmt: skip
        model = model_class(config_class(
            vocab_size=size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2 if kind == "llama" else 1,
            max_position_embeddings=128))  # fmt: skip
    model.save_pretrained(directory)
    return directory


def llama_7b_config(directory: Path) -> Path:
    """config.json of a Llama 2 7B shape (transformers' LlamaConfig defaults: 32 layers of
    width 4096, MLP 11008, vocabulary 32000), no weights: what the budget and plan need."""
    from transformers import LlamaConfig

    config = LlamaConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (4096, 32, 32000)
    config.save_pretrained(directory)
    return directory

"""Character-level text that ships with Python: `pydoc_data.topics` (about 465k
characters), or the source of some standard-library modules (`data.corpus`).

The vocabulary is the 128 ASCII code points: the corpus is ASCII except ~575 typographic
characters (curly quotes, dashes, ellipses), which are mapped to ASCII look-alikes, so a
token is a character and the loss is in nats per character.
"""

from __future__ import annotations

import torch
from typing_extensions import Unpack

from litforge import (
    ConfigError,
    LoaderArgs,
    SplitDataModule,
    StreamArgs,
    StreamDataModule,
    TokenWindows,
    at_least,
)

VOCAB_SIZE = 128
_ASCII_LOOKALIKES = str.maketrans(
    {"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2026": "...",
     "\u2014": "--", "\u2013": "-", "\u00df": "ss", "\u00b0": " deg"}
)  # fmt: skip


def encode(text: str) -> torch.Tensor:
    """Text -> 1-D uint8 tensor of ASCII ids; other characters become '?'."""
    ascii_text = text.translate(_ASCII_LOOKALIKES).encode("ascii", errors="replace")
    return torch.frombuffer(bytearray(ascii_text), dtype=torch.uint8).clone()


def decode(ids: torch.Tensor | list[int]) -> str:
    """ASCII ids -> text; ids 128..255 become U+FFFD."""
    return bytes(int(i) for i in ids).decode("ascii", errors="replace")


def load_corpus(corpus: str = "pydoc_topics") -> str:
    """The text of `corpus`, the same on every run of one Python version:
    pydoc_topics: every pydoc topic (the language reference's prose), in sorted key order;
    stdlib_source: the source code of a fixed list of standard-library modules (another
    kind of text, for fine-tuning a model pretrained on the first)."""
    if corpus == "pydoc_topics":
        from pydoc_data.topics import topics

        return "\n\n".join(topics[key] for key in sorted(topics))
    if corpus == "stdlib_source":
        import importlib
        import inspect

        return "\n\n".join(inspect.getsource(importlib.import_module(m)) for m in STDLIB_MODULES)
    raise ConfigError(f"data.corpus={corpus!r} must be one of: {', '.join(CORPORA)}")


# About 470k characters of Python source (3.11), all shipped with the interpreter.
STDLIB_MODULES = ("argparse", "textwrap", "difflib", "fractions", "statistics", "calendar",
                  "heapq", "bisect", "shlex", "string", "csv", "fnmatch", "glob", "tokenize")  # fmt: skip
CORPORA = ("pydoc_topics", "stdlib_source")


# Character windows are the library's token windows (one id per character).
CharWindows = TokenWindows


class TextDataModule(SplitDataModule):
    """Split by position: the first `train_fraction` for training, then val, then test."""

    provides = "token windows"

    def __init__(
        self,
        block_size: int = 128,
        batch_size: int = 32,
        train_fraction: float = 0.9,
        val_fraction: float = 0.05,
        corpus: str = "pydoc_topics",
        **loader: Unpack[LoaderArgs],  # shuffle_seed, shuffle, num_workers
    ) -> None:
        super().__init__(batch_size=batch_size, **loader)
        at_least(block_size=(block_size, 1))
        if not (0 < train_fraction and 0 <= val_fraction and train_fraction + val_fraction < 1):
            raise ConfigError(
                f"data.train_fraction={train_fraction} + data.val_fraction={val_fraction} "
                "must lie in (0, 1): the rest is the test split"
            )
        if corpus not in CORPORA:
            raise ConfigError(f"data.corpus={corpus!r} must be one of: {', '.join(CORPORA)}")
        self.corpus = corpus
        self.block_size = block_size
        self.train_fraction = train_fraction
        self.val_fraction = val_fraction

    # The tokenizer, so eval.py can sample text without knowing which data it is.
    encode = staticmethod(encode)
    decode = staticmethod(decode)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        ids = encode(load_corpus(self.corpus))
        n_train = int(len(ids) * self.train_fraction)
        n_val = int(len(ids) * self.val_fraction)
        self.train_set = CharWindows(ids[:n_train], self.block_size)
        self.val_set = CharWindows(ids[n_train : n_train + n_val], self.block_size)
        self.test_set = CharWindows(ids[n_train + n_val :], self.block_size)


class TextStream(StreamDataModule):
    """The text splits streamed from shards (`litforge shards write data=text --url URL`):
    windows of `block_size` characters, which must be the size they were written with."""

    provides = "token windows"
    encode = staticmethod(encode)
    decode = staticmethod(decode)

    def __init__(
        self, url: str | None = None, block_size: int = 128, batch_size: int = 32,
        **stream: Unpack[StreamArgs],
    ) -> None:  # fmt: skip
        super().__init__(url, batch_size, **stream)
        written = self.split_streams["train"][0].index.extra.get("block_size")
        if written is not None and written != block_size:
            raise ConfigError(
                f"data.block_size={block_size}, but the shards at {self.url} hold windows of "
                f"{written}: set data.block_size={written}, or write them again with "
                f"`litforge shards write data=text data.block_size={block_size} --url URL`"
            )
        self.block_size = block_size

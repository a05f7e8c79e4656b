"""A local text file, tokenized with a Hugging Face tokenizer, in windows of `block_size`
tokens: the data for `litforge.hf.HFCausalLM` (a project's conf/data/hf_text.yaml).

`tokenizer` is a directory written by `save_pretrained` (usually the model's own) or a
hub id. Split by position like `TextDataModule`: the first `train_fraction` for training,
then validation, then test. Needs the `hf` extra.
"""

from __future__ import annotations

from pathlib import Path

import torch
from typing_extensions import Unpack

from litforge.data.loaders import LoaderArgs, SplitDataModule, at_least
from litforge.data.windows import TokenWindows
from litforge.errors import ConfigError
from litforge.hf.model import check_pretrained


class HFTextDataModule(SplitDataModule):
    provides = "token windows"

    def __init__(
        self,
        path: str | None,
        tokenizer: str | None,
        block_size: int = 128,
        batch_size: int = 8,
        train_fraction: float = 0.9,
        val_fraction: float = 0.05,
        **loader: Unpack[LoaderArgs],  # shuffle_seed, shuffle, num_workers
    ) -> None:
        super().__init__(batch_size=batch_size, **loader)
        at_least(block_size=(block_size, 1))
        if not path or not Path(path).is_file():
            raise ConfigError(f"data.path={path}: no such file (a UTF-8 text file to train on)")
        check_pretrained(tokenizer, "data.tokenizer")
        self.path, self.tokenizer_name, self.block_size = path, tokenizer, block_size
        self.train_fraction, self.val_fraction = train_fraction, val_fraction
        self._tokenizer = None

    @property
    def tokenizer(self):  # noqa: ANN201 - transformers' PreTrainedTokenizerBase
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_name)
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor(self.tokenizer(text)["input_ids"], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self._check_vocabulary()
        ids = self.encode(Path(self.path).read_text(encoding="utf-8"))
        n_train = int(len(ids) * self.train_fraction)
        n_val = int(len(ids) * self.val_fraction)
        self.train_set = TokenWindows(ids[:n_train], self.block_size)
        self.val_set = TokenWindows(ids[n_train : n_train + n_val], self.block_size)
        self.test_set = TokenWindows(ids[n_train + n_val :], self.block_size)

    def _check_vocabulary(self) -> None:
        """Token ids the model's embedding has no row for would fail at the first batch with
        an index error deep in the model: say it first (this runs before every other setup)."""
        module = getattr(getattr(self, "trainer", None), "lightning_module", None)
        rows = getattr(getattr(module, "net", None), "vocab_size", None)
        if isinstance(rows, int) and self.vocab_size > rows:
            raise ConfigError(
                f"data.tokenizer={self.tokenizer_name} has {self.vocab_size} tokens, but "
                f"model.net's embedding has {rows} rows; use the model's own tokenizer"
            )

"""Character-level text: encoding, windows, and the positional split."""

from __future__ import annotations

import pytest
import torch

from litforge_examples.data.text import (
    VOCAB_SIZE,
    CharWindows,
    TextDataModule,
    decode,
    encode,
    load_corpus,
)


def test_encode_decode_round_trip_on_ascii():
    text = "".join(chr(c) for c in range(VOCAB_SIZE)) + "Hello, world!\n\tdef f(x): return x"
    ids = encode(text)
    assert ids.dtype == torch.uint8
    assert ids.tolist() == [ord(c) for c in text]
    assert decode(ids) == text
    assert decode(ids.tolist()) == text


def test_encode_maps_typography_to_ascii_and_the_rest_to_question_marks():
    assert decode(encode("\u201cit\u2019s\u201d \u2014 ok\u2026")) == '"it\'s" -- ok...'
    assert decode(encode("caf\u00e9 \u4e2d")) == "caf? ?"


def test_char_windows_targets_are_inputs_shifted_by_one():
    ids = torch.arange(23, dtype=torch.uint8)
    windows = CharWindows(ids, block_size=5)
    assert len(windows) == 4  # (23 - 1) // 5: the last window needs one extra target
    for i in range(len(windows)):
        x, y = windows[i]
        assert x.dtype == torch.long and x.shape == y.shape == (5,)
        assert torch.equal(x, torch.arange(5 * i, 5 * i + 5))
        assert torch.equal(y, x + 1)
    # Exactly divisible: no target for the final character, so one window fewer.
    assert len(CharWindows(torch.arange(20), block_size=5)) == 3


@pytest.fixture(scope="module")
def corpus_ids() -> torch.Tensor:
    return encode(load_corpus())


def test_corpus_is_ascii_and_deterministic(corpus_ids):
    assert len(corpus_ids) > 100_000
    assert int(corpus_ids.max()) < VOCAB_SIZE
    assert torch.equal(encode(load_corpus()), corpus_ids)


@pytest.mark.parametrize("block_size", [128, 32])
def test_split_is_90_5_5_by_position_in_windows(corpus_ids, block_size):
    dm = TextDataModule(block_size=block_size)
    dm.setup("fit")
    n = len(corpus_ids)
    n_train, n_val = int(n * 0.9), int(n * 0.05)
    parts = (dm.train_set, dm.val_set, dm.test_set)
    assert [len(p.ids) for p in parts] == [n_train, n_val, n - n_train - n_val]
    assert torch.equal(torch.cat([p.ids for p in parts]), corpus_ids.long())
    for part in parts:
        assert part.block_size == block_size
        assert len(part) == (len(part.ids) - 1) // block_size
    # In windows, the fractions hold to within one window of each part's length.
    windows = [len(p) * block_size for p in parts]
    for got, fraction in zip(windows, (0.9, 0.05, 0.05), strict=True):
        assert abs(got - fraction * n) <= block_size + 1


@pytest.mark.parametrize(
    "train_fraction, val_fraction", [(0.0, 0.05), (0.95, 0.05), (0.9, -0.1), (1.2, 0.0)]
)
def test_invalid_fractions_are_rejected(train_fraction, val_fraction):
    with pytest.raises(ValueError, match="train_fraction"):
        TextDataModule(train_fraction=train_fraction, val_fraction=val_fraction)

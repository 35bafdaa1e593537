"""Keep freed memory in the process (glibc malloc), for inference on CPU.

Inference allocates the same few large activations batch after batch (an FFN output of 32 sentences is ~6 MB).
glibc serves blocks that large from fresh mappings or trims them back to the OS when freed, so every batch
page-faults and zeroes them again: on this project's CPU that cost the int8 encoder 11-15 % of its time
(docs/results/benchmarks.md). Raising malloc's mmap and trim thresholds keeps the memory for reuse, as jemalloc or
tcmalloc (which PyTorch's CPU tuning guide suggests) would. The price: the process keeps its peak heap until
exit. `maskplay score`, `embed` and `eval` call this; library users may call it themselves."""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory(mmap_threshold: int = 32 << 20, trim_threshold: int = 1 << 30,
                      top_pad: int = 64 << 20) -> bool:
    """Serve blocks below `mmap_threshold` bytes from the heap, keep up to `trim_threshold` bytes of freed heap,
    and grow it `top_pad` bytes at a time. True if applied; False where malloc is not glibc's (macOS, musl,
    Windows), where nothing changes."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: other C libraries' mallopt takes other parameters  # noqa: B018
    except (OSError, AttributeError):
        return False
    settings = ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold), (_M_TOP_PAD, top_pad))
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)

"""maskplay.runtime.allocator: freed heap memory stays in the process once asked, and the inference commands ask."""

from __future__ import annotations

import subprocess
import sys

import pytest

from maskplay.runtime.allocator import keep_freed_memory

PROBE = r"""
import sys
from maskplay.runtime.allocator import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
import torch

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

blocks = [torch.ones(256 * 1024) for _ in range(200)]  # 200 x 1 MiB, under the mmap threshold: heap
high = rss_mb()
del blocks
print(high - rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not keep_freed_memory(),
                    reason="glibc malloc only")
def test_freed_heap_memory_stays_in_the_process_only_when_asked():
    def released(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
        return float(out.stdout.split()[-1])

    assert released("default") > 100  # glibc hands the freed 200 MiB back to the OS
    assert released("keep") < 20  # kept for the next batch


def test_inference_commands_keep_freed_memory(monkeypatch, tmp_path):
    import maskplay.runtime.allocator
    from maskplay.cli import main

    calls = []
    monkeypatch.setattr(maskplay.runtime.allocator, "keep_freed_memory", lambda: calls.append(1) or True)
    assert main(["embed", str(tmp_path / "missing-model"), "--file", str(tmp_path / "x.txt"),
                 "--out", str(tmp_path / "x.npy")]) == 2  # fails on the missing model, after the allocator call
    assert calls == [1]
    main(["masks", "--out", str(tmp_path / "masks.png")])
    assert calls == [1]  # not for other commands

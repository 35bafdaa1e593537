"""Shared pieces of the benchmark scripts: machine description, matmul peak, timing, memory sampling, results."""

from __future__ import annotations

import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

# The instruction sets that decide which precision is fast on a CPU (docs/results/benchmarks.md keeps one table per
# kind): native bf16 dot products, int8 dot products (VNNI), and AMX's tile units (bf16 and int8 matrices).
KIND_FLAGS = (("AMX", ("amx_tile",)), ("bf16", ("avx512_bf16", "amx_bf16")), ("VNNI", ("avx512_vnni", "avx_vnni")))

# oneDNN's ONEDNN_MAX_CPU_ISA holds its kernels below what the CPU has, which is how a kind this machine is not gets
# measured on it (AVX2-only, or Ice Lake's VNNI without bf16 on a Zen4): the flags each cap takes away.
_AMX = {"amx_tile", "amx_bf16", "amx_int8", "amx_fp16"}
_BF16 = {"avx512_bf16"} | _AMX
_AVX512 = {"avx512f", "avx512_vnni"} | _BF16
ISA_CAPS: dict[str, set[str]] = {
    "SSE41": {"avx", "avx2", "avx_vnni"} | _AVX512, "AVX": {"avx2", "avx_vnni"} | _AVX512,
    "AVX2": {"avx_vnni"} | _AVX512, "AVX2_VNNI": _AVX512, "AVX2_VNNI_2": _AVX512,
    "AVX512_CORE": {"avx512_vnni", "avx_vnni"} | _BF16, "AVX512_CORE_VNNI": _BF16,
    "AVX512_CORE_BF16": _AMX, "AVX512_CORE_FP16": _AMX, "AVX10_1_512": _AMX,
}


def isa_cap(environ: dict[str, str] | None = None) -> str | None:
    """ONEDNN_MAX_CPU_ISA where it holds oneDNN below the CPU (upper-cased), else None ("ALL", "DEFAULT", unset or
    a cap that takes no flag away)."""
    cap = (os.environ if environ is None else environ).get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    return cap if cap in ISA_CAPS else None


def cpu_kind(flags: str | set[str], bf16_over_fp32: float | None = None) -> str:
    """The CPU kind from /proc/cpuinfo's flags (a string as the file gives it, or a set): the features of KIND_FLAGS
    it has, joined by " + " (Sapphire Rapids: "AMX + bf16 + VNNI", Zen4: "bf16 + VNNI", Ice Lake: "VNNI"), or
    "AVX2-only" where it has none of them and AVX2 (no AVX2 either: "no AVX2").

    The flags say what a CPU has, not how fast it runs it: some Xeons have AVX-512 BF16 whose matmuls run at half
    fp32's rate, and there maskplay's best precision is fp32's, as on a CPU without bf16. Given the measured ratio
    of bf16 to fp32 matmul throughput (matmul_peak), bf16 below fp32's speed is "slow bf16"."""
    have = set(flags.split()) if isinstance(flags, str) else set(flags)
    kinds = [name for name, any_of in KIND_FLAGS if have & set(any_of)]
    if bf16_over_fp32 is not None and bf16_over_fp32 < 1.0:
        kinds = ["slow bf16" if name == "bf16" else name for name in kinds]
    if kinds:
        return " + ".join(kinds)
    return "AVX2-only" if "avx2" in have else "no AVX2"


def cpu_info(cpuinfo: str | None = None, bf16_over_fp32: float | None = None,
             environ: dict[str, str] | None = None) -> dict[str, object]:
    """This CPU's model name, kind (cpu_kind, with the measured bf16 / fp32 matmul ratio where given) and the flags
    that decide it, read from /proc/cpuinfo (or the text given); an unreadable file gives "unknown CPU" and kind
    "unknown". Where ONEDNN_MAX_CPU_ISA (in environ, default os.environ) holds oneDNN below the CPU, the kind is the
    one it emulates, marked "(emulated)", the flags those left to it, and "emulated" names the cap."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return {"model": "unknown CPU", "kind": "unknown", "flags": []}
    fields = dict(line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    cap = isa_cap(environ)
    held = flags - ISA_CAPS[cap] if cap else flags
    decisive = sorted(held & ({"avx2", "avx512f"} | {f for _, any_of in KIND_FLAGS for f in any_of}))
    kind = cpu_kind(held, bf16_over_fp32) if flags else "unknown"
    info: dict[str, object] = {"model": fields.get("model name", "unknown CPU"), "kind": kind, "flags": decisive}
    if cap and held != flags and flags:
        info["kind"] = f"{kind} (emulated)"
        info["emulated"] = f"ONEDNN_MAX_CPU_ISA={cap}"
    if bf16_over_fp32 is not None:
        info["bf16_over_fp32"] = round(bf16_over_fp32, 3)
    return info


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    amx = "amx_bf16" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads, "
            f"AMX {'yes' if amx else 'no'}, Python {platform.python_version()}")


def resolve_dtype(name: str, config: object, rows: int) -> str:
    """A benchmark's --dtype with auto resolved as maskplay's commands resolve it (maskplay.runtime.precision_probe: bf16
    where this machine's bf16 matmuls measure faster, else fp32), the choice printed; other names as given."""
    from maskplay.runtime.precision_probe import AUTO, resolve

    if name != AUTO:
        return name
    choice = resolve(AUTO, "cpu", config, rows=rows, inference=True)
    print(choice.describe(), flush=True)
    return choice.precision.value


def call_times(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> list[float]:
    """The seconds of each of `repeats` calls of fn, after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """The fastest of `repeats` timed calls, in seconds (the least disturbed by other work)."""
    return min(call_times(fn, repeats, warmup))


def median_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """The median of `repeats` timed calls, in seconds."""
    return statistics.median(call_times(fn, repeats, warmup))


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 10) -> float:
    """Measured matmul throughput of this machine for `dtype`, in FLOP/s (the best of `repeats`). Where one
    product takes over a second (bf16 emulated on an AVX2-only CPU: ~17 s at 2048^3) the first timing is the
    answer: the peak is then only a reference for MFU columns, and ten such products would take minutes."""
    a = torch.randn(size, size, dtype=dtype)
    b = torch.randn(size, size, dtype=dtype)
    start = time.perf_counter()
    torch.mm(a, b)
    first = time.perf_counter() - start
    if first > 1.0:
        return 2 * size**3 / first
    seconds = best_time(lambda: torch.mm(a, b), repeats=repeats, warmup=1)
    return 2 * size**3 / seconds


def interleaved(cases: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Time each case once per round, rounds interleaved (A B C A B C ...), so that a change in the machine's
    load hits every case alike; returns the median seconds per call of each case."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()  # warm-up
    for _ in range(rounds):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def report(result: dict[str, object], out: Path | None, echo: bool = True) -> None:
    """A script's results: printed as JSON (where `echo`), and written to `out` (its folder made) where given."""
    text = json.dumps(result, indent=2)
    if echo:
        print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Samples this process's resident memory every few milliseconds while active."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        self.start = rss_bytes()
        self.peak = self.start
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())

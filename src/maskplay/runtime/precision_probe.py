"""`precision = "auto"`: measure once per machine whether bf16 matmuls beat fp32 ones, and choose.

CPUs differ by three orders of magnitude in bf16: with AVX-512 BF16 or AMX a bf16 matmul runs 4-6x faster than
fp32, with AVX-512 alone about half as fast, and with AVX2 only it is emulated (~1 GFLOP/s, hundreds of times
slower). The probe times a few matmuls of the model's own shapes (the FFN, the attention projections, the LM head)
in fp32 and bf16, well under a second, and caches the measured speed ratio on disk in precision-probe.json, in
maskplay's cache as the fetched models and data are (`~/.cache/maskplay`, or `$XDG_CACHE_HOME/maskplay`, or
`$MASKPLAY_CACHE`: download.cache_root), keyed by the CPU model and flags, the torch version, the oneDNN/ATen ISA
settings and the shapes; `MASKPLAY_REPROBE=1` measures again; `MASKPLAY_AUTO_PRECISION=fp32|bf16` sets what auto
means without measuring (the test suite pins fp32 so). `auto` is bf16 when bf16 measured at least `MIN_SPEEDUP`
times faster than fp32, else fp32; on CUDA it is bf16 when the GPU supports it. int8 is never chosen by `auto` (ask
for it). An explicit bf16 on a CPU where it measured more than 2x slower than fp32 (emulated) warns with the
slowdown."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .precision import Precision

AUTO = "auto"
MIN_SPEEDUP = 1.25  # auto picks bf16 when its matmuls measure at least this many times fp32's speed
EMULATED_BELOW = 0.5  # an explicit bf16 (or bf16-autocast) warns when its matmuls measure below this ratio
CACHE_ENV, REPROBE_ENV = "MASKPLAY_CACHE", "MASKPLAY_REPROBE"  # the cache's directory (download.cache_root)
AUTO_ENV = "MASKPLAY_AUTO_PRECISION"  # fp32 or bf16: what auto means here, without measuring (CI, clusters)
CACHE_FILE = "precision-probe.json"
EMULATED_STOP = 8  # a bf16 product this many times slower than fp32: emulated, the probe stops there
GIVE_UP_FLOOR = 0.005  # seconds
OP_FLOPS = 64e6  # rows of each timed product are cut to about this many FLOPs (at least MIN_ROWS rows)
MIN_ROWS = 16


@dataclass(frozen=True)
class Choice:
    """What a precision request resolved to, and why."""

    requested: str
    precision: Precision
    ratio: float | None = None  # bf16 matmul speed / fp32 matmul speed measured on this machine (None: not probed)
    source: str = "explicit"  # explicit | probe | cache | cuda | env

    def describe(self) -> str:
        """The one log line: `precision auto -> bf16 (bf16 matmuls 4.2x fp32 on this CPU, cached)`."""
        if self.source == "env":
            why = f"set by {AUTO_ENV}"
        elif self.source == "cuda":
            why = "CUDA GPU " + ("with" if self.precision is Precision.bf16 else "without") + " bf16 support"
        elif self.ratio is None:
            why = "as given"
        else:
            why = (f"bf16 matmuls {self.ratio:.2g}x fp32's speed on this CPU, "
                   f"{'measured now' if self.source == 'probe' else 'measured earlier, cached'}; "
                   f"{REPROBE_ENV}=1 measures again")
        return f"precision {self.requested} -> {self.precision.value} ({why})"


def model_shapes(hidden: int, intermediate: int, vocab: int, layers: int) -> list[tuple[int, int, int]]:
    """(weight count per token, k, n) of the model's matmuls: attention projections, FFN up and down, LM head."""
    return [(4 * layers, hidden, hidden), (layers, hidden, intermediate), (layers, intermediate, hidden),
            (1, hidden, vocab)]


def shapes_of(config: Any) -> list[tuple[int, int, int]]:
    """model_shapes of a ModelConfig (or anything with its size fields)."""
    return model_shapes(config.hidden_size, config.intermediate_size, config.vocab_size, config.num_layers)


def time_matmul(m: int, k: int, n: int, dtype: torch.dtype, budget: float = 0.05, give_up: float = math.inf) -> float:
    """Seconds per (m x k) @ (k x n) product in `dtype` on the CPU: the best of up to 5 calls after a warm-up
    (oneDNN builds its kernel on the first call), fewer when they use up `budget` seconds, and only one when it
    takes longer than `give_up` seconds."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    best, spent = math.inf, 0.0
    for _ in range(5):
        start = time.perf_counter()
        torch.mm(a, b)
        seconds = time.perf_counter() - start
        best, spent = min(best, seconds), spent + seconds
        if spent > budget or seconds > give_up:
            break
    return max(best, 1e-9)


def measure_ratio(shapes: list[tuple[int, int, int]], rows: int = 256) -> float:
    """bf16 speed / fp32 speed for the matmuls in `shapes` (from model_shapes), each weighted by its share of
    the model's work; `rows` = tokens per forward (batch x length), cut so that each product stays small. When
    bf16 is emulated (one product more than EMULATED_STOP times slower than in fp32), the products left are not
    timed: they would take seconds and cannot change the answer. The products run on one thread: the ratio is
    the ISA's, and a single thread is not thrown off by other processes on the machine (a threaded product waits
    for its slowest thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(shapes, rows)
    finally:
        torch.set_num_threads(threads)


def _measure(shapes: list[tuple[int, int, int]], rows: int) -> float:
    fp32 = bf16 = 0.0
    for count, k, n in shapes:
        m = max(MIN_ROWS, min(rows, int(OP_FLOPS // (2 * k * n))))
        t32 = time_matmul(m, k, n, torch.float32)
        # give_up: one call this slow is enough to know; the floor keeps a hiccup of the machine on a product of
        # microseconds from passing for emulation (the best of several calls decides then)
        t16 = time_matmul(m, k, n, torch.bfloat16, give_up=max(EMULATED_STOP * t32, GIVE_UP_FLOOR))
        if t16 > EMULATED_STOP * t32:
            return t32 / t16
        fp32 += count * t32 / m  # seconds per token for this product
        bf16 += count * t16 / m
    return fp32 / bf16


def cache_path() -> Path:
    """The probe's file in maskplay's cache, the directory the models and data are fetched into."""
    from .download import cache_root  # urllib and http.client: imported only when the probe runs

    return cache_root() / CACHE_FILE


def machine_key(shapes: list[tuple[int, int, int]], rows: int) -> str:
    """What the measured ratio depends on: CPU model and flags, torch, ISA limits, the shapes."""
    cpu, flags = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not cpu:
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = line.split(":", 1)[1].strip()
    except OSError:
        pass
    cpu = cpu or platform.processor() or platform.machine()
    isa = ",".join(f"{v}={os.environ.get(v, '')}" for v in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
                                                           "ATEN_CPU_CAPABILITY"))
    flags_hash = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return (f"{cpu} | flags {flags_hash} | torch {torch.__version__} {torch.backends.cpu.get_cpu_capability()} | "
            f"{isa} | rows {rows} | shapes {shapes}")


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or damaged: measured again and rewritten


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home: the probe runs again next time, nothing else changes


def cpu_ratio(shapes: list[tuple[int, int, int]], rows: int = 256) -> tuple[float, str]:
    """(bf16/fp32 speed ratio, "cache" or "probe"): from the cache when this machine and these shapes were
    measured before (and MASKPLAY_REPROBE is not set), else measured now and cached."""
    key, path = machine_key(shapes, rows), cache_path()
    cache = _read_cache(path)
    entry = cache.get(key)
    if os.environ.get(REPROBE_ENV, "") in ("", "0") and isinstance(entry, dict) and \
            isinstance(entry.get("ratio"), (int, float)) and entry["ratio"] > 0:
        return float(entry["ratio"]), "cache"
    ratio = measure_ratio(shapes, rows)
    cache = _read_cache(path)  # another process may have written meanwhile
    cache[key] = {"ratio": ratio, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    _write_cache(path, cache)
    return ratio, "probe"


def resolve(requested: str | Precision, device: torch.device | str = "cpu", config: Any = None,
            rows: int = 256, inference: bool = False, warn: Callable[[str], None] | None = None) -> Choice:
    """The precision to run in. `requested` = auto | fp32 | bf16 | bf16-autocast | int8; `config` = the model's
    ModelConfig (its shapes are probed; None = a BERT-base-sized model); `rows` = tokens per forward. auto picks
    bf16 or fp32 (never int8); an explicit bf16 on a CPU that emulates it calls `warn` (default: stderr)."""
    requested = requested.value if isinstance(requested, Precision) else str(requested)
    device = torch.device(device)
    if requested != AUTO:
        precision = Precision(requested)
        if inference is False and not precision.trainable:
            raise ValueError(f"precision {precision.value} is for inference only")
        if device.type != "cpu" or precision not in (Precision.bf16, Precision.bf16_autocast):
            return Choice(requested, precision)
        ratio, source = cpu_ratio(_shapes(config), rows)
        if ratio < EMULATED_BELOW:
            message = (f"WARNING: precision {requested}: bf16 matmuls measured {1 / ratio:.1f}x slower than fp32 on "
                       f"this CPU (bf16 is emulated here); precision fp32 or auto would run faster")
            (warn or (lambda m: print(m, file=sys.stderr, flush=True)))(message)
        return Choice(requested, precision, ratio, source)
    pinned = os.environ.get(AUTO_ENV, "")
    if pinned:
        if pinned not in (Precision.fp32.value, Precision.bf16.value):
            raise ValueError(f"{AUTO_ENV}={pinned!r}: give fp32 or bf16 (or leave it unset to measure)")
        return Choice(requested, Precision(pinned), None, "env")
    if device.type == "cuda":
        supported = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return Choice(requested, Precision.bf16 if supported else Precision.fp32, None, "cuda")
    if device.type != "cpu":
        return Choice(requested, Precision.fp32)
    ratio, source = cpu_ratio(_shapes(config), rows)
    return Choice(requested, Precision.bf16 if ratio >= MIN_SPEEDUP else Precision.fp32, ratio, source)


def _shapes(config: Any) -> list[tuple[int, int, int]]:
    return shapes_of(config) if config is not None else model_shapes(768, 3072, 30522, 12)


def model_dir_config(model_dir: str | Path) -> Any:
    """The ModelConfig in a model directory (or a bundled model's), or None when it cannot be read (the model's
    loading then reports the problem)."""
    try:
        from .model_dir import WEIGHTS_NAME, check_sizes_fit, read_model_config, read_shapes, resolve_model_dir

        config = read_model_config(model_dir)
        # the probe multiplies matrices of the config's sizes: sizes the weights cannot hold are not probed
        check_sizes_fit(config, read_shapes(resolve_model_dir(model_dir) / WEIGHTS_NAME), "config", "weights")
        return config
    except Exception:  # noqa: BLE001 - any problem here is reported by the model's loading right after
        return None


# what `auto` chose in this command, printed once it has succeeded: (line, whether it was measured now)
_announcements: list[tuple[str, bool]] = []


def resolve_cli(requested: str, device: torch.device | str, model: Any = None, model_dir: str | Path | None = None,
                rows: int = 32 * 32, command: str = "") -> Precision:
    """resolve() for an inference command: the model (or its directory) gives the shapes; an emulated explicit
    bf16 warns on stderr at once; when `requested` is auto, the choice is one line on stderr printed by
    announce() when the command has succeeded (maskplay.cli.main), so that an error stays a one-line error; the
    line is printed when the probe measured now (the first run on a machine, or MASKPLAY_REPROBE=1), or verbose."""
    config = getattr(model, "config", None) if model is not None else None
    if config is None and model_dir is not None:
        config = model_dir_config(model_dir)
    prefix = f"maskplay {command}: " if command else ""
    choice = resolve(requested, device, config, rows=rows, inference=True,
                     warn=lambda m: print(prefix + m, file=sys.stderr, flush=True))
    if requested == AUTO:
        _announcements.append((prefix + choice.describe(), choice.source == "probe"))
    return choice.precision


def announce(show: bool = True, verbose: bool = False) -> None:
    """Print (show=False: drop) the choices resolve_cli made for auto: those measured now, or all when verbose (a
    choice read from the cache or set by the environment is the same every run: it is not repeated)."""
    if show:
        lines = [line for line, measured in _announcements if measured or verbose]
        for line in dict.fromkeys(lines):  # eval resolves once per data set: say it once
            print(line, file=sys.stderr, flush=True)
    _announcements.clear()

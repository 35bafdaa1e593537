"""Host synchronisations per training step, counted on a CPU: where a strict-small recipe's step (forward, loss,
backward, the optimizer's update; benchmarks/probes/step_ops.py's step) would make the host wait for a GPU.

On a GPU the host queues kernels and runs ahead of them; reading a device value back (`item()`, `bool()` or `int()`
of a tensor, `nonzero` and boolean indexing, whose output size the host must know) makes it wait until the device
has finished everything queued, and the device then idles while the host queues the next kernels. A CPU has no such
wait, so this counts where it would be: a TorchDispatchMode marks every tensor that would live on the device (the
model's parameters and buffers, the batch moved to it, and everything computed from them, optimizer state included)
and records each operator that reads one of them back, with the line of maskplay that called it. Tensors made on the
host (the optimizer's step counters, the masking's random draws before the batch moves) are not marked: reading them
costs nothing. `tolist()` and `numpy()` of a marked tensor are watched directly (on a CPU they dispatch nothing);
`.cpu()` is not seen.

    python benchmarks/probes/step_syncs.py                      # every recipe
    python benchmarks/probes/step_syncs.py --families gpt-bert \
        --out results/gpu/babylm-gpt-bert-one-call-h200/step-syncs.json
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

from maskplay.nn import outputs

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from step_ops import recipe_model  # noqa: E402

# operators whose result the host must read from the device: a value (item, bool, int, float of a tensor) or an
# output size that depends on the values
READS_BACK = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "unique_consecutive",
              "repeat_interleave", "equal", "is_nonzero"}

# a marked tensor copied to the host whole (on a CPU these dispatch nothing)
HOST_COPIES = ("tolist", "numpy")
# indexing with a boolean mask: the output's size is the mask's count, read back (x[mask], x[mask] = y)
MASK_INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}
# functions that read back on a CPU only (they ask `device.type == "cpu"`, which this count cannot fake): the ids'
# range check (MaskplayModel.check_inputs: on a GPU at inference only) and the dead-rows check (guard_empty_rows)
HOST_ONLY = ("(check_inputs)", "(guard_empty_rows)")


class DeviceReads(TorchDispatchMode):
    """Marks tensors that would live on the device (`seeds` and everything computed from a marked tensor) and counts
    the operators that read a marked tensor back, by the innermost maskplay source line that called them."""

    def __init__(self, seeds: Iterable[torch.Tensor]) -> None:
        super().__init__()
        self.on_device = WeakTensorKeyDictionary()
        for t in seeds:
            self.on_device[t] = True
        self.reads: Counter[str] = Counter()

    def __enter__(self):  # noqa: ANN204
        # tolist(), numpy() and item() of a CPU tensor dispatch nothing this mode sees: watch them directly
        self.watched = {name: getattr(torch.Tensor, name) for name in HOST_COPIES}
        for name, method in self.watched.items():
            setattr(torch.Tensor, name, self._watch(name, method))
        # the CPU-only check of the host's labelled rows (nn/outputs.Targets.of_labels) is not a GPU's read
        self.checked, outputs._KnownRows.check_on_cpu = outputs._KnownRows.check_on_cpu, False
        return super().__enter__()

    def __exit__(self, *exc):  # noqa: ANN002, ANN204
        for name, method in self.watched.items():
            setattr(torch.Tensor, name, method)
        outputs._KnownRows.check_on_cpu = self.checked
        return super().__exit__(*exc)

    def _watch(self, name: str, method):  # noqa: ANN001, ANN202
        def watched(tensor: torch.Tensor, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if tensor in self.on_device:
                where = caller()
                if not where.endswith(HOST_ONLY):
                    self.reads[f"{name} at {where}"] += 1
            return method(tensor, *args, **kwargs)
        return watched

    def mark(self, tensors: Iterable[torch.Tensor]) -> None:
        for t in tensors:
            self.on_device[t] = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        marked = any(t in self.on_device for t in inputs)
        name = func.overloadpacket.__name__
        if marked and (name in READS_BACK or (name in MASK_INDEXING and any(t.dtype == torch.bool for t in inputs[1:]))):
            where = caller()
            if not where.endswith(HOST_ONLY):
                self.reads[f"{name} at {where}"] += 1
        out = func(*args, **kwargs)
        if marked:
            self.mark(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def caller() -> str:
    """The innermost frame in maskplay's source (or a benchmark) that led to this operator."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename.replace("\\", "/")
        if "/maskplay/" in path and "/torch/" not in path:
            return f"{path[path.rindex('/maskplay/') + 1:]}:{frame.lineno} ({frame.name})"
    return "outside maskplay"


def count_reads(step: Callable[[DeviceReads], None], seeds: Iterable[torch.Tensor], warm: bool = True) -> Counter[str]:
    """Reads back during one call of step(mode), after a warm call outside the count (lazy set-up, optimizer state)."""
    seeds = list(seeds)
    if warm:
        with DeviceReads(seeds) as mode:
            step(mode)
    with DeviceReads(seeds) as mode:
        step(mode)
    return mode.reads


def recipe_step(family: str, rows: int, sets: list[str]):  # noqa: ANN201
    """The recipe's model, optimizer and a step over a fresh masked batch (made on the host, then marked as moved)."""
    from maskplay.runtime.precision import forward_in

    model, opt, shape = recipe_model(family, sets)
    ids = torch.randint(7, shape.vocab, (rows, shape.seq_len), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[-1, shape.seq_len * 3 // 4:] = False  # a packed batch's last row is rarely full
    generator = torch.Generator().manual_seed(0)

    def step(mode: DeviceReads) -> None:
        batch = model.training_batch(ids, mask, generator=generator)  # on the host, as the trainer makes it
        mode.mark(batch.values())  # ... then moved to the device
        forward_in(model, "bf16-autocast", **batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, [*model.parameters(), *model.buffers()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--rows", type=int, default=4, help="rows of 128 tokens per batch")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model overrides")
    p.add_argument("--out", default=None, help="also write the counts as JSON here")
    args = p.parse_args()
    result = {}
    for family in args.families:
        step, seeds = recipe_step(family, args.rows, args.set)
        reads = count_reads(step, seeds)
        result[family] = {"reads": sum(reads.values()), "where": dict(sorted(reads.items()))}
        print(f"{family} recipe: {sum(reads.values())} reads back a step")
        for where, n in sorted(reads.items()):
            print(f"  {n:>4}  {where}")
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": args.rows, "set": args.set, "families": result}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""model.reversible against the plain pre-LN backbone (docs/guides/switches.md): activation memory and step time of one
training step, a GPT of 12 layers at 2,048 tokens (batch 1, fp32; a narrow width so that it runs on a CPU).

Two memory figures per case: the bytes autograd keeps for the backward pass at the end of the forward (every
tensor saved for backward, parameters left out: the activation memory proper, exact), and the growth of the
process's peak resident memory over the first forward + backward (transients and the allocator included; each
case in a fresh subprocess, gradients allocated beforehand, so that no freed pages serve the step). Step time:
forward + backward, the two cases interleaved round by round in one process, the median; the ratio is what to read.

    OMP_NUM_THREADS=2 nice .venv/bin/python benchmarks/probes/reversible_memory.py \
        --out results/probes/reversible-memory.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import PeakRSS, interleaved, machine  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.families import MaskplayModel, build_model  # noqa: E402

CASES = {"plain": False, "reversible": True}


def model_of(args: argparse.Namespace, reversible: bool) -> MaskplayModel:
    torch.manual_seed(0)
    config = preset("tiny", family="gpt", num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                    intermediate_size=4 * args.hidden, max_position=args.length, vocab_size=args.vocab,
                    norm_placement="pre", reversible=reversible, hidden_dropout=0.0, attention_dropout=0.0)
    return build_model(config).train()


def step(model: MaskplayModel, ids: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model(ids, labels=ids).loss.backward()


def saved_bytes(model: MaskplayModel, ids: torch.Tensor) -> int:
    """The bytes of every non-parameter tensor autograd saves for the backward pass during the forward (a storage
    saved twice counted once)."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, torch.nn.Parameter):
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        return t

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(ids, labels=ids).loss
    loss.backward()
    return sum(storages.values())


def peak_growth(args: argparse.Namespace, case: str) -> int:
    """One step's peak resident memory growth, measured in a fresh subprocess (the case's own)."""
    setting = [f"--{k}={getattr(args, k)}" for k in ("layers", "length", "hidden", "heads", "vocab")]
    argv = [sys.executable, __file__, *setting, "--child", case]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def child(args: argparse.Namespace) -> None:
    model = model_of(args, CASES[args.child])
    ids = torch.randint(7, args.vocab, (1, args.length))
    for p in model.parameters():  # the gradients, which both cases hold alike, before the measurement
        p.grad = torch.zeros_like(p)
    # the first step: a later one would reuse pages the allocator kept from this one, and read low
    with PeakRSS() as peak:
        model(ids, labels=ids).loss.backward()
    print(peak.peak - peak.start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", choices=CASES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    models = {case: model_of(args, reversible) for case, reversible in CASES.items()}
    ids = torch.randint(7, args.vocab, (1, args.length))
    rows = {case: {"saved_MB": round(saved_bytes(model, ids) / 2**20, 1),
                   "peak_growth_MB": round(peak_growth(args, case) / 2**20, 1)} for case, model in models.items()}
    seconds = interleaved({case: (lambda m=model: step(m, ids)) for case, model in models.items()}, args.rounds)
    for case in CASES:
        rows[case]["step_s"] = round(seconds[case], 3)
        for key in ("saved_MB", "peak_growth_MB", "step_s"):
            rows[case][f"{key}_vs_plain"] = round(rows[case][key] / rows["plain"][key], 3)
        print(json.dumps({"case": case, **rows[case]}), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        setting = {k: getattr(args, k) for k in ("layers", "length", "hidden", "heads", "vocab", "rounds")}
        args.out.write_text(json.dumps({"model": "gpt, pre-LN, fp32, batch 1", **setting, "machine": machine(),
                                        "command": f"python benchmarks/probes/reversible_memory.py --out {args.out}",
                                        "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

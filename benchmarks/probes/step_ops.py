"""Operators per training step: how many kernels a step of each strict-small recipe (configs/babylm/) launches, next
to HuggingFace's BertForMaskedLM / GPT2LMHeadModel of the same 12 x 384 size, counted by torch.profiler on the CPU
(forward, backward and the optimizer's update: the operators called from Python or autograd, each at least one
kernel on a GPU; views and other operators that launch no kernel left out).

On a GPU a step of a small model is bound by launching its kernels, not by computing them: the recipes ran at 3 %
MFU on an H200 (docs/results/training-speed.md). The count is the same on any machine, so this tracks that cost
on a machine without a GPU.

    python benchmarks/probes/step_ops.py                  # every recipe and both HuggingFace twins
    python benchmarks/probes/step_ops.py --families gpt-bert --set denseformer=false
    python benchmarks/probes/step_ops.py --rows 256 --blocking cpu --no-hf   # the recipes' real batch,
                                                                             # the loss as a CPU walks it

The loss and the scores walk the (N, V) logits in blocks whose size depends on the device (heads.blocking: a CPU's
cache-sized ones, a GPU's few large ones), so their share of the count grows with the rows a step holds unless the
GPU's blocking is counted (--blocking gpu, the default: what a GPU launches).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from gpu_train_speed import model_config, shapes  # noqa: E402

from maskplay.config import apply_overrides  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.runtime.precision import forward_in  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# operators that make no kernel of their own (views, shape queries, wrappers whose work is counted inside them)
NO_KERNEL = {"as_strided", "view", "reshape", "select", "slice", "expand", "t", "transpose", "permute", "unsqueeze",
             "detach", "empty", "empty_strided", "alias", "_unsafe_view", "to", "_to_copy", "squeeze", "unbind", "split",
             "chunk", "narrow", "contiguous", "lift_fresh", "empty_like", "result_type", "_reshape_alias", "unflatten",
             "flatten", "size", "stride", "is_nonzero", "item", "_local_scalar_dense", "resolve_conj", "resolve_neg",
             "view_as", "expand_as", "matmul", "linear", "dropout", "scaled_dot_product_attention", "layer_norm",
             "zeros_like", "ones_like"}


def count_ops(step) -> int:  # noqa: ANN001
    """The operators a step calls from Python or autograd (not those inside another operator: on the CPU a
    torch._foreach_* update runs one operator per tensor inside it, on a GPU a few kernels for them all)."""
    step()  # the optimizer's state and any lazy set-up happen outside the count
    with torch.profiler.profile() as prof:
        step()
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and e.name[len("aten::"):] not in NO_KERNEL
               and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


def recipe_model(family: str, sets: list[str]):  # noqa: ANN201
    """A strict-small recipe's model at the 12 x 384 shape (with model overrides) in training mode, its optimizer
    (configs/babylm/strict-small-FAMILY.toml's), and the shape."""
    from maskplay.tasks.train import load_train_config
    from maskplay.tasks.train.schedule import build_optimizer

    shape = shapes(False)["babylm"]
    config = model_config(shape, family, recipe=True)
    if sets:
        config = apply_overrides(config, sets)
    torch.manual_seed(0)
    model = build_model(config).train()
    opt = build_optimizer(model, load_train_config(REPO / "configs" / "babylm" / f"strict-small-{family}.toml").optim)
    return model, opt, shape


def ours(family: str, sets: list[str], rows: int):  # noqa: ANN201
    model, opt, shape = recipe_model(family, sets)
    ids = torch.randint(7, shape.vocab, (rows, shape.seq_len))
    mask = torch.ones_like(ids, dtype=torch.bool)
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))

    def step() -> None:
        forward_in(model, "bf16-autocast", **batch).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def hf(kind: str, rows: int):  # noqa: ANN201
    import transformers

    shape = shapes(False)["babylm"]
    if kind == "bert":
        cfg = transformers.BertConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                                      num_attention_heads=shape.heads, intermediate_size=shape.ffn,
                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                      attn_implementation="sdpa")
        model = transformers.BertForMaskedLM(cfg).train()
    else:
        cfg = transformers.GPT2Config(vocab_size=shape.vocab, n_positions=shape.seq_len, n_embd=shape.hidden,
                                      n_layer=shape.layers, n_head=shape.heads, n_inner=shape.ffn, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa")
        model = transformers.GPT2LMHeadModel(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.randint(7, shape.vocab, (rows, shape.seq_len))

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--families", nargs="+", default=["gpt", "bert", "tta", "gpt-bert"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model overrides for ours")
    p.add_argument("--rows", type=int, default=2, help="rows of 128 tokens per batch")
    p.add_argument("--blocking", choices=["gpu", "cpu"], default="gpu",
                   help="walk the loss's logits as on a GPU (few large blocks) or as on a CPU (cache-sized blocks)")
    p.add_argument("--no-hf", action="store_true", help="leave out the HuggingFace twins")
    p.add_argument("--out", default=None, help="also write the counts as JSON here")
    args = p.parse_args()
    from maskplay.nn import heads

    policy = heads.GPU_BLOCKING if args.blocking == "gpu" else heads.CPU_BLOCKING
    heads.blocking = lambda device: policy  # this process counts; it trains nothing
    counts = {f"{f} recipe": count_ops(ours(f, args.set, args.rows)) for f in args.families}
    if not args.no_hf:
        counts |= {"HF bert (AdamW)": count_ops(hf("bert", args.rows)), "HF gpt2 (AdamW)": count_ops(hf("gpt2", args.rows))}
    for name, n in counts.items():
        print(f"{name:<24}{n:>8,} operators a step")
    if args.out:
        Path(args.out).write_text(json.dumps({"set": args.set, "rows": args.rows, "blocking": args.blocking,
                                              "counts": counts}, indent=2) + "\n")


if __name__ == "__main__":
    main()

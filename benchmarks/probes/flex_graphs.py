"""What dynamo makes of a forward through FlexAttention (run.flex_attention) under run.compile: graphs, graph breaks
and recompiles for each family and run.compile_scope, over two batches with different masks (and, for GPT-BERT,
another mix of causal and masked rows), and whether each compiled loss equals the eager SDPA one. Traced with
"aot_eager" (dynamo and AOTAutograd, no inductor code) and without gradients: a CPU's inductor cannot lower
FlexAttention over a mask computed in the graph, and its FlexAttention has no backward (nn/attention/flex.py). The
counts are facts of the code, the same on any machine; it runs against another tree by PYTHONPATH, and uses only
what commit e5f4c71 had (torch.compile and nn/regional.compiled_blocks), so it can count the commit before a change.

    python benchmarks/probes/flex_graphs.py --out results/probes/flex-graphs/after.json
    git worktree add --detach ../before e5f4c71
    PYTHONPATH=../before/src python benchmarks/probes/flex_graphs.py --out results/probes/flex-graphs/before-e5f4c71.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch._dynamo
from torch._dynamo.utils import counters, guard_failures

from maskplay.config import ModelConfig
from maskplay.families import build_model
from maskplay.nn.attention import flex
from maskplay.nn.regional import compiled_blocks

SMALL = dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_position=32,
             hidden_dropout=0.0, attention_dropout=0.0)
RECIPE = dict(positions="disentangled", norm_placement="pre", ffn="geglu", denseformer=True)


def batches(model: torch.nn.Module, family: str) -> list[dict[str, torch.Tensor]]:
    """Two batches of 4 x 16: another row padded in each, and for GPT-BERT other rows causal."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for n, (row, end, causal) in enumerate([(1, 11, [True, False, True, False]), (2, 6, [False, True, True, False])]):
        ids = torch.randint(7, SMALL["vocab_size"], (4, 16), generator=gen)
        mask = torch.ones(4, 16, dtype=torch.bool)
        mask[row, end:] = False
        batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(2 + n))
        if family == "gpt-bert":
            batch["causal_rows"] = torch.tensor(causal)
        out.append(batch)
    return out


def count(family: str, scope: str) -> dict:
    torch.manual_seed(0)
    model = build_model(ModelConfig(family=family, **SMALL, **RECIPE)).train()
    torch._dynamo.reset()
    counters.clear()
    guard_failures.clear()
    whole = torch.compile(model.__call__, backend="aot_eager")
    differences = []
    with torch.no_grad(), torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        for batch in batches(model, family):
            want = model(**batch).loss
            with flex.using(True):
                if scope == "step":
                    got = whole(**batch).loss
                else:
                    with compiled_blocks(model, "aot_eager"):
                        got = model(**batch).loss
            differences.append(float((got - want).abs()))
    return {"family": family, "scope": scope, "graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "recompiles": sum(len(v) for v in guard_failures.values()),
            "loss_difference_per_batch": differences}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=["tta", "gpt-bert"])
    parser.add_argument("--scopes", nargs="+", default=["step", "layers"], choices=["step", "layers"])
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    args = parser.parse_args()
    rows = []
    for family in args.families:
        for scope in args.scopes:
            rows.append(count(family, scope))
            print(json.dumps(rows[-1]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

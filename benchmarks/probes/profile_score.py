"""Where scoring and embedding spend their time: maskplay's T-TA one-pass scorer, XLNet's causal scorer
and the T-TA / BERT encoders at the T-TA paper's size (random weights) on real WikiText-103 valid sentences, each
run under torch.profiler with shapes; per path, the share of time in matrix products against everything else, and
the operators (with their input shapes) that take the most self time.

    OMP_NUM_THREADS=2 python benchmarks/probes/profile_score.py --sentences 200 --dtype bf16 \
        --out results/probes/profile-score/epyc-bf16

--dtype is the precision of the maskplay rows (auto: what `maskplay score` would pick here). The table is what
to read on a new CPU (an AMX Xeon, an AVX2-only laptop) before changing anything: a path at a high matmul share is
bound by the arithmetic; one at a low share has overhead left to remove.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from common import machine, resolve_dtype  # noqa: E402
from score_speed import DATA, wikitext_sentences  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.runtime.allocator import keep_freed_memory  # noqa: E402
from maskplay.runtime.precision import Precision  # noqa: E402
from maskplay.tasks.score import Embedder, Scorer  # noqa: E402

MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul", "mkldnn::_linear_pointwise",
           "aten::_scaled_dot_product_flash_attention_for_cpu", "quantized::linear_dynamic", "aten::_weight_int8pack_mm",
           "aten::_int_mm", "onednn::qlinear_pointwise"}


def profile(call: Callable[[], object], repeats: int) -> list[dict]:
    """Self CPU time per (operator, input shapes) over `repeats` calls after one warm-up call, largest first."""
    call()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(repeats):
            call()
    rows = [{"op": e.key, "shapes": str(e.input_shapes), "calls": e.count // repeats,
             "ms_per_call": e.self_cpu_time_total / 1e3 / repeats}
            for e in prof.key_averages(group_by_input_shape=True) if e.self_cpu_time_total > 0]
    return sorted(rows, key=lambda r: -r["ms_per_call"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default="auto")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="profiled calls per path")
    parser.add_argument("--rows", type=int, default=12, help="operators shown per path")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None, help="write OUT.txt (the tables) and OUT.json")
    args = parser.parse_args()
    if not (args.data / "wikitext-103").is_dir():
        parser.error(f"--data {args.data}: no wikitext-103 folder there (the shared data)")
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()  # as `maskplay score` and `embed` run
    tok = load_tokenizer(args.data / "tta-vocab")
    sentences = wikitext_sentences(args.data / "wikitext-103" / "wiki.valid.tokens", args.sentences, 5, 60)
    ids = tok.model_config_ids()
    torch.manual_seed(0)
    models = {family: build_model(preset("tta-paper", family=family, **ids)).eval() for family in ("tta", "bert",
                                                                                                    "xlnet")}
    dtype = resolve_dtype(args.dtype, models["tta"].config, args.batch_size * 32)
    precision = Precision(dtype)
    paths = {
        "T-TA one pass": Scorer(models["tta"], tok, batch_size=args.batch_size, precision=precision).score,
        "T-TA one pass, int8": Scorer(models["tta"], tok, batch_size=args.batch_size, precision=Precision.int8).score,
        "XLNet causal": Scorer(models["xlnet"], tok, batch_size=args.batch_size, method="causal",
                               precision=precision).score,
        "T-TA encode": Embedder(models["tta"], tok, precision=precision).encode,
        "BERT encode": Embedder(models["bert"], tok, precision=precision).encode,
    }
    lines = [f"machine: {machine()}, {torch.get_num_threads()} threads; precision {dtype}; {len(sentences)} "
             f"WikiText-103 valid sentences, batch {args.batch_size}; tta-paper size (3 x 512, vocabulary "
             f"{models['tta'].config.vocab_size}); self CPU time per call of the whole path, {args.repeats} calls"]
    results = {}
    for name, method in paths.items():
        rows = profile(lambda method=method: method(sentences), args.repeats)
        total = sum(r["ms_per_call"] for r in rows)
        matmul = sum(r["ms_per_call"] for r in rows if r["op"] in MATMULS)
        results[name] = {"ms_per_call": total, "matmul_share": matmul / total, "operators": rows[:args.rows * 3]}
        lines += ["", f"## {name}: {total:.1f} ms a call, {matmul / total:.1%} in matrix products and attention",
                  "", "| operator | input shapes | calls | ms a call | share |", "|---|---|---|---|---|"]
        lines += [f"| {r['op']} | {r['shapes'][:90]} | {r['calls']} | {r['ms_per_call']:.2f} | "
                  f"{r['ms_per_call'] / total:.1%} |" for r in rows[:args.rows]]
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
        meta = {"machine": machine(), "threads": torch.get_num_threads(), "precision": dtype,
                "sentences": len(sentences), "batch_size": args.batch_size, "command": " ".join(sys.argv)}
        args.out.with_suffix(".json").write_text(json.dumps({**meta, "paths": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()

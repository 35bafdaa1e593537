"""How int8 layers add their outlier channels' fp32 term (runtime.quant.add_product): as one matmul (addmm_) or as
one outer product per channel (addr_), first alone on the shapes int8 scoring meets (the vocabulary projection's
block of rows, the FFN's layers) for 1-16 channels, then inside T-TA's int8 one pass at the paper's size over
WikiText-103 sentences with quant.OUTER_PRODUCTS at 0 (always the matmul) and at its value, interleaved round by round
(median); the scores of both are compared.

    python benchmarks/probes/outlier_products.py --out results/probes/outlier-products/epyc.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from common import interleaved, machine, median_time, report  # noqa: E402
from score_speed import DATA, wikitext_sentences  # noqa: E402

import maskplay.runtime.quant as quant  # noqa: E402
from maskplay import preset  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.runtime.allocator import keep_freed_memory  # noqa: E402
from maskplay.runtime.precision import Precision  # noqa: E402
from maskplay.tasks.score import Scorer  # noqa: E402

SHAPES = [(256, 29530), (1119, 512), (1119, 2048)]  # (rows, outputs): a vocabulary block, the FFN's two layers


def alone() -> list[dict]:
    rows = []
    for n, out in SHAPES:
        for k in (1, 2, 4, 8, 16):
            y, inputs, weights = torch.randn(n, out), torch.randn(n, k), torch.randn(k, out)
            columns = inputs.t().contiguous()

            def outer(y=y, columns=columns, weights=weights) -> None:
                for column, row in zip(columns, weights, strict=True):
                    y.addr_(column, row)

            matmul = median_time(lambda y=y, i=inputs, w=weights: y.addmm_(i, w), repeats=20, warmup=3) * 1e6
            products = median_time(outer, repeats=20, warmup=3) * 1e6
            rows.append({"rows": n, "outputs": out, "channels": k, "addmm_us": matmul, "addr_us": products})
            print(f"({n} x {out}), {k:2d} channels: addmm_ {matmul:,.0f} us, addr_ per channel {products:,.0f} us "
                  f"({matmul / products:.2f}x)", flush=True)
    return rows


def in_the_pass(sentences: list[str], tok: object, rounds: int) -> dict:
    torch.manual_seed(0)
    model = build_model(preset("tta-paper", family="tta", **tok.model_config_ids())).eval()
    scorer = Scorer(model, tok, batch_size=32, precision=Precision.int8)
    chosen = quant.OUTER_PRODUCTS
    scores: dict[str, list[float]] = {}

    def scored(name: str, value: int) -> Callable[[], None]:
        def run() -> None:
            quant.OUTER_PRODUCTS = value
            scores[name] = [s.log_prob for s in scorer.score(sentences)]
        return run

    median = interleaved({"matmul": scored("matmul", 0), "outer_products": scored("outer_products", chosen)}, rounds)
    quant.OUTER_PRODUCTS = chosen
    rate = {name: len(sentences) / m for name, m in median.items()}
    largest = max(abs(a - b) for a, b in zip(scores["matmul"], scores["outer_products"], strict=True))
    print(f"T-TA one pass, int8: outer products (up to {chosen} channels) {rate['outer_products']:.1f} sentences/s, "
          f"matmul {rate['matmul']:.1f} ({median['matmul'] / median['outer_products']:.3f}x); largest score "
          f"difference {largest:.2e} nats")
    return {"outer_products_up_to": chosen, "sentences_per_s": rate,
            "speedup": median["matmul"] / median["outer_products"], "largest_score_difference_nats": largest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not (args.data / "wikitext-103").is_dir():
        parser.error(f"--data {args.data}: no wikitext-103 folder there (the shared data)")
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as `maskplay score` runs
    tok = load_tokenizer(args.data / "tta-vocab")
    sentences = wikitext_sentences(args.data / "wikitext-103" / "wiki.valid.tokens", args.sentences, 5, 60)
    result = {"machine": machine(), "command": " ".join(sys.argv), "alone": alone(),
              "tta_one_pass": in_the_pass(sentences, tok, args.rounds)}
    report(result, args.out, echo=False)


if __name__ == "__main__":
    main()

"""int8 scoring's error against fp32 with the vocabulary projection in bf16 and in int8 (the encoder in int8 both
times): the mean absolute difference of the per-piece log-probabilities over WikiText-103 valid sentences, for a
bundled or local model.

    python benchmarks/probes/int8_head_error.py tta-mini-wiki --out results/probes/int8-head-error/tta-mini-wiki.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import machine, report  # noqa: E402
from score_speed import DATA, wikitext_sentences  # noqa: E402

from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import MaskplayModel  # noqa: E402
from maskplay.runtime.model_dir import resolve_model_dir  # noqa: E402
from maskplay.tasks.score import Scorer  # noqa: E402
from maskplay.tasks.score.passes import Runner, _bf16_copies, _cached  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    directory = resolve_model_dir(args.model)
    model = MaskplayModel.from_pretrained(directory).eval()
    tok = load_tokenizer(directory)
    sentences = wikitext_sentences(DATA / "wikitext-103" / "wiki.valid.tokens", args.sentences, 5, 40)
    reference = Scorer(model, tok).score(sentences)

    def error(scores) -> float:
        diffs = [abs(a - b) for x, y in zip(scores, reference, strict=True)
                 for a, b in zip(x.token_log_probs, y.token_log_probs, strict=True)]
        return sum(diffs) / len(diffs)

    int8_head = Scorer(model, tok, precision="int8").score(sentences)
    init = Runner.__init__

    def bf16_head(self, model, precision, temperature=1.0):  # the int8 encoder with a bf16 vocabulary projection
        init(self, model, precision, temperature)
        self.bf16_head, self.int8_head = True, None
        self.bf16_model, self.head = _cached(model, "bf16", _bf16_copies)

    Runner.__init__ = bf16_head
    with torch.inference_mode():
        bf16 = Scorer(model, tok, precision="int8").score(sentences)
    Runner.__init__ = init
    result = {"model": args.model, "sentences": len(sentences), "machine": machine(), "command": " ".join(sys.argv),
              "mean_abs_error_per_piece_nats": {"int8 encoder, bf16 head": error(bf16),
                                                 "int8 encoder, int8 head": error(int8_head)}}
    report(result, args.out)


if __name__ == "__main__":
    main()

"""How often int8 greedy decoding gives fp32's tokens: a bundled or local GPT continues the first words of
WikiText-103 valid sentences greedily in fp32 (the reference), in eager int8 (its outlier channels those past
quant.OUTLIER_RATIO x the median, up to MAX_OUTLIERS) and in compiled int8 (`generate --precision int8 --compile`:
its TRACED_OUTLIERS largest channels in fp32 at every call), for each count given by --outliers. Per run: the
continuations equal to fp32's and the mean length of the prefix they share with it.

    python benchmarks/probes/int8_decode_agreement.py gpt-two-hour \
        --out results/probes/int8-decode-agreement/gpt-two-hour.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import machine, report  # noqa: E402
from score_speed import DATA, wikitext_sentences  # noqa: E402

from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import MaskplayModel  # noqa: E402
from maskplay.runtime import quant  # noqa: E402
from maskplay.runtime.model_dir import resolve_model_dir  # noqa: E402
from maskplay.runtime.precision import quantize_int8  # noqa: E402
from maskplay.tasks.decoding import generate  # noqa: E402


def agreement(tokens: list[list[int]], reference: list[list[int]]) -> dict[str, float]:
    """Continuations equal to the reference's, and the mean length of the prefix each shares with its reference."""
    shared = []
    for ours, theirs in zip(tokens, reference, strict=True):
        n = 0
        while n < min(len(ours), len(theirs)) and ours[n] == theirs[n]:
            n += 1
        shared.append(n)
    return {"equal": sum(a == b for a, b in zip(tokens, reference, strict=True)),
            "mean_shared_prefix": sum(shared) / len(shared)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-words", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--outliers", type=int, nargs="+", default=[0, quant.TRACED_OUTLIERS, 8],
                        help="TRACED_OUTLIERS values to compile with (0: every channel quantised)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    directory = resolve_model_dir(args.model)
    model = MaskplayModel.from_pretrained(directory).eval()
    tokenizer = load_tokenizer(directory)
    sentences = wikitext_sentences(DATA / "wikitext-103" / "wiki.valid.tokens", args.prompts, args.prompt_words + 5,
                                   60)
    prompts = [" ".join(s.split()[:args.prompt_words]) for s in sentences]

    def run(m, compile: bool = False) -> list[list[int]]:
        out = generate(m, prompts, tokenizer=tokenizer, max_new_tokens=args.max_new_tokens, stop_ids=[],
                       batch_size=args.batch_size, compile=compile)
        return [o.token_ids for o in out]

    reference = run(model)
    runs = {"int8, eager": agreement(run(quantize_int8(model)), reference)}
    default = quant.TRACED_OUTLIERS
    for count in args.outliers:
        quant.TRACED_OUTLIERS = count  # a fresh int8 copy for each: its compiled steps are its own
        runs[f"int8, compiled, {count} channels in fp32"] = agreement(run(quantize_int8(model), True), reference)
    quant.TRACED_OUTLIERS = default
    result = {"model": args.model, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
              "machine": machine(), "command": " ".join(sys.argv), "against_fp32_greedy": runs}
    report(result, args.out)


if __name__ == "__main__":
    main()

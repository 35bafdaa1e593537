"""Causal sentence scoring of HuggingFace causal LMs converted to maskplay against the tools users pick
instead, on the same weights and the same token ids, in the same run:

- maskplay: `maskplay.families.hf.from_hf` of the HuggingFace directory, scored by Scorer (method causal:
  length-sorted batches, the per-token layers on the real tokens only, the LM head and its log-softmax at the
  scored pieces only, in row chunks);
- minicons: IncrementalLMScorer(model, tokenizer).sequence_score(batch, bos_token=True, reduction=sum), its users'
  call, on batches of 32 sentences in the data's order (as its users call it) and, its best case, on maskplay's
  length-sorted batches;
- HuggingFace batched: batches of 32 in the data's order, right-padded, log-softmax over every position;
- HuggingFace naive: one sentence per forward pass, log-softmax over the logits, the pieces' log-probabilities summed
  (the oracle of the parity tests; timed once, it is slow).

Two random models: GPT-2 small's shape (GPT2LMHeadModel: 12 layers, hidden 768, 12 heads, vocabulary 50,257) and
SmolLM2-135M's (LlamaForCausalLM: 30 layers, hidden 576, 9 heads, 3 key/value heads, intermediate 1,536, vocabulary
49,152, tied, rope_theta 100,000). The text: one sentence per WikiText-103 valid sentence of 3..60 words (the first
--sentences), as many random words of a WordPiece vocabulary over the model's ids ("w5" ...): real lengths, and
scoring cost depends on the ids only through their count. (Without ../shared/data, lengths uniform in 6..45.)
Every sentence's score must agree with the naive loop's to 1e-4 nats (fp32); the run checks it and prints the
largest difference. Timings: --repeats rounds after one warm-up each, the cases interleaved within a round; each
case's median time and the median over rounds of its time / that round's maskplay time (the ratio shown).

    nice .venv/bin/python benchmarks/hf_in_causal.py --sentences 96 --repeats 2
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import re
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BATCH = 32


def hf_models() -> dict[str, object]:
    import transformers

    return {
        "gpt2-small": transformers.GPT2LMHeadModel(transformers.GPT2Config(bos_token_id=2, eos_token_id=3)),
        "smollm2-135m": transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=49152, hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
            intermediate_size=1536, max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_theta=100000.0, bos_token_id=2, eos_token_id=3)),
    }


def tokenizers(vocab_size: int, directory: Path):
    """maskplay's Tokenizer and a transformers fast tokenizer over one WordPiece vocabulary (no post-processor on the
    HuggingFace side: minicons adds the [CLS] it is told is the bos token)."""
    import transformers

    from maskplay.data.tokenizer import Tokenizer, wordpiece_from_vocab

    vocab = directory / "vocab.txt"
    vocab.write_text("".join((SPECIALS[i] if i < len(SPECIALS) else f"w{i}") + "\n" for i in range(vocab_size)))
    ours = Tokenizer(wordpiece_from_vocab(vocab))
    backend = wordpiece_from_vocab(vocab)
    backend.post_processor = None
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="[CLS]", eos_token="[SEP]",
                                                  pad_token="[PAD]", unk_token="[UNK]")
    return ours, theirs


DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WIKITEXT = DATA / "wikitext-103" / "wiki.valid.tokens"


def lengths(count: int, seed: int = 0) -> list[int]:
    """Word counts of the first `count` WikiText-103 valid sentences of 3..60 words (headings and sentences with
    <unk> skipped); uniform in 6..45 without the data."""
    if not WIKITEXT.is_file():
        print(f"{WIKITEXT} not found: sentence lengths uniform in 6..45", flush=True)
        rng = random.Random(seed)
        return [rng.randint(6, 45) for _ in range(count)]
    out = []
    for line in WIKITEXT.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        for sentence in re.split(r"(?<= \.) ", re.sub(r" @(.)@ ", r"\1", line)):
            if "<unk>" not in sentence and 3 <= len(sentence.split()) <= 60:
                out.append(len(sentence.split()))
                if len(out) == count:
                    return out
    raise ValueError(f"{WIKITEXT}: only {len(out)} sentences of 3-60 words")


def sentences(vocab_size: int, count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(len(SPECIALS), vocab_size)}" for _ in range(n)) for n in lengths(count, seed)]


def batches(texts: list[str], by_length: bool) -> list[list[str]]:
    order = sorted(texts, key=lambda t: -len(t.split())) if by_length else texts
    return [order[i:i + BATCH] for i in range(0, len(order), BATCH)]


def hf_naive(model, ids: list[list[int]]) -> list[float]:
    out = []
    with torch.inference_mode():
        for row in ids:
            log_probs = model(input_ids=torch.tensor([row])).logits[0].log_softmax(-1)
            out.append(log_probs[torch.arange(len(row) - 1), torch.tensor(row[1:])].sum().item())
    return out


def hf_batched(model, ids: list[list[int]]) -> list[float]:
    order = list(range(len(ids)))  # the data's order, as its users batch
    scores = [0.0] * len(ids)
    with torch.inference_mode():
        for start in range(0, len(order), BATCH):
            rows = [ids[k] for k in order[start:start + BATCH]]
            width = max(len(r) for r in rows)
            x = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros(len(rows), width, dtype=torch.long)
            for r, row in enumerate(rows):
                x[r, :len(row)], mask[r, :len(row)] = torch.tensor(row), 1
            log_probs = model(input_ids=x, attention_mask=mask).logits.log_softmax(-1)
            picked = log_probs[:, :-1].gather(-1, x[:, 1:, None])[..., 0] * mask[:, 1:]
            for r, k in enumerate(order[start:start + BATCH]):
                scores[k] = picked[r].sum().item()
    return scores


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def run(name: str, hf, count: int, repeats: int, bf16: bool = False) -> dict[str, float]:
    from minicons import scorer as minicons_scorer

    from maskplay.families.hf import from_hf
    from maskplay.families.hf.directory import read_hf_dir
    from maskplay.tasks.score import Scorer

    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        hf.eval().save_pretrained(directory / "hf")
        ours_tok, their_tok = tokenizers(hf.config.vocab_size, directory)
        architecture, config, state = read_hf_dir(directory / "hf")
        special = ours_tok.model_config_ids()
        del special["vocab_size"]
        model = from_hf(architecture, (config, state), special_ids=special)
    texts = sentences(hf.config.vocab_size, count)
    scorer = Scorer(model, ours_tok, batch_size=BATCH, precision="fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = minicons_scorer.IncrementalLMScorer(hf, "cpu", tokenizer=their_tok)
    ids = [[ours_tok.special.sos, *ours_tok.encode(t)[1:-1]] for t in texts]
    by_text = {t: k for k, t in enumerate(texts)}

    def minicons_scores(lm, by_length: bool) -> list[float]:  # noqa: ANN001
        out = [math.nan] * len(texts)
        for group in batches(texts, by_length):
            values = lm.sequence_score(group, bos_token=True, reduction=lambda x: x.sum(0).item())
            for text, value in zip(group, values, strict=True):
                out[by_text[text]] = value
        return out

    cases = {"maskplay": lambda: [s.log_prob for s in scorer.score(texts)],
             "minicons": lambda: minicons_scores(lm, False), "minicons sorted": lambda: minicons_scores(lm, True),
             "hf batched": lambda: hf_batched(hf, ids)}
    if bf16:  # each side at bf16 as its users ask for it: maskplay's precision, minicons on a bf16 model
        scorer16 = Scorer(model, ours_tok, batch_size=BATCH, precision="bf16")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lm16 = minicons_scorer.IncrementalLMScorer(copy.deepcopy(hf).to(torch.bfloat16), "cpu",
                                                        tokenizer=their_tok)
        cases["maskplay bf16"] = lambda: [s.log_prob for s in scorer16.score(texts)]
        cases["minicons bf16"] = lambda: minicons_scores(lm16, False)
    results = {case: fn() for case, fn in cases.items()}  # warm-up, and the scores compared
    naive, results["hf naive"] = timed(lambda: hf_naive(hf, ids))
    rounds = []  # each round's times, the cases interleaved: a round's ratios share the machine's load
    for _ in range(repeats):
        rounds.append({case: timed(fn)[0] for case, fn in cases.items()})
    oracle = results["hf naive"]
    for case, values in results.items():
        worst = max(abs(a - b) for a, b in zip(values, oracle, strict=True))
        print(f"{name}: {case} vs the naive loop: largest difference {worst:.2e} nats", flush=True)
        if worst > 1e-4 and "bf16" not in case:  # bf16 rows: their error is reported, not required
            raise SystemExit(f"{name}: {case} differs from HuggingFace's naive loop by {worst:.2e} nats")
    # per case: its median time, and the median over rounds of its time / the round's maskplay time (fp32; the bf16
    # minicons row against maskplay bf16); the naive loop's one time against maskplay's median
    out = {case: statistics.median(r[case] for r in rounds) for case in cases}
    for case in cases:
        base = "maskplay bf16" if case == "minicons bf16" else "maskplay"
        out[f"{case} ratio"] = statistics.median(r[case] / r[base] for r in rounds)
    out["hf naive"], out["hf naive ratio"] = naive, naive / out["maskplay"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models", default="gpt2-small,smollm2-135m")
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data directory (WikiText-103's lengths)")
    parser.add_argument("--bf16", action="store_true", help="also time maskplay and minicons in bf16")
    args = parser.parse_args()
    global WIKITEXT
    WIKITEXT = args.data / "wikitext-103" / "wiki.valid.tokens"
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(machine(), flush=True)
    models = hf_models()
    rows = []
    for name in args.models.split(","):
        best = run(name, models[name], args.sentences, args.repeats, args.bf16)
        rows.append(f"| {name} | {args.sentences} | {best['maskplay']:.2f} | " + " | ".join(
            f"{best[case]:.2f} s, {best[case + ' ratio']:.2f}x" for case in ("minicons", "minicons sorted",
                                                                              "hf batched", "hf naive")) + " |")
        if args.bf16:
            rows.append(f"| {name}, bf16 both | {args.sentences} | {best['maskplay bf16']:.2f} | "
                        f"{best['minicons bf16']:.2f} s, {best['minicons bf16 ratio']:.2f}x | | | |")
    print("| model | sentences | maskplay s | minicons (data order) | minicons (sorted batches) | HF batched | HF naive |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()

"""HuggingFace models in, masked half: a RoBERTa-base-shaped model (random weights, 12 x 768, 50,265 pieces) read
as a HuggingFace directory, against the tools users pick instead, in the same run on the same weights:

- PLL (mlm-scoring's rule, every piece masked in turn): maskplay's `Scorer` vs minicons' `MaskedLMScorer` and vs
  the naive HuggingFace loop (one masked copy per piece, the full-sequence head, one sentence per batch);
- sentence embeddings: maskplay's `Embedder` (the directory's sentence-transformers mean pooling) vs
  sentence-transformers' `encode` (mean pooling) on a RobertaModel.

Scores must agree to 1e-4 nats per sentence and embeddings to 1e-4 (fp32 everywhere); the script stops otherwise.
maskplay in bf16 and int8 is timed beside, its difference from fp32 printed (not held to 1e-4).
Sentences: STS-B dev (shared data). The tokenizer is bert-base-uncased's WordPiece padded to RoBERTa's 50,265
entries (RoBERTa's BPE is not in the shared data; the model's shape, not its vocabulary, sets the cost).

    nice python benchmarks/hf_in_masked.py --pll-sentences 8 --embed-sentences 64
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
VOCAB = 50265
LOWER = ("bf16", "int8")  # maskplay's faster precisions, timed beside fp32 (their scores differ from fp32's)


def sentences(data: Path, n: int) -> list[str]:
    with open(data / "stsbenchmark" / "sts-dev.csv", encoding="utf-8") as f:
        rows = [row[5] for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if len(row) > 6]
    return rows[:n]


def write_tokenizer(data: Path, directory: Path) -> None:
    """bert-base-uncased's WordPiece padded to VOCAB pieces, saved as transformers saves a fast tokenizer (so
    minicons and sentence-transformers load it), [CLS] text [SEP] as maskplay frames it."""
    import transformers
    from tokenizers import processors

    from maskplay.data.tokenizer import wordpiece_from_vocab

    lines = (data / "bert-base-uncased-vocab" / "vocab.txt").read_text().splitlines()
    lines += [f"[filler{k}]" for k in range(VOCAB - len(lines))]
    (directory / "vocab.txt").write_text("\n".join(lines) + "\n")
    backend = wordpiece_from_vocab(directory / "vocab.txt")
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls),
                                                                                                    ("[SEP]", sep)])
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]",
                                               sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]",
                                               bos_token="[CLS]", eos_token="[SEP]")
    tok.save_pretrained(directory)
    (directory / "vocab.txt").unlink()


def roberta_config():
    import transformers

    return transformers.RobertaConfig(vocab_size=VOCAB, pad_token_id=0, bos_token_id=101, eos_token_id=102,
                                      max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)


def naive_hf(hf, ids_list: list[list[int]], mask: int) -> list[float]:
    out = []
    for ids in ids_list:
        n = len(ids)
        copies = torch.tensor([ids] * (n - 2))
        rows, positions = torch.arange(n - 2), torch.arange(1, n - 1)
        copies[rows, positions] = mask
        logits = hf(input_ids=copies).logits[rows, positions].log_softmax(-1)
        out.append(math.fsum(logits[rows, torch.tensor(ids[1:-1])].tolist()))
    return out


def interleaved(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The fastest of `repeats` timed calls of each run, the runs taking turns (one call of each per round, after
    one untimed round), so that a change in the machine's load falls on every run alike."""
    best = {name: math.inf for name in runs}
    for round_ in range(repeats + 1):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if round_:
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def bench_pll(root: Path, data: Path, texts: list[str], repeats: int) -> dict[str, float]:
    import transformers
    from minicons import scorer as minicons_scorer

    from maskplay.tasks.score import Scorer

    torch.manual_seed(0)
    hf = transformers.RobertaForMaskedLM(roberta_config()).eval()
    hf.save_pretrained(root / "mlm")
    write_tokenizer(data, root / "mlm")
    ours = Scorer.from_pretrained(root / "mlm", batch_size=64, precision="fp32")
    theirs = minicons_scorer.MaskedLMScorer(str(root / "mlm"), "cpu")
    if not hasattr(theirs.tokenizer, "batch_encode_plus"):  # minicons 0.3.39 under transformers 5 (docs/guides/scoring.md)
        theirs.tokenizer.batch_encode_plus = theirs.tokenizer
    ids = [ours.tokenizer.encode(t) for t in texts]
    with torch.inference_mode():
        a = [s.log_prob for s in ours.score(texts)]
        b = theirs.sequence_score(texts, reduction=lambda x: x.sum(0).item())
        c = naive_hf(hf, ids, ours.tokenizer.special.mask)
    worst = max(max(abs(x - y), abs(x - z)) for x, y, z in zip(a, b, c, strict=True))
    print(f"PLL: largest difference per sentence vs minicons / HF loop: {worst:.2e} nats", flush=True)
    if worst > 1e-4:
        raise SystemExit("scores differ by more than 1e-4 nats")
    runs = {"maskplay": lambda: ours.score(texts),
            "minicons": lambda: theirs.sequence_score(texts, reduction=lambda x: x.sum(0).item()),
            "hf": lambda: naive_hf(hf, ids, ours.tokenizer.special.mask)}
    for precision in LOWER:
        fast = Scorer(ours.model, ours.tokenizer, batch_size=64, precision=precision)
        with torch.inference_mode():
            worst = max(abs(x.log_prob - y) for x, y in zip(fast.score(texts), a, strict=True))
        print(f"PLL, maskplay {precision}: largest difference per sentence vs fp32: {worst:.3f} nats", flush=True)
        runs[f"maskplay {precision}"] = lambda fast=fast: fast.score(texts)
    with torch.inference_mode():
        return interleaved(runs, repeats)


def bench_embed(root: Path, data: Path, texts: list[str], repeats: int) -> dict[str, float]:
    import transformers
    from sentence_transformers import SentenceTransformer, models

    from maskplay.tasks.score import Embedder

    torch.manual_seed(0)
    transformers.RobertaModel(roberta_config(), add_pooling_layer=False).eval().save_pretrained(root / "encoder")
    write_tokenizer(data, root / "encoder")
    body = models.Transformer(str(root / "encoder"), max_seq_length=512)
    st = SentenceTransformer(modules=[body, models.Pooling(768, "mean")], device="cpu")
    st.save(str(root / "st"))
    ours = Embedder.from_pretrained(root / "st", precision="fp32")
    assert ours.default_pooling.value == "mean-tokens"
    a = ours.encode(texts, batch_size=32)
    b = st.encode(texts, batch_size=32, convert_to_numpy=True)
    worst = float(np.abs(a - b).max())
    print(f"embeddings: largest difference vs sentence-transformers: {worst:.2e}", flush=True)
    if worst > 1e-4:
        raise SystemExit("embeddings differ by more than 1e-4")
    runs = {"maskplay": lambda: ours.encode(texts, batch_size=32),
            "sentence-transformers": lambda: st.encode(texts, batch_size=32)}
    for precision in LOWER:
        fast = Embedder(ours.model, ours.tokenizer, precision=precision)
        worst = float(np.abs(fast.encode(texts) - a).max())
        print(f"embeddings, maskplay {precision}: largest difference vs fp32: {worst:.2e}", flush=True)
        runs[f"maskplay {precision}"] = lambda fast=fast: fast.encode(texts, batch_size=32)
    return interleaved(runs, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pll-sentences", type=int, default=8)
    parser.add_argument("--embed-sentences", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    print(machine(), flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        texts = sentences(args.data, max(args.pll_sentences, args.embed_sentences))
        pll = bench_pll(root, args.data, texts[:args.pll_sentences], args.repeats)
        for name in ("maskplay", *(f"maskplay {p}" for p in LOWER)):
            print(f"PLL, {args.pll_sentences} sentences: {name} {pll[name]:.2f} s; minicons {pll['minicons']:.2f} s "
                  f"({pll['minicons'] / pll[name]:.1f}x), HF naive loop {pll['hf']:.2f} s "
                  f"({pll['hf'] / pll[name]:.1f}x)", flush=True)
        emb = bench_embed(root, args.data, texts[:args.embed_sentences], args.repeats)
        for name in ("maskplay", *(f"maskplay {p}" for p in LOWER)):
            print(f"embeddings, {args.embed_sentences} sentences: {name} {emb[name]:.2f} s, sentence-transformers "
                  f"{emb['sentence-transformers']:.2f} s ({emb['sentence-transformers'] / emb[name]:.2f}x)", flush=True)
    print(f"({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()

"""Transformer-XL's claim for GPTs trained on the contiguous stream with and without memory
(docs/results/long-context.md): perplexity per word piece on long WikiText-103 articles, each read as training
reads its lanes - the
article's sentences, each [SOS] ... [EOS] as `maskplay prepare` writes them, back to back - in segments of
`--segment` tokens, each segment reading the memory of the last 0, 128 or 512 tokens (GPT.forward's mems). A piece
is predicted by the output one position to its left, in the segment that holds it or, for a segment's first piece,
the last output of the segment before; only word pieces are scored ([SOS] / [EOS] never), so every setting scores
the same pieces. Perplexity over all pieces and by the piece's position in its article.

    OMP_NUM_THREADS=1 nice .venv/bin/python scripts/memory_study.py --models runs/xl/gpt-mem runs/xl/gpt-nomem \
        --out results/memory-study/training.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from context_length_study import BUCKETS, DATA, relative, wikitext_articles  # noqa: E402


def article_stream(tokenizer, text: str) -> tuple[list[int], list[bool]]:
    """The article as training reads text: its sentences, each [SOS] pieces [EOS], back to back; and which
    positions are word pieces (scored)."""
    from maskplay.data.sentences import split_sentences

    ids: list[int] = []
    for sentence in split_sentences(text):
        ids.extend(tokenizer.encode(sentence))
    specials = {tokenizer.special.sos, tokenizer.special.eos}
    return ids, [i not in specials for i in ids]


def score_article(model, ids: list[int], segment: int, memory: int) -> list[float]:
    """log p of every token from the second on, each from everything before it that the segments and memory
    show (position j predicted by the output at j - 1)."""
    import torch

    values: list[float] = []
    mems = None
    previous_last = None  # the log-probabilities the previous segment's last output gives the next token
    for start in range(0, len(ids), segment):
        chunk = torch.tensor([ids[start:start + segment]])
        out = model(chunk, mems=mems, memory_length=memory) if memory else model(chunk)
        mems = out.mems if memory else None
        logp = out.logits[0].float().log_softmax(-1)
        if previous_last is not None:
            values.append(float(previous_last[chunk[0, 0]]))
        targets = chunk[0, 1:]
        values.extend(logp[:-1].gather(1, targets[:, None])[:, 0].tolist())
        previous_last = logp[-1]
    return values


def study(model_dir: Path, articles: list[str], segment: int, memories: list[int]) -> dict:
    import torch

    from maskplay.tasks.score import load_model_dir

    model, tokenizer = load_model_dir(model_dir)
    model.eval()
    streams = [article_stream(tokenizer, text) for text in articles]
    rows = []
    for memory in memories:
        started = time.perf_counter()
        scored: list[list[float]] = []  # per article, the word pieces' log p in order
        with torch.inference_mode():
            for ids, word in streams:
                values = score_article(model, ids, segment, memory)
                scored.append([v for v, w in zip(values, word[1:], strict=True) if w])
        flat = [v for s in scored for v in s]
        row = {"memory": memory, "pieces": len(flat), "ppl": math.exp(-math.fsum(flat) / len(flat)),
               "seconds": round(time.perf_counter() - started, 1), "by_position": []}
        for lo, hi in BUCKETS:
            part = [v for s in scored for v in s[lo:hi]]
            row["by_position"].append({"from": lo, "to": hi, "pieces": len(part),
                                       "ppl": math.exp(-math.fsum(part) / len(part)) if part else None})
        print(json.dumps({"model": relative(model_dir), **row}), flush=True)
        rows.append(row)
    return {"model": relative(model_dir), "segment": segment, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=Path, nargs="+", required=True, help="GPT model directories")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--articles", type=int, default=30)
    parser.add_argument("--segment", type=int, default=128)
    parser.add_argument("--memories", type=int, nargs="+", default=[0, 128, 512])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    _, texts, unk = wikitext_articles(args.data, args.articles)
    results = [study(m, texts, args.segment, args.memories) for m in args.models]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "data": relative(args.data), "articles": args.articles, "unk_dropped": unk, "segment": args.segment,
            "threads": args.threads, "torch": torch.__version__, "processor": platform.processor() or platform.machine(),
            "command": "scripts/memory_study.py --models " + " ".join(relative(m) for m in args.models)
                       + f" --out {relative(args.out)}",
            "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()

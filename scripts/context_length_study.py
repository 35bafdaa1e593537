"""Does more context help? Perplexity of long-document scoring on WikiText-103 valid against the context length
(the Transformer-XL question).

The first --articles articles of WikiText-103 valid (shared/data), each scored as one text (headings dropped,
paragraphs joined, `@-@`-style joins undone as benchmarks/score_speed.py does, `<unk>` words dropped), every word
piece of the model's tokenizer scored exactly once, [SOS]/[EOS] never:

- XLNet, `Scorer(overflow="memory")` (maskplay.tasks.score.memory): segments of --segment tokens (128) reading the
  Transformer-XL memory of the last M tokens, M in --memories (0, 128, 384, 1920: a total context of 128, 256,
  512 and 2048 tokens). With M = 0 every segment after the first is a text of its own, without [SOS].
- The same without [SOS] (`maskplay.tasks.score.memory.memory_log_probs(sos=False)`; the first piece of an article is
  then predicted from nothing): a control, because this XLNet scores far worse left to right when [SOS] is in
  view (docs/results/README.md), which would otherwise be mistaken for an effect of the context length.
- XLNet, `Scorer(overflow="window")`: sliding windows of 126 pieces + [SOS]/[EOS] advancing by 63, each piece
  scored in the earliest window that holds it (63..125 pieces of left context after the first window); each
  window starts with [SOS].
- GPT, the same sliding windows, when --gpt names a model directory that exists (a reference of another family).
- Long GPTs (--long-gpt, docs/guides/long-text.md: ALiBi positions, pretrained on blocks of 512 tokens, with and without
  a sliding attention window of 128), `Scorer(overflow="window", max_length=C)` for C in --long-contexts (128, 512,
  2048): windows of C tokens advancing by half a window, each piece from the earliest window holding it; at 2048
  the windowed model's encoder runs the banded kernel. Rows are named after the run directory (RUN-window-C).

Perplexity = exp(-mean log p per word piece), over all pieces and per bucket of position in the article
([0, 128), [128, 512), [512, 2048), [2048, ...)); every configuration scores the same pieces. Writes
OUT/<name>.json per configuration and OUT/summary.json (paths relative to the repository) and the plot --plot.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/context_length_study.py --model runs/cmp2/xlnet/final --articles 30
    OMP_NUM_THREADS=1 .venv/bin/python scripts/context_length_study.py --skip-xlnet   # GPT rows only, XLNet's reused
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "wikitext-103" / "wiki.valid.tokens"
BUCKETS = [(0, 128), (128, 512), (512, 2048), (2048, None)]


def relative(path: Path) -> str:
    """A path as it is written in results: relative to the repository (or to its parent, for shared data)."""
    path = Path(path).resolve()
    for base, prefix in ((ROOT, ""), (ROOT.parent, "../")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            continue
    return path.name


def wikitext_articles(path: Path, n: int) -> tuple[list[str], list[str], int]:
    """(titles, texts, number of <unk> words dropped) of the first n articles (a top-level heading ` = T = `
    starts one; ` = = S = = ` subsection headings are dropped)."""
    titles, texts, unk = [], [], 0
    body: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        top = re.fullmatch(r"= ([^=].*[^=]) =", line)
        if top:
            if titles:
                texts.append(" ".join(body))
                if len(texts) == n:
                    return titles, texts, unk
            titles.append(top.group(1).strip())
            body = []
            continue
        if line.startswith("="):
            continue
        line = re.sub(r" @(.)@ ", r"\1", line)
        unk += line.split().count("<unk>")
        body.append(" ".join(w for w in line.split() if w != "<unk>"))
    if titles:
        texts.append(" ".join(body))
    if len(texts) < n:
        raise ValueError(f"{path}: only {len(texts)} articles")
    return titles[:n], texts[:n], unk


def perplexities(scores: list, buckets: list[tuple[int, int | None]]) -> dict:
    values = [v for s in scores for v in s.token_log_probs]
    out = {"pieces": len(values), "log_prob": math.fsum(values), "ppl": math.exp(-math.fsum(values) / len(values)),
           "by_position": []}
    for lo, hi in buckets:
        part = [v for s in scores for v in s.token_log_probs[lo:hi]]
        out["by_position"].append({"from": lo, "to": hi, "pieces": len(part),
                                   "ppl": math.exp(-math.fsum(part) / len(part)) if part else None})
    return out


@dataclass
class Scored:
    text: str
    token_log_probs: list[float]
    windows: int

    @property
    def num_tokens(self) -> int:
        return len(self.token_log_probs)


class WithoutSos:
    """Scorer(overflow="memory")'s scores with the texts' streams started without [SOS]."""

    def __init__(self, model, tokenizer, segment: int, memory: int, batch_size: int, precision: str) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.segment, self.memory, self.batch_size, self.precision = segment, memory, batch_size, precision

    def score(self, texts: list[str]) -> list[Scored]:
        import torch

        from maskplay.tasks.score.memory import memory_log_probs
        from maskplay.tasks.score.passes import Runner
        from maskplay.tasks.score.text import encode_texts

        encoded = encode_texts(self.tokenizer, texts)
        with torch.inference_mode():
            found, counts = memory_log_probs(Runner(self.model, self.precision), list(enumerate(encoded)),
                                             self.segment, self.memory, self.batch_size, sos=False)
        values = [[math.nan] * len(enc) for enc in encoded]
        for (k, j), v in found:
            values[k][j] = v
        assert all(math.isfinite(v) for row in values for v in row)
        return [Scored(t, row, counts[k]) for k, (t, row) in enumerate(zip(texts, values, strict=True))]


def run(name: str, scorer, texts: list[str], out_dir: Path, meta: dict) -> dict:
    start = time.perf_counter()
    scores = scorer.score(texts)
    seconds = time.perf_counter() - start
    assert [s.text for s in scores] == texts
    result = {"name": name, **meta, **perplexities(scores, BUCKETS), "seconds": round(seconds, 1),
              "pieces_per_s": round(sum(s.num_tokens for s in scores) / seconds, 1),
              "segments": sum(s.windows for s in scores)}
    (out_dir / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{name:>22}: ppl {result['ppl']:8.2f}  by position "
          + "  ".join(f"{b['ppl']:.2f}" if b["ppl"] else "-" for b in result["by_position"])
          + f"  ({result['pieces']} pieces, {seconds:.0f} s)", flush=True)
    return result


def reused(path: Path) -> dict:
    """A configuration scored by an earlier run of this script (--skip-xlnet)."""
    if not path.is_file():
        raise SystemExit(f"--skip-xlnet: {relative(path)} is missing; run the study once without --skip-xlnet")
    result = json.loads(path.read_text())
    print(f"{result['name']:>22}: ppl {result['ppl']:8.2f}  (reused from {relative(path)})", flush=True)
    return result


def long_label(result: dict) -> str:
    window = (result.get("long") or {}).get("window")
    return f"long GPT (ALiBi, {'window ' + str(window) if window else 'no window'}, blocks of 512)"


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    left = axes[0]
    for sos, style in ((True, "o-"), (False, "s--")):
        memory = sorted((r for r in results if r["strategy"] == "memory" and r["sos"] is sos), key=lambda r: r["context"])
        if memory:
            xs = [r["context"] for r in memory]
            left.plot(xs, [r["ppl"] for r in memory], style,
                      label=f"XLNet, segments of 128 + memory, {'with' if sos else 'without'} [SOS]")
            left.set_xticks(xs, [str(x) for x in xs])
    for model, color in zip(sorted({r["model"] for r in results if r["strategy"] == "long-window"}),
                            ["tab:green", "tab:purple", "tab:olive"], strict=False):
        long = sorted((r for r in results if r["strategy"] == "long-window" and r["model"] == model),
                      key=lambda r: r["context"])
        left.plot([r["context"] for r in long], [r["ppl"] for r in long], "^-", color=color,
                  label=f"{long_label(long[0])}, windows of C tokens")
    for r, style in zip([r for r in results if r["strategy"] == "window"], [":", "-."], strict=False):
        left.axhline(r["ppl"], linestyle=style, color="grey" if r["family"] == "xlnet" else "tab:red",
                     label=f"{'GPT' if r['family'] == 'gpt' else 'XLNet'}, sliding windows of 128 (each with [SOS])")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("context (tokens): XLNet segment + memory; long GPT windows of C")
    left.set_ylabel("perplexity per word piece (log scale)")
    left.set_title("all pieces")
    left.legend(fontsize=7)
    for ax, sos in zip(axes[1:], (True, False), strict=True):
        memory = sorted((r for r in results if r["strategy"] == "memory" and r["sos"] is sos), key=lambda r: r["context"])
        if not memory:
            continue
        labels = [f"{b['from']}-{b['to'] or '...'}" for b in memory[0]["by_position"]]
        for r in memory:
            ax.plot(labels, [b["ppl"] for b in r["by_position"]], "o-", label=f"context {r['context']}")
        for r in results:
            if r["strategy"] == "window":
                ax.plot(labels, [b["ppl"] for b in r["by_position"]], "x:", label=f"{r['family']} windows of 128")
            if r["strategy"] == "long-window" and r["context"] == max(x["context"] for x in results
                                                                     if x["strategy"] == "long-window"):
                ax.plot(labels, [b["ppl"] for b in r["by_position"]], "^-.",
                        label=f"{long_label(r)}, C = {r['context']}")
        ax.set_yscale("log")
        ax.set_xlabel("position of the piece in its article")
        ax.set_title(f"by position, memory {'with' if sos else 'without'} [SOS]")
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def sos_check(model, tok, n: int, out_dir: Path, base: dict) -> dict:
    """The [SOS] diagnosis on n short WikiText-103 valid sentences (8-40 words, benchmarks/score_speed.py's
    selection): perplexity of the same pieces p1..p_{n-1} left to right with [SOS] in view and without it, through
    the permutation path with [EOS] first in the order and with [SOS] last (hidden), and the PLL."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from score_speed import wikitext_sentences

    from maskplay.tasks.score import Scorer

    sentences = wikitext_sentences(DATA, n, 8, 40)
    weight = model.embeddings.word.weight
    found: dict[str, list[float]] = {}
    with torch.inference_mode():
        for sentence in sentences:
            ids = torch.tensor([tok.encode(sentence)])
            L = ids.shape[1]
            targets = ids[0, 2:L - 1]  # p1 .. p_{n-1}: every piece but the first
            views = {"left to right, with [SOS]": model.left_to_right(ids[:, :-1]).last_hidden_state[0, 2:],
                     "left to right, without [SOS]": model.left_to_right(ids[:, 1:-1]).last_hidden_state[0, 1:]}
            positions = torch.arange(2, L - 1)[None]
            for name, order in (("[EOS] first, then left to right", [L - 1, *range(L - 1)]),
                                ("left to right, [SOS] last (hidden)", [*range(1, L), 0])):
                views[name] = model(ids, order=torch.tensor([order]), target_positions=positions).last_hidden_state[0]
            for name, hidden in views.items():
                found.setdefault(name, []).extend(model.head.log_probs(hidden, weight, targets).tolist())
    result = {name: math.exp(-math.fsum(v) / len(v)) for name, v in found.items()}
    pll = [v for s in Scorer(model, tok, method="pll").score(sentences) for v in s.token_log_probs]
    result["pll (all pieces)"] = math.exp(-math.fsum(pll) / len(pll))
    out = {**base, "sentences": n, "pieces": len(found["left to right, with [SOS]"]), "ppl": result}
    (out_dir / "sos_check.json").write_text(json.dumps(out, indent=1) + "\n")
    for name, value in result.items():
        print(f"{name:>38}: ppl {value:10.1f}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=ROOT / "runs/cmp2/xlnet/final", help="an XLNet model directory")
    parser.add_argument("--gpt", type=Path, default=ROOT / "runs/cmp2/gpt/final",
                        help="a GPT model directory for the sliding-window reference (skipped when absent)")
    parser.add_argument("--long-gpt", type=Path, nargs="+",
                        default=[ROOT / "runs/long/gpt-alibi-w128/final", ROOT / "runs/long/gpt-alibi-full/final"],
                        help="long GPTs scored at --long-contexts (each skipped when absent)")
    parser.add_argument("--long-contexts", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--skip-xlnet", action="store_true",
                        help="reuse the XLNet rows already in --out (OUT/xlnet-*.json) instead of scoring them again")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--articles", type=int, default=30)
    parser.add_argument("--segment", type=int, default=128)
    parser.add_argument("--memories", type=int, nargs="+", default=[0, 128, 384, 1920])
    parser.add_argument("--batch-size", type=int, default=8, help="articles per batch")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "results/long-context")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/results/long_context.png")
    parser.add_argument("--sos-check", type=int, default=0, metavar="N",
                        help="also the [SOS] diagnosis on N short sentences (results/long-context/sos_check.json)")
    parser.add_argument("--no-study", action="store_true", help="only the --sos-check")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from maskplay.tasks.score import Scorer, load_model_dir

    titles, texts, unk = wikitext_articles(args.data, args.articles)
    model, tok = load_model_dir(args.model)
    if model.config.family != "xlnet":
        raise SystemExit(f"--model {args.model}: an XLNet model is needed, this one is {model.config.family!r}")
    pieces = [len(ids) - 2 for ids in (tok.encode(t) for t in texts)]
    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    base = {"data": relative(args.data), "articles": args.articles, "titles": titles, "unk_dropped": unk,
            "article_pieces": pieces, "precision": args.precision, "threads": args.threads,
            "torch": torch.__version__, "machine": platform.machine(), "commit": commit.strip(),
            "command": "OMP_NUM_THREADS=1 .venv/bin/python scripts/context_length_study.py " + " ".join(sys.argv[1:])}
    train = args.model / "train_config.json"
    model_meta = {"model": relative(args.model), "family": "xlnet", "max_position": model.config.max_position,
                  "train_config": json.loads(train.read_text()) if train.is_file() else None}
    if args.sos_check:
        sos_check(model, tok, args.sos_check, args.out, {**base, **model_meta})
    if args.no_study:
        return
    print(f"{args.articles} articles, {sum(pieces):,} pieces (min {min(pieces)}, max {max(pieces)}); "
          f"{unk} <unk> dropped", flush=True)
    results = []
    for sos in (True, False):
        for memory in args.memories:
            if args.skip_xlnet:
                results.append(reused(args.out / f"xlnet-memory-{memory}{'' if sos else '-nosos'}.json"))
                continue
            if sos:
                scorer = Scorer(model, tok, overflow="memory", segment_tokens=args.segment, memory_tokens=memory,
                                batch_size=args.batch_size, precision=args.precision)
            else:
                scorer = WithoutSos(model, tok, args.segment, memory, args.batch_size, args.precision)
            results.append(run(f"xlnet-memory-{memory}{'' if sos else '-nosos'}", scorer, texts, args.out,
                               {**base, **model_meta, "strategy": "memory", "sos": sos, "segment": args.segment,
                                "memory": memory, "context": args.segment + memory}))
    if args.skip_xlnet:
        results.append(reused(args.out / "xlnet-window-128.json"))
    else:
        scorer = Scorer(model, tok, overflow="window", batch_size=args.batch_size * 8, precision=args.precision)
        results.append(run("xlnet-window-128", scorer, texts, args.out,
                           {**base, **model_meta, "strategy": "window", "sos": True,
                            "context": model.config.max_position}))
    if (args.gpt / "model.safetensors").is_file():
        gpt, gpt_tok = load_model_dir(args.gpt)
        if gpt_tok.backend.to_str() != tok.backend.to_str():
            print("GPT's tokenizer differs from XLNet's: its perplexity per piece is not comparable", flush=True)
        scorer = Scorer(gpt, gpt_tok, overflow="window", batch_size=args.batch_size * 8, precision=args.precision)
        gtrain = args.gpt / "train_config.json"
        results.append(run("gpt-window-128", scorer, texts, args.out,
                           {**base, "model": relative(args.gpt), "family": "gpt", "strategy": "window", "sos": True,
                            "context": gpt.config.max_position,
                            "train_config": json.loads(gtrain.read_text()) if gtrain.is_file() else None}))
    else:
        print(f"no GPT model at {relative(args.gpt)}: the GPT reference is left out", flush=True)
    for path in args.long_gpt:
        if not (path / "model.safetensors").is_file():
            print(f"no long GPT at {relative(path)}: its rows are left out", flush=True)
            continue
        long_gpt, long_tok = load_model_dir(path)
        if long_tok.backend.to_str() != tok.backend.to_str():
            print(f"{relative(path)}: its tokenizer differs from XLNet's: perplexity per piece is not comparable",
                  flush=True)
        ltrain = path / "train_config.json"
        label = path.parent.name if path.name == "final" else path.name
        for context in args.long_contexts:
            scorer = Scorer(long_gpt, long_tok, overflow="window", max_length=context, precision=args.precision,
                            batch_size=max(1, args.batch_size * 8 * 128 // context))
            results.append(run(f"{label}-window-{context}", scorer, texts, args.out,
                               {**base, "model": relative(path), "family": "gpt", "strategy": "long-window",
                                "sos": True, "context": context, "long": dataclasses.asdict(long_gpt.config.long),
                                "positions": long_gpt.config.positions, "max_position": long_gpt.config.max_position,
                                "train_config": json.loads(ltrain.read_text()) if ltrain.is_file() else None}))
    summary = [{k: r[k] for k in ("name", "strategy", "family", "sos", "context", "ppl", "pieces", "seconds",
                                  "by_position")}
               for r in results]
    (args.out / "summary.json").write_text(json.dumps({**base, "results": summary}, indent=1) + "\n")
    plot(results, args.plot, f"WikiText-103 valid, first {args.articles} articles ({sum(pieces):,} pieces); "
                             f"{relative(args.model)}")
    print(f"wrote {relative(args.out)}/*.json and {relative(args.plot)}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()

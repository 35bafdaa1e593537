"""Where in a model are its best unsupervised sentence embeddings? STS-B dev and SICK Spearman of every pooling
of every layer, for models already trained (asked because the bundled models are below a TF-IDF baseline).

    python scripts/pooling_study.py tta-mini-wiki runs/cmp2/bert/final --frequencies runs/data-wiki16k \
        --out results/pooling/study.json

Layers: `word` = the word-piece embedding table alone (no position, no norm: static word vectors), then the
hidden states 0..N as `maskplay embed --layer` reads them (0 = the first block's input). Weights over a sentence's
pieces ([SOS]/[EOS] excluded): `mean`; `sif-A` = A / (A + p(piece)), p from the model directory's piece_counts.npy
(the bundled models) or else the piece counts of --frequencies's training split (checked to be the model's
vocabulary) (Arora et al. 2017, "A simple but tough-to-beat baseline for sentence embeddings"); `idf` =
ln((1 + n) / (1 + df)) + 1 over the pieces of the dataset's own unlabelled train sentences (STS-B train; SICK:
every SICK sentence), as the TF-IDF baseline's. Each with and without removing the first principal component of
the dataset's sentence vectors (SIF's second step; no labels). T-TA runs with its diagonal mask, as `eval sts`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from maskplay.runtime.model_dir import resolve_model_dir
from maskplay.tasks.eval.sts import SICK, STSB, load_sick, load_stsb
from maskplay.tasks.score.embed import PIECE_COUNTS, read_piece_counts
from maskplay.tasks.score.scorer import load_model_dir
from maskplay.tasks.score.text import encode_ids

SHARED = Path("../shared/data")


def piece_states(model, tok, sentences: list[str], batch: int = 64) -> list[list[np.ndarray]]:
    """Per sentence, per layer (word table, hidden state 0..N): the pieces' vectors (n, H)."""
    cfg = model.config
    kwargs = {"diagonal_mask": True} if cfg.family == "tta" else {}
    width = cfg.max_position - 2
    encoded = encode_ids(tok, sentences)
    out = []
    with torch.inference_mode():
        for i in range(0, len(encoded), batch):
            rows = [[cfg.sos_token_id, *e[:width], cfg.eos_token_id] for e in encoded[i:i + batch]]
            length = max(map(len, rows))
            ids = torch.full((len(rows), length), cfg.pad_token_id)
            mask = torch.zeros(len(rows), length, dtype=torch.bool)
            for k, r in enumerate(rows):
                ids[k, :len(r)] = torch.tensor(r)
                mask[k, :len(r)] = True
            result = model(ids, attention_mask=mask, output_hidden_states=True, **kwargs)
            layers = [model.embeddings.word(ids).float(), *(h.float() for h in result.hidden_states)]
            for k, r in enumerate(rows):
                out.append([h[k, 1:len(r) - 1].numpy() for h in layers])
    return out, [e[:width] for e in encoded]


def spearman(vectors: np.ndarray, gold: list[float]) -> float:
    n = len(gold)
    a, b = vectors[:n], vectors[n:]
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return float(100 * spearmanr(cos, gold).correlation)


def without_first_component(x: np.ndarray) -> np.ndarray:
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    pc = vt[:1]
    return x - x @ pc.T @ pc


def study(model_dir: str, frequencies: Path) -> dict:
    model, tok = load_model_dir(model_dir)
    model.eval()
    vocab = model.config.vocab_size
    own = resolve_model_dir(model_dir) / PIECE_COUNTS  # a bundled model's own counts, by its own vocabulary
    source = own if own.is_file() else frequencies
    counts = read_piece_counts(source, vocab, tok)
    p = counts / counts.sum()
    sets = {"stsb": (load_stsb(SHARED.joinpath(*STSB), None),
                     load_stsb(SHARED / "stsbenchmark" / "sts-train.csv", None)),
            "sick": (load_sick(SHARED.joinpath(*SICK), None), None)}
    out = {}
    for name, (pairs, train) in sets.items():
        unlabelled = [x.a for x in train or pairs] + [x.b for x in train or pairs]
        df = np.zeros(vocab)
        for e in encode_ids(tok, unlabelled):
            df[list(set(e))] += 1
        idf = np.log((1 + len(unlabelled)) / (1 + df)) + 1
        states, pieces = piece_states(model, tok, [x.a for x in pairs] + [x.b for x in pairs])
        gold = [x.gold for x in pairs]
        weights = {"mean": lambda ids: np.ones(len(ids)), "sif-1e-3": lambda ids: 1e-3 / (1e-3 + p[ids]),
                   "sif-1e-4": lambda ids: 1e-4 / (1e-4 + p[ids]), "idf": lambda ids, idf=idf: idf[ids]}
        layers = ["word", *(str(k) for k in range(len(states[0]) - 1))]
        table = {}
        for wname, w in weights.items():
            for li, layer in enumerate(layers):
                vecs = []
                for ids, s in zip(pieces, states, strict=True):
                    ws = w(np.asarray(ids, dtype=np.int64))
                    vecs.append((ws[:, None] * s[li]).sum(0) / max(ws.sum(), 1e-12))
                x = np.stack(vecs)
                table[f"{wname}/{layer}"] = {"plain": spearman(x, gold),
                                             "minus_pc1": spearman(without_first_component(x), gold)}
        out[name] = {"pairs": len(pairs), "layers": layers, "results": table}
    frequencies_name = f"{model_dir}/{PIECE_COUNTS}" if own.is_file() else str(frequencies)
    return {"model": model_dir, "family": model.config.family, "frequencies": frequencies_name, "datasets": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--frequencies", type=Path, default=Path("runs/data-wiki16k"),
                        help="a `maskplay prepare` directory whose train split gives the piece counts")
    parser.add_argument("--out", type=Path, default=Path("results/pooling/study.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = [study(m, args.frequencies) for m in args.models]
    for r in results:
        for name, d in r["datasets"].items():
            best = max(d["results"].items(), key=lambda kv: max(kv[1].values()))
            base = d["results"][f"mean/{d['layers'][-1]}"]
            print(f"{r['model']:36s} {name:5s} mean/last {base['plain']:5.1f}  best {best[0]} "
                  f"{max(best[1].values()):5.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

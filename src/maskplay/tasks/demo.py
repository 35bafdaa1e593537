"""`make demo` / `python -m maskplay.tasks.demo`: the bundled T-TA model at work, in well under a minute on 2 cores.

1. scores a few sentences in one pass each and colours every piece by surprisal (`maskplay score --explain`);
2. finds the word that does not fit in sentences with a real-word error;
3. ranks sentence pairs by the cosine of their embeddings (`maskplay embed`);
4. turns a paragraph into a title with the bundled UniLM (`maskplay generate unilm-titles-mini ...`): a BERT
   made a seq2seq model by its mask alone, fine-tuned on Wikipedia (first paragraph -> title)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .score import Scorer
from .score.embed import Embedder
from .score.explain import explain, legend

MODEL = "tta-mini-wiki"
TITLE_MODEL = "unilm-titles-mini"
PARAGRAPH = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
             "after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889.")

SENTENCES = [
    "The river flows into the sea near the old harbour.",
    "The river flows into the sea near the old potato.",
    "She was elected to the city council in 1998.",
]
ODD_WORD = [
    "He took a peace of cake from the plate.",
    "The team won there first match of the season.",
    "The church was build in the twelfth century.",
]
PAIRS = [
    ("A man is playing a guitar.", "A person plays an instrument."),
    ("The stock market fell sharply today.", "Shares dropped steeply on Monday."),
    ("A man is playing a guitar.", "The stock market fell sharply today."),
    ("The cat sleeps on the sofa.", "A kitten is napping on the couch."),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=MODEL, help="a model directory or bundled name (default: %(default)s)")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    args = p.parse_args(argv)
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    start = time.perf_counter()

    scorer = Scorer.from_pretrained(args.model)
    print(f"== 1. One-pass scoring with {args.model} ({type(scorer.model).__name__}, "
          f"{scorer.model.num_parameters() / 1e6:.1f} M parameters): `maskplay score {args.model} ... --explain`")
    print(legend(colour))
    for s in scorer.score(SENTENCES):
        print(explain(s, colour))
    print()

    print("== 2. The word that does not fit (highest surprisal):")
    for s in scorer.score(ODD_WORD):
        worst = max(s.words(), key=lambda w: w.surprisal)
        print(f"  {s.text}\n    -> {worst.text!r} ({worst.surprisal:.1f} nats)")
    print()

    print(f"== 3. Sentence similarity (cosine of mean-pooled embeddings): `maskplay embed {args.model} ...`")
    embedder = Embedder.from_pretrained(args.model)
    left = embedder.encode([a for a, _ in PAIRS], normalize=True)
    right = embedder.encode([b for _, b in PAIRS], normalize=True)
    cosines = np.sum(left * right, axis=1)
    for k in np.argsort(-cosines):
        print(f"  {cosines[k]:.3f}  {PAIRS[k][0]!r} ~ {PAIRS[k][1]!r}")
    print()

    print(f"== 4. A title for a paragraph (UniLM, beam search): `maskplay generate {TITLE_MODEL} \"...\"`")
    from .score.scorer import load_model_dir

    model, tokenizer = load_model_dir(TITLE_MODEL)
    [title] = model.generate([PARAGRAPH], tokenizer=tokenizer, strategy="beam", num_beams=4,
                             max_new_tokens=16).generations
    print(f"  {PARAGRAPH}\n    -> {title.text!r}")
    print(f"\n(demo took {time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Pieces per (whitespace) word, [UNK] count and exact round trips (decode(encode(text)) == text) of tokenizers on
the first paragraphs of a corpus, e.g. a byte-level BPE against a WordPiece of the same size:

    maskplay tokenizer train --model bpe --vocab-size 8192 --limit-lines 20000 \
        --corpus ../shared/data/enwiki-wikiextractor/wiki_00.gz --out runs/tok-bpe
    maskplay tokenizer train --model wordpiece --vocab-size 8192 --limit-lines 20000 \
        --corpus ../shared/data/enwiki-wikiextractor/wiki_00.gz --out runs/tok-wordpiece
    python scripts/tokenizer_pieces.py --corpus ../shared/data/enwiki-wikiextractor/wiki_01.gz \
        --paragraphs 3000 runs/tok-bpe runs/tok-wordpiece"""

from __future__ import annotations

import argparse
import itertools

from maskplay.data.readers import iter_paragraphs
from maskplay.data.tokenizer import load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tokenizers", nargs="+", help="tokenizer directories or files")
    parser.add_argument("--corpus", required=True, nargs="+")
    parser.add_argument("--paragraphs", type=int, default=3000)
    args = parser.parse_args()
    paragraphs = list(itertools.islice(iter_paragraphs(args.corpus), args.paragraphs))
    words = sum(len(p.split()) for p in paragraphs)
    print(f"{len(paragraphs)} paragraphs, {words} words")
    for path in args.tokenizers:
        tok = load_tokenizer(path)
        encoded = tok.encode_batch(paragraphs)
        pieces = sum(len(ids) - 2 for ids in encoded)
        unknown = sum(ids.count(tok.special.unk) for ids in encoded)
        exact = sum(tok.decode(ids) == text for ids, text in zip(encoded, paragraphs, strict=True))
        print(f"{path}: {tok.vocab_size} pieces; {pieces / words:.3f} pieces per word, {unknown} [UNK], "
              f"{exact}/{len(paragraphs)} exact round trips")


if __name__ == "__main__":
    main()

"""`maskplay tokenizer train|encode`: train an uncased WordPiece (or, --model bpe, a cased byte-level BPE) on a
corpus, or show how a text is split."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..data.readers import FORMATS, INVALID_UTF8_POLICIES, ReadStats, iter_paragraphs
from ..data.tokenizer import SPECIAL_TOKENS, Tokenizer, load_tokenizer, train_byte_bpe, train_wordpiece
from ..runtime.progress import track
from .common import positive_int
from .summaries import summary

MODELS = ("wordpiece", "bpe")


def train_tokenizer(corpus: list[str | Path], vocab_size: int, out_dir: str | Path, min_frequency: int = 2,
                    limit_lines: int | None = None, limit_alphabet: int = 1000, fmt: str = "auto",
                    on_invalid_utf8: str = "error", show_progress: bool = False,
                    model: str = "wordpiece") -> tuple[Tokenizer, ReadStats]:
    """Train on the paragraphs of `corpus` (files or directories, read like `maskplay prepare` reads them) and
    save out_dir/tokenizer.json and, for a WordPiece, out_dir/vocab.txt (a BPE needs its merges: tokenizer.json
    only). model: wordpiece | bpe (byte-level; limit_alphabet does not apply)."""
    if model not in MODELS:
        raise ValueError(f"tokenizer model must be one of {MODELS}, got {model!r}")
    if limit_lines is not None and limit_lines <= 0:
        raise ValueError(f"--limit-lines must be positive, got {limit_lines}")
    stats = ReadStats()
    texts = iter_paragraphs(corpus, fmt=fmt, on_invalid_utf8=on_invalid_utf8, stats=stats, limit=limit_lines)
    # reading the corpus is most of the time: a bar on a terminal, plain lines otherwise (the trainer's own bars,
    # show_progress, would draw over it while reading)
    texts = track(texts, desc="tokenizer: reading", unit="paragraph", enabled=not show_progress)
    if model == "bpe":
        tok = train_byte_bpe(texts, vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show_progress)
    else:
        tok = train_wordpiece(texts, vocab_size=vocab_size, min_frequency=min_frequency,
                              limit_alphabet=limit_alphabet, show_progress=show_progress)
    if tok.vocab_size <= len(SPECIAL_TOKENS):  # an empty corpus (or only blank lines): refuse, naming it
        raise ValueError(f"--corpus {' '.join(map(str, corpus))}: no text to learn pieces from ({stats.documents} "
                         f"documents, {stats.lines} lines, {stats.blank_lines} blank)")
    out_dir = Path(out_dir)
    tok.save(out_dir)
    if model == "wordpiece":
        tok.save_vocab(out_dir / "vocab.txt")
    return load_tokenizer(out_dir / "tokenizer.json"), stats


def _train(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    tok, stats = train_tokenizer(args.corpus, args.vocab_size, args.out, min_frequency=args.min_frequency,
                                 limit_lines=args.limit_lines, limit_alphabet=args.limit_alphabet, fmt=args.format,
                                 on_invalid_utf8=args.on_invalid_utf8, show_progress=args.progress, model=args.model)
    seconds = time.perf_counter() - start
    print(f"read {stats.files} files ({', '.join(f'{n} {k}' for k, n in stats.formats.items())}), "
          f"{stats.documents} documents, {stats.lines} lines ({stats.blank_lines} blank), "
          f"{stats.invalid_utf8_replaced} invalid UTF-8 sequences replaced")
    if tok.vocab_size < args.vocab_size:
        print(f"note: the corpus supports only {tok.vocab_size} pieces at --min-frequency {args.min_frequency} "
              f"(asked for {args.vocab_size})")
    also = " and vocab.txt" if args.model == "wordpiece" else f" ({args.model})"
    print(f"wrote {Path(args.out) / 'tokenizer.json'}{also}: {tok.vocab_size} pieces, "
          f"specials {' '.join(SPECIAL_TOKENS)} at 0-{len(SPECIAL_TOKENS) - 1}, {seconds:.1f} s")
    return 0


def _encode(args: argparse.Namespace) -> int:
    tok = load_tokenizer(args.tokenizer)
    for text in args.text:
        ids = tok.encode(text)
        print(" ".join(tok.tokens(text)))
        if args.ids:
            print(" ".join(map(str, ids)))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tokenizer", help=summary("tokenizer"))
    tsub = p.add_subparsers(dest="tokenizer_command", required=True)

    t = tsub.add_parser("train", help="train an uncased WordPiece (or a byte-level BPE) with maskplay's special "
                                      "tokens at ids 0-6")
    t.add_argument("--corpus", nargs="+", required=True, metavar="PATH",
                   help="text, .gz, JSONL or WikiExtractor files; a directory means every file in it")
    t.add_argument("--vocab-size", type=positive_int, required=True)
    t.add_argument("--out", required=True, metavar="DIR",
                   help="writes DIR/tokenizer.json (and, for a WordPiece, DIR/vocab.txt)")
    t.add_argument("--model", choices=MODELS, default="wordpiece",
                   help="wordpiece: uncased, BERT's pre-tokenizer (default); bpe: cased byte-level BPE, no unknown "
                        "pieces, decoding gives the text back byte for byte (GPT-BERT's, 8k-16k pieces)")
    t.add_argument("--min-frequency", type=positive_int, default=2, help="least count of a pair to merge")
    t.add_argument("--limit-lines", type=positive_int, default=None, metavar="N",
                   help="train on the first N non-blank paragraphs only")
    t.add_argument("--limit-alphabet", type=positive_int, default=1000,
                   help="WordPiece: keep at most this many distinct characters (the rest become [UNK])")
    t.add_argument("--format", choices=FORMATS, default="auto")
    t.add_argument("--on-invalid-utf8", choices=INVALID_UTF8_POLICIES, default="error")
    t.add_argument("--progress", action="store_true",
                   help="the HuggingFace trainer's own progress bars instead of maskplay's (reading the corpus)")
    t.set_defaults(func=_train)

    e = tsub.add_parser("encode", help="print the pieces (and ids) a tokenizer gives a text")
    e.add_argument("--tokenizer", required=True, metavar="PATH", help="a directory, tokenizer.json or vocab.txt")
    e.add_argument("--ids", action="store_true", help="also print the ids")
    e.add_argument("text", nargs="+")
    e.set_defaults(func=_encode)

"""`maskplay prepare`: corpus files -> sentences -> token ids in the TokenDataset layout, train and valid splits.

The main process reads documents (readers.py) and decides each document's split; worker processes split
sentences and tokenize chunks of documents; the main process writes their results in input order, streaming
to disk. At most a few chunks are in flight, so memory stays bounded whatever the corpus size, and the
output is the same for any number of workers (the split of a document depends only on its index and the seed)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..runtime.progress import Progress
from .dataset import META_NAME, OFFSETS_NAME, TOKENS_NAME
from .readers import FORMATS, INVALID_UTF8_POLICIES, ReadStats, iter_documents, resolve_corpus
from .sentences import split_sentences
from .tokenizer import Tokenizer, load_tokenizer
from .words import WORDS_DTYPE, WORDS_NAME, piece_words

MODES = ("sentences", "blocks")
OVERLONG = ("truncate", "split")
SPLITS = ("train", "valid")
PARTIAL = ".partial"


@dataclass
class PrepareConfig:
    mode: str = "sentences"  # sentences: one sentence per sequence; blocks: sentences of a document packed
    max_length: int = 128  # tokens per sequence, [SOS] and [EOS] included
    valid_fraction: float = 0.01  # of documents, held out by a hash of (seed, document index)
    overlong: str = "truncate"  # a sentence longer than max_length: truncate it, or split it into windows
    workers: int = 1  # processes that tokenize; 1 = in this process
    seed: int = 0
    on_invalid_utf8: str = "error"  # or "replace" (with U+FFFD, counted)
    format: str = "auto"  # readers.FORMATS
    overwrite: bool = False  # replace a prepared corpus already in out_dir
    chunk_chars: int = 1 << 20  # characters of text per chunk of work sent to a worker
    progress: bool = False  # a bar on stderr when it is a terminal, else a plain line every 30 s (maskplay.runtime.progress)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.overlong not in OVERLONG:
            raise ValueError(f"overlong must be one of {OVERLONG}, got {self.overlong!r}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {self.format!r}")
        if self.on_invalid_utf8 not in INVALID_UTF8_POLICIES:
            raise ValueError(f"on_invalid_utf8 must be one of {INVALID_UTF8_POLICIES}, got {self.on_invalid_utf8!r}")
        if self.max_length < 3:
            raise ValueError(f"max_length must be at least 3 ([SOS], one piece, [EOS]), got {self.max_length}")
        if not 0.0 <= self.valid_fraction < 1.0:
            raise ValueError(f"valid_fraction must be in [0, 1), got {self.valid_fraction}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.chunk_chars < 1:
            raise ValueError(f"chunk_chars must be positive, got {self.chunk_chars}")


@dataclass
class PrepareSummary:
    files: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    documents: int = 0
    empty_documents: int = 0
    lines: int = 0  # physical lines read
    blank_lines: int = 0  # skipped
    invalid_utf8_replaced: int = 0
    sentences: int = 0
    empty_sentences: int = 0  # sentences the tokenizer turned into no pieces at all (dropped)
    truncated: int = 0  # sentences cut to max_length (--overlong truncate)
    split: int = 0  # sentences split into windows of max_length (--overlong split)
    dropped_tokens: int = 0  # pieces lost to truncation
    dropped_words: int = 0  # source words whose first piece truncation dropped (data/words.py)
    train_documents: int = 0  # non-empty documents per split
    valid_documents: int = 0
    train_sequences: int = 0
    valid_sequences: int = 0
    train_tokens: int = 0  # [SOS] and [EOS] included
    valid_tokens: int = 0
    train_words: int = 0  # source words, whitespace-separated, as BabyLM counts them (data/words.py)
    valid_words: int = 0
    seconds: float = 0.0

    def table(self) -> str:
        rows = [(name, value) for name, value in asdict(self).items() if name != "formats"]
        rows.insert(1, ("formats", ", ".join(f"{k}: {v}" for k, v in self.formats.items()) or "-"))
        width = max(len(name) for name, _ in rows)
        out = []
        for name, value in rows:
            text = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value
            out.append(f"{name:<{width}}  {text:>14}")
        return "\n".join(out)


def held_out(index: int, seed: int, fraction: float) -> bool:
    """Whether document `index` goes to the valid split: a hash, so it does not depend on chunking or workers."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < fraction * 2.0**64


class _Encoder:
    """Turns a chunk of documents into sequences for each split; runs in a worker process (or in-process)."""

    def __init__(self, tokenizer: Tokenizer, config: PrepareConfig, dtype: np.dtype) -> None:
        self.tok, self.config, self.dtype = tokenizer, config, dtype
        self.body = config.max_length - 2  # room for pieces between [SOS] and [EOS]

    def __call__(self, chunk: list[tuple[int, list[str]]]) -> dict:
        sentences: list[str] = []
        ends: list[int] = []  # end of each document's sentences in `sentences`
        for _, paragraphs in chunk:
            for paragraph in paragraphs:
                sentences.extend(split_sentences(paragraph))
            ends.append(len(sentences))
        encodings = self.tok.backend.encode_batch(sentences, add_special_tokens=False) if sentences else []
        counts = dict(sentences=len(sentences), empty_sentences=0, truncated=0, split=0, dropped_tokens=0,
                      dropped_words=0)
        flat: list[list[int]] = [[], []]
        words: list[list[np.ndarray]] = [[], []]  # per piece, the source words that begin there (data/words.py)
        lengths: list[list[int]] = [[], []]
        sos, eos, body = self.tok.special.sos, self.tok.special.eos, self.body
        none = np.zeros(1, dtype=WORDS_DTYPE)
        begin = 0
        for (split, _), end in zip(chunk, ends, strict=True):
            units = self._units(sentences[begin:end], encodings[begin:end], counts)
            begin = end
            if self.config.mode == "blocks":
                units = _pack(units, body)
            for unit, unit_words in units:
                flat[split].append(sos)
                flat[split].extend(unit)
                flat[split].append(eos)
                words[split].extend((none, unit_words, none))
                lengths[split].append(len(unit) + 2)
        return dict(counts=counts,
                    tokens=[np.array(f, dtype=self.dtype) for f in flat],
                    words=[np.concatenate(w) if w else np.zeros(0, WORDS_DTYPE) for w in words],
                    lengths=[np.array(n, dtype=np.int64) for n in lengths])

    def _units(self, sentences: list[str], encodings: list, counts: dict) -> list[tuple[list[int], np.ndarray]]:
        """A document's sequences, each (piece ids, source words per piece), as config.overlong says."""
        units: list[tuple[list[int], np.ndarray]] = []
        body = self.body
        for sentence, enc in zip(sentences, encodings, strict=True):
            ids = enc.ids
            if not ids:
                counts["empty_sentences"] += 1
                continue
            marks = piece_words(sentence, enc.offsets)
            if len(ids) <= body:
                units.append((ids, marks))
            elif self.config.overlong == "truncate":
                counts["truncated"] += 1
                counts["dropped_tokens"] += len(ids) - body
                counts["dropped_words"] += int(marks[body:].sum())
                units.append((ids[:body], marks[:body]))
            else:
                counts["split"] += 1
                units.extend((ids[i:i + body], marks[i:i + body]) for i in range(0, len(ids), body))
        return units


def _pack(units: list[tuple[list[int], np.ndarray]], body: int) -> list[tuple[list[int], np.ndarray]]:
    """Greedy packing: append each sentence to the current block while the block stays within `body` pieces."""
    blocks: list[tuple[list[int], np.ndarray]] = []
    current: list[int] = []
    marks: list[np.ndarray] = []
    for unit, unit_words in units:
        if current and len(current) + len(unit) > body:
            blocks.append((current, np.concatenate(marks)))
            current, marks = [], []
        current = current + unit if current else list(unit)
        marks.append(unit_words)
    if current:
        blocks.append((current, np.concatenate(marks)))
    return blocks


_WORKER: _Encoder | None = None


def _init_worker(tokenizer_file: str, config: PrepareConfig, dtype: str) -> None:
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the processes are the parallelism; no thread pools inside
    _WORKER = _Encoder(load_tokenizer(tokenizer_file), config, np.dtype(dtype))


def _work(chunk: list[tuple[int, list[str]]]) -> dict:
    assert _WORKER is not None, "worker not initialised"
    return _WORKER(chunk)


class _SplitWriter:
    """Appends sequences to tokens.bin and their lengths to a scratch file; offsets.npy is built at the end,
    so nothing grows in memory with the corpus."""

    def __init__(self, directory: Path, dtype: np.dtype) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory, self.dtype = directory, dtype
        self.tokens = open(directory / TOKENS_NAME, "wb")
        self.words = open(directory / WORDS_NAME, "wb")
        self.lengths = open(directory / "lengths.tmp", "wb")
        self.num_sequences = self.num_tokens = self.num_words = 0

    def write(self, tokens: np.ndarray, words: np.ndarray, lengths: np.ndarray) -> None:
        assert len(words) == len(tokens), (len(words), len(tokens))
        tokens.tofile(self.tokens)
        words.tofile(self.words)
        lengths.tofile(self.lengths)
        self.num_sequences += len(lengths)
        self.num_tokens += len(tokens)
        self.num_words += int(words.sum(dtype=np.int64))

    def close(self, meta: dict) -> None:
        self.tokens.close()
        self.words.close()
        self.lengths.close()
        scratch = self.directory / "lengths.tmp"
        offsets = np.lib.format.open_memmap(self.directory / OFFSETS_NAME, mode="w+", dtype=np.int64,
                                            shape=(self.num_sequences + 1,))
        offsets[0] = 0
        if self.num_sequences:
            lengths = np.memmap(scratch, dtype=np.int64, mode="r", shape=(self.num_sequences,))
            total, block = 0, 1 << 22
            for start in range(0, self.num_sequences, block):
                part = np.cumsum(lengths[start:start + block]) + total
                offsets[start + 1:start + 1 + len(part)] = part
                total = int(part[-1])
            del lengths
            assert total == self.num_tokens, (total, self.num_tokens)
        offsets.flush()
        del offsets
        scratch.unlink()
        meta = {"dtype": self.dtype.name, "num_sequences": self.num_sequences, "num_tokens": self.num_tokens,
                "num_words": self.num_words, **meta}
        (self.directory / META_NAME).write_text(json.dumps(meta, indent=2) + "\n")


def _chunks(documents: Iterator[tuple[int, list[str]]], chunk_chars: int) -> Iterator[list[tuple[int, list[str]]]]:
    chunk: list[tuple[int, list[str]]] = []
    size = 0
    for item in documents:
        chunk.append(item)
        size += sum(len(p) for p in item[1])
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    existing = [name for name in (*SPLITS, "tokenizer.json", "summary.json") if (out_dir / name).exists()]
    if existing and not overwrite:
        raise ValueError(f"{out_dir} already holds a prepared corpus ({', '.join(existing)}); pass --overwrite to "
                         "replace it")


def prepare_corpus(paths: list[str | Path], tokenizer: str | Path, out_dir: str | Path,
                   config: PrepareConfig) -> PrepareSummary:
    """Read, split into sentences, tokenize and write out_dir/{train,valid}/ (TokenDataset layout),
    out_dir/tokenizer.json and out_dir/summary.json. See PrepareConfig for the knobs."""
    start = time.perf_counter()
    files = resolve_corpus(paths)  # a missing file fails here, before any work
    tok = load_tokenizer(tokenizer)
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, config.overwrite)
    partial = out_dir / PARTIAL
    if partial.exists():
        shutil.rmtree(partial)  # left by an interrupted run
    created = not out_dir.exists()
    partial.mkdir(parents=True)
    try:
        summary = _prepare_into(partial, files, tok, tokenizer, config, paths, start)
    except (ValueError, FileNotFoundError):  # a refused corpus leaves nothing behind
        shutil.rmtree(partial, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    _publish(partial, out_dir)
    return summary


def _prepare_into(partial: Path, files: list[Path], tok: Tokenizer, tokenizer: str | Path, config: PrepareConfig,
                  paths: list[str | Path], start: float) -> PrepareSummary:
    """prepare_corpus's work, into `partial`: an error leaves its caller a directory to remove."""
    tok.save(partial)
    tokenizer_file = partial / "tokenizer.json"
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 65536 else np.uint32)

    meta = dict(vocab_size=tok.vocab_size, mode=config.mode, max_length=config.max_length,
                pad_token_id=tok.special.pad, sos_token_id=tok.special.sos, eos_token_id=tok.special.eos,
                tokenizer="../tokenizer.json")
    writers = [_SplitWriter(partial / name, dtype) for name in SPLITS]
    stats = ReadStats()
    summary = PrepareSummary()
    docs_per_split = [0, 0]

    def documents() -> Iterator[tuple[int, list[str]]]:
        for index, doc in enumerate(iter_documents(files, config.format, config.on_invalid_utf8, stats)):
            if doc.paragraphs:
                split = int(held_out(index, config.seed, config.valid_fraction))
                docs_per_split[split] += 1
                yield split, doc.paragraphs

    bar = Progress(total=len(files), desc="prepare", unit="file", enabled=config.progress)

    def consume(result: dict) -> None:
        for name, value in result["counts"].items():
            setattr(summary, name, getattr(summary, name) + value)
        for writer, tokens, words, lengths in zip(writers, result["tokens"], result["words"], result["lengths"],
                                                  strict=True):
            writer.write(tokens, words, lengths)
        bar.set_postfix(documents=f"{stats.documents:,}", MB_read=f"{stats.bytes / 1e6:,.1f}",
                        sequences=f"{writers[0].num_sequences + writers[1].num_sequences:,}")
        bar.update(stats.files - bar.n)  # the files opened so far

    chunks = _chunks(documents(), config.chunk_chars)
    if config.workers == 1:
        encoder = _Encoder(load_tokenizer(tokenizer_file), config, dtype)
        for chunk in chunks:
            consume(encoder(chunk))
    else:
        _run_pool(chunks, str(tokenizer_file), config, dtype, consume)
    bar.close()

    for writer, name in zip(writers, SPLITS, strict=True):
        writer.close({**meta, "split": name})
    for name in ("files", "formats", "documents", "empty_documents", "lines", "blank_lines", "invalid_utf8_replaced"):
        setattr(summary, name, getattr(stats, name))
    summary.train_documents, summary.valid_documents = docs_per_split
    summary.train_sequences, summary.valid_sequences = (w.num_sequences for w in writers)
    summary.train_tokens, summary.valid_tokens = (w.num_tokens for w in writers)
    summary.train_words, summary.valid_words = (w.num_words for w in writers)
    summary.seconds = round(time.perf_counter() - start, 2)
    record = {**asdict(summary), "config": asdict(config), "corpus": [str(p) for p in paths],
              "tokenizer": str(tokenizer), "vocab_size": tok.vocab_size}
    if not summary.train_sequences:
        where = (f"all {summary.valid_sequences:,} sequences were held out (--valid-fraction)"
                 if summary.valid_sequences else "no text in it")
        raise ValueError(f"the corpus gives no training sequence: {where} ({summary.files} file(s), "
                         f"{summary.lines:,} lines, {summary.blank_lines:,} of them blank)")
    (partial / "summary.json").write_text(json.dumps(record, indent=2) + "\n")
    return summary


def _run_pool(chunks: Iterator[list], tokenizer_file: str, config: PrepareConfig, dtype: np.dtype, consume) -> None:
    """Ordered results with a bounded number of chunks in flight (Pool.imap would read the whole corpus ahead)."""
    methods = multiprocessing.get_all_start_methods()
    # fork shares the parent's imported modules (torch among them) instead of importing them again per worker
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # inherited by forked workers; silences the fork warning
    try:
        pool = ctx.Pool(config.workers, initializer=_init_worker, initargs=(tokenizer_file, config, dtype.name))
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved
    with pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(_work, (chunk,)))
            while len(pending) >= 2 * config.workers:
                consume(pending.popleft().get())
        while pending:
            consume(pending.popleft().get())


def _publish(partial: Path, out_dir: Path) -> None:
    """Move the finished files into place. Old files are unlinked, not overwritten, so a training run that has
    the old tokens.bin memory-mapped keeps reading the old data."""
    for name in (*SPLITS, "tokenizer.json", "summary.json"):
        target = out_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        os.replace(partial / name, target)
    partial.rmdir()

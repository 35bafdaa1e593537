"""A seq2seq task from the shared Wikipedia: a document's first paragraph -> its title.

WikiExtractor documents carry their titles. Each kept document gives one pair; the split is fixed per document
(a hash of its title decides dev / test / train), so it never changes with the order or the number of files
read. The pairs are written twice: as JSONL text (`train.jsonl`, `dev.jsonl`, `test.jsonl`: what evaluation
reads) and as token sequences `[SOS] source [SEP] target [EOS]` in the TokenDataset layout (`train/`,
`valid/` = dev: what `maskplay seq2seq train` reads), with the tokenizer next to them."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ..runtime.progress import track
from .dataset import write_split
from .readers import ReadStats, iter_documents
from .tokenizer import load_tokenizer

SPLITS = ("train", "dev", "test")


@dataclass
class TitlesConfig:
    max_source: int = 96  # pieces of the first paragraph kept (its beginning); longer ones are cut, and counted
    max_target: int = 24  # a title of more pieces is skipped, and counted
    min_source_words: int = 8  # a shorter first paragraph (a stub, a redirect) is skipped, and counted
    dev_percent: float = 2.0
    test_percent: float = 2.0

    def __post_init__(self) -> None:
        for name in ("max_source", "max_target", "min_source_words"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not (0 <= self.dev_percent and 0 <= self.test_percent and self.dev_percent + self.test_percent < 100):
            raise ValueError(f"dev_percent + test_percent must be in [0, 100), got {self.dev_percent} + "
                             f"{self.test_percent}")


def split_of(title: str, config: TitlesConfig) -> str:
    """dev, test or train, from the title alone (stable across runs, machines and file orders)."""
    bucket = int(hashlib.sha1(title.encode("utf-8")).hexdigest()[:8], 16) % 10000 / 100
    if bucket < config.dev_percent:
        return "dev"
    if bucket < config.dev_percent + config.test_percent:
        return "test"
    return "train"


def build_titles(corpus: list[str], tokenizer_path: str, out: str | Path, config: TitlesConfig | None = None,
                 progress: bool = False) -> dict:
    """Write the data set to `out` (which must not exist yet) and return its summary (also summary.json)."""
    config = config or TitlesConfig()
    out = Path(out)
    if out.exists():
        raise ValueError(f"--out {out} already exists; choose a new directory")
    tok = load_tokenizer(tokenizer_path)
    sp = tok.special
    stats = ReadStats()
    counts: Counter[str] = Counter()
    pairs: dict[str, list[dict[str, str]]] = {s: [] for s in SPLITS}
    for doc in track(iter_documents(corpus, stats=stats), desc="titles", unit="document", enabled=progress):
        if not doc.title:
            counts["skipped: no title (not WikiExtractor)"] += 1
        elif not doc.paragraphs:
            counts["skipped: empty document"] += 1
        elif doc.title.endswith("(disambiguation)"):
            counts["skipped: disambiguation page"] += 1
        elif len(doc.paragraphs[0].split()) < config.min_source_words:
            counts["skipped: first paragraph under min_source_words"] += 1
        else:
            pairs[split_of(doc.title, config)].append({"doc": doc.source, "source": doc.paragraphs[0],
                                                       "target": doc.title})
    sequences: dict[str, list[list[int]]] = {}
    kept: dict[str, list[dict[str, str]]] = {}
    for split, rows in pairs.items():
        sources = tok.backend.encode_batch([r["source"] for r in rows], add_special_tokens=False)
        targets = tok.backend.encode_batch([r["target"] for r in rows], add_special_tokens=False)
        sequences[split], kept[split] = [], []
        for row, src, tgt in zip(rows, sources, targets, strict=True):
            if len(tgt.ids) > config.max_target:
                counts["skipped: title over max_target pieces"] += 1
                continue
            if not tgt.ids:
                counts["skipped: title with no pieces"] += 1
                continue
            counts["first paragraphs cut at max_source pieces"] += len(src.ids) > config.max_source
            sequences[split].append([sp.sos, *src.ids[:config.max_source], sp.sep, *tgt.ids, sp.eos])
            kept[split].append(row)
    if not any(kept.values()):  # nothing to write: say why instead of an empty data set
        why = "; ".join(f"{what}: {n:,}" for what, n in sorted(counts.items())) or "no documents"
        raise ValueError(f"--corpus {' '.join(map(str, corpus))}: no (first paragraph, title) pairs from "
                         f"{stats.documents:,} documents ({why}); `data titles` reads WikiExtractor <doc title=...> files")
    tmp = out.parent / f".tmp-{out.name}"
    tmp.mkdir(parents=True, exist_ok=False)
    for split in SPLITS:
        with open(tmp / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row in kept[split]:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    write_split(tmp / "train", sequences["train"], tok.vocab_size)
    write_split(tmp / "valid", sequences["dev"], tok.vocab_size)
    tok.save(tmp)
    summary = {"pairs": {s: len(kept[s]) for s in SPLITS}, "documents": stats.documents, "files": stats.files,
               "counts": dict(sorted(counts.items())), "config": asdict(config),
               "format": "[SOS] source [SEP] target [EOS] (the tokenizer's start, separator and end tokens)"}
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    tmp.rename(out)
    return summary

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from maskplay.cli import main
from maskplay.data import TokenDataset
from maskplay.data.prepare import PrepareConfig, PrepareSummary, held_out, prepare_corpus
from maskplay.data.readers import ReadStats, detect_format, iter_documents, iter_paragraphs
from maskplay.data.sentences import split_sentences
from maskplay.data.tokenizer import load_tokenizer, train_wordpiece
from tests.conftest import shared_path

WIKI = """<doc id="1" url="?curid=1" title="Ada &amp; Co">
Ada &amp; Co

Ada &amp; Co is a firm. It was founded by Mr. Smith in 1990.
History.
Its revenue was 3.5 million in 2001.&lt;ref name="x/1"&gt;&lt;/ref&gt; It grew.

</doc>
<doc id="2" url="?curid=2" title="Empty page">
Empty page


</doc>
<doc id="3" url="?curid=3" title="Bob">
Bob

Bob (born 1950) is a painter.
</doc>
"""

PROSE = [
    "The cat sat on the mat. It was happy there.",
    "Dr. Jones met J. R. R. Tolkien in the U.S. in 1950. They talked for 2.5 hours!",
    "A dog barked. The bird sang. Nobody listened?",
    "Rain fell on the old town for many days and nights without stopping once.",
    "She said \"Stop.\" Then she left.",
]


def write(path: Path, text: str | bytes, gz: bool = False) -> Path:
    data = text.encode() if isinstance(text, str) else text
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def docs(path: Path | list[Path], **kw) -> tuple[list[list[str]], ReadStats]:
    stats = ReadStats()
    out = [d.paragraphs for d in iter_documents(path if isinstance(path, list) else [path], stats=stats, **kw)]
    return out, stats


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    """A small WordPiece trained on the test prose (fast: a few hundred pieces)."""
    words = " ".join(PROSE) + " " + WIKI
    tokenizer = train_wordpiece([words] * 5, vocab_size=300, min_frequency=1)
    directory = tmp_path_factory.mktemp("tok")
    tokenizer.save(directory)
    return directory / "tokenizer.json"


# ---------------------------------------------------------------------------------------------------- readers


def test_text_format_one_document_per_line_blank_lines_counted(tmp_path):
    path = write(tmp_path / "a.txt", "first line.\n\n  \nsecond line.\r\nthird\n")
    out, stats = docs(path)
    assert out == [["first line."], ["second line."], ["third"]]
    assert (stats.documents, stats.lines, stats.blank_lines, stats.empty_documents) == (3, 5, 2, 0)
    assert stats.formats == {"text": 1}


def test_paragraphs_format_joins_hard_wrapped_lines(tmp_path):
    text = "It was a dark\nand stormy night.\n\n\nThe end\ncame soon.\n"
    out, stats = docs(write(tmp_path / "book.txt", text), fmt="paragraphs")
    assert out == [["It was a dark and stormy night."], ["The end came soon."]]
    assert (stats.documents, stats.blank_lines) == (2, 2)


def test_auto_detects_hard_wrapped_prose_but_not_sentence_per_line(tmp_path):
    wrapped = "".join(f"The story of the number {i} goes\non and on until it ends.\n\n" for i in range(30))
    assert detect_format(write(tmp_path / "book.txt", wrapped)) == "paragraphs"
    per_line = "".join(f"Sentence number {i} is here.\n" for i in range(30))
    assert detect_format(write(tmp_path / "lines.txt", per_line)) == "text"
    lower = "".join(f"the story of {i} goes\non and on\n" for i in range(30))  # no case: no evidence of wrapping
    assert detect_format(write(tmp_path / "lower.txt", lower)) == "text"


def test_jsonl_documents_blank_and_empty_counted(tmp_path):
    lines = [json.dumps({"text": "One. Two.", "id": 1}), "", json.dumps({"text": ""}),
             json.dumps({"text": "Para one.\n\nPara two."})]
    path = write(tmp_path / "c.jsonl", "\n".join(lines) + "\n")
    out, stats = docs(path)
    assert out == [["One. Two."], [], ["Para one.", "Para two."]]
    assert (stats.documents, stats.empty_documents, stats.lines) == (3, 1, 4)
    assert stats.blank_lines == 2  # the blank physical line and the blank line inside the third text
    assert stats.formats == {"jsonl": 1}


@pytest.mark.parametrize("bad, message", [('{"text": "ok"}\n{"text": oops}\n', "not valid JSON"),
                                          ('{"text": "ok"}\n{"body": "x"}\n', '"text" field'),
                                          ('{"text": "ok"}\n{"text": 3}\n', "must be a string")])
def test_jsonl_errors_name_file_and_line(tmp_path, bad, message):
    path = write(tmp_path / "bad.jsonl", bad)
    with pytest.raises(ValueError, match=message) as err:
        docs(path)
    assert f"{path}:2" in str(err.value)


def test_wikiextractor_docs_title_dropped_empty_counted_markup_cleaned(tmp_path):
    out, stats = docs(write(tmp_path / "wiki_00", WIKI))
    assert stats.formats == {"wikiextractor": 1}
    assert out == [
        ["Ada & Co is a firm. It was founded by Mr. Smith in 1990.", "History.",
         "Its revenue was 3.5 million in 2001. It grew."],
        [],
        ["Bob (born 1950) is a painter."],
    ]
    assert (stats.documents, stats.empty_documents) == (3, 1)
    assert stats.lines == WIKI.count("\n")


def test_wikiextractor_missing_close_is_an_error(tmp_path):
    path = write(tmp_path / "wiki_01", WIKI.rsplit("</doc>", 1)[0])
    with pytest.raises(ValueError, match=r"missing </doc>"):
        docs(path)
    path = write(tmp_path / "wiki_02", "<doc id=\"1\" title=\"A\">\nA\n</doc>\nstray text\n")
    with pytest.raises(ValueError, match=rf"{path}:4: expected a WikiExtractor <doc"):
        docs(path, fmt="wikiextractor")


@pytest.mark.parametrize("name, text", [("w.gz", WIKI), ("c.jsonl.gz", '{"text": "A b."}\n'),
                                        ("t.txt.gz", "a\n\nb\n"), ("noext", "a\nb\n")])
def test_gzip_reads_like_plain(tmp_path, name, text):
    plain = write(tmp_path / name.replace(".gz", ""), text)
    packed = write(tmp_path / name, text, gz=name.endswith(".gz"))
    assert docs(packed)[0] == docs(plain)[0]
    assert detect_format(packed) == detect_format(plain)


def test_format_flag_overrides_detection(tmp_path):
    path = write(tmp_path / "c.jsonl", '{"text": "A."}\n')
    assert docs(path, fmt="text")[0] == [['{"text": "A."}']]


def test_invalid_utf8_error_names_file_and_byte_offset(tmp_path):
    data = b"good line\nbad \xff here\n"  # the bad byte is at offset 10 + 4
    for gz in (False, True):
        path = write(tmp_path / f"bad{'.gz' if gz else '.txt'}", data, gz=gz)
        with pytest.raises(ValueError) as err:
            docs(path)
        assert f"{path}:2: invalid UTF-8 at byte offset 14" in str(err.value)  # file, line, offset
        assert "--on-invalid-utf8 replace" in str(err.value)


def test_invalid_utf8_replace_counts(tmp_path):
    path = write(tmp_path / "bad.txt", b"a \xff b \xfe\xfe c\nok\n\xe2\x82 trunc\n")
    out, stats = docs(path, on_invalid_utf8="replace")
    assert out == [["a \ufffd b \ufffd\ufffd c"], ["ok"], ["\ufffd trunc"]]
    assert stats.invalid_utf8_replaced == 4  # \xff, each \xfe, and the cut-off 3-byte sequence


def test_directory_means_all_files_sorted_and_missing_file_is_an_error(tmp_path):
    write(tmp_path / "b.txt", "second\n")
    write(tmp_path / "a.txt", "first\n")
    write(tmp_path / ".hidden", "never\n")
    assert docs(tmp_path)[0] == [["first"], ["second"]]
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        docs(tmp_path / "nope.txt")


def test_iter_paragraphs_limit(tmp_path):
    path = write(tmp_path / "a.txt", "one\ntwo\nthree\n")
    assert list(iter_paragraphs([path], limit=2)) == ["one", "two"]


# -------------------------------------------------------------------------------------------------- sentences

# Real lines from the shared Wikipedia corpus, with the split a reader expects.
REAL = [
    ("Jarred Shaw (born September 28, 1990) is an American professional basketball player for Trouville of the "
     "Liga Uruguaya de Básquetbol (LUB).", 1),
    ("On October 31, 2015, Shaw was selected by the Santa Cruz Warriors with the 18th overall pick in the 2015 NBA "
     "Development League Draft. He signed for Dorados de Chihuahua of the Liga Nacional de Baloncesto Profesional "
     "(LNBP) in August 2019. In February 2020 he signed for Club Trouville of Montevideo, Uruguay, and played "
     "during the 2019–20 LUB season.", 3),
    ("Martin Truex Jr. led the field to the green flag.", 1),
    ("It opened in August 2016 and is the fourth in the Harrow family of schools in the Asia region. The School "
     "provides a British independent style of education from early years to Y13.", 2),
]


@pytest.mark.parametrize("text, expected", [
    ("Mr. Smith went to Washington. He arrived at 3 p.m. on Monday.",
     ["Mr. Smith went to Washington.", "He arrived at 3 p.m. on Monday."]),
    ("The U.S. Army won. It was over.", ["The U.S. Army won.", "It was over."]),
    ("Fruits, e.g. Apples, are sweet. Yes.", ["Fruits, e.g. Apples, are sweet.", "Yes."]),
    ("J. R. R. Tolkien wrote it. George W. Bush read it.", ["J. R. R. Tolkien wrote it.", "George W. Bush read it."]),
    ("Growth was 3.5 percent. Prices rose by 2.5. Then they fell.",
     ["Growth was 3.5 percent.", "Prices rose by 2.5.", "Then they fell."]),
    ("See No. 5 and Vol. 2 of the series. Done!", ["See No. 5 and Vol. 2 of the series.", "Done!"]),
    ("Where? Here! Fine...  Okay.", ["Where?", "Here!", "Fine...", "Okay."]),
    ("She said \"Stop.\" Then (quietly) she left.", ["She said \"Stop.\"", "Then (quietly) she left."]),
    ("He was born in 1990. 2001 was a good year.", ["He was born in 1990.", "2001 was a good year."]),
    ("Ends with an abbreviation etc. and goes on.", ["Ends with an abbreviation etc. and goes on."]),
    ("Dr. Who arrived.", ["Dr. Who arrived."]),
    ("", []),
    ("   ", []),
])
def test_split_sentences_rules(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize("text, n", REAL)
def test_split_sentences_real_wikipedia_lines(text, n):
    sentences = split_sentences(text)
    assert len(sentences) == n, sentences
    assert "".join(" ".join(sentences).split()) == "".join(text.split())


def test_split_sentences_on_a_real_file_is_lossless():
    path = shared_path("enwiki-wikiextractor", "wiki_00.gz")
    paragraphs = list(iter_paragraphs([path], limit=3000))
    total = 0
    for p in paragraphs:
        sentences = split_sentences(p)
        assert all(s and s == s.strip() for s in sentences)
        assert " ".join(sentences).split() == p.split()  # nothing lost or reordered, only cut
        total += len(sentences)
    assert 1.3 * len(paragraphs) < total < 5 * len(paragraphs)


# ---------------------------------------------------------------------------------------------------- prepare


def oracle(paths: list[Path], tokenizer_file: Path, config: PrepareConfig) -> list[list[list[int]]]:
    """The naive version: every document, every sentence, Tokenizer.encode, truncate or split, pack."""
    tok = load_tokenizer(tokenizer_file)
    body = config.max_length - 2
    splits: list[list[list[int]]] = [[], []]
    for index, doc in enumerate(iter_documents(paths, config.format)):
        units = []
        for paragraph in doc.paragraphs:
            for sentence in split_sentences(paragraph):
                pieces = tok.encode(sentence)[1:-1]
                if config.overlong == "truncate":
                    units.append(pieces[:body])
                else:
                    units.extend(pieces[i:i + body] for i in range(0, len(pieces), body))
        if config.mode == "blocks":
            packed: list[list[int]] = []
            for unit in units:
                if packed and len(packed[-1]) + len(unit) <= body:
                    packed[-1] = packed[-1] + unit
                else:
                    packed.append(list(unit))
            units = packed
        split = int(held_out(index, config.seed, config.valid_fraction)) if doc.paragraphs else 0
        splits[split].extend([tok.special.sos, *u, tok.special.eos] for u in units)
    return splits


def read_splits(out: Path) -> list[list[list[int]]]:
    return [[ds[i].tolist() for i in range(len(ds))] for ds in (TokenDataset(out / "train"), TokenDataset(out / "valid"))]


@pytest.fixture
def corpus(tmp_path) -> list[Path]:
    """40 JSONL documents of 1-4 paragraphs and a WikiExtractor file."""
    rng = np.random.default_rng(0)
    lines = []
    for i in range(40):
        paragraphs = [" ".join(rng.choice(PROSE, size=rng.integers(1, 4))) for _ in range(rng.integers(1, 5))]
        lines.append(json.dumps({"text": "\n".join(paragraphs), "id": i}))
    a = write(tmp_path / "a.jsonl", "\n".join(lines) + "\n")
    b = write(tmp_path / "wiki_00.gz", WIKI * 3, gz=True)
    return [a, b]


@pytest.mark.parametrize("mode, overlong", [("sentences", "truncate"), ("blocks", "split")])
def test_prepare_equals_naive_oracle(tmp_path, corpus, tok, mode, overlong):
    config = PrepareConfig(mode=mode, max_length=16, valid_fraction=0.3, overlong=overlong, seed=3)
    summary = prepare_corpus(corpus, tok, tmp_path / "out", config)
    got = read_splits(tmp_path / "out")
    assert got == oracle(corpus, tok, config)
    assert len(got[0]) > 0 and len(got[1]) > 0
    assert all(len(s) <= 16 for split in got for s in split)
    assert (summary.train_sequences, summary.valid_sequences) == (len(got[0]), len(got[1]))
    assert (summary.train_tokens, summary.valid_tokens) == (sum(map(len, got[0])), sum(map(len, got[1])))
    assert (summary.documents, summary.empty_documents) == (40 + 9, 3)
    assert summary.sentences == sum(len(split_sentences(p)) for d, _ in [docs(corpus)] for doc in d for p in doc)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["train_tokens"] == summary.train_tokens
    meta = json.loads((tmp_path / "out" / "train" / "meta.json").read_text())
    assert meta["dtype"] == "uint16" and meta["mode"] == mode and meta["vocab_size"] == load_tokenizer(tok).vocab_size
    assert load_tokenizer(tmp_path / "out").backend.to_str() == load_tokenizer(tok).backend.to_str()
    assert not (tmp_path / "out" / ".partial").exists()


def test_blocks_pack_a_documents_sentences(tmp_path, tok):
    path = write(tmp_path / "a.txt", "A dog barked. The bird sang. Nobody listened?\n")
    prepare_corpus([path], tok, tmp_path / "s", PrepareConfig(valid_fraction=0.0))
    prepare_corpus([path], tok, tmp_path / "b", PrepareConfig(mode="blocks", valid_fraction=0.0))
    (s_train, _), (b_train, _) = read_splits(tmp_path / "s"), read_splits(tmp_path / "b")
    assert len(s_train) == 3 and len(b_train) == 1
    assert b_train[0] == [s_train[0][0], *(t for s in s_train for t in s[1:-1]), s_train[0][-1]]


def test_truncate_versus_split(tmp_path, tok):
    sentence = "Rain fell on the old town for many days and nights without stopping once."
    path = write(tmp_path / "a.txt", sentence + "\nThe cat sat.\n")
    pieces = load_tokenizer(tok).encode(sentence)
    n = len(pieces) - 2
    assert n > 12, "the test needs a sentence longer than two windows"
    cut = PrepareConfig(max_length=8, valid_fraction=0.0, overlong="truncate")
    s = prepare_corpus([path], tok, tmp_path / "t", cut)
    (train, _) = read_splits(tmp_path / "t")
    assert train[0] == pieces[:7] + pieces[-1:] and len(train) == 2
    assert (s.truncated, s.split, s.dropped_tokens, s.sentences) == (1, 0, n - 6, 2)

    s = prepare_corpus([path], tok, tmp_path / "s", PrepareConfig(max_length=8, valid_fraction=0.0, overlong="split"))
    (train, _) = read_splits(tmp_path / "s")
    windows = -(-n // 6)
    assert len(train) == windows + 1 and (s.truncated, s.split, s.dropped_tokens) == (0, 1, 0)
    assert [len(w) for w in train[:windows]] == [8] * (windows - 1) + [n - 6 * (windows - 1) + 2]
    assert [t for w in train[:windows] for t in w[1:-1]] == pieces[1:-1]


def test_held_out_split_is_deterministic_and_worker_independent(tmp_path, corpus, tok):
    outputs = []
    for workers in (1, 2, 3):
        config = PrepareConfig(valid_fraction=0.25, workers=workers, chunk_chars=300, seed=1)
        summary = prepare_corpus(corpus, tok, tmp_path / f"w{workers}", config)
        files = {name: (tmp_path / f"w{workers}" / name).read_bytes()
                 for name in ("train/tokens.bin", "train/offsets.npy", "valid/tokens.bin", "valid/offsets.npy")}
        outputs.append((files, {k: v for k, v in asdict(summary).items() if k != "seconds"}))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0][1]["valid_sequences"] > 0
    other = prepare_corpus(corpus, tok, tmp_path / "seed2", PrepareConfig(valid_fraction=0.25, seed=2))
    assert other.valid_sequences != outputs[0][1]["valid_sequences"] or \
        (tmp_path / "seed2/valid/tokens.bin").read_bytes() != outputs[0][0]["valid/tokens.bin"]


def test_held_out_fraction_is_about_right():
    picked = sum(held_out(i, 0, 0.1) for i in range(20000))
    assert 1800 < picked < 2200
    assert not any(held_out(i, 0, 0.0) for i in range(1000))


def test_refuses_to_overwrite_without_flag(tmp_path, tok):
    path = write(tmp_path / "a.txt", "The cat sat.\n")
    prepare_corpus([path], tok, tmp_path / "out", PrepareConfig(valid_fraction=0.0))
    with pytest.raises(ValueError, match="--overwrite"):
        prepare_corpus([path], tok, tmp_path / "out", PrepareConfig(valid_fraction=0.0))
    write(path, "The cat sat.\nThe dog sat.\n")
    s = prepare_corpus([path], tok, tmp_path / "out", PrepareConfig(valid_fraction=0.0, overwrite=True))
    assert s.train_sequences == 2 == len(TokenDataset(tmp_path / "out" / "train"))


@pytest.mark.parametrize("kw", [dict(mode="words"), dict(max_length=2), dict(valid_fraction=1.0),
                                dict(overlong="drop"), dict(workers=0), dict(format="csv")])
def test_config_validation(kw):
    with pytest.raises(ValueError):
        PrepareConfig(**kw)


def test_cli_prepare_and_missing_corpus(tmp_path, tok, capsys):
    path = write(tmp_path / "a.txt", "The cat sat. It was happy.\n")
    out = tmp_path / "out"
    assert main(["prepare", "--corpus", str(path), "--tokenizer", str(tok), "--out", str(out), "--workers", "1",
                 "--valid-fraction", "0", "--quiet"]) == 0
    assert "train_sequences" in capsys.readouterr().out
    assert len(TokenDataset(out / "train")) == 2
    missing = tmp_path / "missing.txt"
    assert main(["prepare", "--corpus", str(missing), "--tokenizer", str(tok), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert f"maskplay prepare: error: corpus file {missing} not found" in err
    assert not (tmp_path / "o2").exists()


def test_prepare_a_real_wikiextractor_file(tmp_path):
    path = shared_path("enwiki-wikiextractor", "wiki_00.gz")
    vocab = shared_path("tta-vocab")
    s = prepare_corpus([path], vocab, tmp_path / "out", PrepareConfig(valid_fraction=0.05))
    with gzip.open(path, "rt", encoding="utf-8") as f:
        n_docs = sum(line.startswith("<doc ") for line in f)
    assert s.documents == n_docs and 0 < s.empty_documents < n_docs
    assert s.train_documents + s.valid_documents == n_docs - s.empty_documents
    assert s.valid_documents > 0 and s.sentences == s.train_sequences + s.valid_sequences + s.empty_sentences
    train = TokenDataset(tmp_path / "out" / "train")
    lengths = np.diff(np.asarray(train.offsets))
    assert lengths.max() <= 128 and lengths.min() >= 3
    tok = load_tokenizer(tmp_path / "out")
    assert tok.decode(train[0].tolist()).startswith("jarred shaw ( born september 28, 1990 )")


def test_summary_table_lists_every_count():
    table = PrepareSummary(documents=12345, seconds=1.5, formats={"text": 2}).table()
    assert "12,345" in table and "text: 2" in table and "valid_tokens" in table

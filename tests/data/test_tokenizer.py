from __future__ import annotations

import gzip
import json
import shutil

import pytest

from maskplay.cli import main
from maskplay.cli.tokenizer import train_tokenizer
from maskplay.data.tokenizer import SPECIAL_TOKENS, load_tokenizer, train_wordpiece
from tests.conftest import shared_path

SENTENCE = "Jarred Shaw (born September 28, 1990) is an American professional basketball player for Trouville."
SIMPLE = "the quick brown fox jumps over the lazy dog."

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A quick brown dog jumps over the lazy fox!",
    "Foxes and dogs are quick, brown and lazy.",
    "The lazy dog sleeps; the quick fox runs.",
] * 3


def round_trips(tok, text: str) -> None:
    ids = tok.encode(text)
    assert ids[0] == tok.special.sos and ids[-1] == tok.special.eos
    decoded = tok.decode(ids)
    assert tok.encode(decoded) == ids  # decoding loses case and spacing around brackets, never a piece


@pytest.mark.parametrize("name", ["tta-vocab", "bert-base-uncased-vocab"])
def test_shared_vocabularies_load_and_round_trip(name):
    tok = load_tokenizer(shared_path(name))
    assert tok.decode(tok.encode(SIMPLE)) == SIMPLE
    round_trips(tok, SENTENCE)
    assert tok.special.unk not in tok.encode(SENTENCE)


def test_tta_vocab_has_maskplay_layout():
    tok = load_tokenizer(shared_path("tta-vocab"))
    assert tok.vocab_size == 29530
    assert (tok.special.pad, tok.special.eos, tok.special.unk, tok.special.sos, tok.special.mask) == (0, 1, 2, 3, 4)
    assert tok.special.all == tuple(range(7))


def test_bert_vocab_matches_huggingface_bert_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    directory = shared_path("bert-base-uncased-vocab")
    ours = load_tokenizer(directory / "vocab.txt")
    from_json = load_tokenizer(directory)  # the directory's tokenizer.json
    shutil.copy(directory / "vocab.txt", tmp_path / "vocab.txt")  # so HF builds it from vocab.txt alone
    hf = transformers.BertTokenizer.from_pretrained(str(tmp_path), do_lower_case=True)
    assert hf.vocab_size == 30522
    for text in (SENTENCE, SIMPLE, "Café naïve résumé — 3.5% of U.S. [MASK] tokens"):
        expected = hf(text)["input_ids"]  # [CLS] ... [SEP]
        assert ours.encode(text) == expected
        assert from_json.encode(text) == expected
    assert (ours.special.sos, ours.special.eos) == (hf.cls_token_id, hf.sep_token_id)


def test_trained_tokenizer_specials_and_round_trip(tmp_path):
    tok = train_wordpiece(CORPUS, vocab_size=120, min_frequency=1)
    vocab = tok.backend.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == list(range(7))
    assert tok.special.all == tuple(range(7)) and tok.special.sos == 3 and tok.special.eos == 1
    assert tok.vocab_size <= 120
    assert tok.decode(tok.encode(SIMPLE)) == SIMPLE
    round_trips(tok, "Quick dogs jump.")
    assert tok.special.unk in tok.encode("zebra")  # 'z' never occurs in the corpus
    assert tok.encode("[MASK]")[1:-1] == [4]


def test_train_cli_writes_json_and_vocab_that_agree(tmp_path, capsys):
    corpus = tmp_path / "c.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.write("\n\n".join(CORPUS) + "\n")
    out = tmp_path / "tok"
    assert main(["tokenizer", "train", "--corpus", str(corpus), "--vocab-size", "150", "--min-frequency", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "blank" in printed and f"{out / 'tokenizer.json'}" in printed
    from_json, from_txt = load_tokenizer(out / "tokenizer.json"), load_tokenizer(out / "vocab.txt")
    lines = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:7] == SPECIAL_TOKENS and len(lines) == from_json.vocab_size
    for text in CORPUS[:4] + [SENTENCE]:
        assert from_json.encode(text) == from_txt.encode(text)
    assert load_tokenizer(out).source.endswith("tokenizer.json")


def test_train_reads_jsonl_and_wikiextractor(tmp_path):
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS))
    wiki = tmp_path / "wiki_00"
    wiki.write_text('<doc id="1" url="?curid=1" title="Ωμέγα">\nΩμέγα\n\nQuick.\n</doc>\n', encoding="utf-8")
    tok, stats = train_tokenizer([jsonl, wiki], 150, tmp_path / "tok", min_frequency=1)
    assert stats.formats == {"jsonl": 1, "wikiextractor": 1} and stats.documents == len(CORPUS) + 1
    assert "ω" not in tok.backend.get_vocab()  # the title line was dropped, so 'ω' was never seen


def test_limit_lines(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("aaa bbb aaa bbb\nzzz yyy zzz yyy\n")
    tok, _ = train_tokenizer([corpus], 100, tmp_path / "t", min_frequency=1, limit_lines=1)
    assert tok.encode("zzz")[1:-1] == [tok.special.unk]
    tok, _ = train_tokenizer([corpus], 100, tmp_path / "t2", min_frequency=1)
    assert tok.special.unk not in tok.encode("zzz")


def test_train_cli_missing_corpus_exit_2(tmp_path, capsys):
    missing = tmp_path / "nope.txt"
    assert main(["tokenizer", "train", "--corpus", str(missing), "--vocab-size", "100", "--out",
                 str(tmp_path / "t")]) == 2
    assert f"maskplay tokenizer: error: corpus file {missing} not found" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_train_rejects_tiny_vocab():
    with pytest.raises(ValueError, match="vocab_size"):
        train_wordpiece(CORPUS, vocab_size=7)


def test_encode_cli(capsys):
    assert main(["tokenizer", "encode", "--tokenizer", str(shared_path("tta-vocab")), "--ids", "Hello world."]) == 0
    pieces, ids = capsys.readouterr().out.splitlines()
    assert pieces == "[SOS] hello world . [EOS]" and ids.split()[0] == "3" and ids.split()[-1] == "1"

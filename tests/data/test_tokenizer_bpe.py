"""The byte-level BPE tokenizer (`maskplay tokenizer train --model bpe`, GPT-BERT's): maskplay's special-token
layout, an exact round trip on bytes (accents, emoji, scripts never seen in training, whitespace), its pieces
being the text's UTF-8 bytes under GPT-2's byte-to-character table, and `maskplay prepare` + a tiny pretraining
run with it."""

from __future__ import annotations

import random

import pytest

from maskplay import MaskplayModel
from maskplay.cli import main
from maskplay.data.dataset import TokenDataset
from maskplay.data.tokenizer import SPECIAL_TOKENS, load_tokenizer, train_byte_bpe
from maskplay.tasks.train import train
from tests.tasks.train.test_train import small_config

WORDS = ["café", "naïve", "façade", "über", "smörgåsbord", "el", "niño", "the", "quick", "brown", "fox", "jumps",
         "over", "lazy", "dog", "and", "a", "cat", "sat", "on", "mat", "😀", "🎉", "Ωμέγα", "déjà", "vu"]


def corpus(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(n)]


def gpt2_byte_table() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table, written out from its definition: the printable
    Latin-1 bytes stand for themselves, the other 68 bytes for chr(256), chr(257), ... in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


TEXTS = ["Café déjà vu, naïve façade.", "😀🎉 emoji, 👍🏽 with a skin tone and 👩‍👩‍👧 a family (ZWJ)",
         "日本語のテキスト, never seen in training", "tabs\tand\nnewlines,  double  spaces ", " leading space",
         "Ωμέγα über smörgåsbord", "\u0065\u0301 (e + combining acute) stays decomposed"]


@pytest.fixture(scope="module")
def bpe():
    return train_byte_bpe(corpus(), vocab_size=400, min_frequency=2)


def test_byte_bpe_keeps_maskplays_special_layout(bpe):
    vocab = bpe.backend.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == list(range(7))
    s = bpe.special
    assert (s.pad, s.eos, s.unk, s.sos, s.mask, s.sep, s.all) == (0, 1, 2, 3, 4, 6, tuple(range(7)))
    assert 7 + 256 < bpe.vocab_size <= 400
    assert bpe.encode("[MASK]")[1:-1] == [4]  # a literal special is one piece, as with WordPiece
    with pytest.raises(ValueError, match="256 bytes"):
        train_byte_bpe(corpus(10), vocab_size=200)


@pytest.mark.parametrize("text", TEXTS)
def test_byte_bpe_round_trips_bytes(bpe, text):
    ids = bpe.encode(text)
    assert ids[0] == bpe.special.sos and ids[-1] == bpe.special.eos
    assert bpe.special.unk not in ids  # every byte has a piece
    assert bpe.decode(ids) == text  # byte for byte: no normalisation, no lowercasing
    table = gpt2_byte_table()
    pieces = bpe.tokens(text)[1:-1]
    assert "".join(pieces) == "".join(table[b] for b in text.encode("utf-8"))


def test_byte_bpe_merges_what_the_corpus_repeats(bpe):
    assert len(bpe.encode("Café déjà vu")) < len("Café déjà vu".encode()) + 2  # fewer pieces than bytes
    assert len(bpe.tokens(" smörgåsbord")) <= 2 + 2  # a frequent word: one or two pieces between [SOS] and [EOS]


@pytest.mark.slow
def test_cli_trains_a_bpe_then_prepare_and_a_tiny_pretraining_run(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(corpus(600)) + "\n", encoding="utf-8")
    tok_dir = tmp_path / "tok"
    assert main(["tokenizer", "train", "--model", "bpe", "--corpus", str(text), "--vocab-size", "400",
                 "--out", str(tok_dir)]) == 0
    assert "(bpe)" in capsys.readouterr().out
    assert (tok_dir / "tokenizer.json").is_file() and not (tok_dir / "vocab.txt").exists()
    tok = load_tokenizer(tok_dir)
    assert tok.decode(tok.encode(TEXTS[1])) == TEXTS[1]
    data = tmp_path / "data"
    assert main(["prepare", "--corpus", str(text), "--tokenizer", str(tok_dir), "--out", str(data), "--workers", "1",
                 "--max-length", "32", "--valid-fraction", "0.1", "--quiet"]) == 0
    first = TokenDataset(data / "train")[0].tolist()
    assert first[0] == tok.special.sos and first[-1] == tok.special.eos and tok.decode(first) in corpus(600)
    for family in ("gpt", "bert"):
        result = train(small_config(data, tmp_path / family, "optim.max_steps=4", "run.eval_every=0",
                                    family=family))
        assert result.status == "finished" and result.eval_loss is not None
        model = MaskplayModel.from_pretrained(result.final_dir)
        assert model.config.vocab_size == tok.vocab_size and model.config.mask_token_id == 4
        assert load_tokenizer(result.final_dir).decode(tok.encode(TEXTS[0])) == TEXTS[0]

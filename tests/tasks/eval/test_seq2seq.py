"""The titles data set (split by document, counted skips), ROUGE / exact match against hand-checked values, the
first-words baseline, malformed JSONL, and `maskplay seq2seq eval` end to end on a tiny UniLM and GPT."""

from __future__ import annotations

import gzip
import json

import pytest

from maskplay.cli import main as cli_main
from maskplay.data.titles import TitlesConfig, build_titles, split_of
from maskplay.tasks.eval.seq2seq import first_words, read_pairs, scores
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (fixture)

WIKI = """<doc id="1" url="u1" title="Alpha Beta">
Alpha Beta

Alpha Beta is a cat that sat on the mat in the old house .
Second paragraph is not used .
</doc>
<doc id="2" url="u2" title="Empty One">
Empty One

</doc>
<doc id="3" url="u3" title="Gamma (disambiguation)">
Gamma (disambiguation)

Gamma may refer to many things in the world and more .
</doc>
<doc id="4" url="u4" title="Short">
Short

Too short here .
</doc>
<doc id="5" url="u5" title="The Dog">
The Dog

The dog is a good animal that ran to the river and back .
</doc>
"""


def test_titles_pairs_the_first_paragraph_with_the_title_and_counts_what_it_skips(tmp_path):
    corpus = tmp_path / "wiki_00.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        f.write(WIKI)
    tok_dir = tmp_path / "tok"
    save_model_dir(tok_dir, tiny("bert", small_tokenizer(tmp_path)), small_tokenizer(tmp_path))
    config = TitlesConfig(dev_percent=0, test_percent=0, max_source=6)
    summary = build_titles([str(corpus)], str(tok_dir), tmp_path / "titles", config)
    assert summary["pairs"] == {"train": 2, "dev": 0, "test": 0}
    counts = summary["counts"]
    assert counts["skipped: empty document"] == 1 and counts["skipped: disambiguation page"] == 1
    assert counts["skipped: first paragraph under min_source_words"] == 1
    assert counts["first paragraphs cut at max_source pieces"] == 2
    rows = [json.loads(line) for line in (tmp_path / "titles" / "train.jsonl").read_text().splitlines()]
    assert rows[0]["target"] == "Alpha Beta" and rows[0]["source"].startswith("Alpha Beta is a cat")
    from maskplay.data.dataset import TokenDataset

    seq = TokenDataset(tmp_path / "titles" / "train")[0].tolist()
    tok = small_tokenizer(tmp_path)
    assert seq[0] == tok.special.sos and seq[-1] == tok.special.eos and seq.count(tok.special.sep) == 1
    assert seq.index(tok.special.sep) == 7  # [SOS] + 6 source pieces
    with pytest.raises(ValueError, match="already exists"):
        build_titles([str(corpus)], str(tok_dir), tmp_path / "titles", config)


def test_the_split_depends_on_the_title_alone():
    config = TitlesConfig(dev_percent=10, test_percent=10)
    splits = [split_of(f"title {k}", config) for k in range(2000)]
    assert splits == [split_of(f"title {k}", config) for k in range(2000)]
    assert 0.07 < splits.count("dev") / 2000 < 0.13 and 0.07 < splits.count("test") / 2000 < 0.13


def test_rouge_and_exact_match_against_hand_checked_values():
    result = scores(["walter collinge", "the Dog"], ["Walter Edward Collinge", "The dog"])
    # pair 1: unigram P 2/2, R 2/3 -> F 0.8; bigrams: none shared -> 0; LCS 2 -> 0.8. pair 2: identical tokens
    assert result["rouge1"] == pytest.approx(90.0)
    assert result["rouge2"] == pytest.approx(50.0)
    assert result["rougeL"] == pytest.approx(90.0)
    assert result["exact_match"] == pytest.approx(50.0)
    assert first_words("one two three four", 2) == "one two"


def test_malformed_pairs_name_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"source": "a", "target": "b"}\n{"source": "a"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: expected an object"):
        read_pairs(path)
    path.write_text('{"source": "a", "target": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: not valid JSON"):
        read_pairs(path)


@pytest.mark.parametrize("family", ["unilm", "gpt"])
def test_seq2seq_eval_end_to_end(tmp_path, family, capsys):
    tok = small_tokenizer(tmp_path)
    model_dir = save_model_dir(tmp_path / "m", tiny(family, tok), tok)
    data = tmp_path / "dev.jsonl"
    data.write_text("".join(json.dumps({"source": s, "target": t}) + "\n"
                            for s, t in [("the cat sat on the mat", "cat"), ("a dog ran", "the dog")]))
    out = tmp_path / "r.json"
    assert cli_main(["seq2seq", "eval", str(model_dir), "--data", str(data), "--max-new-tokens", "4",
                     "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["pairs"] == 2 and len(record["predictions"]) == 2 and 0 <= record["rouge1"] <= 100
    assert cli_main(["eval", "seq2seq", "first-words:2", "--data", str(data)]) == 0  # the same command
    assert "first-words:2" in capsys.readouterr().out


def test_a_family_that_cannot_generate_says_so(tmp_path, capsys):
    tok = small_tokenizer(tmp_path)
    model_dir = save_model_dir(tmp_path / "m", tiny("tta", tok), tok)
    data = tmp_path / "dev.jsonl"
    data.write_text(json.dumps({"source": "a cat", "target": "cat"}) + "\n")
    assert cli_main(["seq2seq", "eval", str(model_dir), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert "cannot generate" in err and "unilm" in err and len(err.strip().splitlines()) == 1

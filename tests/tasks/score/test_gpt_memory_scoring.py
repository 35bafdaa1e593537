"""maskplay score --overflow memory for a GPT that has Transformer-XL memory (relative positions): against
scripts/memory_study.py's loop (the RESULTS section 9 scoring) and, with memory covering the whole text, against
one pass over it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from maskplay.cli import main
from maskplay.tasks.score import Scorer
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from memory_study import score_article  # noqa: E402

ATOL = 2e-5
DOCS = [" ".join(["the cat sat on the mat and it is good"] * 3), "a dog ran on the mat",
        " ".join(["unbelievably good dogs sat"] * 4)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module", params=["transformer-xl", "alibi"])
def gpt(tok, request):
    return tiny("gpt", tok, positions=request.param, max_position=256)


@pytest.mark.parametrize("memory", [0, 5, 12])
def test_scores_equal_the_memory_studys_loop(tok, gpt, memory):
    got = Scorer(gpt, tok, overflow="memory", segment_tokens=8, memory_tokens=memory, batch_size=2).score(DOCS)
    for text, score in zip(DOCS, got, strict=True):
        ids = tok.encode(text)  # [SOS] pieces [EOS]
        with torch.no_grad():
            want = score_article(gpt.eval(), ids, 8, memory)  # tokens from the second on
        assert len(ids) > 10 or score.windows == 1
        assert score.token_log_probs == pytest.approx(want[:len(ids) - 2], abs=ATOL)


def test_memory_covering_everything_equals_one_pass(tok, gpt):
    whole = Scorer(gpt, tok).score(DOCS)
    got = Scorer(gpt, tok, overflow="memory", segment_tokens=5, memory_tokens=10_000, batch_size=3).score(DOCS)
    for a, b in zip(whole, got, strict=True):
        assert b.windows > 1
        assert b.token_log_probs == pytest.approx(a.token_log_probs, abs=ATOL)


def test_a_gpt_without_relative_positions_says_why(tok):
    with pytest.raises(ValueError, match="needs relative positions"):
        Scorer(tiny("gpt", tok), tok, overflow="memory")
    with pytest.raises(ValueError, match="only families gpt, xlnet have; this model is 'bert'"):
        Scorer(tiny("bert", tok), tok, overflow="memory")


def test_the_command_line_scores_a_gpt_with_memory(tok, gpt, tmp_path, capsys):
    directory = save_model_dir(tmp_path / "gpt", gpt, tok)
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(DOCS) + "\n")
    assert main(["score", str(directory), "--file", str(path), "--overflow", "memory", "--segment-tokens", "8",
                 "--memory-tokens", "12", "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    want = Scorer(gpt, tok, overflow="memory", segment_tokens=8, memory_tokens=12).score(DOCS)
    for row, score in zip(rows, want, strict=True):
        assert row["token_log_probs"] == pytest.approx(score.token_log_probs, abs=1e-6)
        assert row["windows"] == score.windows

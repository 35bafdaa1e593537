"""Long documents: XLNet's causal score over segments with Transformer-XL memory
(overflow="memory", maskplay.tasks.score.memory) and embeddings of long text in windows (Embedder overflow="window")."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from maskplay.cli import main
from maskplay.families.xlnet import XlnetConfig
from maskplay.tasks.score import Embedder, Scorer
from maskplay.tasks.score.memory import memory_segments
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)

ATOL = 2e-5
# ~70-130 pieces each (the small vocabulary splits most words), all fitting a 256-position model in one pass
DOCS = [" ".join(["the cat sat on the mat and it is good"] * 6),
        "a dog ran on the mat",
        " ".join(["unbelievably good dogs sat"] * 9),
        " ".join(["it is a dog, quickly jumping over the cat!"] * 5)]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


@pytest.fixture(scope="module")
def xlnet(tok):
    return tiny("xlnet", tok, max_position=256)


def _whole(model, tok, text):
    """log p of every piece from one left-to-right pass over [SOS] text [EOS]: the oracle."""
    ids = torch.tensor([tok.encode(text)])
    with torch.no_grad():
        g = model.left_to_right(ids).last_hidden_state[0]
        return model.head.log_probs(g[1:-1], model.embeddings.word.weight, ids[0, 1:-1]).tolist()


# ---- the segments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 13, 30])
@pytest.mark.parametrize("width", [2, 3, 7, 8])
def test_segments_score_every_piece_once_in_order(n, width):
    ids = list(range(100, 100 + n))
    sos, eos = 3, 1
    segs = memory_segments(ids, sos, eos, width)
    scored = [j for s in segs for j in s.scored]
    assert scored == list(range(n))  # every piece exactly once, in order
    stream = [s_id for s in segs for s_id in s.ids]
    assert stream in ([sos, *ids, eos], [sos, *ids])  # consecutive, nothing repeated, nothing skipped
    assert stream[-1] == eos or (n + 2) % width == 1  # [EOS] left out only when it would be a segment alone
    assert all(len(s.ids) <= width for s in segs) and all(len(s.ids) == width for s in segs[:-1])
    assert [s.ids.count(sos) for s in segs] == [1] + [0] * (len(segs) - 1)  # only the first starts with [SOS]
    for s in segs:
        for j in s.scored:
            assert s.ids[s.position(j)] == ids[j]
    assert len(segs) == math.ceil((n + 1) / width)  # what `maskplay score` announces for long lines
    bare = memory_segments(ids, None, eos, width)  # without [SOS] (the context-length study's control)
    assert [j for s in bare for j in s.scored] == list(range(n))
    assert [t for s in bare for t in s.ids] in ([*ids, eos], ids) and all(sos not in s.ids for s in bare)
    assert all(s.ids[s.position(j)] == ids[j] for s in bare for j in s.scored)


# ---- scores ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("segment", [4, 9, 16])
def test_memory_covering_everything_equals_one_pass(tok, xlnet, segment):
    scorer = Scorer(xlnet, tok, overflow="memory", segment_tokens=segment, memory_tokens=10_000, batch_size=2)
    got = scorer.score(DOCS)
    assert [s.text for s in got] == DOCS
    for text, score in zip(DOCS, got, strict=True):
        want = _whole(xlnet, tok, text)
        assert score.num_tokens == len(want) and score.method == "causal"
        assert score.token_log_probs == pytest.approx(want, abs=ATOL)
        assert score.windows == math.ceil((len(want) + 1) / segment)
    # the same through the ordinary path, where every text fits the model: one pass each
    plain = Scorer(xlnet, tok).score(DOCS)
    for a, b in zip(plain, got, strict=True):
        assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=ATOL) and a.windows == 1


def test_many_texts_in_one_batch_and_short_ones_between(tok, xlnet):
    """More than 8 rows of different lengths (XLNet would cut such a batch into groups and drop the memory),
    texts that fit the segment scored the ordinary way, the order kept."""
    texts = [DOCS[k % 4] if k % 3 else "a dog ran" for k in range(11)]
    got = Scorer(xlnet, tok, overflow="memory", segment_tokens=12, memory_tokens=500, batch_size=16).score(texts)
    for text, score in zip(texts, got, strict=True):
        assert score.text == text
        assert score.token_log_probs == pytest.approx(_whole(xlnet, tok, text), abs=ATOL)
    assert got[0].windows == 1 and got[2].windows > 1


def _reference(model, tok, text, width, memory):
    """A plain loop over one text: segment after segment, the memory cut by hand."""
    stream = tok.encode(text)
    out, mems = [], None
    with torch.no_grad():
        for start in range(0, len(stream) - 1, width):  # a last segment of [EOS] alone is not run
            ids = torch.tensor([stream[start:start + width]])
            result = model.left_to_right(ids, mems=mems)
            logp = model.head.log_probs(result.last_hidden_state[0], model.embeddings.word.weight, ids[0])
            for position in range(ids.shape[1]):
                if 0 < start + position < len(stream) - 1:  # a piece, not [SOS] or [EOS]
                    out.append(logp[position].item())
            mems = [m[:, -memory:] for m in result.mems] if memory else None
    return out


@pytest.mark.parametrize("memory", [0, 5, 8, 20])
def test_limited_memory_against_a_plain_loop(tok, xlnet, memory):
    got = Scorer(xlnet, tok, overflow="memory", segment_tokens=8, memory_tokens=memory, batch_size=3).score(DOCS)
    for text, score in zip(DOCS, got, strict=True):
        assert score.token_log_probs == pytest.approx(_reference(xlnet, tok, text, 8, memory), abs=ATOL)


def test_without_sos_equals_one_pass_over_the_pieces(tok, xlnet):
    from maskplay.tasks.score.memory import memory_log_probs
    from maskplay.tasks.score.passes import Runner
    from maskplay.tasks.score.text import encode_texts

    encoded = encode_texts(tok, DOCS[:3])
    with torch.no_grad():
        found, counts = memory_log_probs(Runner(xlnet, "fp32"), list(enumerate(encoded)), 8, 10_000, batch_size=2,
                                         sos=False)
        for k, enc in enumerate(encoded):
            got = [v for (sentence, _), v in sorted(found) if sentence == k]
            ids = torch.tensor([[*enc.ids, tok.special.eos]])
            g = xlnet.left_to_right(ids).last_hidden_state[0, :-1]
            assert got == pytest.approx(xlnet.head.log_probs(g, xlnet.embeddings.word.weight, ids[0, :-1]).tolist(),
                                        abs=ATOL)
            assert counts[k] == math.ceil(len(enc) / 8)  # [EOS] alone is not run


def test_memory_changes_the_scores_and_no_memory_is_each_segment_alone(tok, xlnet):
    text = DOCS[0]
    full, none, short = (Scorer(xlnet, tok, overflow="memory", segment_tokens=8, memory_tokens=m).score([text])[0]
                         for m in (10_000, 0, 8))
    stream = tok.encode(text)
    # no memory: each segment is a text of its own (only the first starts with [SOS])
    alone = []
    with torch.no_grad():
        for start in range(0, len(stream) - 1, 8):
            ids = torch.tensor([stream[start:start + 8]])
            g = xlnet.left_to_right(ids).last_hidden_state[0]
            logp = xlnet.head.log_probs(g, xlnet.embeddings.word.weight, ids[0]).tolist()
            alone.extend(v for p, v in enumerate(logp) if 0 < start + p < len(stream) - 1)
    assert none.token_log_probs == pytest.approx(alone, abs=ATOL)
    # the first segment is the same under every memory; later pieces are not
    assert full.token_log_probs[:7] == pytest.approx(none.token_log_probs[:7], abs=ATOL)
    assert full.token_log_probs[7:] != pytest.approx(none.token_log_probs[7:], abs=1e-3)
    assert full.token_log_probs[:15] == pytest.approx(short.token_log_probs[:15], abs=ATOL)  # memory 8 holds it all
    assert full.token_log_probs[23:] != pytest.approx(short.token_log_probs[23:], abs=1e-3)


def test_bf16_memory_scores_are_close(tok, xlnet):
    a = Scorer(xlnet, tok, overflow="memory", segment_tokens=8).score(DOCS[:2])
    b = Scorer(xlnet, tok, overflow="memory", segment_tokens=8, precision="bf16").score(DOCS[:2])
    for x, y in zip(a, b, strict=True):
        assert abs(x.mean_log_prob - y.mean_log_prob) < 0.2


def test_memory_defaults(tok, xlnet):
    scorer = Scorer(xlnet, tok, overflow="memory")
    assert (scorer.segment_tokens, scorer.memory_tokens) == (256, 768)
    capped = tiny("xlnet", tok, max_position=32, xlnet=XlnetConfig(mem_len=40))
    scorer = Scorer(capped, tok, overflow="memory")
    assert (scorer.segment_tokens, scorer.memory_tokens) == (32, 40)


def test_one_line_errors(tok, xlnet):
    cases = [
        (dict(model=tiny("gpt", tok)), "needs relative positions: positions = 'transformer-xl'"),
        (dict(model=tiny("bert", tok)), "only families gpt, xlnet have; this model is 'bert': use overflow='window'"),
        (dict(method="pll"), "method 'pll' reads more than the text before a piece"),
        (dict(segment_tokens=300), r"segment_tokens must be 2..256"),
        (dict(segment_tokens=1), r"segment_tokens must be 2..256"),
        (dict(memory_tokens=-1), "memory_tokens must be >= 0"),
        (dict(model=tiny("xlnet", tok, xlnet=XlnetConfig(mem_len=16)), memory_tokens=17), r"xlnet.mem_len = 16"),
        (dict(overflow="window", memory_tokens=5), "apply to overflow='memory' only"),
    ]
    for kwargs, message in cases:
        kwargs = {"model": xlnet, "overflow": "memory", **kwargs}
        with pytest.raises(ValueError, match=message) as err:
            Scorer(kwargs.pop("model"), tok, **kwargs)
        assert "\n" not in str(err.value)


# ---- the command line ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, tok, xlnet):
    root = tmp_path_factory.mktemp("models")
    return {"xlnet": save_model_dir(root / "xlnet", xlnet, tok),
            "gpt": save_model_dir(root / "gpt", tiny("gpt", tok), tok),
            "tta": save_model_dir(root / "tta", tiny("tta", tok, max_position=16), tok)}


def test_cli_scores_with_memory_line_by_line(model_dirs, tok, xlnet, tmp_path, capsys):
    path = tmp_path / "docs.txt"
    path.write_text(f"{DOCS[0]}\n\n{DOCS[1]}\n{DOCS[2]}\n")
    assert main(["score", str(model_dirs["xlnet"]), "--file", str(path), "--overflow", "memory",
                 "--segment-tokens", "8", "--memory-tokens", "16", "--format", "jsonl", "--batch-size", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in rows] == [1, 2, 3, 4] and rows[1]["empty"]
    want = Scorer(xlnet, tok, overflow="memory", segment_tokens=8, memory_tokens=16).score(
        [DOCS[0], DOCS[1], DOCS[2]])
    for row, score in zip([rows[0], rows[2], rows[3]], want, strict=True):
        assert row["token_log_probs"] == pytest.approx(score.token_log_probs, abs=1e-6)
        assert row["windows"] == score.windows


def test_cli_errors_are_one_line(model_dirs, capsys):
    assert main(["score", str(model_dirs["gpt"]), "a dog", "--overflow", "memory"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs relative positions" in err
    assert main(["score", str(model_dirs["xlnet"]), "a dog", "--memory-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apply to overflow='memory' only" in err


# ---- embeddings in windows -----------------------------------------------------------------------------------


def _naive_window_mean(model, tok, text, width, causal):
    """Every window, run alone; each piece from the window where it sits furthest from the edges (GPT: the
    earliest that holds it); the mean over the pieces."""
    pieces = tok.encode(text)[1:-1]
    n = len(pieces)
    starts = sorted({*range(0, n - width, width // 2), n - width})
    total = torch.zeros(model.config.hidden_size, dtype=torch.float64)
    for j in range(n):
        holding = [s for s in starts if s <= j < s + width]
        if causal:
            s = min(holding)
        else:
            best = max(min(j - s, s + width - 1 - j) for s in holding)
            s = min(s for s in holding if min(j - s, s + width - 1 - j) == best)
        window = torch.tensor([[tok.special.sos, *pieces[s:s + width], tok.special.eos]])
        with torch.no_grad():
            total += model(window).last_hidden_state[0, j - s + 1].double()
    return (total / n).numpy()


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "xlnet"])
def test_embedding_in_windows_against_a_naive_mean(tok, family):
    model = tiny(family, tok, max_position=12)
    texts = [DOCS[0], "a dog ran", DOCS[2]]
    got = Embedder(model, tok).encode(texts, overflow="window", batch_size=2)
    for text, row in zip(texts, got, strict=True):
        if len(tok.encode(text)) <= 12:
            want = Embedder(model, tok).encode([text])[0]
        else:
            want = _naive_window_mean(model, tok, text, 10, causal=family == "gpt")
        np.testing.assert_allclose(row, want, atol=2e-5)
    truncated = Embedder(model, tok).encode(texts, overflow="truncate")
    assert not np.allclose(got[0], truncated[0], atol=1e-3) and np.allclose(got[1], truncated[1], atol=1e-6)


def test_embedding_window_errors_and_cli(model_dirs, tok, tmp_path, capsys):
    model = tiny("tta", tok, max_position=16)
    with pytest.raises(ValueError, match="defines mean pooling only; pooling 'first'"):
        Embedder(model, tok).encode([DOCS[0]], overflow="window", pooling="first")
    with pytest.raises(ValueError, match="overflow='memory' applies to XLNet's causal score"):
        Embedder(model, tok).encode([DOCS[0]], overflow="memory")
    path = tmp_path / "in.txt"
    path.write_text(f"{DOCS[0]}\na dog ran\n")
    out = tmp_path / "x.npy"
    assert main(["embed", str(model_dirs["tta"]), "--file", str(path), "--out", str(out), "--overflow", "window"]) == 0
    matrix = np.load(out, allow_pickle=False)
    np.testing.assert_allclose(matrix, Embedder(model, tok).encode([DOCS[0], "a dog ran"], overflow="window"),
                               atol=1e-6)


# ---- the context-length study's reading of WikiText -------------------------------------------------------------


def test_study_reads_wikitext_articles(tmp_path, monkeypatch):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "context_length_study", Path(__file__).resolve().parents[3] / "scripts" / "context_length_study.py")
    study = importlib.util.module_from_spec(spec)
    import sys

    monkeypatch.setitem(sys.modules, spec.name, study)  # its dataclass looks its module up there
    spec.loader.exec_module(study)
    path = tmp_path / "wiki.valid.tokens"
    path.write_text(" \n = First = \n \n A b @-@ c , 1 @.@ 5 <unk> d . \n \n = = Part = = \n \n E f . \n"
                    " = Second = \n G h . \n = Third = \n I . \n")
    titles, texts, unk = study.wikitext_articles(path, 2)
    assert titles == ["First", "Second"] and texts == ["A b-c , 1.5 d . E f .", "G h ."] and unk == 1
    assert study.wikitext_articles(path, 3)[1][2] == "I ."
    with pytest.raises(ValueError, match="only 3 articles"):
        study.wikitext_articles(path, 4)

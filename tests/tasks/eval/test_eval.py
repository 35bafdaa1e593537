"""Evaluation logic with toy inputs and hand-worked answers, and each loader on the real shared files."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from maskplay.tasks.eval.cola import Judgement, evaluate_cola, load_cola, sample, tune_threshold
from maskplay.tasks.eval.common import matthews, pearson, rankdata, spearman
from maskplay.tasks.eval.nbest import FirstPass, Utterance, evaluate_nbest, load_nbest
from maskplay.tasks.eval.pairs import MinimalPair, evaluate_pairs, load_pairs, pair_files
from maskplay.tasks.eval.spelling import Item, evaluate_spelling, load_rwse
from maskplay.tasks.eval.sts import Pair, evaluate_sts, load_sick, load_stsb
from maskplay.tasks.eval.wer import edit_distance, wer
from maskplay.tasks.score.scorer import SentenceScore
from maskplay.tasks.score.text import encode_texts
from tests.conftest import shared_path
from tests.tasks.score.test_score_support import one_thread, small_tokenizer  # noqa: F401 (one_thread: autouse fixture)

# ---- WER -----------------------------------------------------------------------------------------------


def test_edit_distance_hand_worked():
    # ref:  the cat sat on  the mat
    # hyp:  the cat sit on      mat  down
    #               S        D        I   -> 3 edits, WER 3/6 = 50 %
    ref, hyp = "the cat sat on the mat", "the cat sit on mat down"
    assert edit_distance(ref.split(), hyp.split()) == 3
    assert wer([ref], [hyp]) == pytest.approx(50.0)
    assert edit_distance([], ["a", "b"]) == 2 and edit_distance(["a"], []) == 1 and edit_distance([], []) == 0
    assert edit_distance("a b c d".split(), "b c d a".split()) == 2  # delete a, insert a
    assert wer(["a b", "c d e"], ["a b", "c x e y"]) == pytest.approx(100 * 2 / 5)


def _reference_distance(a: tuple, b: tuple) -> int:
    """The textbook recursion, no prefix/suffix trimming."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, j in itertools.product(range(len(a) + 1), range(len(b) + 1)):
        if i == 0 or j == 0:
            table[i][j] = i + j
        else:
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return table[-1][-1]


def test_edit_distance_matches_the_textbook_table():
    rng = random.Random(0)
    for _ in range(300):
        a = tuple(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        b = tuple(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        assert edit_distance(a, b) == _reference_distance(a, b), (a, b)


def test_wer_bad_input():
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        wer(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no words"):
        wer([""], ["a"])


# ---- correlation and MCC -------------------------------------------------------------------------------


def _old_pearson(x, y):
    """The hand-written statistics these replaced (scipy / scikit-learn now), kept to show the numbers hold."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum()) / float(np.sqrt((x * x).sum() * (y * y).sum()))


def _old_rankdata(x):
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks, sorted_x, start = np.empty(len(x)), x[order], 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            ranks[order[start:end]] = (start + end + 1) / 2.0
            start = end
    return ranks


def _old_matthews(p, g):
    p, g = np.asarray(p, dtype=bool), np.asarray(g, dtype=bool)
    tp, tn, fp, fn = (float(v.sum()) for v in (p & g, ~p & ~g, p & ~g, ~p & g))
    denom = float(np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    return (tp * tn - fp * fn) / denom if denom > 0 else 0.0


def test_library_statistics_equal_the_old_numbers():
    rng = np.random.default_rng(0)
    x = rng.normal(size=40)
    y = x + rng.normal(size=40)
    y[:6] = y[6]  # ties
    x[10:13] = x[13]
    assert pearson(x, y) == pytest.approx(_old_pearson(x, y), abs=1e-12)
    assert spearman(x, y) == pytest.approx(_old_pearson(_old_rankdata(x), _old_rankdata(y)), abs=1e-12)
    np.testing.assert_array_equal(rankdata(y), _old_rankdata(y))
    # fixed inputs, numbers from the old code
    assert pearson([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8, abs=1e-12)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9486832980505138, abs=1e-12)
    with pytest.raises(ValueError, match="same length"):
        pearson([1.0, 2.0], [1.0])
    for _ in range(50):
        p, g = rng.random(30) > 0.5, rng.random(30) > 0.4
        assert matthews(p, g) == pytest.approx(_old_matthews(p, g), abs=1e-12)
    assert matthews([True] * 4, [True, False, True, False]) == _old_matthews([True] * 4, [1, 0, 1, 0]) == 0.0


def test_matthews_hand_worked():
    # tp=2 tn=1 fp=1 fn=0: (2*1 - 1*0) / sqrt(3 * 2 * 2 * 1) = 2 / sqrt(12)
    assert matthews([1, 1, 1, 0], [1, 1, 0, 0]) == pytest.approx(2 / 12 ** 0.5)
    assert matthews([1, 1, 1], [1, 0, 1]) == 0.0  # constant prediction: undefined -> 0
    assert matthews([0, 1], [0, 1]) == pytest.approx(1.0)


# ---- STS -----------------------------------------------------------------------------------------------


def test_evaluate_sts_cosine_and_correlations():
    stats = pytest.importorskip("scipy.stats")
    vectors = {"a": [1.0, 0.0], "b": [1.0, 0.1], "c": [0.0, 1.0], "d": [-1.0, 0.2], "e": [0.5, 0.5]}
    pairs = [Pair("a", "b", 5.0), Pair("a", "c", 1.0), Pair("a", "d", 0.0), Pair("b", "e", 3.0), Pair("c", "e", 3.5)]
    seen = []

    def embed(texts):
        seen.append(list(texts))
        return np.array([vectors[t] for t in texts])

    result = evaluate_sts(pairs, embed)
    assert sorted(seen[0]) == sorted(vectors) and len(seen) == 1  # each sentence embedded once
    v = {k: np.array(x) / np.linalg.norm(x) for k, x in vectors.items()}
    cos = [float(v[p.a] @ v[p.b]) for p in pairs]
    gold = [p.gold for p in pairs]
    assert result["pearson"] == pytest.approx(100 * stats.pearsonr(cos, gold)[0])
    assert result["spearman"] == pytest.approx(100 * stats.spearmanr(cos, gold)[0])


def test_stsb_loader_reads_the_real_file():
    path = shared_path("stsbenchmark", "sts-dev.csv")
    pairs = load_stsb(path)
    assert len(pairs) == 1500  # rows with extra source columns and stray quotes included
    assert pairs[0] == Pair("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)
    assert all(0.0 <= p.gold <= 5.0 and p.a and p.b for p in pairs)
    assert len(load_stsb(path, limit=3)) == 3


def test_sick_loader_reads_the_real_file():
    pairs = load_sick(shared_path("sick", "SICK_train_trial.txt"), limit=4)
    assert len(pairs) == 4 and pairs[0].gold == 4.5
    assert pairs[0].a.startswith("A group of kids is playing in a yard")


def test_sts_loaders_name_bad_rows(tmp_path):
    bad = tmp_path / "sts.csv"
    bad.write_text("g\tf\ty\t1\t5.0\ta\tb\ng\tf\ty\t2\tfive\ta\tb\n")
    with pytest.raises(ValueError, match=r"sts.csv:2: score column 'five' is not a number"):
        load_stsb(bad)
    bad.write_text("pair_ID\tsentence_A\n1\tx\n")
    with pytest.raises(ValueError, match=r"sts.csv:1: header lacks column\(s\) \['sentence_B', 'relatedness_score'\]"):
        load_sick(bad)


# ---- N-best --------------------------------------------------------------------------------------------


def _utt(ref: str, texts: list[str], scores: list[float]) -> Utterance:
    return Utterance("u", ref, texts, np.array(scores), np.zeros(len(texts)))


def test_nbest_reranking_toy():
    # The first pass prefers a wrong hypothesis by 1; an LM that likes the right one by 2 per unit weight
    # fixes it from w = 0.5 on. Each split is tuned on the other.
    good = {"the cat sat": -1.0, "the cat sad": -3.0, "a dog ran": -2.0, "a dog rang": -4.0, "": 0.0}
    split_a = [_utt("THE CAT SAT", ["THE CAT SAD", "THE CAT SAT"], [-10.0, -11.0])]
    split_b = [_utt("A DOG RAN", ["A DOG RANG", "A DOG RAN", ""], [-5.0, -6.0, -5.5])]
    asked = []

    def lm(texts):
        asked.extend(texts)
        return [good[t] for t in texts]

    result = evaluate_nbest({"a": split_a, "b": split_b}, lm, weights=[0.0, 0.25, 1.0, 2.0])
    assert "" not in asked and all(t == t.lower() for t in asked)
    a = result["a"]
    assert a["one_best_wer"] == pytest.approx(100 / 3) and a["oracle_wer"] == 0.0
    assert a["reranked_wer"] == 0.0 and a["weight"] == 1.0 and a["tuned_on"] == "b"
    b = result["b"]
    # the empty hypothesis gets the list's lowest LM score (-4), so it never wins on LM grounds
    assert b["reranked_wer"] == 0.0 and b["oracle_wer"] == 0.0 and b["one_best_wer"] == pytest.approx(100 / 3)


def test_nbest_first_pass_am_removes_espnet_lm():
    u = Utterance("u", "A B", ["A X", "A B"], np.array([-1.0, -1.5]), np.array([0.0, -5.0]))
    # am = score - 0.6 * lm: [-1.0, 1.5] -> the second hypothesis wins without any LM of ours
    result = evaluate_nbest({"x": [u], "y": [u]}, lambda t: [0.0] * len(t), FirstPass.AM, weights=[0.0])
    assert result["x"]["reranked_wer"] == 0.0 and result["x"]["one_best_wer"] == 50.0


def test_nbest_loader_reads_the_real_file():
    utts = load_nbest(shared_path("librispeech-nbest-espnet-hubert30", "dev_other.jsonl.gz"), limit=3)
    assert len(utts) == 3 and all(len(u.texts) == 30 for u in utts)
    assert utts[0].ref == utts[0].ref.upper() and utts[0].score[0] >= utts[0].score.max() - 1e-9


def test_nbest_loader_names_bad_lines(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps({"utt_id": "u", "ref": "A", "hyps": [{"rank": 1, "text": "A", "score": 0, "lm": 0}]})
                    + "\n{\"utt_id\": \"v\"}\n")
    with pytest.raises(ValueError, match=r"n.jsonl:2: not an N-best record \(KeyError"):
        load_nbest(path)


# ---- minimal pairs -------------------------------------------------------------------------------------


def test_pairs_accuracy_per_file_and_overall(tmp_path):
    (tmp_path / "agr.jsonl").write_text(
        "\n".join(json.dumps({"sentence_good": g, "sentence_bad": b, "UID": "agr"})
                  for g, b in [("the cats sleep", "the cats sleeps"), ("a dog ran", "a dog rans"),
                               ("xx", "y")]) + "\n")
    (tmp_path / "island.jsonl").write_text(json.dumps({"sentence_good": "long one here", "sentence_bad": "short"}) + "\n")
    files = {f.stem: load_pairs(f) for f in pair_files([tmp_path])}
    assert list(files) == ["agr", "island"]
    result = evaluate_pairs(files, lambda texts: [-float(len(t)) for t in texts])  # shorter = better
    assert result["files"]["agr"] == {"accuracy": pytest.approx(200 / 3), "pairs": 3}
    assert result["files"]["island"]["accuracy"] == 0.0
    assert result["accuracy"] == 50.0 and result["macro_accuracy"] == pytest.approx(100 / 3)
    tie = evaluate_pairs({"t": [MinimalPair("ab", "cd")]}, lambda texts: [0.0] * len(texts))
    assert tie["accuracy"] == 0.0  # a tie is not a win


def test_pairs_loader_names_bad_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"sentence_good": "a", "sentence_bad": "b"}\n{"sentence_good": "a"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: missing or non-string field\(s\) \['sentence_bad'\]"):
        load_pairs(path)
    path.write_text('{"sentence_good": "a", "sentence_bad": "b"}\nnot json\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: invalid JSON"):
        load_pairs(path)
    with pytest.raises(FileNotFoundError, match="nothere"):
        pair_files([tmp_path / "nothere"])


# ---- spelling ------------------------------------------------------------------------------------------


def _fake_scorer(tok, surprising: set[str]):
    """Words in `surprising` cost 9 nats, every other word 1 nat, spread over the word's pieces."""
    def score(texts):
        out = []
        for enc in encode_texts(tok, texts):
            words = {}
            for k, w in enumerate(enc.word_ids):
                words.setdefault(w, []).append(k)
            lp = [0.0] * len(enc.ids)
            for pieces in words.values():
                text = enc.text[enc.offsets[pieces[0]][0]:enc.offsets[pieces[-1]][1]]
                for k in pieces:
                    lp[k] = (-9.0 if text in surprising else -1.0) / len(pieces)
            out.append(SentenceScore(enc.text, enc.tokens, enc.ids, lp, enc.word_ids, enc.offsets, "fake"))
        return out
    return score


def test_spelling_detection_toy(tmp_path):
    tok = small_tokenizer(tmp_path)
    items = [Item("the goals were full .", "the gaols were full .", 4, "goals", "gaols"),
             Item("a dog ran far", "a dig ran far", 2, "dog", "dig"),
             Item("it is a cat", "it is a car", 8, "cat", "car")]
    # the model finds "goals" and "dog" but in the third item it is surprised by "is" in both versions
    result = evaluate_spelling({"f": items, "g": items[:2]}, _fake_scorer(tok, {"goals", "dog", "is"}), tune_on="g")
    f = result["files"]["f"]
    assert f["top1"] == pytest.approx(200 / 3)
    # always flag: 6 sentences flagged, 2 right -> P 2/6, R 2/3
    assert f["always_flag"]["precision"] == pytest.approx(100 / 3) and f["always_flag"]["recall"] == pytest.approx(200 / 3)
    # corrected sentences without a surprising word: top surprisal 1 < tuned threshold; "is" sentences 9 >= it
    assert result["threshold"] == pytest.approx(5.0)
    assert f["tuned"]["precision"] == pytest.approx(50.0) and f["tuned"]["recall"] == pytest.approx(200 / 3)
    assert result["files"]["g"]["tuned"] == {"precision": 100.0, "recall": 100.0, "f1": 100.0, "flags": 2,
                                             "in_sample": True}


def test_rwse_loader_reads_the_real_files():
    natural = load_rwse(shared_path("rwse-zesch2012", "en_natural_train.txt"))
    assert len(natural) == 136
    for it in natural:
        assert it.wrong_sentence[it.offset:it.offset + len(it.wrong)] == it.wrong
        assert it.correct_sentence[it.offset:it.offset + len(it.correct)] == it.correct
    assert natural[0].wrong == "goals" and "the jails of England" in natural[0].correct_sentence
    scaler = next(it for it in natural if it.wrong == "scaler")  # its given offset (9) is off by one
    assert scaler.offset == 8 and scaler.correct_sentence == "It is a scalar."
    assert len(load_rwse(shared_path("rwse-zesch2012", "en_artificial_token.txt"), limit=5)) == 5


def test_rwse_loader_names_bad_blocks(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("1\n2\nab\ncd\n0\nab c\n\n1\n2\nab\ncd\nzero\nab c\n")
    with pytest.raises(ValueError, match=r"r.txt:12: offset 'zero' is not an integer"):
        load_rwse(path)
    path.write_text("1\n2\nab\ncd\n0\n")
    with pytest.raises(ValueError, match=r"r.txt:1: a block has 5 lines, expected 6"):
        load_rwse(path)


# ---- CoLA ----------------------------------------------------------------------------------------------


def test_cola_threshold_and_mcc():
    scores = np.array([-1.0, -2.0, -3.0, -4.0, -2.5])
    gold = np.array([True, True, False, False, False])
    threshold, mcc = tune_threshold(scores, gold)
    assert mcc == pytest.approx(1.0) and -2.5 < threshold < -2.0
    train = [Judgement(f"s{k}", bool(g)) for k, g in enumerate(gold)]
    values = dict(zip([j.sentence for j in train], scores, strict=True)) | {"d1": -1.5, "d2": -2.4, "d3": -9.0}
    devs = {"dev": [Judgement("d1", True), Judgement("d2", False), Judgement("d3", False)]}
    result = evaluate_cola(train, devs, lambda texts: [values[t] for t in texts])
    assert result["dev"]["mcc"] == pytest.approx(100.0) and result["train"]["mcc"] == pytest.approx(100.0)


def test_cola_loader_reads_the_real_files():
    folder = shared_path("cola", "raw")
    dev = load_cola(folder / "in_domain_dev.tsv")
    assert len(dev) == 527 and dev[0] == Judgement("The sailors rode the breeze clear of the rocks.", True)
    assert 0 < sum(not j.acceptable for j in dev) < len(dev)
    assert len(load_cola(folder / "out_of_domain_dev.tsv")) == 516
    train = load_cola(folder / "in_domain_train.tsv")
    assert len(train) == 8551 and sample(train, 50) == sample(train, 50) and len(sample(train, 50)) == 50


def test_cola_loader_names_bad_rows(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("src\t1\t\tfine .\nsrc\tyes\t*\tbad .\n")
    with pytest.raises(ValueError, match=r"c.tsv:2: label 'yes' is not 0 or 1"):
        load_cola(path)


def test_results_are_strict_json(tmp_path):
    from maskplay.tasks.eval.common import write_results

    write_results(tmp_path / "r.json", {"threshold": float("-inf"), "x": [np.float32(1.5), float("nan")], "n": np.int64(3)})
    assert json.loads((tmp_path / "r.json").read_text()) == {"threshold": "-inf", "x": [1.5, "nan"], "n": 3}

"""The model-free STS baselines (maskplay.tasks.eval.baselines) and their place in `maskplay eval sts`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from maskplay.cli import main
from maskplay.data.tokenizer import load_tokenizer
from maskplay.tasks.eval.baselines import Idf, bag, evaluate_baselines, similarities, sparse_cosine, words
from maskplay.tasks.eval.sts import Pair, baseline_idf, load_stsb, sick_split
from tests.conftest import shared_path
from tests.tasks.score.test_score_support import one_thread, save_model_dir, tiny  # noqa: F401 (autouse fixture)


def test_words_are_lower_cased_word_characters():
    assert words("A man's hat -- isn't RED, 3.5!") == ["a", "man", "s", "hat", "isn", "t", "red", "3", "5"]
    assert words(" ... ") == []


def test_hand_computed_tiny_example():
    idf = Idf.fit(["a cat", "a dog", "The cat sat"], source="three")
    assert idf.documents == 3 and dict(idf.df) == {"a": 2, "cat": 2, "dog": 1, "the": 1, "sat": 1}
    # scikit-learn's smooth IDF: ln((1 + n) / (1 + df)) + 1
    w_a, w_cat, w_dog = math.log(4 / 3) + 1, math.log(4 / 3) + 1, math.log(4 / 2) + 1
    w_new = math.log(4 / 1) + 1  # a word the IDF never saw: df = 0, the largest weight
    assert idf.weight("a") == pytest.approx(w_a) and idf.weight("dog") == pytest.approx(w_dog)
    assert idf.weight("zebra") == pytest.approx(w_new)
    pairs = [Pair("A cat cat.", "a dog", 1.0), Pair("a cat", "A CAT!", 5.0), Pair("zebra dog", "dog", 3.0),
             Pair("...", "a cat", 0.0)]
    # bag of words: (a 1, cat 2) . (a 1, dog 1) = 1 over sqrt(5) sqrt(2); identical bags 1; (zebra, dog) . dog
    assert similarities(pairs) == pytest.approx([1 / math.sqrt(10), 1.0, 1 / math.sqrt(2), 0.0])
    tfidf = [w_a * w_a / (math.hypot(w_a, 2 * w_cat) * math.hypot(w_a, w_dog)), 1.0,
             w_dog / math.hypot(w_new, w_dog), 0.0]
    assert similarities(pairs, idf) == pytest.approx(tfidf)
    result = evaluate_baselines(pairs, idf)
    assert result["tfidf"]["idf_from"] == "three" and result["tfidf"]["idf_documents"] == 3
    from scipy.stats import pearsonr, spearmanr

    gold = [p.gold for p in pairs]
    assert result["bow"]["spearman"] == pytest.approx(100 * spearmanr(similarities(pairs), gold)[0])
    assert result["tfidf"]["pearson"] == pytest.approx(100 * pearsonr(tfidf, gold)[0])


def test_sklearn_tfidf_vectorizer_is_the_same_where_every_word_was_seen():
    from sklearn.feature_extraction.text import TfidfVectorizer

    rng = np.random.default_rng(0)
    vocab = ["the", "cat", "dog", "sat", "ran", "on", "a", "mat", "red", "big", "Bird", "sings"]
    docs = [" ".join(rng.choice(vocab, size=rng.integers(1, 9))) for _ in range(60)]
    pairs = [Pair(docs[k], docs[k + 1], float(k)) for k in range(0, 40, 2)]
    vectorizer = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\w+", smooth_idf=True, norm="l2").fit(docs)
    a, b = vectorizer.transform([p.a for p in pairs]), vectorizer.transform([p.b for p in pairs])
    oracle = np.asarray(a.multiply(b).sum(axis=1)).ravel()
    ours = similarities(pairs, Idf.fit(docs))
    np.testing.assert_allclose(ours, oracle, rtol=1e-10, atol=1e-12)
    assert not np.allclose(ours, similarities(pairs))  # the weights matter on this data


def test_empty_and_undefined():
    assert sparse_cosine({}, {"a": 1.0}) == 0.0 and bag("") == {}
    same = [Pair("a b", "a b", 1.0), Pair("c", "c", 2.0)]  # every cosine 1: no correlation, not an error
    result = evaluate_baselines(same, Idf.fit(["a b c"]))
    assert result["bow"] == {"spearman": None, "pearson": None} and result["tfidf"]["spearman"] is None
    with pytest.raises(ValueError, match="no sentences"):
        Idf.fit([])


def test_the_reference_numbers_on_stsb_dev():
    """The reference baselines: BoW 58.8 and TF-IDF (IDF from the STS-B train sentences) 74.7 Spearman on STS-B dev."""
    dev_path = shared_path("stsbenchmark", "sts-dev.csv")
    dev = load_stsb(dev_path)
    idf = baseline_idf(dev, "stsb", dev_path)
    assert idf.source.startswith("STS-B train sentences") and idf.documents == 2 * len(load_stsb(
        dev_path.with_name("sts-train.csv")))
    result = evaluate_baselines(dev, idf)
    assert round(result["bow"]["spearman"], 1) == 58.7 and round(result["tfidf"]["spearman"], 1) == 74.7


SICK = ("pair_ID\tsentence_A\tsentence_B\trelatedness_score\tSemEval_set\n"
        "1\tA boy runs.\tA kid runs.\t4.5\tTRAIN\n2\tA boy runs.\tA cat eats.\t1.2\tTRIAL\n"
        "3\tA man sings.\tA woman sings.\t3.1\tTRAIN\n4\tA dog sleeps.\tA man sings loudly.\t1.0\tTRIAL\n")


def test_idf_sources(tmp_path):
    (tmp_path / "sick.txt").write_text(SICK)
    rows = sick_split(tmp_path / "sick.txt")
    assert [r.a for r in rows] == ["A boy runs.", "A man sings."]
    pairs = [Pair("a b", "a c", 1.0)]
    idf = baseline_idf(pairs, "sick", tmp_path / "sick.txt")
    assert idf.documents == 4 and "SICK TRAIN rows" in idf.source and idf.df["boy"] == 1 and "dog" not in idf.df
    (tmp_path / "nosplit.txt").write_text(SICK.replace("\tSemEval_set", "\tother"))
    assert sick_split(tmp_path / "nosplit.txt") is None
    itself = baseline_idf(pairs, "sick", tmp_path / "nosplit.txt")
    assert itself.documents == 2 and "themselves" in itself.source
    stsb = "g\tf\ty\t0\t{}\t{}\t{}\n"
    (tmp_path / "sts-test.csv").write_text(stsb.format(1, "x y", "y z") + stsb.format(2, "p", "q"))
    assert "themselves" in baseline_idf(pairs, "stsb", tmp_path / "sts-test.csv").source  # no train beside it
    (tmp_path / "sts-train.csv").write_text(stsb.format(3, "one two", "two three") * 3)
    idf = baseline_idf(pairs, "stsb", tmp_path / "sts-test.csv")
    assert idf.documents == 6 and idf.df == {"one": 3, "two": 6, "three": 3}
    assert "themselves" in baseline_idf(pairs, "stsb", tmp_path / "sts-train.csv").source  # not train on itself
    given = baseline_idf(pairs, "stsb", tmp_path / "sts-test.csv", idf_from=tmp_path / "sick.txt")
    assert given.documents == 8 and "--idf-from" in given.source


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = load_tokenizer(shared_path("tta-vocab"))
    return str(save_model_dir(tmp_path_factory.mktemp("m") / "tta", tiny("tta", tok), tok))


def test_eval_sts_prints_and_records_the_baselines(model_dir, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["eval", "sts", model_dir, "--limit", "40", "--data", str(shared_path()), "--out", str(out),
                 "--precision", "fp32"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())["results"]
    stsb = result["stsb"]["baselines"]
    dev = load_stsb(shared_path("stsbenchmark", "sts-dev.csv"), limit=40)
    assert stsb == evaluate_baselines(dev, baseline_idf(dev, "stsb", shared_path("stsbenchmark", "sts-dev.csv")))
    assert "STS-B train" in stsb["tfidf"]["idf_from"]
    assert "SICK TRAIN rows" in result["sick"]["baselines"]["tfidf"]["idf_from"]
    assert "BoW" in printed and "TF-IDF" in printed and f"{stsb['tfidf']['spearman']:.2f}" in printed
    assert str(Path.cwd()) not in out.read_text()


def test_eval_sts_file_baselines(model_dir, tmp_path, capsys):
    data = tmp_path / "sick.txt"
    data.write_text(SICK)
    other = tmp_path / "other.txt"
    other.write_text(SICK.replace("\tSemEval_set", "\tsplit").replace("TRAIN", "x").replace("TRIAL", "x"))
    out = tmp_path / "r.json"
    assert main(["eval", "sts", model_dir, "--file", str(data), "--file", str(other), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())["results"]
    assert "SICK TRAIN rows" in result["sick"]["baselines"]["tfidf"]["idf_from"]
    assert "themselves" in result["other"]["baselines"]["tfidf"]["idf_from"] and "themselves" in printed
    assert main(["eval", "sts", model_dir, "--file", str(other), "--idf-from", str(data), "--out", str(out)]) == 0
    assert "--idf-from" in json.loads(out.read_text())["results"]["other"]["baselines"]["tfidf"]["idf_from"]
    capsys.readouterr()
    assert main(["eval", "sts", model_dir, "--idf-from", str(data)]) == 2
    assert "--idf-from goes with --file" in capsys.readouterr().err

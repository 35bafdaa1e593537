"""`maskplay eval blimp`: the scoring convention against a hand-computed example, the loader's errors, the
reference points against the MANIFEST's numbers, a causal model's scores against a naive loop over its logits,
and the command (and blimp-plot) end to end on a tiny model."""

from __future__ import annotations

import gzip
import json
import math

import pytest
import torch

from maskplay.cli import main
from maskplay.data.tokenizer import load_tokenizer
from maskplay.tasks.eval.blimp import (
    REFERENCE_PARADIGMS,
    BlimpPair,
    evaluate_blimp,
    format_table,
    load_blimp,
    load_blimp_file,
    reference_points,
)
from tests.conftest import shared_path
from tests.tasks.score.test_score_support import one_thread, save_model_dir, tiny  # noqa: F401 (autouse fixture)


def pair(good: str, bad: str, paradigm: str, phenomenon: str) -> BlimpPair:
    return BlimpPair(good, bad, paradigm, phenomenon)


# Two phenomena; "agr" has two paradigms of unequal size. log p per sentence, chosen so that each pair's verdict
# is known: a1 right, a2 wrong, a3 a tie (wrong); b1 right, b2 right; c1 wrong.
LOGP = {"a1+": -1.0, "a1-": -2.0, "a2+": -5.0, "a2-": -4.0, "a3+": -3.0, "a3-": -3.0,
        "b1+": -1.0, "b1-": -1.5, "b2+": -2.0, "b2-": -9.0, "c1+": -7.0, "c1-": -6.0}
PAIRS = [pair("a1+", "a1-", "p_a", "agr"), pair("a2+", "a2-", "p_a", "agr"), pair("a3+", "a3-", "p_a", "agr"),
         pair("b1+", "b1-", "p_b", "agr"), pair("b2+", "b2-", "p_b", "agr"),
         pair("c1+", "c1-", "p_c", "island"), pair("a1+", "a1-", "p_c", "island")]  # a sentence used twice


def test_evaluate_blimp_against_a_hand_computed_example():
    calls = []

    def score(texts):
        calls.append(list(texts))
        return [LOGP[t] for t in texts]

    r = evaluate_blimp(score, PAIRS)
    assert len(calls) == 1 and sorted(calls[0]) == sorted(LOGP)  # every distinct sentence once, in one call
    assert r["sentences"] == 12 and r["pairs"] == 7 and r["right"] == 4 and r["ties"] == 1
    p = r["paradigms"]
    assert p["p_a"] == {"phenomenon": "agr", "field": "", "pairs": 3, "right": 1, "ties": 1, "accuracy": 100 / 3}
    assert (p["p_b"]["accuracy"], p["p_c"]["accuracy"], p["p_c"]["ties"]) == (100.0, 50.0, 0)
    # macro: the mean over paradigms; micro: pooled over pairs; they differ because the paradigms' sizes do
    assert r["macro_accuracy"] == pytest.approx((100 / 3 + 100 + 50) / 3)
    assert r["micro_accuracy"] == pytest.approx(100 * 4 / 7)
    assert r["phenomena"]["agr"] == {"accuracy": pytest.approx((100 / 3 + 100) / 2), "paradigms": 2, "pairs": 5,
                                     "right": 3, "ties": 1}
    assert r["phenomena"]["island"]["accuracy"] == 50.0
    assert r["phenomenon_mean"] == pytest.approx(((100 / 3 + 100) / 2 + 50) / 2)


def test_a_tie_is_wrong_and_a_nan_is_an_error():
    tie = evaluate_blimp(lambda texts: [0.0] * len(texts), [pair("x", "y", "p", "t")])
    assert tie["macro_accuracy"] == 0.0 and tie["ties"] == 1
    with pytest.raises(ValueError, match="non-finite"):
        evaluate_blimp(lambda texts: [math.nan] * len(texts), [pair("x", "y", "p", "t")])
    with pytest.raises(ValueError, match="returned 1 values for 2 sentences"):
        evaluate_blimp(lambda texts: [0.0], [pair("x", "y", "p", "t")])


def write(path, rows: list[dict | str]) -> str:
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return str(path)


def row(good="a b .", bad="b a .", uid="p1", term="t1", **extra) -> dict:
    return {"sentence_good": good, "sentence_bad": bad, "UID": uid, "linguistics_term": term, **extra}


def test_loader_reads_plain_and_gzip_and_defaults_uid_to_the_file_name(tmp_path):
    plain = write(tmp_path / "mine.jsonl", [{"sentence_good": "A.", "sentence_bad": "B."}, ""])
    assert load_blimp_file(plain) == [BlimpPair("A.", "B.", "mine", "mine")]
    gz = write(tmp_path / "x.jsonl.gz", [row(field="syntax"), row(uid="p2")])
    assert [(p.paradigm, p.phenomenon, p.field) for p in load_blimp_file(gz)] == [("p1", "t1", "syntax"),
                                                                                   ("p2", "t1", "")]


def test_limit_keeps_the_first_pairs_of_each_paradigm_across_files(tmp_path):
    a = write(tmp_path / "a.jsonl", [row(good=f"g{k}", uid="p1") for k in range(3)] + [row(good="h", uid="p2")])
    b = write(tmp_path / "b.jsonl", [row(good="g9", uid="p1"), row(good="h2", uid="p2")])
    kept = load_blimp([a, b], limit=2)
    assert [(p.paradigm, p.good) for p in kept] == [("p1", "g0"), ("p1", "g1"), ("p2", "h"), ("p2", "h2")]
    assert len(load_blimp([a, b])) == 6
    with pytest.raises(ValueError, match="--limit must be at least 1"):
        load_blimp([a], limit=0)


@pytest.mark.parametrize("line, message", [
    ("{not json", r"bad\.jsonl:2: invalid JSON"),
    ("[1, 2]", r"bad\.jsonl:2: expected a JSON object, got list"),
    ('{"sentence_good": "a"}', r"bad\.jsonl:2: no sentence_bad field"),
    ('{"sentence_good": "a", "sentence_bad": 3}', r"bad\.jsonl:2: sentence_bad must be a non-empty string"),
    ('{"sentence_good": " ", "sentence_bad": "b"}', r"bad\.jsonl:2: sentence_good must be a non-empty string"),
    ('{"sentence_good": "a", "sentence_bad": "b", "UID": null}', r"bad\.jsonl:2: UID must be a non-empty string"),
])
def test_loader_errors_name_the_file_and_line(tmp_path, line, message):
    path = write(tmp_path / "bad.jsonl", [row(), line])
    with pytest.raises(ValueError, match=message):
        load_blimp_file(path)


def test_loader_errors_on_empty_files_and_a_paradigm_under_two_phenomena(tmp_path):
    with pytest.raises(ValueError, match=r"empty\.jsonl: no pairs"):
        load_blimp_file(write(tmp_path / "empty.jsonl", ["", ""]))
    a = write(tmp_path / "a.jsonl", [row(uid="p1", term="t1")])
    b = write(tmp_path / "b.jsonl", [row(uid="p1", term="t2")])
    with pytest.raises(ValueError, match=r"b\.jsonl: paradigm p1 is under phenomenon 't2' here and 't1' in"):
        load_blimp([a, b])
    fake = tmp_path / "fake.jsonl.gz"
    fake.write_text(json.dumps(row()) + "\n")
    with pytest.raises(ValueError, match=r"fake\.jsonl\.gz: not a readable gzip"):
        load_blimp_file(fake)


def test_reference_points_match_the_manifest_and_exist_only_on_dev_paradigms():
    result = evaluate_blimp(lambda texts: [-len(t) for t in texts],
                            [pair(f"g{k}", f"bad{k}", name, "t") for k, name in enumerate(REFERENCE_PARADIGMS)])
    refs = reference_points(result)
    # shared/data/MANIFEST.md: macro over these 36 paradigms, 5-gram 58.4, LSTM 66.5, Transformer-XL 67.5, GPT-2 81.2
    assert [round(v["macro_accuracy"], 1) for v in refs.values()] == [58.4, 66.5, 67.5, 81.2]
    assert refs["GPT-2"]["phenomena"] == {"t": refs["GPT-2"]["macro_accuracy"]}
    lines = format_table(result, per_paradigm=True)
    assert "adjunct_island" in "\n".join(lines) and "GPT-2" in lines[0]
    assert reference_points(evaluate_blimp(lambda texts: [0.0] * len(texts), [pair("a", "b", "mine", "t")])) is None


def naive_causal_log_prob(model, tok, sentence: str) -> float:
    """Sum over the pieces of log p(piece | [SOS] and the pieces before it), one forward pass per prefix."""
    ids = tok.encode(sentence)  # [SOS] pieces [EOS]; [EOS] is not scored
    total = 0.0
    for t in range(1, len(ids) - 1):
        with torch.no_grad():
            logits = model(torch.tensor([ids[:t]])).logits[0, -1]
        total += logits.double().log_softmax(-1)[ids[t]].item()
    return total


def test_a_causal_models_blimp_score_equals_a_naive_loop(tmp_path, capsys):
    from maskplay.tasks.score import Scorer

    tok = load_tokenizer(shared_path("tta-vocab"))
    model = tiny("gpt", tok)
    dev = shared_path("blimp-dev")
    files = [dev / f"{name}.jsonl.gz" for name in ("adjunct_island", "causative", "passive_1")]
    pairs = load_blimp(files, limit=4)
    want = {s: naive_causal_log_prob(model, tok, s) for p in pairs for s in (p.good, p.bad)}
    scorer = Scorer(model, tok, batch_size=5)
    result = evaluate_blimp(lambda texts: [s.log_prob for s in scorer.score(texts)], pairs)
    naive = evaluate_blimp(lambda texts: [want[t] for t in texts], pairs)
    got = dict(zip(want, (s.log_prob for s in scorer.score(list(want))), strict=True))
    assert got == pytest.approx(want, abs=1e-4)
    assert result["paradigms"] == naive["paradigms"] and result["macro_accuracy"] == naive["macro_accuracy"]
    # and the command, given the same files and this model, reaches the same verdicts
    model_dir = save_model_dir(tmp_path / "gpt", model, tok)
    out = tmp_path / "r.json"
    args = ["eval", "blimp", str(model_dir), "--limit", "4", "--precision", "fp32", "--out", str(out)]
    assert main([*args, *(a for f in files for a in ("--file", str(f)))]) == 0
    written = json.loads(out.read_text())
    assert written["method"] == "causal" and written["results"]["paradigms"] == naive["paradigms"]


@pytest.fixture(scope="module")
def tta_dir(tmp_path_factory):
    tok = load_tokenizer(shared_path("tta-vocab"))
    return str(save_model_dir(tmp_path_factory.mktemp("m") / "tta", tiny("tta", tok), tok))


def test_eval_blimp_on_the_dev_folder_end_to_end(tta_dir, tmp_path, capsys):
    out = tmp_path / "tta.json"
    assert main(["eval", "blimp", tta_dir, "--limit", "2", "--per-paradigm", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    r = data["results"]
    assert data["task"] == "blimp" and data["method"] == "one-pass" and data["data"].endswith("blimp-dev")
    assert len(r["paradigms"]) == 36 and r["pairs"] == 72 and len(r["phenomena"]) == 13
    assert all(p["pairs"] == 2 for p in r["paradigms"].values())
    assert round(data["references"]["GPT-2"]["macro_accuracy"], 1) == 81.2
    assert "/work" not in out.read_text() and not any(str(v).startswith("/") for v in data.values())
    assert "macro mean over 36 paradigms" in printed and "wh_vs_that_with_gap_long_distance" in printed
    # the plot of two results side by side
    other = tmp_path / "again.json"
    assert main(["eval", "blimp", tta_dir, "--limit", "1", "--out", str(other)]) == 0
    png = tmp_path / "plot" / "blimp.png"
    assert main(["eval", "blimp-plot", str(out), str(other), "--labels", "two", "one", "--out", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_eval_blimp_errors_are_one_line(tta_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(row()) + "\n{oops\n")
    assert main(["eval", "blimp", tta_dir, "--file", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad.jsonl:2: invalid JSON" in err
    with pytest.raises(SystemExit) as refused:  # refused while parsing: the option layer's one line
        main(["eval", "blimp", tta_dir, "--limit", "0"])
    err = capsys.readouterr().err.strip()
    assert refused.value.code == 2 and "\n" not in err and "argument --limit: 0 is not a positive integer" in err
    assert main(["eval", "blimp", tta_dir, "--data", str(tmp_path / "nowhere")]) == 2
    assert "not found" in capsys.readouterr().err
    not_blimp = tmp_path / "other.json"
    not_blimp.write_text('{"task": "sts", "results": {}}')
    png = str(tmp_path / "p.png")
    assert main(["eval", "blimp-plot", str(not_blimp), "--out", png]) == 2
    assert "other.json: not the --out of `maskplay eval blimp`" in capsys.readouterr().err
    assert main(["eval", "blimp-plot", str(not_blimp), "--labels", "a", "b", "--out", png]) == 2
    assert "--labels: 2 names for 1 results files" in capsys.readouterr().err

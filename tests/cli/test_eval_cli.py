"""`maskplay eval TASK` end to end on the real shared data with a tiny random model (--limit small)."""

from __future__ import annotations

import json

import pytest

from maskplay.cli import main
from maskplay.data.tokenizer import load_tokenizer
from tests.conftest import shared_path
from tests.tasks.score.test_score_support import one_thread, save_model_dir, tiny  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = load_tokenizer(shared_path("tta-vocab"))
    return str(save_model_dir(tmp_path_factory.mktemp("m") / "tta", tiny("tta", tok), tok))


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    tok = load_tokenizer(shared_path("tta-vocab"))
    return str(save_model_dir(tmp_path_factory.mktemp("m") / "bert", tiny("bert", tok), tok))


def run(args, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main([*args, "--out", str(out), "--data", str(shared_path())] if args[1] == "sts" else
                [*args, "--out", str(out)]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


def test_eval_sts(model_dir, tmp_path, capsys):
    result, printed = run(["eval", "sts", model_dir, "--limit", "12", "--no-diagonal-mask"], tmp_path, capsys)
    assert result["task"] == "sts" and result["diagonal_mask"] is False and result["pooling"] == "mean"
    for name in ("stsb", "sick"):
        r = result["results"][name]
        assert r["pairs"] == 12 and -100 <= r["spearman"] <= 100 and -100 <= r["pearson"] <= 100
    assert "STS-B dev" in printed and "Spearman" in printed


def test_eval_sts_with_sif_pooling_records_its_settings(bert_dir, tmp_path, capsys):
    import numpy as np

    counts = tmp_path / "counts.npy"
    np.save(counts, np.arange(1, load_tokenizer(shared_path("tta-vocab")).vocab_size + 1, dtype=np.int64))
    result, printed = run(["eval", "sts", bert_dir, "--limit", "12", "--pooling", "sif", "--static",
                           "--frequencies", str(counts), "--remove-components", "1"], tmp_path, capsys)
    assert result["pooling"] == "sif" and result["static"] is True and result["remove_components"] == 1
    assert result["sif_a"] == 1e-3 and result["frequencies"].endswith("counts.npy")
    assert "the word-piece table, 1 component(s) removed" in printed
    assert -100 <= result["results"]["stsb"]["spearman"] <= 100


def test_eval_nbest(model_dir, tmp_path, capsys):
    result, printed = run(["eval", "nbest", model_dir, "--limit", "2", "--weights", "0", "0.5", "--batch-size", "64"],
                          tmp_path, capsys)
    for split in ("dev_clean", "dev_other"):
        r = result["results"][split]
        assert r["utterances"] == 2 and r["oracle_wer"] <= r["one_best_wer"] and r["weight"] in (0.0, 0.5)
        assert r["first_pass_only_wer"] == r["one_best_wer"]  # rank 1 is the first pass's best
    assert "1-best" in printed and "oracle" in printed


def test_eval_pairs(bert_dir, tmp_path, capsys):
    data = tmp_path / "blimp"
    data.mkdir()
    (data / "agreement.jsonl").write_text(
        json.dumps({"sentence_good": "the cats sleep .", "sentence_bad": "the cats sleeps ."}) + "\n"
        + json.dumps({"sentence_good": "a dog runs .", "sentence_bad": "a dog run ."}) + "\n")
    result, printed = run(["eval", "pairs", bert_dir, "--data", str(data), "--method", "pll-word"], tmp_path, capsys)
    assert result["results"]["files"]["agreement"]["pairs"] == 2 and result["method"] == "pll-word"
    assert "overall" in printed


def test_eval_spelling(model_dir, tmp_path, capsys):
    result, printed = run(["eval", "spelling", model_dir, "--limit", "4"], tmp_path, capsys)
    files = result["results"]["files"]
    assert set(files) == {"en_natural_train", "en_artificial_noun", "en_artificial_token"}
    assert all(f["items"] == 4 and 0 <= f["top1"] <= 100 for f in files.values())
    assert files["en_natural_train"]["tuned"]["in_sample"] is True
    assert "top1" in printed


def test_eval_cola(model_dir, tmp_path, capsys):
    result, printed = run(["eval", "cola", model_dir, "--limit", "10", "--train-limit", "20"], tmp_path, capsys)
    r = result["results"]
    assert r["train"]["sentences"] == 20 and r["in_domain_dev"]["sentences"] == 10
    assert r["out_of_domain_dev"]["sentences"] == 10 and "MCC" in printed


def test_eval_errors(model_dir, tmp_path, capsys):
    assert main(["eval", "cola", model_dir, "--data", str(tmp_path / "nope")]) == 2
    assert "nope not found" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # refused while parsing, in one line
        main(["eval", "sts", model_dir, "--limit", "0"])
    assert exit_.value.code == 2 and "argument --limit: 0 is not a positive integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "pairs", model_dir])  # --data is required
    assert main(["eval", "spelling", model_dir, "--method", "pll-word", "--limit", "1"]) == 0  # T-TA through copies
    assert main(["eval", "spelling", model_dir, "--method", "causal", "--limit", "1"]) == 2
    assert "'causal' does not apply to a 'tta' model" in capsys.readouterr().err


@pytest.fixture(scope="module")
def xlnet_dir(tmp_path_factory):
    tok = load_tokenizer(shared_path("tta-vocab"))
    return str(save_model_dir(tmp_path_factory.mktemp("m") / "xlnet", tiny("xlnet", tok), tok))


def test_every_eval_accepts_an_xlnet_model(xlnet_dir, tmp_path, capsys):
    sts, _ = run(["eval", "sts", xlnet_dir, "--limit", "6"], tmp_path, capsys)
    assert sts["results"]["stsb"]["pairs"] == 6
    nbest, _ = run(["eval", "nbest", xlnet_dir, "--limit", "1"], tmp_path, capsys)
    assert nbest["results"]["dev_clean"]["utterances"] == 1
    spelling, _ = run(["eval", "spelling", xlnet_dir, "--limit", "2"], tmp_path, capsys)
    assert all(f["items"] == 2 for f in spelling["results"]["files"].values())
    cola, _ = run(["eval", "cola", xlnet_dir, "--limit", "4", "--train-limit", "8"], tmp_path, capsys)
    assert cola["results"]["in_domain_dev"]["sentences"] == 4
    data = tmp_path / "blimp"
    data.mkdir()
    (data / "a.jsonl").write_text(json.dumps({"sentence_good": "a dog runs .", "sentence_bad": "a dog run ."}) + "\n")
    for method in ("causal", "pll"):
        pairs, _ = run(["eval", "pairs", xlnet_dir, "--data", str(data), "--method", method], tmp_path, capsys)
        assert pairs["results"]["files"]["a"]["pairs"] == 1 and pairs["method"] == method

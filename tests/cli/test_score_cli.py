"""`maskplay score` and `maskplay embed` on a tiny saved model."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from maskplay.cli import main
from maskplay.tasks.score import Scorer
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    tok = small_tokenizer(root)
    return {family: save_model_dir(root / family, tiny(family, tok), tok) for family in ("tta", "bert", "gpt")}


def test_score_formats_agree_with_the_api(model_dirs, capsys):
    d = str(model_dirs["bert"])
    sentences = ["the cat sat on the mat .", "unbelievably good"]
    want = Scorer.from_pretrained(d).score(sentences)

    assert main(["score", d, *sentences, "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in rows] == [1, 2] and rows[1]["tokens"] == ["un", "##bel", "##iev", "##ably", "good"]
    assert [r["log_prob"] for r in rows] == pytest.approx([s.log_prob for s in want])
    assert rows[0]["method"] == "pll" and rows[0]["num_tokens"] == 7

    assert main(["score", d, *sentences, "--format", "tsv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "index\tlog_prob\tnum_tokens\tmean_log_prob\ttext"
    assert float(lines[2].split("\t")[1]) == pytest.approx(want[1].log_prob, abs=1e-5)

    assert main(["score", d, *sentences]) == 0  # table
    out = capsys.readouterr().out
    assert f"{want[0].log_prob:.3f}" in out and "unbelievably good" in out


def test_score_reads_files_and_stdin(model_dirs, tmp_path, capsys, monkeypatch):
    d = str(model_dirs["tta"])
    path = tmp_path / "in.txt"
    path.write_text("a dog ran\nthe cat sat\n")
    assert main(["score", d, "--file", str(path), "--format", "jsonl"]) == 0
    from_file = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a dog ran\nthe cat sat\n")))
    assert main(["score", d, "--format", "jsonl", "--method", "pll-word"]) == 0
    from_stdin = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in from_file] == [1, 2] and from_stdin[0]["method"] == "pll-word"
    assert from_file[0]["method"] == "one-pass"


def test_explain_marks_the_most_surprising_word(model_dirs, capsys):
    d = str(model_dirs["gpt"])
    assert main(["score", d, "the cat sat on the mat", "--explain", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "\033[" not in out and out.splitlines()[1].count("**") == 2 and "most surprising word:" in out
    score = Scorer.from_pretrained(d).score(["the cat sat on the mat"])[0]
    worst = max(score.words(), key=lambda w: w.surprisal)
    assert f"most surprising word: {worst.text!r}" in out
    assert main(["score", d, "the cat sat on the mat", "--explain", "--color", "always"]) == 0
    coloured = capsys.readouterr().out
    assert "\033[38;5;" in coloured and "\033[1;4m" in coloured  # 256 colours; the worst word underlined
    assert main(["score", d, "the cat", "--explain"]) == 0  # auto: captured stdout is not a terminal
    assert "\033[" not in capsys.readouterr().out


def test_score_bad_input_is_a_clear_error(model_dirs, tmp_path, capsys):
    d = str(model_dirs["tta"])
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nnot \xc3\x28 fine\n")
    assert main(["score", d, "--file", str(bad)]) == 2
    assert "bad.txt:2: invalid UTF-8 at byte offset 9" in capsys.readouterr().err
    bad.write_bytes(b"fine\n\nmore\n")
    assert main(["score", d, "--file", str(bad), "--empty", "error"]) == 2  # blank lines are kept by default
    assert "bad.txt:2: empty line" in capsys.readouterr().err
    assert main(["score", d, "a", "", "--empty", "error"]) == 2
    assert "sentence argument 2 is empty" in capsys.readouterr().err
    bad.write_text("a dog\n" + "the cat sat " * 30 + "\n")
    assert main(["score", d, "--file", str(bad)]) == 2
    assert "bad.txt:2: has 92 tokens" in capsys.readouterr().err
    assert main(["score", d, "--file", str(bad), "--overflow", "window", "--format", "tsv"]) == 0
    assert main(["score", d, "a", "--method", "causal"]) == 2
    assert "'causal' does not apply to a 'tta' model" in capsys.readouterr().err
    assert main(["score", str(tmp_path / "none"), "a"]) == 2
    assert "not found" in capsys.readouterr().err


def test_embed_to_npy_and_jsonl(model_dirs, tmp_path, capsys):
    d = str(model_dirs["tta"])
    src = tmp_path / "s.txt"
    src.write_text("a dog ran\nthe cat sat on the mat\nx\n")
    out = tmp_path / "e.npy"
    assert main(["embed", d, "--file", str(src), "--out", str(out), "--no-diagonal-mask", "--layer", "1"]) == 0
    matrix = np.load(out, allow_pickle=False)
    assert matrix.shape == (3, 32) and matrix.dtype == np.float32
    from maskplay.tasks.score import Embedder

    want = Embedder.from_pretrained(d).encode(["a dog ran", "the cat sat on the mat", "x"], layer=1, diagonal_mask=False)
    np.testing.assert_allclose(matrix, want, atol=1e-6)
    assert main(["embed", d, "--file", str(src), "--out", str(tmp_path / "e.jsonl"), "--pooling", "first",
                 "--normalize"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == [1, 2, 3] and np.linalg.norm(rows[0]["embedding"]) == pytest.approx(1.0)
    assert main(["embed", d, "--file", str(src), "--out", str(tmp_path / "e.txt")]) == 2
    assert "must end in .npy or .jsonl" in capsys.readouterr().err
    assert main(["embed", str(model_dirs["bert"]), "--file", str(src), "--out", str(out), "--no-diagonal-mask"]) == 2
    assert "applies to T-TA only" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["embed", d, "--file", str(src), "--out", str(out), "--pooling", "max"])


def test_embed_takes_sif_pooling(model_dirs, tmp_path, capsys):
    from maskplay.tasks.score import Embedder

    d = str(model_dirs["bert"])
    src = tmp_path / "s.txt"
    sentences = ["a dog ran", "the cat sat on the mat", "x y", "the dog sat"]
    src.write_text("\n".join(sentences) + "\n")
    vocab = Embedder.from_pretrained(d).model.config.vocab_size
    counts = tmp_path / "counts.npy"
    np.save(counts, np.arange(1, vocab + 1, dtype=np.int64))
    out = tmp_path / "e.npy"
    assert main(["embed", d, "--file", str(src), "--out", str(out), "--pooling", "sif", "--static",
                 "--frequencies", str(counts), "--sif-a", "0.01", "--remove-components", "1"]) == 0
    want = Embedder.from_pretrained(d, piece_counts=np.load(counts).astype(np.float64)).encode(
        sentences, pooling="sif", static=True, sif_a=0.01, remove_components=1)
    np.testing.assert_allclose(np.load(out, allow_pickle=False), want, atol=1e-6)
    assert main(["embed", d, "--file", str(src), "--out", str(out), "--pooling", "sif"]) == 2
    assert "pooling 'sif' weighs pieces by their corpus frequency" in capsys.readouterr().err

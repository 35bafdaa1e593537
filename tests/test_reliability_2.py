"""Bad inputs to the commands added since docs/reference/errors.md's table: each case runs the command in
this process through maskplay.cli.main, as tests/test_reliability.py does, and asserts exit code 2 with one line
`maskplay CMD: error: ...` naming the option or the file, or the documented handling (exit 0 and what was done).
docs/reference/errors.md lists these cases."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)
from tests.test_reliability import NO_CUDA, assert_one_line_error, run_cli

WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "is", "it"]
WIKI = ('<doc id="1" url="u1" title="Alpha Beta">\nAlpha Beta\n\nAlpha Beta is a cat that sat on the mat in the old '
        'house .\n</doc>\n<doc id="2" url="u2" title="The Dog">\nThe Dog\n\nThe dog is a good animal that ran to the '
        'river and back .\n</doc>\n')


def _tsv(rows: int, seed: int = 0) -> str:
    import random

    r = random.Random(seed)
    lines = ["sentence\tlabel"]
    for i in range(rows):
        words = [r.choice(WORDS) for _ in range(r.randint(2, 5))]
        lines.append(" ".join([*words, "good" if i % 2 else "bad"]) + f"\t{i % 2}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, Path]:
    from maskplay.tasks.finetune import FineTuned, HeadConfig

    root = tmp_path_factory.mktemp("reliability2")
    tok = small_tokenizer(root)
    model = save_model_dir(root / "model", tiny("tta", tok), tok)
    bert = save_model_dir(root / "bert", tiny("bert", tok), tok)
    torch.manual_seed(0)
    FineTuned(tiny("tta", tok), HeadConfig(labels=["0", "1"], pooling="mean")).save_pretrained(root / "ft", tok)
    (root / "train.tsv").write_text(_tsv(16))
    (root / "dev.tsv").write_text(_tsv(8, seed=1))
    (root / "plain.txt").write_text("the cat sat on the mat\na dog ran\n")
    (root / "pairs.jsonl").write_text("".join(json.dumps({"source": f"the cat sat on the mat {k}", "target": "cat"})
                                              + "\n" for k in range(4)))
    with gzip.open(root / "wiki_00.gz", "wt", encoding="utf-8") as f:
        f.write(WIKI)
    return {"root": root, "model": model, "bert": bert, "ft": root / "ft", "train": root / "train.tsv",
            "dev": root / "dev.tsv", "text": root / "plain.txt", "pairs": root / "pairs.jsonl",
            "wiki": root / "wiki_00.gz"}


def _file(env: dict[str, Path], name: str, data: str | bytes) -> str:
    path = env["root"] / name
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return str(path)


def _hf_dir(env: dict[str, Path], name: str, edit: Callable[[dict], None], sequence: bool = False) -> str:
    """A HuggingFace directory (config.json + model.safetensors) from transformers, with config.json edited."""
    target = env["root"] / name
    if not target.exists():
        transformers = pytest.importorskip("transformers")
        config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=64, num_labels=2)
        torch.manual_seed(0)
        cls = transformers.BertForSequenceClassification if sequence else transformers.BertForMaskedLM
        cls(config).save_pretrained(target)
        data = json.loads((target / "config.json").read_text())
        edit(data)
        (target / "config.json").write_text(json.dumps(data))
    return str(target)


def _three_labels(data: dict) -> None:
    data.update(num_labels=3, id2label={"0": "a", "1": "b", "2": "c"}, label2id={"a": 0, "b": 1, "c": 2})


def _string_hidden(data: dict) -> None:
    data["hidden_size"] = "256"


def _run_dir(env: dict[str, Path], name: str, records: list[dict] | None) -> str:
    run = env["root"] / name
    run.mkdir(exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records or []))
    return str(run)


def _truncated_tokenizer(env: dict[str, Path]) -> str:
    text = (env["model"] / "tokenizer.json").read_text()
    return _file(env, "cut-tokenizer.json", text[: len(text) // 2])


FT = ["--epochs", "1", "--batch-size", "8"]

# (id, command as printed, argv builder, what the error line must name)
CASES: list = [
    # --- tracebacks before their fixes (2026-11-25) ---
    ("generate-device-foo", "generate", lambda e: ["generate", str(e["model"]), "the cat", "--device", "foo"],
     "--device='foo'"),
    pytest.param("generate-device-cuda", "generate", lambda e: ["generate", str(e["model"]), "the", "--device", "cuda"],
                 "--device='cuda'", marks=NO_CUDA),
    ("generate-device-mps", "generate", lambda e: ["generate", str(e["model"]), "the", "--device", "mps"],
     "--device='mps'"),
    ("finetune-batch-size-0", "finetune", lambda e: ["finetune", str(e["model"]), "--task", "classify", "--train",
                                                     str(e["train"]), "--dev", str(e["dev"]), "--out",
                                                     str(e["root"] / "o1"), "--batch-size", "0"], "--batch-size"),
    ("finetune-threads-negative", "finetune", lambda e: ["finetune", str(e["model"]), "--task", "classify", "--train",
                                                         str(e["train"]), "--dev", str(e["dev"]), "--out",
                                                         str(e["root"] / "o2"), "--threads", "-1"], "--threads"),
    ("finetune-convert-labels-vs-weights", "finetune-convert",
     lambda e: ["finetune-convert", "--from-hf", _hf_dir(e, "hf-3-labels", _three_labels, sequence=True), "--out",
                str(e["root"] / "fc1")], "classifier.out.bias"),
    ("finetune-convert-string-size", "finetune-convert",
     lambda e: ["finetune-convert", "--from-hf", _hf_dir(e, "hf-seq-str", _string_hidden, sequence=True), "--out",
                str(e["root"] / "fc2")], 'config.json: "hidden_size"'),
    ("convert-string-size", "convert", lambda e: ["convert", "--from-hf", _hf_dir(e, "hf-str", _string_hidden),
                                                  "--out", str(e["root"] / "cv")], 'config.json: "hidden_size"'),
    ("plot-runs-no-elapsed", "plot-runs",
     lambda e: ["plot-runs", _run_dir(e, "run-noelapsed", [{"step": 1, "loss": 3.0}, {"step": 1, "eval_loss": 2.0}]),
                "--out", str(e["root"] / "p.png")], "metrics.jsonl:2"),
    # --- accepted with exit 0 before ---
    ("finetune-eval-every-negative", "finetune", lambda e: ["finetune", str(e["model"]), "--task", "classify",
                                                            "--train", str(e["train"]), "--dev", str(e["dev"]), "--out",
                                                            str(e["root"] / "o3"), "--eval-every", "-1"],
     "--eval-every"),
    ("finetune-eval-every-zero", "finetune", lambda e: ["finetune", str(e["model"]), "--task", "classify", "--train",
                                                        str(e["train"]), "--dev", str(e["dev"]), "--out",
                                                        str(e["root"] / "o4"), "--eval-every", "0"], "--eval-every"),
    ("simcse-clip-nan", "simcse", lambda e: ["simcse", str(e["model"]), "--out", str(e["root"] / "sc"), "--data",
                                             str(e["text"]), "--clip", "nan"], "--clip"),
    ("seq2seq-first-words-negative", "seq2seq", lambda e: ["seq2seq", "eval", "first-words:-3", "--data",
                                                                str(e["pairs"])], "first-words:-3"),
    ("seq2seq-max-source-negative", "seq2seq eval", lambda e: ["seq2seq", "eval", str(e["model"]), "--data",
                                                               str(e["pairs"]), "--max-source", "-5"], "--max-source"),
    # --- also seen ---
    ("predict-header-only", "predict", lambda e: ["predict", str(e["ft"]), "--file", _file(e, "head.tsv",
                                                                                           "sentence\tlabel\n")],
     "head.tsv: a header line and no rows"),
    ("predict-batch-size-0", "predict", lambda e: ["predict", str(e["ft"]), "--file", str(e["dev"]), "--batch-size",
                                                   "0"], "--batch-size"),
    ("masks-length-0", "masks", lambda e: ["masks", "--length", "0", "--out", str(e["root"] / "m.png")], "--length"),
    ("tokenizer-encode-truncated-json", "tokenizer", lambda e: ["tokenizer", "encode", "--tokenizer",
                                                                      _truncated_tokenizer(e), "a cat"],
     "cut-tokenizer.json: not readable JSON"),
    ("finetune-nul-byte", "finetune", lambda e: ["finetune", str(e["model"]), "--task", "classify", "--train",
                                                 _file(e, "nul.tsv", "sentence\tlabel\nthe cat\t1\nthe\x00dog\t0\n"),
                                                 "--dev", str(e["dev"]), "--out", str(e["root"] / "o5")],
     "nul.tsv:3: NUL byte"),
    ("predict-nul-byte", "predict", lambda e: ["predict", str(e["ft"]), "--file",
                                               _file(e, "nul2.txt", "the cat\nthe\x00dog\n")], "nul2.txt:2: NUL byte"),
    ("predict-invalid-utf8", "predict", lambda e: ["predict", str(e["ft"]), "--file",
                                                   _file(e, "bad.txt", b"the cat\nthe \xff dog\n")],
     "bad.txt:2: invalid UTF-8"),
    ("seq2seq-limit-negative", "seq2seq eval", lambda e: ["seq2seq", "eval", "first-words:3", "--data",
                                                          str(e["pairs"]), "--limit", "-1"], "--limit"),
    ("data-titles-plain-text", "data", lambda e: ["data", "titles", "--corpus", str(e["text"]), "--tokenizer",
                                                         str(e["model"]), "--out", str(e["root"] / "t1")],
     "plain.txt: no (first paragraph, title) pairs"),
    ("tokenizer-train-empty", "tokenizer", lambda e: ["tokenizer", "train", "--corpus", _file(e, "empty.txt", "\n\n"),
                                                      "--vocab-size", "100", "--out", str(e["root"] / "tk")],
     "empty.txt: no text"),
    ("plot-runs-empty", "plot-runs", lambda e: ["plot-runs", _run_dir(e, "run-empty", None), "--out",
                                                str(e["root"] / "p2.png")], "run-empty/metrics.jsonl: no held-out"),
]


def _case_id(case: object) -> str:
    return case.values[0] if hasattr(case, "values") else case[0]  # type: ignore[index,attr-defined]


@pytest.mark.parametrize(("name", "command", "argv", "culprit"), CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_a_one_line_error(env, capsys, name, command, argv, culprit):
    args = argv(env)
    capsys.readouterr()  # what building the inputs printed (transformers' progress bars) is not the command's
    code, _, err = run_cli(args, capsys)
    assert_one_line_error(code, err, command, culprit)


# ---- documented handling: accepted, and what is done is what the docs say -------------------------------------

def _predict(env: dict[str, Path], capsys: pytest.CaptureFixture[str], path: str) -> list[dict]:
    code, out, err = run_cli(["predict", str(env["ft"]), "--file", path], capsys)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_a_megabyte_field_is_read_and_cut_to_the_model(env, capsys):
    """A 1 MB field (the csv module refuses fields over 131,072 characters): one-column CSV (the csv path) and
    TSV, each row predicted; the text is cut to the model's positions as every long input is."""
    big = " ".join(["cat"] * 350_000)  # 1.4 MB
    csv_rows = _predict(env, capsys, _file(env, "big.csv", f"text\n\"{big}\"\nthe dog\n"))
    tsv_rows = _predict(env, capsys, _file(env, "big.tsv", f"sentence\tlabel\n{big}\t1\nthe dog\t0\n"))
    assert len(csv_rows) == len(tsv_rows) == 2
    assert csv_rows[0]["probs"] == tsv_rows[0]["probs"]  # the same cut text, whichever reader
    import csv

    assert csv.field_size_limit() == 131_072  # lifted only while reading


def test_u2028_and_other_separators_stay_inside_their_row(env, capsys):
    text = "sentence\tlabel\nthe cat\u2028sat\t1\nform\x0cfeed\t0\nnext\x85line\t1\n"
    rows = _predict(env, capsys, _file(env, "sep.tsv", text))
    assert len(rows) == 3
    from maskplay.tasks.finetune import read_examples

    assert [ex.text for ex in read_examples(env["root"] / "sep.tsv")] == ["the cat\u2028sat", "form\x0cfeed",
                                                                          "next\x85line"]


def _fifo(env: dict[str, Path], name: str, data: bytes) -> str:
    path = env["root"] / name
    if path.exists():
        path.unlink()
    os.mkfifo(path)
    threading.Thread(target=path.write_bytes, args=(data,), daemon=True).start()
    return str(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_fifos_are_read_as_files(env, capsys):
    train, dev = env["train"].read_bytes(), env["dev"].read_bytes()
    code, _, err = run_cli(["finetune", str(env["model"]), "--task", "classify", "--train", _fifo(env, "tr.fifo", train),
                            "--dev", _fifo(env, "dv.fifo", dev), "--out", str(env["root"] / "o-fifo"), *FT], capsys)
    assert code == 0, err
    rows = _predict(env, capsys, _fifo(env, "pr.fifo", gzip.compress(b"the cat\na dog\n")))  # gzip in a FIFO
    assert len(rows) == 2
    code, out, err = run_cli(["score", str(env["model"]), "--file", _fifo(env, "sc.fifo", b"the cat\n")], capsys)
    assert code == 0 and "the cat" in out, err
    code, out, err = run_cli(["tokenizer", "train", "--corpus", _fifo(env, "tk.fifo", env["text"].read_bytes() * 20),
                              "--vocab-size", "40", "--out", str(env["root"] / "tk-fifo")], capsys)
    assert code == 0, err


def test_a_process_substitution_is_read(env):
    """`--file <(...)`: bash hands over /dev/fd/63, a pipe; the command reads it as a file."""
    env_vars = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    result = subprocess.run(["bash", "-c", f'"{sys.executable}" -m maskplay predict "{env["ft"]}" '
                                           "--file <(printf 'text\\nthe cat\\na dog\\n')"],
                            capture_output=True, text=True, env=env_vars, timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2


def test_a_mistyped_local_init_is_not_looked_up_on_the_hub(env, capsys, monkeypatch):
    import maskplay.runtime.model_dir as model_dir

    (env["root"] / "runs").mkdir(exist_ok=True)
    monkeypatch.chdir(env["root"])
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # a hub lookup would fail differently
    with pytest.raises(FileNotFoundError, match=r"runs/nope not found \(runs/ is a local directory"):
        model_dir.resolve_model_dir("runs/nope")


def test_a_title_cut_off_by_max_length_blames_max_length(env, capsys):
    from maskplay.data.titles import TitlesConfig, build_titles

    titles = env["root"] / "titles"
    build_titles([str(env["wiki"])], str(env["model"]), titles, TitlesConfig(dev_percent=0, test_percent=0))
    (titles / "valid").exists() or pytest.skip("no valid split")
    code, _, err = run_cli(["seq2seq", "train", "--init", str(env["bert"]), "--data", str(titles), "--out",
                            str(env["root"] / "s2s"), "--max-steps", "1", "--batch-size", "2",
                            "--set", "data.max_length=6", "--set", "optim.warmup_steps=0", "--set",
                            "run.progress=false", "--set", "run.tensorboard=false", "--set", "run.threads=1",
                            "--set", "run.eval_batches=1"], capsys)
    lines = err.strip().splitlines()  # the training log's warning that sequences are cut, then the error
    assert code == 2 and "WARNING" in lines[0] and len(lines) == 2, err
    assert lines[-1].startswith("maskplay seq2seq: error: ") and "data.max_length" in lines[-1], err
    assert "--max-source" in lines[-1] and "has no target after its separator" in lines[-1]

"""benchmarks/all.py: the one table of every family against its HuggingFace twin. The table is built from the
sub-runs' JSON, so it is checked against numbers written here (each ratio recomputed by hand, the best precision
picked, the empty cells saying why), and one real sub-run (GPT against GPT2LMHeadModel, tiny) goes through it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_all():
    spec = importlib.util.spec_from_file_location("bench_all", ROOT / "benchmarks" / "all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data))


def test_table_from_the_sub_runs(tmp_path):
    bench = load_all()
    peaks = {"peak_bf16": 400e9, "peak_fp32": 100e9}
    write(tmp_path / "train.json", {**peaks, "rows": [
        {"case": "HF fp32", "tokens_per_s": 1000.0, "mfu_bf16": 0.05},
        {"case": "HF bf16-autocast", "tokens_per_s": 1500.0, "mfu_bf16": 0.07},
        {"case": "tta fp32", "tokens_per_s": 1200.0, "mfu_bf16": 0.06},
        {"case": "tta bf16", "tokens_per_s": 3000.0, "mfu_bf16": 0.15},
        {"case": "bert fp32", "tokens_per_s": 2400.0, "mfu_bf16": 0.10},  # fp32 faster here: MFU vs the fp32 peak
        {"case": "bert bf16", "tokens_per_s": 2000.0, "mfu_bf16": 0.08},
        {"case": "bert bf16 rotary", "tokens_per_s": 9000.0, "mfu_bf16": 0.5},  # a switch: never the family's row
    ]})
    write(tmp_path / "train-xlnet.json", {**peaks, "rows": [
        {"case": "HF xlnet fp32", "tokens_per_s": 500.0, "mfu_bf16": 0.05},
        {"case": "xlnet bf16", "tokens_per_s": 1100.0, "mfu_bf16": 0.2}]})
    write(tmp_path / "score.json", {"rows": [
        {"case": "tta", "method": "T-TA one pass (maskplay)", "sentences_per_s": 300.0, "mfu": 0.2},
        {"case": "tta8", "method": "T-TA one pass, int8 (maskplay)", "sentences_per_s": 360.0, "mfu": 0.25},
        {"case": "hf_pll", "method": "x", "sentences_per_s": 10.0, "mfu": 0.5},
        {"case": "hf_pll8", "method": "x", "sentences_per_s": 12.0, "mfu": 0.5},
        {"case": "pll", "method": "BERT PLL bucketed (maskplay)", "sentences_per_s": 30.0, "mfu": 0.3}]})
    write(tmp_path / "generate.json", {"rows": [
        {"batch": 1, "case": "maskplay bf16, compiled", "tokens_per_s": 800.0, "bandwidth_limit_tokens_per_s": 1600.0},
        {"batch": 1, "case": "maskplay fp32, cache", "tokens_per_s": 500.0, "bandwidth_limit_tokens_per_s": 800.0},
        {"batch": 1, "case": "HF generate fp32, cache", "tokens_per_s": 400.0, "bandwidth_limit_tokens_per_s": 800.0},
        {"batch": 8, "case": "maskplay fp32, compiled", "tokens_per_s": 3000.0, "bandwidth_limit_tokens_per_s": 6000.0},
        {"batch": 8, "case": "HF generate bf16, cache", "tokens_per_s": 2000.0, "bandwidth_limit_tokens_per_s": 9e3}]})
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[3:-1]]
            for line in bench.table(tmp_path).splitlines()[2:]}
    assert rows[("T-TA", "train step")] == ["3,000 tokens/s (bf16)", f"{bench.REFERENCE}: 1,500 (bf16-autocast)",
                                           "2.00x", "15%"]
    assert rows[("BERT", "train step")][0] == "2,400 tokens/s (fp32)"
    assert rows[("BERT", "train step")][2:] == ["1.60x", "40%"]  # 0.10 of the bf16 peak = 0.40 of the fp32 peak
    assert rows[("XLNet", "train step")][1:3] == ["HF XLNetLMHeadModel: 500 (fp32)", "2.20x"]
    assert rows[("T-TA", "score")][0].startswith("360.0 sent/s (T-TA one pass, int8)")
    assert rows[("T-TA", "score")][2] == "30.00x" and rows[("BERT", "score")][2] == "2.50x"
    assert rows[("GPT", "generate")][2] == "2.00x / 1.50x"
    assert rows[("GPT", "generate")][3] == "50% of bandwidth / 50% of bandwidth"
    assert rows[("GPT", "train step")] == ["-", "not measured", "-", "-"]  # its sub-run is missing here
    assert rows[("ELECTRA", "score")][1] == "not measured" and ("ELECTRA", "generate") not in rows
    assert {family for family, _ in rows} == set(bench.NAMES.values())


def test_docs_block_is_replaced_not_repeated(tmp_path):
    bench = load_all()
    doc = tmp_path / "BENCH.md"
    doc.write_text("# Benchmarks\n\nbefore\n")
    bench.write_docs(doc, "first table")
    bench.write_docs(doc, "second table")
    text = doc.read_text()
    assert text.count(bench.START) == 1 and "second table" in text and "first table" not in text
    assert text.startswith("# Benchmarks\n\nbefore\n")


def test_one_real_sub_run_gpt_against_gpt2(tmp_path):
    out = tmp_path / "train-gpt.json"
    subprocess.run([sys.executable, "benchmarks/train_speed.py", "--preset", "tiny", "--data", "none", "--families",
                    "gpt", "--hf-gpt2", "--precisions", "fp32", "--hf-precisions", "fp32", "--rounds", "1",
                    "--batch-size", "2", "--seq-len", "16", "--threads", "1", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    assert {r["case"] for r in json.loads(out.read_text())["rows"]} == {"gpt fp32", "HF gpt2 fp32"}
    rows = {line.split("|")[2].strip(): line for line in load_all().table(tmp_path).splitlines()
            if line.startswith("| GPT |")}
    assert "HF GPT2LMHeadModel" in rows["train step"] and rows["train step"].count("x |") == 1

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
    write(tmp_path / "cpu.json", {"model": "AMD EPYC 9R14", "kind": "bf16 + VNNI", "flags": ["avx512_bf16"]})
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
                                           "2.00x", "15%", "bf16 + VNNI"]
    assert {cells[-1] for cells in rows.values()} == {"bf16 + VNNI"}  # every ratio beside the CPU kind it ran on
    assert {r["cpu_model"] for r in bench.cells(tmp_path)} == {"AMD EPYC 9R14"}
    assert rows[("BERT", "train step")][0] == "2,400 tokens/s (fp32)"
    assert rows[("BERT", "train step")][2:4] == ["1.60x", "40%"]  # 0.10 of the bf16 peak = 0.40 of the fp32 peak
    assert rows[("XLNet", "train step")][1:3] == ["HF XLNetLMHeadModel: 500 (fp32)", "2.20x"]
    assert rows[("T-TA", "score")][0].startswith("360.0 sent/s (T-TA one pass, int8)")
    assert rows[("T-TA", "score")][2] == "30.00x" and rows[("BERT", "score")][2] == "2.50x"
    assert rows[("GPT", "generate")][2] == "2.00x / 1.50x"
    assert rows[("GPT", "generate")][3] == "50% of bandwidth / 50% of bandwidth"
    assert rows[("GPT", "train step")] == ["-", "not measured", "-", "-", "bf16 + VNNI"]  # its sub-run is missing here
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


def test_docs_keep_one_block_per_cpu_kind(tmp_path):
    bench = load_all()
    doc = tmp_path / "BENCH.md"
    doc.write_text("# Benchmarks\n")
    bench.write_docs(doc, "zen4 first", "bf16 + VNNI")
    bench.write_docs(doc, "sapphire rapids", "AMX + bf16 + VNNI")
    bench.write_docs(doc, "zen4 second", "bf16 + VNNI")
    text = doc.read_text()
    assert "zen4 first" not in text and text.count("zen4 second") == 1 and text.count("sapphire rapids") == 1
    assert text.count("### CPU kind: bf16 + VNNI") == 1 and text.count("### CPU kind: AMX + bf16 + VNNI") == 1


def test_docs_put_a_new_cpu_kind_with_the_others(tmp_path):
    """A kind not yet in the page goes after the last kind's block and its notes, before the next section - not at
    the end of the file, below sections about other things."""
    bench = load_all()
    doc = tmp_path / "BENCH.md"
    doc.write_text("# Benchmarks\n\n## Every family\n\n### CPU kind: bf16 + VNNI\n\n"
                   "<!-- bench-all:bf16-vnni:start -->\nzen4\n<!-- bench-all:bf16-vnni:end -->\n\nnotes on zen4\n\n"
                   "```bash\n# a comment, not a heading\nmake bench\n```\n\n## Start-up\n\nother things\n")
    bench.write_docs(doc, "ice lake", "VNNI")
    bench.write_docs(doc, "sapphire rapids", "AMX + bf16 + VNNI")
    text = doc.read_text()
    order = ["zen4", "notes on zen4", "make bench\n```", "### CPU kind: VNNI", "ice lake",
             "### CPU kind: AMX + bf16 + VNNI", "sapphire rapids", "## Start-up", "other things"]
    assert [text.index(s) for s in order] == sorted(text.index(s) for s in order), text
    assert "```\n\n### CPU kind: VNNI\n\n<!-- bench-all:vnni:start -->\nice lake\n<!-- bench-all:vnni:end -->\n\n" \
        "### CPU kind: AMX + bf16 + VNNI\n\n" in text
    assert text.endswith("-->\n\n## Start-up\n\nother things\n")
    bench.write_docs(doc, "ice lake again", "VNNI")  # a kind already there: replaced in place
    assert doc.read_text() == text.replace("ice lake", "ice lake again")


def test_cpu_kind_from_flags():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import cpu_info, cpu_kind

    base = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma"
    sapphire = base + " avx512f avx512_vnni avx_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"
    zen4 = base + " avx512f avx512_vnni avx512_bf16"
    ice_lake = base + " avx512f avx512_vnni"
    alder_lake = base + " avx_vnni"
    assert cpu_kind(sapphire) == "AMX + bf16 + VNNI"
    assert cpu_kind(zen4) == "bf16 + VNNI"
    assert cpu_kind(ice_lake) == cpu_kind(alder_lake) == "VNNI"
    assert cpu_kind(base) == "AVX2-only"
    assert cpu_kind(base + " avx512f") == "AVX2-only"  # AVX-512 without VNNI or bf16: no fast low-precision path
    assert cpu_kind("fpu sse sse2") == "no AVX2"
    assert cpu_kind({"amx_bf16"}) == "bf16"  # amx_bf16 alone counts as native bf16; AMX is amx_tile
    # the flags of bf16 with matmuls measured slower than fp32's (a Xeon without AMX): a kind of its own
    assert cpu_kind(zen4, bf16_over_fp32=0.52) == "slow bf16 + VNNI"
    assert cpu_kind(zen4, bf16_over_fp32=1.9) == cpu_kind(zen4) == "bf16 + VNNI"
    assert cpu_kind(ice_lake, bf16_over_fp32=0.01) == "VNNI"  # emulated bf16 without the flag changes nothing
    assert cpu_info(f"model name\t: Xeon\nflags\t\t: {zen4}\n", bf16_over_fp32=0.5234, environ={})["bf16_over_fp32"] == 0.523
    info = cpu_info(f"processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: {zen4}\n", environ={})
    assert info == {"model": "AMD EPYC 9R14", "kind": "bf16 + VNNI",
                    "flags": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"]}
    assert cpu_info("processor\t: 0\n")["kind"] == "unknown"


def test_cpu_kind_under_an_isa_cap():
    """ONEDNN_MAX_CPU_ISA emulates a smaller kind on this CPU: the kind, the flags and the results folder say so."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import cpu_info, isa_cap

    zen4 = "fpu avx avx2 fma avx512f avx512_vnni avx512_bf16"
    text = f"model name\t: AMD EPYC\nflags\t\t: {zen4}\n"
    ice_lake = cpu_info(text, bf16_over_fp32=0.02, environ={"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"})
    assert ice_lake == {"model": "AMD EPYC", "kind": "VNNI (emulated)", "flags": ["avx2", "avx512_vnni", "avx512f"],
                        "emulated": "ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI", "bf16_over_fp32": 0.02}
    assert cpu_info(text, environ={"ONEDNN_MAX_CPU_ISA": "AVX2"})["kind"] == "AVX2-only (emulated)"
    for no_cap in ({}, {"ONEDNN_MAX_CPU_ISA": "ALL"}, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}):
        assert cpu_info(text, environ=no_cap)["kind"] == "bf16 + VNNI"  # a cap above the CPU emulates nothing
        assert "emulated" not in cpu_info(text, environ=no_cap)
    assert isa_cap({"ONEDNN_MAX_CPU_ISA": "nonsense"}) is None
    assert load_all().kind_slug("VNNI (emulated)") == "vnni-emulated"
    assert load_all().kind_slug("slow bf16 + VNNI") == "slow-bf16-vnni"


def test_an_emulated_kind_without_bf16_generates_without_it():
    """Inductor's kernels are not held by ONEDNN_MAX_CPU_ISA: an emulated VNNI-only kind must not time bf16."""
    bench = load_all()
    ice_lake = {"kind": "VNNI (emulated)", "emulated": "ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI"}
    assert bench.generation_dtypes(ice_lake) == ("fp32", "int8")
    assert bench.generation_dtypes({"kind": "bf16 + VNNI"}) == ("fp32", "bf16", "int8")
    assert bench.generation_dtypes({"kind": "slow bf16 + VNNI"}) == ("fp32", "bf16", "int8")
    assert bench.generation_dtypes(None) == ("fp32", "bf16", "int8")
    plan = bench.runs(3, Path("w"), bench.generation_dtypes(ice_lake))
    dtypes = plan["generate"][plan["generate"].index("--dtypes") + 1:plan["generate"].index("--out")]
    assert dtypes == ["fp32", "int8"]


def test_repeated_runs_give_the_median_ratio_and_the_range(tmp_path):
    """--repeat N: runs 2.. in work/repeat-N; each ratio is the median over the runs with their range, and the
    throughputs shown are those of the run whose ratio is the median."""
    bench = load_all()
    write(tmp_path / "cpu.json", {"model": "AMD EPYC 9R14", "kind": "bf16 + VNNI", "flags": ["avx512_bf16"]})
    for k, (tta, b8) in enumerate([(300.0, 2000.0), (250.0, 3000.0), (350.0, 2500.0)], start=1):
        folder = tmp_path if k == 1 else tmp_path / f"repeat-{k}"
        folder.mkdir(exist_ok=True)
        write(folder / "score.json", {"rows": [
            {"case": "tta8", "method": "T-TA one pass, int8 (maskplay)", "sentences_per_s": tta, "mfu": tta / 1000},
            {"case": "hf_pll8", "method": "x", "sentences_per_s": 10.0, "mfu": 0.5}]})
        write(folder / "generate.json", {"rows": [
            {"batch": 1, "case": "maskplay bf16, compiled", "tokens_per_s": 800.0 * k,
             "bandwidth_limit_tokens_per_s": 8000.0},
            {"batch": 1, "case": "HF generate int8, cache", "tokens_per_s": 400.0, "bandwidth_limit_tokens_per_s": 1.0},
            {"batch": 8, "case": "maskplay bf16, compiled", "tokens_per_s": b8, "bandwidth_limit_tokens_per_s": 1e4},
            {"batch": 8, "case": "HF generate int8, cache", "tokens_per_s": 1000.0,
             "bandwidth_limit_tokens_per_s": 1.0}]})
    (tmp_path / "repeat-x").mkdir()  # not a repeat's folder
    assert bench.repeat_dirs(tmp_path) == [tmp_path, tmp_path / "repeat-2", tmp_path / "repeat-3"]
    rows = {(r["family"], r["task"]): r for r in bench.cells(tmp_path)}
    tta = rows[("T-TA", "score")]
    assert tta["ratio"] == "30.00x (25.00-35.00x)" and tta["maskplay"].startswith("300.0 sent/s")
    assert tta["mfu"] == "30%" and tta["ratios"] == ["30.00x", "25.00x", "35.00x"]
    generate = rows[("GPT", "generate")]  # each ratio's own median; the run shown is the first ratio's median
    assert generate["ratio"] == "4.00x / 2.50x (2.00-6.00x / 2.00-3.00x)"
    assert generate["maskplay"].startswith("b1: 1,600 tokens/s")
    assert rows[("GPT", "train step")]["ratio"] == "-"  # no run measured it
    assert "(25.00-35.00x)" in bench.table(tmp_path)
    assert bench.stale_repeats(tmp_path, 2) == [tmp_path / "repeat-3"] and bench.stale_repeats(tmp_path, 3) == []

"""One table, every family: each family's training step, scoring, embedding and generation against its HuggingFace
twin where one exists, best precision against best precision, in one invocation (`make bench`).

    python benchmarks/all.py                      # ~4-5 minutes on 2 cores; writes results/bench-all/KIND/
    python benchmarks/all.py --repeat 3 --docs docs/results/benchmarks.md     # make bench: three runs, medians

It runs the project's benchmark scripts with small rounds (ratios are what count; each script interleaves its cases
round by round, so the machine's drift hits both sides alike) and merges their JSON into one Markdown table. A
shared machine's speed moves between runs by more than a round's interleaving evens out (a ratio by up to a third on
one machine in one day), so --repeat N runs every sub-run N times in turn and gives each ratio as the median over
the runs with their range:

- training (`train_speed.py --preset mini`, batch 16 x 128, random ids): every family in fp32 and bf16; the twins
  BertForMaskedLM (BERT), GPT2LMHeadModel (GPT), HF ELECTRA generator + discriminator (ELECTRA), XLNetLMHeadModel
  (XLNet); T-TA, UniLM and GPT-BERT have no twin in transformers and are shown against BertForMaskedLM of the same
  size, the model a HuggingFace user would train instead (marked "reference");
- scoring and embedding (`score_speed.py`, tta-paper size, WikiText-103 sentences): T-TA one pass and BERT PLL
  against HF BertForMaskedLM's PLL, XLNet causal against XLNetLMHeadModel, GPT causal against BertLMHeadModel and
  ELECTRA's discriminator against ElectraForPreTraining on the same weights, T-TA / BERT / UniLM encode against HF
  BertModel, GPT / ELECTRA / XLNet encode against their HF encoders on the same weights;
- generation (`generate_speed.py --preset mini`): GPT's greedy decoding (cached and compiled; fp32, bf16 and int8)
  against HF `generate` on the same weights (BertLMHeadModel, converted; fp32, bf16 and torch.ao int8), batch 1
  and 8.

Each row: maskplay's best case (over its precisions, int8 and compiled included where the script has them) and the
twin's best, the ratio of their throughputs, and maskplay's MFU against this machine's measured matmul peak of the
precision it ran in (generation: the share of the memory-bandwidth limit instead), and the CPU's kind (common.cpu_kind:
AMX, native bf16 (or "slow bf16" where its matmuls are measured slower than fp32's), VNNI, or AVX2-only; the ratios
depend on it). Cells a family does not support, or that have no
script yet, say so. --docs replaces this CPU kind's block in that file (appended once with a heading if absent), so
the page keeps one current table per kind; the sub-runs' JSON, cpu.json, all.json (every row with the CPU's model
and kind) and the table stay in --work.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
from common import cpu_info, machine, matmul_peak  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- bench-all:start -->", "<!-- bench-all:end -->"
ANY_END = re.compile(r"<!-- bench-all:(?:[^:>]+:)?end -->")
FAMILIES = ("tta", "bert", "gpt", "electra", "xlnet", "unilm", "gpt-bert")
NAMES = {"tta": "T-TA", "bert": "BERT", "gpt": "GPT", "electra": "ELECTRA", "xlnet": "XLNet", "unilm": "UniLM",
         "gpt-bert": "GPT-BERT"}
TRAIN_TWINS = {"bert": "HF BertForMaskedLM", "gpt": "HF GPT2LMHeadModel",
               "electra": "HF ELECTRA (generator + discriminator)", "xlnet": "HF XLNetLMHeadModel"}
REFERENCE = "HF BertForMaskedLM (reference: no twin in transformers)"


def runs(rounds: int, work: Path, generate_dtypes: tuple[str, ...] = ("fp32", "bf16", "int8")) -> dict[str, list[str]]:
    """The sub-runs: name -> the script and its arguments (each writes work/NAME.json)."""
    train = ["benchmarks/train_speed.py", "--preset", "mini", "--data", "none", "--batch-size", "16",
             "--precisions", "fp32", "bf16", "--hf-precisions", "fp32", "bf16-autocast", "--rounds", str(rounds)]
    return {
        "train": [*train, "--families", "tta", "bert", "unilm", "gpt-bert", "--out", str(work / "train.json")],
        "train-gpt": [*train, "--families", "gpt", "--hf-gpt2", "--out", str(work / "train-gpt.json")],
        "train-electra": [*train, "--families", "electra", "--hf-electra", "--out", str(work / "train-electra.json")],
        "train-xlnet": [*train, "--families", "xlnet", "--hf-xlnet", "--out", str(work / "train-xlnet.json")],
        "score": ["benchmarks/score_speed.py", "--sentences", "60", "--rounds", str(rounds),
                  "--out", str(work / "score.json")],
        "generate": ["benchmarks/generate_speed.py", "--preset", "mini", "--batch-sizes", "1", "8",
                     "--prompt-lengths", "16", "--max-new-tokens", "32", "--rounds", str(rounds), "--no-uncached",
                     "--dtypes", *generate_dtypes, "--out", str(work / "generate")],
    }


def best(rows: list[dict], key: str, pick) -> dict | None:
    chosen = [r for r in rows if pick(r)]
    return max(chosen, key=lambda r: r[key]) if chosen else None


def train_rows(work: Path) -> dict[str, tuple[str, str, str, str]]:
    """family -> (maskplay's best case, the twin, ratio, MFU) from the training sub-runs."""
    out = {}
    for run in ("train", "train-gpt", "train-electra", "train-xlnet"):
        path = work / f"{run}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        peaks = {"bf16": data["peak_bf16"], "fp32": data["peak_fp32"]}
        rows = data["rows"]
        hf = best(rows, "tokens_per_s", lambda r: r["case"].startswith("HF "))
        for family in FAMILIES:
            ours = best(rows, "tokens_per_s", lambda r, f=family: r["case"].split() in ([f, "fp32"], [f, "bf16"]))
            if ours is None:
                continue
            precision = ours["case"].split(" ")[1]
            mfu = ours["mfu_bf16"] * data["peak_bf16"] / peaks["fp32" if precision == "fp32" else "bf16"]
            twin = TRAIN_TWINS.get(family, REFERENCE)
            hf_precision = hf["case"].split()[-1]
            out[family] = (f"{ours['tokens_per_s']:,.0f} tokens/s ({precision})",
                           f"{twin}: {hf['tokens_per_s']:,.0f} ({hf_precision})",
                           f"{ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x", f"{mfu:.0%}")
    return out


SCORE_CASES = {  # (task, family) -> maskplay's cases, the HF cases, the twin's name
    ("score", "tta"): (("tta", "tta8"), ("hf_pll", "hf_pll8"), "HF BertForMaskedLM PLL (reference: no twin)"),
    ("score", "bert"): (("pll",), ("hf_pll", "hf_pll8"), "HF BertForMaskedLM PLL"),
    ("score", "xlnet"): (("xlnet",), ("hf_xlnet",), "HF XLNetLMHeadModel, causal order"),
    ("score", "gpt"): (("gpt",), ("hf_gpt",), "HF BertLMHeadModel on the same weights (GPT's converter twin)"),
    ("score", "electra"): (("electra",), ("hf_electra",), "HF ElectraForPreTraining on the same weights"),
    ("embed", "tta"): (("e_tta", "e_tta8"), ("e_hf", "e_hf8"), "HF BertModel, mean pooling (reference)"),
    ("embed", "bert"): (("e_bert", "e_bert8"), ("e_hf", "e_hf8"), "HF BertModel, mean pooling"),
    ("embed", "gpt"): (("e_gpt",), ("e_hf_gpt",), "HF BertLMHeadModel's encoder on the same weights, mean"),
    ("embed", "electra"): (("e_electra",), ("e_hf_electra",), "HF ElectraModel on the same weights, mean"),
    ("embed", "xlnet"): (("e_xlnet",), ("e_hf_xlnet",), "HF XLNetModel on the same weights, mean"),
    ("embed", "unilm"): (("e_unilm",), ("e_hf", "e_hf8"), "HF BertModel, mean pooling (reference: no twin)"),
}


def score_rows(work: Path) -> dict[tuple[str, str], tuple[str, str, str, str]]:
    path = work / "score.json"
    if not path.exists():
        return {}
    rows = {r["case"]: r for r in json.loads(path.read_text())["rows"]}
    out = {}
    for key, (ours, theirs, twin) in SCORE_CASES.items():
        o = max((rows[c] for c in ours if c in rows), key=lambda r: r["sentences_per_s"], default=None)
        t = max((rows[c] for c in theirs if c in rows), key=lambda r: r["sentences_per_s"], default=None)
        if o is None or t is None:
            continue
        out[key] = (f"{o['sentences_per_s']:,.1f} sent/s ({o['method'].replace(' (maskplay)', '')})",
                    f"{twin}: {t['sentences_per_s']:,.1f}", f"{o['sentences_per_s'] / t['sentences_per_s']:.2f}x",
                    f"{o['mfu']:.0%}")
    return out


def generate_rows(work: Path) -> dict[str, tuple[str, str, str, str]]:
    path = work / "generate.json"
    if not path.exists():
        return {}
    rows = json.loads(path.read_text())["rows"]
    cells = []
    for batch in sorted({r["batch"] for r in rows}):
        here = [r for r in rows if r["batch"] == batch]
        o = best(here, "tokens_per_s", lambda r: r["case"].startswith("maskplay"))
        t = best(here, "tokens_per_s", lambda r: r["case"].startswith("HF"))
        cells.append((batch, o, t))
    return {"gpt": (
        "; ".join(f"b{b}: {o['tokens_per_s']:,.0f} tokens/s ({o['case'].removeprefix('maskplay ')})" for b, o, _ in cells),
        "HF generate on the same weights (BertLMHeadModel): "
        + "; ".join(f"b{b}: {t['tokens_per_s']:,.0f}" for b, _, t in cells),
        " / ".join(f"{o['tokens_per_s'] / t['tokens_per_s']:.2f}x" for _, o, t in cells),
        " / ".join(f"{o['tokens_per_s'] / o['bandwidth_limit_tokens_per_s']:.0%} of bandwidth" for _, o, _ in cells))}


NOT_MEASURED = {  # (task, family) -> why the cell is empty
    ("score", "unilm"): "PLL as BERT; no twin",
    ("score", "gpt-bert"): "causal / MNTP PLL; no twin",
    ("embed", "gpt-bert"): "supported (bidirectional mode); no twin",
    ("generate", "unilm"): "same decode code as GPT; no twin",
    ("generate", "gpt-bert"): "same decode code as GPT (causal mode); no twin",
}
GENERATES = {"gpt", "unilm", "gpt-bert"}


def the_cpu(work: Path) -> dict:
    """The CPU the sub-runs in work ran on: work/cpu.json, written by the run, or this machine's."""
    path = work / "cpu.json"
    return json.loads(path.read_text()) if path.exists() else cpu_info()


def repeat_dirs(work: Path) -> list[Path]:
    """The folders of the runs a table merges: work (the first run) and work/repeat-2, repeat-3, ... (--repeat)."""
    found = {int(d.name.removeprefix("repeat-")): d for d in work.glob("repeat-*")
             if d.is_dir() and d.name.removeprefix("repeat-").isdigit()}
    return [work, *(found[k] for k in sorted(found))]


def stale_repeats(work: Path, repeat: int) -> list[Path]:
    """The repeat folders a run of `repeat` runs does not write: an older run's, which its table must not merge."""
    return repeat_dirs(work)[repeat:]


RATIO = re.compile(r"(\d+(?:\.\d+)?)x")


def cells(work: Path) -> list[dict[str, str]]:
    """One row per family and task: maskplay's best, the twin's best, the ratio, the MFU and the CPU's kind and
    model (a ratio holds for the kind of CPU it was measured on: docs/results/benchmarks.md). Where work holds
    repeated runs (repeat_dirs), each ratio is the median over the runs with their range in brackets, and the
    throughputs and MFU are those of the run whose (first) ratio is the median; `ratios` lists every run's."""
    runs_cells = [cells_of(folder, the_cpu(work)) for folder in repeat_dirs(work)]
    if len(runs_cells) == 1:
        return runs_cells[0]
    merged = []
    for rows in zip(*runs_cells, strict=True):
        measured = [(row, [float(v) for v in RATIO.findall(row["ratio"])]) for row in rows if row["ratio"] != "-"]
        if not measured:
            merged.append(rows[0])
            continue
        parts = len(measured[0][1])
        medians, ranges = [], []
        for k in range(parts):
            values = sorted(ratios[k] for _, ratios in measured)
            medians.append(values[(len(values) - 1) // 2])
            ranges.append(f"{values[0]:.2f}-{values[-1]:.2f}x")
        middle = sorted(measured, key=lambda m: m[1][0])[(len(measured) - 1) // 2][0]
        merged.append({**middle, "ratio": " / ".join(f"{m:.2f}x" for m in medians) + f" ({' / '.join(ranges)})",
                       "ratios": [row["ratio"] for row, _ in measured]})
    return merged


def cells_of(work: Path, cpu: dict) -> list[dict[str, str]]:
    """cells() of one run's folder."""
    train, score, generate = train_rows(work), score_rows(work), generate_rows(work)
    out = []
    for family in FAMILIES:
        tasks = [("train step", train.get(family)), ("score", score.get(("score", family))),
                 ("embed", score.get(("embed", family)))]
        if family in GENERATES:
            tasks.append(("generate", generate.get(family)))
        for task, cell in tasks:
            if cell is None:
                cell = ("-", NOT_MEASURED.get((task.split()[0], family), "not measured"), "-", "-")
            out.append({"family": NAMES[family], "task": task, "maskplay": cell[0], "twin": cell[1],
                        "ratio": cell[2], "mfu": cell[3], "cpu_kind": str(cpu["kind"]), "cpu_model": str(cpu["model"])})
    return out


def table(work: Path) -> str:
    lines = ["| family | task | maskplay (best precision) | HuggingFace twin (best) | ratio | MFU | CPU kind |",
             "|---|---|---|---|---|---|---|"]
    for row in cells(work):
        lines.append("| " + " | ".join(row[k] for k in ("family", "task", "maskplay", "twin", "ratio", "mfu",
                                                         "cpu_kind")) + " |")
    return "\n".join(lines)


def markers(kind: str | None) -> tuple[str, str]:
    """The docs block's markers: one pair per CPU kind (a run replaces its own kind's table), or the plain pair."""
    if kind is None:
        return START, END
    slug = kind_slug(kind)
    return f"<!-- bench-all:{slug}:start -->", f"<!-- bench-all:{slug}:end -->"


def generation_dtypes(cpu: dict | None) -> tuple[str, ...]:
    """What generation runs in: fp32, bf16 and int8, but no bf16 where oneDNN is held below bf16 on a CPU that has
    it (an emulated kind): the compiled step's own C++ kernels take the CPU's instructions from the CPU itself, so
    its bf16 would run natively where the kind emulated has none."""
    emulated_without_bf16 = cpu is not None and cpu.get("emulated") and "bf16" not in str(cpu.get("kind"))
    return ("fp32", "int8") if emulated_without_bf16 else ("fp32", "bf16", "int8")


def kind_slug(kind: str) -> str:
    """A CPU kind as a name for files and markers: "slow bf16 + VNNI" -> "slow-bf16-vnni", "VNNI (emulated)" ->
    "vnni-emulated"."""
    return "-".join("".join(c if c.isalnum() else " " for c in kind.lower()).split())


def write_docs(path: Path, block: str, kind: str | None = None) -> None:
    """Replace the block of this CPU kind in the Markdown file at path. A kind not yet there goes with the others:
    after the last kind's block and the text that follows it, before the next heading of level 1-3 (or at the end
    of the file when there is no block yet, or no heading after the last one)."""
    start, end = markers(kind)
    text = path.read_text(encoding="utf-8")
    body = f"{start}\n{block}\n{end}"
    if start in text and end in text:
        text = text[:text.index(start)] + body + text[text.index(end) + len(end):]
    else:
        heading = f"### CPU kind: {kind}" if kind else "## Every family against its HuggingFace twin (`benchmarks/all.py`)"
        ends = list(ANY_END.finditer(text))
        at = next_heading(text, ends[-1].end()) if ends else len(text)
        before, after = text[:at].rstrip("\n"), text[at:]
        text = before + f"\n\n{heading}\n\n" + body + "\n" + ("\n" + after if after else "")
    path.write_text(text, encoding="utf-8")


def next_heading(text: str, offset: int) -> int:
    """Where the first Markdown heading of level 1-3 after offset starts (outside fenced code); len(text) if none."""
    fence = ""
    position = 0
    for line in text.splitlines(keepends=True):
        here, position = position, position + len(line)
        stripped = line.lstrip(" ")
        if stripped.startswith(("```", "~~~")):
            marker = stripped[:3]
            fence = "" if fence == marker else (fence or marker)
        elif not fence and here >= offset and re.match(r"#{1,3}\s", stripped):
            return here
    return len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per sub-run (the median counts)")
    parser.add_argument("--work", type=Path, default=None,
                        help="the sub-runs' JSON and logs (default: results/bench-all/KIND, this CPU's kind, so that "
                             "a run on one kind keeps another kind's files)")
    parser.add_argument("--only", nargs="+", default=None, help="run only these sub-runs (the others' JSON in --work "
                                                                "are reused): train train-gpt train-electra ...")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every sub-run this many times in turn (runs 2.. in --work/repeat-N): each ratio is "
                             "then the median over the runs, with their range")
    parser.add_argument("--table-only", action="store_true", help="run nothing: build the table from --work")
    parser.add_argument("--docs", type=Path, default=None, help="write the table into this Markdown file")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    here = None
    if not args.table_only or args.work is None:
        bf16_over_fp32 = matmul_peak(torch.bfloat16) / matmul_peak(torch.float32)  # what the flags cannot say
        here = {**cpu_info(bf16_over_fp32=bf16_over_fp32), "machine": machine()}
    if args.work is None:
        args.work = Path("results/bench-all") / kind_slug(str(here["kind"]))
    args.work.mkdir(parents=True, exist_ok=True)
    folders = [args.work, *(args.work / f"repeat-{k}" for k in range(2, args.repeat + 1))]
    plans = [runs(args.rounds, folder, generation_dtypes(here)) for folder in folders]
    unknown = sorted(set(args.only or ()) - set(plans[0]))
    if unknown:
        parser.error(f"--only: unknown sub-runs {unknown}; choose from {sorted(plans[0])}")
    if not args.table_only:
        for stale in stale_repeats(args.work, args.repeat):
            shutil.rmtree(stale)
        for folder in folders:  # the CPU the sub-runs run on, kept beside their JSON
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "cpu.json").write_text(json.dumps(here, indent=1) + "\n")
    timings: dict[str, float] = {}
    for folder, plan in ([] if args.table_only else zip(folders, plans, strict=True)):
        for name, argv in plan.items():
            if args.only and name not in args.only:
                continue
            began = time.perf_counter()
            print(f"== {name}: python {' '.join(argv)}", flush=True)
            with open(folder / f"{name}.log", "w") as log:
                done = subprocess.run([sys.executable, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            spent = time.perf_counter() - began
            timings[f"{folder.name}/{name}"] = spent
            if done.returncode != 0:
                raise SystemExit(f"benchmarks/all.py: {name} failed (exit {done.returncode}); see {folder / name}.log")
            print(f"   {spent:.0f} s", flush=True)
    repeated = f" --repeat {args.repeat}" if args.repeat > 1 else ""
    if args.table_only:
        how = "built from the sub-runs' JSON already there (`--table-only`)"
    elif args.only:
        how = (f"`python benchmarks/all.py --rounds {args.rounds}{repeated} --only {' '.join(args.only)}` re-ran "
               f"those ({sum(timings.values()) / 60:.1f} minutes); the other rows are an earlier full run's")
    else:
        how = (f"`python benchmarks/all.py --rounds {args.rounds}{repeated}` ({sum(timings.values()) / 60:.1f} minutes "
               "in all)")
    merged = len(repeat_dirs(args.work))
    if merged > 1:
        how += (f"; every sub-run {merged} times in turn, each ratio the median over the {merged} runs with their "
                "range in brackets, the throughputs and MFU those of the run whose (first) ratio is the median")
    cpu = the_cpu(args.work)
    emulated = f", oneDNN held by {cpu['emulated']}" if cpu.get("emulated") else ""
    kind = f"CPU kind {cpu['kind']} ({cpu['model']}{emulated}; flags {' '.join(cpu['flags'])})"
    block = (f"Machine: {cpu.get('machine', machine())}; {kind}; "
             f"{args.rounds} interleaved rounds per sub-run; {how}; the sub-runs' JSON in "
             f"`{args.work.as_posix()}/`.\n\n" + table(args.work))
    (args.work / "table.md").write_text(block + "\n")
    (args.work / "all.json").write_text(json.dumps({"cpu": cpu, "rows": cells(args.work)}, indent=1) + "\n")
    print(block)
    if args.docs is not None:
        write_docs(args.docs, block, str(cpu["kind"]))
        print(f"wrote the table into {args.docs}")


if __name__ == "__main__":
    main()

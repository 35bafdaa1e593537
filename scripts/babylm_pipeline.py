"""The official BabyLM evaluation pipeline (babylm-org/babylm-eval, `strict/`, its sentence_zero_shot
runner) on maskplay exports, its decisions compared with maskplay's own, pair by pair (docs/guides/babylm.md).

    git clone https://github.com/babylm-org/babylm-eval ../babylm-eval        # the pipeline: not copied here
    python scripts/babylm_pipeline.py --pipeline ../babylm-eval/strict --data DIR \\
        --model gpt-two-hour:causal --model tta-two-hour:mlm --model GPT_BERT_DIR:mntp:pll --work runs/babylm-work

DIR holds BLiMP-format *.jsonl files (sentence_good, sentence_bad, UID, field, linguistics_term), the pipeline's
format; `--blimp-dev N` writes the first N pairs of --paradigm files of the shared blimp-dev set there instead.
For each MODEL:BACKEND[:METHOD]: `maskplay export --to-hf MODEL`, the pipeline's runner with that backend, then
maskplay's own scorer (METHOD, default the family's, fp32) on the same pairs; it prints the accuracy per paradigm of
both and the pairs decided differently, and writes them (with maskplay's margins) to --work/compare-NAME.json (NAME:
MODEL's last path part)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def blimp_dev(source_dir: Path, out: Path, paradigms: list[str], n: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for paradigm in paradigms:
        source = source_dir / f"{paradigm}.jsonl.gz"
        with gzip.open(source, "rt", encoding="utf-8") as f:
            lines = f.readlines()[:n]
        (out / f"{paradigm}.jsonl").write_text("".join(lines), encoding="utf-8")


def run_pipeline(pipeline: Path, export: Path, backend: str, data: Path, out: Path) -> dict[str, list[str]]:
    """The runner's predictions: per paradigm (UID), the sentence it chose for each pair, in file order."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    subprocess.run([sys.executable, "-m", "evaluation_pipeline.sentence_zero_shot.run", "--model_path_or_name",
                    str(export), "--backend", backend, "--task", "blimp", "--data_path", str(data),
                    "--save_predictions", "--output_dir", str(out)], cwd=pipeline, env=env, check=True)
    found = list(out.rglob("predictions.json"))
    predictions = json.loads(found[0].read_text())
    return {uid: [p["pred"] for p in entry["predictions"]] for uid, entry in predictions.items()}


def maskplay_margins(model: str, data: Path, method: str) -> dict[str, list[tuple[str, str, float]]]:
    """Per paradigm, (good, bad, log p(good) - log p(bad)) by maskplay's scorer, in file order."""
    sys.path.insert(0, str(ROOT / "src"))
    from maskplay.tasks.score import Scorer

    scorer = Scorer.from_pretrained(model, precision="fp32", method=method)
    out: dict[str, list[tuple[str, str, float]]] = {}
    for path in sorted(data.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        scores = scorer.score([s for r in rows for s in (r["sentence_good"], r["sentence_bad"])])
        for k, r in enumerate(rows):
            margin = scores[2 * k].log_prob - scores[2 * k + 1].log_prob
            out.setdefault(r["UID"], []).append((r["sentence_good"], r["sentence_bad"], margin))
    return out


def compare(model: str, backend: str, method: str, args: argparse.Namespace) -> None:
    name = Path(model).name  # a bundled name, or a directory's last part
    work = args.work / name
    export = work / "export"
    if not export.exists():
        subprocess.run([sys.executable, "-m", "maskplay", "export", "--to-hf", model, "--out", str(export)],
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True)
    theirs = run_pipeline(args.pipeline, export.resolve(), backend, args.data.resolve(), (work / "results").resolve())
    ours = maskplay_margins(model, args.data, method)
    report = {}
    for uid, pairs in ours.items():
        chosen = theirs[uid]
        differ = [{"good": g, "bad": b, "maskplay_margin": m, "pipeline_chose": c}
                  for (g, b, m), c in zip(pairs, chosen, strict=True) if (m > 0) != (c == g)]
        acc_ours = 100 * sum(m > 0 for _, _, m in pairs) / len(pairs)
        acc_theirs = 100 * sum(c == g for (g, _, _), c in zip(pairs, chosen, strict=True)) / len(pairs)
        report[uid] = {"pairs": len(pairs), "maskplay": acc_ours, "pipeline": acc_theirs, "differ": differ}
        print(f"{model} ({backend} / {method}) {uid}: maskplay {acc_ours:.2f}, pipeline {acc_theirs:.2f}, "
              f"{len(differ)} pairs decided differently")
    (args.work / f"compare-{name}.json").write_text(json.dumps(report, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", type=Path, required=True, help="babylm-eval's strict/ folder")
    parser.add_argument("--data", type=Path, required=True, help="a folder of BLiMP-format *.jsonl files")
    parser.add_argument("--model", action="append", required=True, metavar="MODEL:BACKEND[:METHOD]",
                        help="a model directory or bundled name, the pipeline backend (causal, mlm, mntp) and maskplay's "
                             "score method to compare with (default auto; GPT-BERT's mntp is maskplay's pll)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--blimp-dev", type=int, default=0, metavar="N",
                        help="first write the first N pairs of each --paradigm of the shared blimp-dev to --data")
    parser.add_argument("--blimp-source", type=Path, default=ROOT.parent / "shared" / "data" / "blimp-dev",
                        help="with --blimp-dev: the blimp-dev folder (default: ../shared/data/blimp-dev)")
    parser.add_argument("--paradigm", action="append",
                        default=None, help="with --blimp-dev (default: three paradigms)")
    args = parser.parse_args()
    if args.blimp_dev:
        paradigms = args.paradigm or ["adjunct_island", "determiner_noun_agreement_1", "anaphor_gender_agreement"]
        blimp_dev(args.blimp_source, args.data, paradigms, args.blimp_dev)
    for spec in args.model:
        model, backend, method = (spec.split(":") + ["auto"])[:3]
        compare(model, backend, method, args)


if __name__ == "__main__":
    main()

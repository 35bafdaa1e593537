"""benchmarks/gpu_babylm.sh at 1/1000 scale on the CPU (a tiny corpus, tokenizer, model and BLiMP, a few thousand
words): every part runs, each family's run stops at its words budget with the checkpoint marks exported, and the
results land in $OUT as JSON. The planner's arithmetic against a count made by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from maskplay.data.tokenizer import train_wordpiece

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import babylm_plan  # noqa: E402

SENTENCES = [f"The {a} {v} the {b} near the old {c} ." for a in ("cat", "dog", "bird", "girl", "boy")
             for v in ("saw", "liked", "chased", "found") for b in ("ball", "tree", "house") for c in ("town", "river")]


def tiny_world(root: Path) -> dict[str, str]:
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    train_wordpiece(SENTENCES, 120).save(root / "tok")
    blimp = root / "blimp"
    blimp.mkdir()
    for uid in ("agreement", "islands"):
        pairs = [{"sentence_good": "The cat saw the ball .", "sentence_bad": "The cat saw ball the .", "UID": uid,
                  "linguistics_term": uid}] * 3
        (blimp / f"{uid}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return {"BABYLM_CORPUS": str(corpus), "BABYLM_TOKENIZER": str(root / "tok"), "BLIMP_DATA": str(blimp)}


def test_gpu_babylm_script_dry_run_on_the_cpu(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, **tiny_world(tmp_path), "OUT": str(out), "WORK": str(work), "DEVICE": "cpu",
           "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "BABYLM_FAMILIES": "gpt-bert",
           "BABYLM_WORDS": "3000", "MARK_SCALE": "0.001", "TRAIN_SECONDS": "20", "NUM_WORKERS": "0",
           "BABYLM_SET": "model.preset=tiny data.max_length=32 data.batch_size=8 run.threads=1 run.precision=fp32 "
                         "run.eval_batches=1",
           "BENCH_ARGS": "--tiny --warmup 1 --steps 1 --shapes babylm --families gpt-bert"}
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_babylm.sh")], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "babylm.json").read_text())
    assert [r["family"] for r in summary["families"]] == ["gpt-bert"], result.stdout[-3000:]
    for r in summary["families"]:
        assert r["words_seen"] >= 3000 and "reached run.max_words=3,000" in r["ended"], r
        assert r["checkpoints_at_words"] == ["1K", "2K", "3K"]
        assert 0 <= r["blimp_dev_macro"] <= 100
    assert {row["case"] for row in summary["train-speed"]["rows"]} >= {"babylm gpt-bert", "babylm gpt-bert recipe"}
    assert summary["plan"]["plans"][0]["max_words"] == 3000
    assert str(tmp_path) not in (out / "babylm.json").read_text()  # no machine paths


def test_the_plan_fits_the_time_and_counts_words_per_step(tmp_path):
    from maskplay.data.dataset import write_split

    data = tmp_path / "data"
    # 6 sequences of 10 pieces, 4 words each: packed at 32 pieces, 3 per row -> 12 words a row
    seqs = [[3, *range(10, 18), 1]] * 6
    marks = [[0, 1, 0, 1, 1, 0, 0, 1, 0, 0]] * 6
    write_split(data / "train", seqs, 100, words=marks)
    overrides = ["data.max_length=32", "data.batch_size=2"]
    assert babylm_plan.words_per_step(data, 2, 32, pack=True) == 24.0
    assert babylm_plan.words_per_step(data, 2, 5, pack=False) == 2 * 3.0  # truncated to 5 pieces: 3 words
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"rows": [{"case": "babylm gpt recipe", "step_ms": 100.0}]}))
    args = babylm_plan.argparse.Namespace(data=str(data), speed=str(speed), seconds=13.0, overhead=1.3, words=None,
                                          default_words=5, mark_scale=1e-4, set=overrides)
    plan = babylm_plan.plan_family(args, "gpt")
    assert plan["max_steps"] == 100 and plan["max_words"] == 2400  # 13 s / (0.1 s x 1.3) = 100 steps of 24 words
    assert plan["checkpoint_at_words"] == [*range(100, 1001, 100), 2000] and plan["warmup_steps"] == 2
    assert babylm_plan.plan_family(args, "bert")["budget_from"].startswith("default")
    assert np.isclose(babylm_plan.plan_family(args, "bert")["max_words"], 5)

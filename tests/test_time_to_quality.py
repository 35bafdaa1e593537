"""benchmarks/time_to_quality.py end to end on a toy corpus: the curves, the HuggingFace BERT left behind as a maskplay
model directory, per-recipe overrides, and --resume continuing a stopped recipe from its checkpoint."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from maskplay.families import MaskplayModel
from tests.tasks.train.test_train import make_data

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "time_to_quality.py"

TINY_GPT = """
[model]
family = "gpt"
preset = "tiny"
hidden_dropout = 0.0
attention_dropout = 0.0

[optim]
lr = 3e-3
warmup_steps = 2
max_steps = 100000

[data]
batch_size = 16
max_length = 32
bucket_window = 4

[run]
eval_every = 100000
eval_batches = 1
save_every = 100000
keep_last = 1
threads = 1
device = "cpu"
"""


def load_script():
    spec = importlib.util.spec_from_file_location("time_to_quality", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(monkeypatch, capsys, *args: str) -> str:
    """main() in this process, the schedule planned far beyond the budget (the probe's speed on a toy model is
    start-up noise): every chunk then ends on its minutes, as on a real corpus. Returns stderr."""
    module = load_script()
    monkeypatch.setattr(module, "probe_steps_per_budget", lambda *_: 100_000)
    monkeypatch.setattr(sys, "argv", ["time_to_quality.py", *args])
    module.main()
    return capsys.readouterr().err


@pytest.mark.slow
def test_curves_hf_model_recipe_overrides_and_resume(tmp_path, monkeypatch, capsys):
    data = make_data(tmp_path / "data")
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    pairs = [{"sentence_good": "w7 w8 w9", "sentence_bad": "w9 w8 w7"}, {"sentence_good": "w10 w11", "sentence_bad":
             "w11 w12 w13"}] * 3
    (blimp / "toy_paradigm.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    config = tmp_path / "tiny-gpt.toml"
    config.write_text(TINY_GPT)
    out, work = tmp_path / "ttq.json", tmp_path / "work"
    common = ["--data", str(data), "--minutes", "0.04", "--points", "2", "--blimp", str(blimp),
              "--work", str(work), "--out", str(out), "--preset", "tiny", "--batch-size", "8", "--max-length", "32"]
    run(monkeypatch, capsys, *common, "--recipe", f"gpt={config}", "--recipe", f"wide={config}",
        "--recipe-set", "wide:model.hidden_size=64", "--hf", "bert")
    result = json.loads(out.read_text())
    assert set(result["curves"]) == {"gpt", "wide", "hf-bert"}
    for curve in result["curves"].values():
        assert [p["minutes"] for p in curve] == [0.02, 0.04]
        assert all(0 <= p["blimp_macro"] <= 100 for p in curve)
        assert curve[1]["step"] > curve[0]["step"] > 0
    # the override reached only its own recipe
    assert MaskplayModel.from_pretrained(work / "gpt" / "run" / "final").config.hidden_size == 32
    assert MaskplayModel.from_pretrained(work / "wide" / "run" / "final").config.hidden_size == 64
    # the HF BERT is left as a maskplay model directory, for `maskplay eval sts / cola`
    hf_bert = MaskplayModel.from_pretrained(work / "hf-bert" / "final")
    assert hf_bert.config.family == "bert" and (work / "hf-bert" / "final" / "tokenizer.json").is_file()

    # a run stopped after the first point: --resume trains on from the checkpoint and keeps the first point
    plan_file = work / "gpt" / "plan.json"
    plan = json.loads(plan_file.read_text())
    first = plan["curve"][0]
    plan["curve"] = plan["curve"][:1]
    plan_file.write_text(json.dumps(plan))
    resumed = run(monkeypatch, capsys, *common, "--recipe", f"gpt={config}", "--resume")
    assert "gpt: resuming at point 2 of 2" in resumed
    curve = json.loads(out.read_text())["curves"]["gpt"]
    assert curve[0] == first and len(curve) == 2 and curve[1]["step"] > first["step"]
    assert curve[1]["planned_steps"] == plan["steps"]


def test_recipe_set_names_a_recipe():
    done = subprocess.run([sys.executable, str(SCRIPT), "--data", "x", "--out", "y.json", "--recipe", "a=c.toml",
                           "--recipe-set", "b:optim.lr=1"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--recipe-set 'b:optim.lr=1'" in done.stderr


def test_ttq_table_rows():
    spec = importlib.util.spec_from_file_location("ttq_table", SCRIPT.parents[1] / "scripts" / "ttq_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = {"curves": {"gpt": [{"minutes": 4.0, "step": 10, "tokens": 2_500_000, "eval_loss": 5.25, "blimp_macro": 51.0},
                                 {"minutes": 8.0, "step": 20, "tokens": 5_000_000, "eval_loss": 5.0, "blimp_macro": 53.25}],
                         "hf-bert": [{"minutes": 8.0, "step": 7, "tokens": 1000, "blimp_macro": 49.0}]}}
    lines = module.table([result]).splitlines()
    assert lines[0] == "| recipe | steps | tokens | held-out loss | BLiMP @ 4 min | BLiMP @ 8 min |"
    assert lines[2] == "| gpt | 20 | 5.00 M | 5.000 | 51.0 | 53.2 |"
    assert lines[3] == "| hf-bert | 7 | 0.00 M |  |  | 49.0 |"


def test_the_plan_counts_the_corpus_mean_batch_not_the_probes(tmp_path, monkeypatch):
    """The probe's first batches are shorter than the corpus's mean (length buckets), so the schedule is planned from
    its tokens per second and the corpus's mean tokens per batch: a probe of 100 steps and 60,000 tokens in 60 s
    (1,000 tokens/s) on a corpus of 1,800 tokens per batch of 16 plans 2,000 steps for 60 minutes, not the 6,000 its
    steps per minute would give."""
    import argparse
    from types import SimpleNamespace

    module = load_script()
    from maskplay.data.dataset import write_split

    data = tmp_path / "data"
    write_split(data / "train", [[5] * (112 + k % 2) for k in range(1_000)], vocab_size=16)  # 112,500 tokens
    assert module.mean_tokens_per_step(data, 16) == 1_800
    assert module.mean_tokens_per_step(tmp_path / "none", 16) is None
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "state.json").write_text(json.dumps({"elapsed_s": 60.0, "tokens_seen": 60_000}))
    monkeypatch.setattr(module, "train", lambda config: SimpleNamespace(step=100, checkpoint=str(checkpoint)))
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_GPT)
    args = argparse.Namespace(data=str(data), minutes=60.0, plan_share=1.0, probe_steps=100)
    assert module.probe_steps_per_budget(str(config), [f"data.path={data}"], tmp_path / "work", args) == 2_000
    args.data = str(tmp_path / "none")  # no meta: the probe's steps per minute
    assert module.probe_steps_per_budget(str(config), [f"data.path={data}"], tmp_path / "work", args) == 6_000

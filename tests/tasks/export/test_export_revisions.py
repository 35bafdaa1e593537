"""`maskplay export --to-hf RUN_DIR --revisions`: a tiny run's models by words seen (run.checkpoint_at_words, built
by the training loop) become one git repository, a branch chck_<N> per checkpoint and main the final model; each
branch, checked out, loads with transformers' Auto class and gives the logits of the maskplay model it came from.
The BabyLM names: the strict-small recipes' marks are the branches babylm-eval's collate_preds.py expects."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from maskplay.cli import main  # noqa: E402
from maskplay.families import MaskplayModel  # noqa: E402
from maskplay.tasks.train import train  # noqa: E402
from maskplay.tasks.train.export import words_name  # noqa: E402
from tests.tasks.export.test_export_hf import saved, tiny  # noqa: E402
from tests.tasks.train.test_train import small_config  # noqa: E402
from tests.tasks.train.test_words_budget import word_data  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
# babylm-eval (strict/evaluation_pipeline/collate_preds.py, commit 45fe2c1): STRICT_SMALL_FAST_REVISIONS
BABYLM_STRICT_SMALL = [f"chck_{i}M" for i in range(1, 10)] + [f"chck_{i * 10}M" for i in range(1, 11)]


def branches(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "branch", "--format=%(refname:short)"], capture_output=True,
                         text=True, check=True).stdout
    return sorted(out.split())


def checkout(repo: Path, branch: str) -> None:
    subprocess.run(["git", "-C", str(repo), "checkout", "--quiet", branch], check=True)


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def test_word_checkpoints_become_branches_that_load(tmp_path, capsys):
    data = word_data(tmp_path / "data", n_train=64)
    run = train(small_config(data, tmp_path / "run", "run.checkpoint_at_words=100,500", "optim.max_steps=4",
                             "run.eval_every=0", family="gpt"))
    marks = sorted(p.name for p in (run.run_dir / "words").iterdir())
    assert marks == ["100", "500"]
    out = tmp_path / "hf"
    assert main(["export", "--to-hf", str(run.run_dir), "--revisions", "--out", str(out)]) == 0
    assert "chck_100 chck_500" in capsys.readouterr().out
    assert branches(out) == ["chck_100", "chck_500", "main"]
    ids = torch.tensor([[3, 10, 11, 12, 13, 1]])
    sources = {"chck_100": run.run_dir / "words/100", "chck_500": run.run_dir / "words/500", "main": run.run_dir / "final"}
    seen = []
    for branch, source in sources.items():
        checkout(out, branch)
        hf = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
        ours = MaskplayModel.from_pretrained(source).eval()
        with torch.no_grad():
            expected = ours(ids).logits
        torch.testing.assert_close(logits(hf, ids), expected, atol=1e-5, rtol=1e-5)
        seen.append(expected)
        assert (out / "tokenizer.json").is_file() and (out / "README.md").is_file()
    assert not torch.allclose(seen[0], seen[-1])  # the checkpoints differ, so a wrong branch would show
    # transformers reads a local directory as checked out, whatever revision= says (docs/guides/babylm.md): the trap the
    # checkout above avoids
    checkout(out, "main")
    ignored = transformers.AutoModelForCausalLM.from_pretrained(out, revision="chck_100", trust_remote_code=True)
    torch.testing.assert_close(logits(ignored.eval(), ids), seen[-1], atol=1e-5, rtol=1e-5)


def test_revisions_refuses_a_run_without_word_checkpoints(tmp_path, capsys):
    (tmp_path / "run" / "final").mkdir(parents=True)
    assert main(["export", "--to-hf", str(tmp_path / "run"), "--revisions", "--out", str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err.strip()
    assert "run.checkpoint_at_words" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_strict_small_marks_are_babylms_revisions():
    from maskplay.tasks.train import load_train_config

    for family in ("gpt", "bert", "gpt-bert", "tta"):
        config = load_train_config(REPO / f"configs/babylm/strict-small-{family}.toml")
        assert [f"chck_{words_name(w)}" for w in config.run.checkpoint_at_words] == BABYLM_STRICT_SMALL


def test_an_electra_runs_revisions_hold_both_towers(tmp_path, capsys):
    """A run directory laid out as train/export.py writes it (final/, words/<N>/words.json), ELECTRA's model."""
    run = tmp_path / "run"
    saved(tiny("electra", seed=1), run / "final")
    saved(tiny("electra", seed=2), run / "words" / "1M")
    (run / "words" / "1M" / "words.json").write_text(json.dumps({"checkpoint_at_words": 1_000_000, "step": 7}))
    out = tmp_path / "hf"
    assert main(["export", "--to-hf", str(run), "--revisions", "--out", str(out)]) == 0
    assert branches(out) == ["chck_1M", "main"]
    ids = torch.tensor([[3, 10, 11, 12, 13, 1]])
    for branch, seed in (("chck_1M", 2), ("main", 1)):
        checkout(out, branch)
        generator = tiny("electra", seed=seed).standalone("generator").eval()
        hf = transformers.AutoModelForMaskedLM.from_pretrained(out, subfolder="generator").eval()
        torch.testing.assert_close(logits(hf, ids), logits(generator, ids), atol=1e-5, rtol=1e-5)
        assert (out / "config.json").is_file()  # the discriminator at the top

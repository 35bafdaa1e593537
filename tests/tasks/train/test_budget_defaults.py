"""Defaults that cannot silently train nothing: `--max-minutes` plans the schedule for the steps that fit (timed on
a trial run), `--max-steps N` scales a warmup that does not fit, `--preset tiny` takes the default data config
(data.max_length follows the model's max_position), and a run that ends in its warmup or with a flat loss says so.
What the user sets explicitly is kept, and a planned run resumes exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from maskplay.cli import main
from maskplay.config import apply_overrides
from maskplay.tasks.train import TrainConfig
from maskplay.tasks.train.budget import end_notes, fit_steps
from maskplay.tasks.train.config import OptimSection
from maskplay.tasks.train.plan import plan_for_minutes
from tests.tasks.train.test_train import assert_same_weights, make_data, weights

QUIET = ["--set", "run.progress=false", "--set", "run.tensorboard=false", "--set", "run.threads=1",
         "--device", "cpu", "--set", "run.eval_batches=1", "--set", "data.batch_size=8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("data"), n_train=64, n_valid=8)


def saved(run: Path) -> dict:
    import tomllib

    return tomllib.loads((run / "config.toml").read_text())


def test_fit_steps_keeps_the_shares():
    optim = fit_steps(OptimSection(warmup_steps=1000, max_steps=10_000), 60)
    assert (optim.max_steps, optim.warmup_steps, optim.cooldown_steps) == (60, 6, 0)
    cosine = fit_steps(OptimSection(warmup_steps=100, max_steps=1000, schedule="cosine-cooldown", cooldown_steps=200), 10)
    assert (cosine.warmup_steps, cosine.cooldown_steps) == (1, 2)
    assert fit_steps(OptimSection(warmup_steps=0, max_steps=100), 3).warmup_steps == 0
    assert fit_steps(OptimSection(warmup_steps=1000, max_steps=10_000), 1).warmup_steps == 1


def test_plan_for_minutes_is_the_steps_that_fit():
    config = apply_overrides(TrainConfig(), ["run.max_minutes=2"])
    planned, line = plan_for_minutes(config, seconds_per_step=0.5)
    assert planned.optim.max_steps == int(0.9 * 120 / 0.5)  # 216: the budget less a tenth, at 0.5 s a step
    assert planned.optim.warmup_steps == round(216 * 1000 / 10_000)
    assert "optim.max_steps=216" in line and "optim.warmup_steps=22" in line
    kept, _ = plan_for_minutes(apply_overrides(config, ["optim.warmup_steps=300"]), seconds_per_step=0.5,
                               keep_warmup=True)
    assert (kept.optim.max_steps, kept.optim.warmup_steps) == (300, 300)  # the user's warmup stays whole


def test_end_notes_say_warmup_and_flat_loss():
    config = TrainConfig()
    warm = end_notes(config, 25, 9.06, 9.04)
    assert len(warm) == 2 and "still in its warmup" in warm[0] and "did not move" in warm[1]
    assert end_notes(config, 2000, 9.0, 5.0) == []
    assert end_notes(config, 2000, 9.0, 8.99)[0].startswith("WARNING: the training loss did not move")


def test_max_steps_scales_a_warmup_that_does_not_fit(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["pretrain", "--family", "tta", "--preset", "tiny", "--data", str(data), "--out", str(run),
                 "--max-steps", "6", *QUIET]) == 0
    err = capsys.readouterr().err
    assert "optim.warmup_steps=1000 does not fit optim.max_steps=6: scaled with the steps to 1" in err
    optim = saved(run)["optim"]
    assert (optim["max_steps"], optim["warmup_steps"]) == (6, 1)
    # the default data config took --preset tiny: its max_length followed the model's max_position
    assert saved(run)["data"]["max_length"] == 64


def test_an_explicit_warmup_is_kept(data, tmp_path, capsys):
    assert main(["pretrain", "--family", "tta", "--preset", "tiny", "--data", str(data), "--out", str(tmp_path / "r"),
                 "--max-steps", "6", "--set", "optim.warmup_steps=10", *QUIET]) == 2  # refused, as before
    assert "error: optim.warmup_steps=10 exceeds optim.max_steps=6" in capsys.readouterr().err
    run = tmp_path / "ok"
    assert main(["pretrain", "--family", "tta", "--preset", "tiny", "--data", str(data), "--out", str(run),
                 "--max-steps", "6", "--set", "optim.warmup_steps=3", "--set", "data.max_length=32", *QUIET]) == 0
    assert "scaled" not in capsys.readouterr().err
    assert saved(run)["optim"]["warmup_steps"] == 3 and saved(run)["data"]["max_length"] == 32


def test_max_steps_scales_a_recipes_warmup(data, tmp_path, capsys):
    """--max-steps on the command line scales a warmup that comes from the --config file (a shipped recipe's 700
    of 7,000 steps) as it does the default config's."""
    run = tmp_path / "run"
    assert main(["pretrain", "--config", "mini-tta", "--preset", "tiny", "--data", str(data), "--out", str(run),
                 "--max-steps", "60", "--set", "run.stop_at_step=1",
                 "--set", "data.max_length=32", *QUIET]) == 0
    err = capsys.readouterr().err
    assert "optim.warmup_steps=700 does not fit optim.max_steps=60: scaled with the steps to 6" in err
    assert [line for line in err.splitlines() if "does not fit" in line] == \
        [line for line in err.splitlines() if "scaled" in line]  # one line
    optim = saved(run)["optim"]
    assert (optim["max_steps"], optim["warmup_steps"]) == (60, 6)


def test_a_warmup_chosen_on_the_command_line_is_not_scaled(data, tmp_path, capsys):
    assert main(["pretrain", "--config", "mini-tta", "--preset", "tiny", "--data", str(data), "--out", str(tmp_path),
                 "--max-steps", "60", "--set", "optim.warmup_steps=100", *QUIET]) == 2
    err = capsys.readouterr().err
    assert "error: optim.warmup_steps=100 exceeds optim.max_steps=60" in err and "scaled" not in err


def test_a_config_file_whose_warmup_does_not_fit_its_steps_is_refused(data, tmp_path, capsys):
    """max_steps and warmup_steps both from the file: the file contradicts itself, nothing is scaled."""
    config = tmp_path / "short.toml"
    config.write_text('[model]\nfamily = "tta"\npreset = "tiny"\n\n[optim]\nwarmup_steps = 100\nmax_steps = 60\n')
    assert main(["pretrain", "--config", str(config), "--data", str(data), "--out", str(tmp_path / "run"),
                 *QUIET]) == 2
    err = capsys.readouterr().err
    assert "error: optim.warmup_steps=100 exceeds optim.max_steps=60" in err and "scaled" not in err


def test_a_run_that_ends_in_its_warmup_says_so(data, tmp_path):
    run = tmp_path / "run"
    assert main(["pretrain", "--family", "tta", "--preset", "tiny", "--data", str(data), "--out", str(run),
                 "--max-steps", "4", "--set", "optim.warmup_steps=4", "--set", "run.stop_at_step=2", *QUIET]) == 0
    log = (run / "train.log").read_text()
    assert "WARNING: the run ended at step 2, still in its warmup of optim.warmup_steps=4" in log


def test_a_run_whose_loss_did_not_move_says_so(data, tmp_path, capsys):
    """A learning rate too small to train (1e-12): the run ends with one line saying its loss did not move."""
    run = tmp_path / "run"
    assert main(["pretrain", "--family", "tta", "--preset", "tiny", "--data", str(data), "--out", str(run),
                 "--max-steps", "6", "--lr", "1e-12", "--set", "optim.warmup_steps=1", "--set", "run.log_every=1",
                 *QUIET]) == 0
    console = capsys.readouterr()
    flat = [line for line in (run / "train.log").read_text().splitlines() if "WARNING" in line]
    assert len(flat) == 1 and "WARNING: the training loss did not move (" in flat[0], flat
    assert "check optim.lr, the schedule and the data" in flat[0]
    assert flat[0].split("] ", 1)[1] in console.out + console.err


def test_max_minutes_plans_the_schedule_and_the_run_resumes_exactly(data, tmp_path, capsys):
    run = tmp_path / "run"
    common = ["pretrain", "--family", "tta", "--preset", "tiny", "--data", str(data), "--max-minutes", "0.5", *QUIET]
    assert main([*common, "--out", str(run), "--set", "run.stop_at_step=2", "--set", "run.save_every=1"]) == 0
    err = capsys.readouterr().err
    assert "run.max_minutes=0.5 fits about" in err and "timed on 6 trial steps" in err
    optim = saved(run)["optim"]
    assert 4 <= optim["max_steps"] < 10_000 and optim["warmup_steps"] == max(1, round(optim["max_steps"] / 10))
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == ["run"]  # the trial: a temporary directory
    # resumed, the run reads its planned schedule back (nothing planned again) and continues exactly: the same
    # weights as a run given that schedule explicitly
    assert main(["pretrain", "--out", str(run), "--resume", "--set", "run.stop_at_step=4"]) == 0
    assert "fits about" not in capsys.readouterr().err
    same = tmp_path / "same"
    assert main([*common, "--out", str(same), "--set", f"optim.max_steps={optim['max_steps']}",
                 "--set", f"optim.warmup_steps={optim['warmup_steps']}", "--set", "run.stop_at_step=4"]) == 0
    assert "fits about" not in capsys.readouterr().err
    assert_same_weights(weights(same), weights(run))


def test_a_recipe_by_name_sets_what_its_file_sets():
    """`--config mini-tta` chooses the schedule that `--config configs/mini-tta.toml` does: its max_steps is the
    recipe's, so --max-minutes does not replan it."""
    import argparse

    from maskplay.cli.pretrain import set_by_user
    from maskplay.tasks.train.recipes import shipped_recipes

    by_path = argparse.Namespace(resume=False, resume_from=None, overrides=[], max_steps=None, max_minutes=1.0,
                                 config=str(shipped_recipes()["mini-tta"]))
    by_name = argparse.Namespace(**{**vars(by_path), "config": "mini-tta"})
    assert "optim.max_steps" in set_by_user(by_path).config_file
    assert "optim.max_steps" not in set_by_user(by_path).command_line
    assert set_by_user(by_name) == set_by_user(by_path)

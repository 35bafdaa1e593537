"""maskplay.runtime.progress: a tqdm bar when stderr is a terminal, plain periodic lines when it is not, nothing when
disabled; and the commands use it (score, finetune, the trainer) rather than tqdm of their own."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

import maskplay.runtime.progress as progress
from maskplay.cli import main
from maskplay.runtime.progress import Progress, interval_seconds, track
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """A fake progress clock: clock.now is what progress._now() returns."""

    class Clock:
        now = 1000.0

    monkeypatch.setattr(progress, "_now", lambda: Clock.now)
    return Clock


def test_not_a_terminal_prints_a_plain_line_every_interval(clock):
    out = io.StringIO()
    bar = Progress(total=100, desc="score", unit="line", stream=out, interval=30)
    assert bar.mode == "lines"
    for step in range(100):
        clock.now += 1.0  # one line per second: a progress line at 30, 60 and 90 seconds
        bar.set_postfix(loss=f"{step / 10:.1f}")
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 4, lines
    assert lines[0] == "score: 30/100 lines (30%), 0:30 elapsed, 1 line/s, about 1:10 left; loss=2.9"
    assert lines[1].startswith("score: 60/100 lines (60%), 1:00 elapsed") and lines[2].startswith("score: 90/100")
    assert lines[3] == "score: 100/100 lines (100%), 1:40 elapsed, 1 line/s, done; loss=9.9"


def test_short_work_prints_nothing_and_disabled_prints_nothing(clock):
    out = io.StringIO()
    with Progress(total=5, desc="quick", stream=out, interval=30) as bar:
        for _ in range(5):
            clock.now += 1.0
            bar.update(1)
    assert out.getvalue() == ""
    tty = Terminal()
    with Progress(total=5, desc="off", stream=tty, interval=0, enabled=False) as bar:
        assert bar.mode == "off"
        for _ in range(5):
            clock.now += 100.0
            bar.update(1)
        bar.set_postfix(loss=1)
    assert tty.getvalue() == "" and bar.n == 5


def test_a_terminal_gets_a_tqdm_bar():
    from tqdm import tqdm

    tty = Terminal()
    with Progress(total=4, desc="embed", unit="batch", stream=tty, interval=0) as bar:
        assert bar.mode == "bar" and isinstance(bar.bar, tqdm)
        bar.update(3)
        bar.write("a message")
    text = tty.getvalue()
    assert "\r" in text and "embed" in text and "3/4" in text and "a message" in text
    assert "elapsed," not in text  # not the plain-line format


def test_track_without_length_and_with_initial(clock):
    out = io.StringIO()

    def items():
        for k in range(3):
            clock.now += 40.0
            yield k

    assert list(track(items(), desc="read", unit="paragraph", stream=out, interval=30)) == [0, 1, 2]
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("read: 1 paragraphs, 0:40 elapsed") and "%" not in lines[0] and "left" not in lines[0]
    assert lines[-1].startswith("read: 3 paragraphs") and lines[-1].endswith("done")
    out = io.StringIO()
    bar = Progress(total=10, initial=4, desc="resume", unit="step", stream=out, interval=0)
    clock.now += 2.0
    bar.update(2)  # the rate counts this run's work only: 2 steps in 2 s
    assert out.getvalue().startswith("resume: 6/10 steps (60%), 0:02 elapsed, 1 step/s, about 0:04 left")


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.delenv("MASKPLAY_PROGRESS_SECONDS", raising=False)
    assert interval_seconds() == 30.0
    monkeypatch.setenv("MASKPLAY_PROGRESS_SECONDS", "2.5")
    assert interval_seconds() == 2.5 and Progress(stream=io.StringIO()).interval == 2.5
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("MASKPLAY_PROGRESS_SECONDS", bad)
        with pytest.raises(ValueError, match="MASKPLAY_PROGRESS_SECONDS"):
            interval_seconds()


def test_no_command_builds_a_tqdm_bar_of_its_own():
    """The one place that decides bar or lines is maskplay.runtime.progress (tasks/train/metrics.py only uses tqdm.write)."""
    src = Path(progress.__file__).parents[1]
    users = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                   if re.search(r"^\s*(from tqdm|import tqdm)", p.read_text(), re.M))
    others = [u for u in users if u not in ("runtime/progress.py", "tasks/train/metrics.py")]
    assert not others, f"use maskplay.runtime.progress.Progress / track, not a tqdm bar of its own, in {others}"
    assert "runtime/progress.py" in users
    assert "tqdm(" not in (src / "tasks" / "train" / "metrics.py").read_text()


# ---- commands -----------------------------------------------------------------------------------------------


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "vocab").mkdir()
    tok = small_tokenizer(tmp_path / "vocab")
    return save_model_dir(tmp_path / "model", tiny("bert", tok), tok)


def test_score_command_prints_plain_lines_when_stderr_is_not_a_terminal(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MASKPLAY_PROGRESS_SECONDS", "0")  # a line after every batch
    text = tmp_path / "in.txt"
    text.write_text("".join(f"the cat sat on the mat {k}\n" for k in range(6)))
    assert main(["score", str(model_dir), "--file", str(text), "--batch-size", "2", "--precision", "fp32",
                 "--out", str(tmp_path / "s.jsonl")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("score: ")]
    assert [line.split(",")[0] for line in lines] == ["score: 2/6 lines (33%)", "score: 4/6 lines (67%)",
                                                      "score: 6/6 lines (100%)", "score: 6/6 lines (100%)"], err
    assert "\r" not in err


def test_score_command_draws_a_bar_on_a_terminal(model_dir, tmp_path, capsys, monkeypatch):
    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    text = tmp_path / "in.txt"
    text.write_text("".join(f"the cat sat on the mat {k}\n" for k in range(6)))
    assert main(["score", str(model_dir), "--file", str(text), "--batch-size", "2", "--precision", "fp32",
                 "--out", str(tmp_path / "s.jsonl")]) == 0
    err = tty.getvalue()
    assert "\r" in err and "6/6" in err and "line/s" in err and "elapsed," not in err


def test_units_in_the_plural(clock):
    out = io.StringIO()
    for unit in ("batch", "step", "lines", "box"):
        bar = Progress(total=2, unit=unit, stream=out, interval=0)
        clock.now += 1.0
        bar.update(1)
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["1/2 batches", "1/2 steps", "1/2 lines",
                                                                             "1/2 boxes"]


def test_finetune_lines_when_not_a_terminal(model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MASKPLAY_PROGRESS_SECONDS", "0")
    rows = "".join(f"{'good' if k % 2 else 'bad'} cat {k}\t{k % 2}\n" for k in range(8))
    (tmp_path / "t.tsv").write_text("sentence\tlabel\n" + rows)
    assert main(["finetune", str(model_dir), "--task", "classify", "--train", str(tmp_path / "t.tsv"), "--dev",
                 str(tmp_path / "t.tsv"), "--out", str(tmp_path / "ft"), "--epochs", "2", "--batch-size", "4"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^finetune: 1/4 steps \(25%\), 0:00 elapsed, .*; loss=\d\.\d{4}$", err, re.M), err
    assert re.search(r"^finetune: 4/4 steps \(100%\), .* done; loss=", err, re.M), err
    assert "\r" not in err


def test_pretrain_lines_when_not_a_terminal(tmp_path, capsys, monkeypatch):
    from tests.tasks.train.test_train import SMALL, make_data

    monkeypatch.setenv("MASKPLAY_PROGRESS_SECONDS", "0")
    data = make_data(tmp_path / "data", n_train=64, n_valid=16)
    args = ["pretrain", "--family", "tta", "--data", str(data), "--out", str(tmp_path / "run")]
    for item in [*SMALL, "optim.max_steps=4", "run.progress=true"]:
        args += ["--set", item]
    assert main(args) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("tta: ")]
    assert [line.split(",")[0] for line in lines] == [f"tta: {k}/4 steps ({25 * k}%)" for k in (1, 2, 3, 4, 4)], err
    assert re.search(r"; loss=\d+\.\d{3} tok_s=[\d,]+ lr=", lines[1]) and "\r" not in err

"""RUN_DIR/metrics.jsonl on resume: a line a killed run left half-written is dropped and said so; a damaged
complete line is an error naming the file and line."""

import io
import json

import pytest

from maskplay.tasks.train.metrics import Metrics


def records(*steps: int) -> str:
    return "".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in steps)


def test_a_torn_last_line_is_dropped_on_resume_and_logged(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(records(10, 20, 30) + '{"step": 40, "loss": 0.0')
    console = io.StringIO()
    metrics = Metrics(tmp_path, resume_step=30, tensorboard=False, stream=console)
    assert [r["step"] for r in metrics.records] == [10, 20, 30]
    assert (tmp_path / "metrics.jsonl").read_text() == records(10, 20, 30)
    assert "dropped an unfinished last line" in console.getvalue()
    metrics.record(step=40, loss=0.5)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [10, 20, 30, 40]


def test_records_after_the_checkpoint_are_dropped_without_a_message(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(records(10, 20, 30))
    console = io.StringIO()
    metrics = Metrics(tmp_path, resume_step=20, tensorboard=False, stream=console)
    assert [r["step"] for r in metrics.records] == [10, 20]
    assert "dropped" not in console.getvalue()


def test_a_damaged_complete_line_names_the_file_and_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(records(10) + "{not json\n" + records(30))
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not JSON"):
        Metrics(tmp_path, resume_step=30, tensorboard=False, stream=io.StringIO())


def test_a_fresh_run_starts_an_empty_file(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("garbage from an older run, not read\n")
    Metrics(tmp_path, resume_step=None, tensorboard=False, stream=io.StringIO())
    assert (tmp_path / "metrics.jsonl").read_text() == ""

import json

import pytest

from maskplay.cli import main
from maskplay.tasks.report import read_run, summary_rows


def write_run(path, evals):
    path.mkdir()
    lines = []
    for step, loss in evals:
        lines.append({"step": step, "loss": loss + 0.1, "tokens": step * 100, "elapsed_s": step * 6.0})
        lines.append({"step": step, "eval_loss": loss, "elapsed_s": step * 6.0})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_plot_runs_reads_evals_and_draws(tmp_path, capsys):
    write_run(tmp_path / "tta", [(0, 9.8), (100, 6.0)])
    write_run(tmp_path / "bert", [(0, 9.7), (100, 7.0)])
    run = read_run(tmp_path / "tta")
    assert [r["tokens"] for r in run["evals"]] == [0, 10000]
    rows = summary_rows([tmp_path / "tta", tmp_path / "bert"])
    assert rows[0]["last_eval_loss"] == 6.0 and rows[1]["first_eval_loss"] == 9.7
    out = tmp_path / "c.png"
    assert main(["plot-runs", str(tmp_path / "tta"), str(tmp_path / "bert"), "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_bad_metrics_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl not found"):
        read_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\nnot json\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2: not JSON"):
        read_run(tmp_path)

"""Bad inputs to every command: each case must end with exit code 2 and one line on stderr,
`maskplay CMD: error: ...`, naming the argument or the file at fault. The commands run in this process through
maskplay.cli.main, so an exception other than the one-line errors (a traceback) fails the test instead of
being printed. docs/reference/errors.md lists these cases."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from maskplay.cli import main
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)
from tests.tasks.train.test_train import make_data


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reliability")
    tok = small_tokenizer(root)
    model = save_model_dir(root / "model", tiny("tta", tok), tok)
    (root / "text.txt").write_text("the cat sat\na dog ran\n")
    (root / "a_file").write_text("not a directory\n")
    (root / "a_dir").mkdir()
    (root / "a_dir.npy").mkdir()
    return {"root": root, "model": model, "text": root / "text.txt", "data": make_data(root / "data")}


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as err:  # argparse's own usage errors
        code = err.code if isinstance(err.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, command: str, culprit: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit code {code}, stderr: {err}"
    assert len(lines) == 1, f"stderr is not one line: {err}"
    assert lines[0].startswith(f"maskplay {command}: error: "), lines[0]
    assert culprit in lines[0], f"{culprit!r} not named in: {lines[0]}"
    return lines[0]


def damaged_copy(env: dict[str, Path], name: str, damage: Callable[[Path], None], manifest: bool = True) -> Path:
    target = env["root"] / name
    if not target.exists():
        shutil.copytree(env["model"], target)
        if not manifest:
            (target / "manifest.json").unlink()
        damage(target / "model.safetensors")
    return target


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _random(path: Path) -> None:
    path.write_bytes(torch.randint(0, 256, (path.stat().st_size,), generator=torch.Generator().manual_seed(0),
                                   dtype=torch.uint8).numpy().tobytes())


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # inside the last tensor's values: a header check alone would not see it
    path.write_bytes(bytes(data))


def _toml(env: dict[str, Path], name: str, text: str) -> str:
    path = env["root"] / name
    path.write_text(text)
    return str(path)


def _nbest_folder(env: dict[str, Path], name: str, make: Callable[[Path], None]) -> str:
    folder = env["root"] / name
    if not folder.exists():
        folder.mkdir()
        for split in ("dev_clean", "dev_other"):
            make(folder / f"{split}.jsonl.gz")
    return str(folder)


def _sts_root(env: dict[str, Path], name: str, golds: list[str]) -> str:
    root = env["root"] / name
    if not root.exists():
        (root / "stsbenchmark").mkdir(parents=True)
        sentences = ["the cat sat", "a dog ran", "the mat", "it is good", "a cat ran", "the dog sat"]
        rows = [f"main\tfile\t2012\t{k}\t{gold}\t{sentences[k % 6]}\t{sentences[(k + 1) % 6]}"
                for k, gold in enumerate(golds)]
        (root / "stsbenchmark" / "sts-dev.csv").write_text("\n".join(rows) + "\n")
    return str(root)


def nan_model(env: dict[str, Path]) -> str:
    """A model whose weights are all finite but one LayerNorm weight, as a diverged run leaves them."""
    target = env["root"] / "m-nan"
    if not target.exists():
        from maskplay.families import MaskplayModel

        model = MaskplayModel.from_pretrained(env["model"])
        with torch.no_grad():
            model.encoder.layers[0].attn_norm.weight[0] = float("nan")
        shutil.copytree(env["model"], target)
        model.save_pretrained(target)
    return str(target)


def init_model(env: dict[str, Path]) -> str:
    """A damaged model of the training data's vocabulary, for pretrain --init."""
    from maskplay.data.tokenizer import load_tokenizer

    target = env["root"] / "m-init"
    if not target.exists():
        tok = load_tokenizer(env["data"])
        save_model_dir(target, tiny("tta", tok), tok)
        _truncate(target / "model.safetensors")
    return str(target)


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
PRETRAIN = ["--set", "model.preset=tiny", "--set", "data.max_length=32", "--set", "run.progress=false",
            "--set", "run.tensorboard=false", "--max-steps", "2", "--batch-size", "16", "--set", "optim.warmup_steps=1",
            "--set", "run.threads=1", "--set", "run.device=cpu", "--set", "run.eval_batches=1"]

# (id, command, argv builder from the fixture's paths, what the error line must name)
CASES: list[tuple[str, str, Callable[[dict[str, Path]], list[str]], str]] = [
    # devices: one parser for every command
    ("score-device-foo", "score", lambda e: ["score", str(e["model"]), "a cat", "--device", "foo"], "--device='foo'"),
    ("embed-device-foo", "embed", lambda e: ["embed", str(e["model"]), "--file", str(e["text"]), "--out",
                                             str(e["root"] / "x.npy"), "--device", "gpu"], "--device='gpu'"),
    ("eval-device-foo", "eval", lambda e: ["eval", "sts", str(e["model"]), "--device", "tpu"], "--device='tpu'"),
    ("pretrain-device-foo", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                   str(e["root"] / "run-dev"), "--device", "foo"], "run.device='foo'"),
    pytest.param("score-device-cuda", "score", lambda e: ["score", str(e["model"]), "a cat", "--device", "cuda"],
                 "--device='cuda'", marks=NO_CUDA),
    pytest.param("embed-device-cuda1", "embed", lambda e: ["embed", str(e["model"]), "--file", str(e["text"]),
                                                           "--out", str(e["root"] / "x.npy"), "--device", "cuda:1"],
                 "--device='cuda:1'", marks=NO_CUDA),
    pytest.param("pretrain-device-cuda", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                                str(e["root"] / "run-cuda"), "--device", "cuda"],
                 "run.device='cuda'", marks=NO_CUDA),
    # output paths
    ("embed-out-parent-is-a-file", "embed", lambda e: ["embed", str(e["model"]), "--file", str(e["text"]), "--out",
                                                       str(e["root"] / "a_file" / "x.npy")], "a_file is a file"),
    ("embed-out-is-a-directory", "embed", lambda e: ["embed", str(e["model"]), "--file", str(e["text"]), "--out",
                                                     str(e["root"] / "a_dir.npy")], "a_dir.npy is a directory"),
    ("embed-out-bad-suffix", "embed", lambda e: ["embed", str(e["model"]), "--file", str(e["text"]), "--out",
                                                 str(e["root"] / "x.txt")], "x.txt"),
    ("eval-out-is-a-directory", "eval", lambda e: ["eval", "sts", str(e["model"]), "--out", str(e["root"] / "a_dir")],
     "a_dir is a directory"),
    ("eval-out-parent-is-a-file", "eval", lambda e: ["eval", "sts", str(e["model"]), "--out",
                                                     str(e["root"] / "a_file" / "r.json")], "a_file is a file"),
    ("pretrain-out-is-a-file", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                      str(e["root"] / "a_file"), *PRETRAIN], "a_file is a file"),
    ("pretrain-out-below-a-file", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                         str(e["root"] / "a_file" / "run"), *PRETRAIN], "a_file is a file"),
    ("masks-out-is-a-directory", "masks", lambda e: ["masks", "--out", str(e["root"] / "a_dir")], "a_dir is a directory"),
    ("tokenizer-out-below-a-file", "tokenizer", lambda e: ["tokenizer", "train", "--corpus", str(e["text"]),
                                                           "--vocab-size", "100", "--out", str(e["root"] / "a_file" / "t")],
     "a_file"),
    # input files
    ("score-file-missing", "score", lambda e: ["score", str(e["model"]), "--file", str(e["root"] / "nope.txt")],
     "nope.txt"),
    ("score-file-is-a-directory", "score", lambda e: ["score", str(e["model"]), "--file", str(e["root"] / "a_dir")],
     "a_dir is a directory"),
    ("score-model-missing", "score", lambda e: ["score", str(e["root"] / "no-model"), "a cat"], "no-model"),
    ("pretrain-config-is-a-directory", "pretrain", lambda e: ["pretrain", "--config", str(e["root"] / "a_dir")],
     "a_dir is a directory"),
    ("pretrain-config-missing", "pretrain", lambda e: ["pretrain", "--config", str(e["root"] / "none.toml")],
     "none.toml"),
    ("pretrain-data-missing", "pretrain", lambda e: ["pretrain", "--data", str(e["root"] / "nodata"), "--out",
                                                     str(e["root"] / "run-nodata"), *PRETRAIN], "nodata"),
    ("nbest-not-gzip", "eval", lambda e: ["eval", "nbest", str(e["model"]), "--data", _nbest_folder(
        e, "nbest-plain", lambda p: p.write_text('{"utt_id": "a"}\n'))], "dev_clean.jsonl.gz: not a readable gzip"),
    ("nbest-gz-is-a-directory", "eval", lambda e: ["eval", "nbest", str(e["model"]), "--data", _nbest_folder(
        e, "nbest-dirs", lambda p: p.mkdir())], "dev_clean.jsonl.gz is a directory"),
    ("nbest-truncated-gzip", "eval", lambda e: ["eval", "nbest", str(e["model"]), "--data", _nbest_folder(
        e, "nbest-cut", lambda p: p.write_bytes(gzip.compress(b'{"utt_id": "a"}\n' * 100)[:30]))],
     "dev_clean.jsonl.gz"),
    # TOML values of the wrong type, checked when the file is read
    ("toml-lr-string", "pretrain", lambda e: ["pretrain", "--config", _toml(e, "lr.toml", '[optim]\nlr = "fast"\n')],
     "lr = 'fast'"),
    ("toml-steps-float", "pretrain", lambda e: ["pretrain", "--config", _toml(e, "st.toml", "[optim]\nmax_steps = 1.5\n")],
     "max_steps = 1.5"),
    ("toml-bool-int", "pretrain", lambda e: ["pretrain", "--config", _toml(e, "pb.toml", "[run]\nprogress = 1\n")],
     "progress = 1"),
    ("toml-list-item", "pretrain", lambda e: ["pretrain", "--config", _toml(e, "bt.toml", '[optim]\nbetas = [0.9, "x"]\n')],
     "betas = 'x'"),
    ("toml-section-not-table", "pretrain", lambda e: ["pretrain", "--config", _toml(e, "sec.toml", "optim = 3\n")],
     "optim"),
    ("toml-invalid", "pretrain", lambda e: ["pretrain", "--config", _toml(e, "bad.toml", "[optim\n")], "bad.toml"),
    # a check across fields (the config's __post_init__) names the file too
    ("toml-cross-field", "pretrain", lambda e: ["pretrain", "--config", _toml(
        e, "cross.toml", '[model]\nnorm_placement = "pre"\nhead_norm = true\n')], "cross.toml: model: head_norm"),
    ("set-bad-type", "pretrain", lambda e: ["pretrain", "--set", "optim.lr=fast"], "optim.lr='fast'"),
    # damaged model files: every loader names the file in one line
    ("model-truncated", "score", lambda e: ["score", str(damaged_copy(e, "m-trunc", _truncate)), "a cat"],
     "m-trunc/model.safetensors is damaged"),
    ("model-empty", "score", lambda e: ["score", str(damaged_copy(e, "m-empty", _empty)), "a cat"],
     "m-empty/model.safetensors is damaged"),
    ("model-random", "embed", lambda e: ["embed", str(damaged_copy(e, "m-rand", _random)), "--file", str(e["text"]),
                                         "--out", str(e["root"] / "y.npy")], "m-rand/model.safetensors is damaged"),
    ("model-one-byte", "score", lambda e: ["score", str(damaged_copy(e, "m-flip", _flip_one_byte)), "a cat"],
     "m-flip/model.safetensors is damaged"),
    ("model-no-manifest-truncated", "score", lambda e: ["score", str(damaged_copy(e, "m-nm-trunc", _truncate, False)),
                                                        "a cat"], "m-nm-trunc/model.safetensors is damaged"),
    ("model-no-manifest-random", "eval", lambda e: ["eval", "sts", str(damaged_copy(e, "m-nm-rand", _random, False)),
                                                    "--data", str(e["root"])], "m-nm-rand/model.safetensors is damaged"),
    ("pretrain-resume-nothing", "pretrain", lambda e: ["pretrain", "--out", str(e["root"] / "never-ran"), "--resume"],
     "never-ran/config.toml not found"),
    ("pretrain-batch-split", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                    str(e["root"] / "run-split"), *PRETRAIN, "--grad-accum", "3"],
     "data.batch_size=16 must be divisible"),
    ("pretrain-length-beyond-model", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                            str(e["root"] / "run-len"), *PRETRAIN, "--set",
                                                            "data.max_length=100"], "data.max_length=100"),
    ("embed-layer-beyond-model", "embed", lambda e: ["embed", str(e["model"]), "--file", str(e["text"]), "--out",
                                                     str(e["root"] / "l.npy"), "--layer", "3"], "layer 3"),
    # outputs
    ("score-empty-error", "score", lambda e: ["score", str(e["model"]), "--file", str(_blank_file(e)), "--empty",
                                              "error"], "blank.txt:2: empty line"),
    ("score-all-empty", "score", lambda e: ["score", str(e["model"]), " ", ""], "every sentence argument is empty"),
    ("score-resume-without-out", "score", lambda e: ["score", str(e["model"]), "a cat", "--resume"], "--resume"),
    ("score-explain-with-out", "score", lambda e: ["score", str(e["model"]), "a cat", "--explain", "--out",
                                                   str(e["root"] / "ex.txt")], "--explain"),
    ("score-max-pieces-zero", "score", lambda e: ["score", str(e["model"]), "a cat", "--max-pieces", "0"],
     "--max-pieces"),
    ("score-out-is-a-directory", "score", lambda e: ["score", str(e["model"]), "a cat", "--out", str(e["root"] / "a_dir")],
     "a_dir is a directory"),
    # silent wrong results refused
    ("sts-gold-nan", "eval", lambda e: ["eval", "sts", str(e["model"]), "--datasets", "stsb", "--data",
                                        _sts_root(e, "sts-nan", ["1.0", "nan", "3.0", "2.0"])], "sts-dev.csv:2"),
    ("sts-gold-inf", "eval", lambda e: ["eval", "sts", str(e["model"]), "--datasets", "stsb", "--data",
                                        _sts_root(e, "sts-inf", ["1.0", "2.0", "-inf"])], "sts-dev.csv:3"),
    ("sts-gold-constant", "eval", lambda e: ["eval", "sts", str(e["model"]), "--datasets", "stsb", "--data",
                                             _sts_root(e, "sts-const", ["2.5"] * 5)],
     "undefined: all 5 gold scores are equal"),
    ("nbest-weight-nan", "eval", lambda e: ["eval", "nbest", str(e["model"]), "--weights", "0", "nan"], "--weights"),
    ("nbest-weight-negative", "eval", lambda e: ["eval", "nbest", str(e["model"]), "--weights", "-0.5"], "--weights"),
    ("nbest-bonus-inf", "eval", lambda e: ["eval", "nbest", str(e["model"]), "--bonuses", "inf"], "--bonuses"),
    ("score-nan-model", "score", lambda e: ["score", nan_model(e), "a cat", "the dog"], "sentence argument 1"),
    ("embed-nan-model", "embed", lambda e: ["embed", nan_model(e), "--file", str(e["text"]), "--out",
                                            str(e["root"] / "nan.npy")], "text.txt:1"),
    ("pretrain-init-damaged", "pretrain", lambda e: ["pretrain", "--data", str(e["data"]), "--out",
                                                     str(e["root"] / "run-init"), *PRETRAIN, "--init", init_model(e)],
     "m-init/model.safetensors is damaged"),
    ("model-config-damaged", "score", lambda e: ["score", str(damaged_copy(
        e, "m-conf", lambda p: (p.parent / "config.json").write_text("{not json"))), "a cat"], "m-conf/config.json"),
]


def _case_id(case: object) -> str:
    return case.values[0] if hasattr(case, "values") else case[0]  # type: ignore[index,attr-defined]


@pytest.mark.parametrize(("name", "command", "argv", "culprit"), CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_a_one_line_error(env, capsys, name, command, argv, culprit):
    code, _, err = run_cli(argv(env), capsys)
    assert_one_line_error(code, err, command, culprit)


def test_a_failed_write_leaves_no_temporary_file(env, capsys):
    before = sorted(p.name for p in env["root"].iterdir())
    code, _, err = run_cli(["embed", str(env["model"]), "--file", str(env["text"]), "--out",
                            str(env["root"] / "a_dir.npy")], capsys)
    assert_one_line_error(code, err, "embed", "a_dir.npy")
    assert sorted(p.name for p in env["root"].iterdir()) == before
    assert not list(env["root"].glob(".a_dir.npy.*"))


def test_saved_models_carry_a_manifest_of_their_weights(env):
    import json

    manifest = json.loads((env["model"] / "manifest.json").read_text())
    entry = manifest["files"]["model.safetensors"]
    assert entry["bytes"] == (env["model"] / "model.safetensors").stat().st_size and len(entry["sha256"]) == 64


def test_results_files_hold_no_absolute_paths(env, capsys):
    import json

    out = env["root"] / "sts.json"
    code, _, err = run_cli(["eval", "sts", str(env["model"]), "--datasets", "stsb", "--data",
                            _sts_root(env, "sts-ok", ["1.0", "4.0", "2.5", "3.0"]), "--out", str(out)], capsys)
    assert code == 0, err
    result = json.loads(out.read_text())
    assert str(env["root"]) not in out.read_text() and not Path(result["model_dir"]).is_absolute()
    assert result["results"]["stsb"]["file"] == "stsbenchmark/sts-dev.csv"  # the data root is outside the cwd
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # follows the umask, not mkstemp's 0600


def _umask() -> int:
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---- training runs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [["--grad-accum", "3"], ["--set", "data.max_length=100"]], ids=["split", "length"])
def test_a_config_that_fails_validation_leaves_nothing_behind(env, capsys, bad):
    run_dir = env["root"] / f"run-nothing-{bad[-1]}"
    code, _, err = run_cli(["pretrain", "--data", str(env["data"]), "--out", str(run_dir), *PRETRAIN, *bad], capsys)
    assert code == 2 and "data." in err
    assert not run_dir.exists()  # no metrics.jsonl, train.log or config.toml, not even the directory


def test_resume_works_from_before_the_first_checkpoint(env, capsys, monkeypatch):
    """A run killed during setup (here: while its data would be prepared) has its resolved config on disk, so
    `--resume` alone continues it."""
    import maskplay.tasks.train.loop as loop

    run_dir = env["root"] / "run-early-kill"
    real = loop.prepare_data

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "prepare_data", killed)
    with pytest.raises(KeyboardInterrupt):
        main(["pretrain", "--data", str(env["data"]), "--out", str(run_dir), *PRETRAIN])
    assert (run_dir / "config.toml").is_file() and not list(run_dir.glob("ckpt-*"))
    monkeypatch.setattr(loop, "prepare_data", real)
    capsys.readouterr()
    code, out, err = run_cli(["pretrain", "--out", str(run_dir), "--resume"], capsys)
    assert code == 0, err
    assert "no checkpoint yet; starting from step 0" in out and (run_dir / "final" / "model.safetensors").is_file()


def poison_fifth_step(monkeypatch) -> Callable[[], None]:
    """The trainer's forward made to return a nan loss at the 5th optimizer step's only micro-batch; returns what
    removes the cause."""
    import maskplay.tasks.train.loop as loop

    real = loop.forward_in
    calls = {"train": 0}

    def poisoned(model, precision, *args, **kwargs):
        out = real(model, precision, *args, **kwargs)
        if model.training:
            calls["train"] += 1
            if calls["train"] == 5:
                out.loss = out.loss * float("nan")
        return out

    monkeypatch.setattr(loop, "forward_in", poisoned)
    return lambda: monkeypatch.setattr(loop, "forward_in", real)


def assert_resumes_from_the_fourth_step(run_dir: Path, capsys) -> None:
    """The cause removed, `pretrain --resume` continues from ckpt-000004 to the end."""
    code, out, err = run_cli(["pretrain", "--out", str(run_dir), "--resume"], capsys)
    assert code == 0, err
    assert "resumed from" in out and "at step 4" in out and (run_dir / "final").is_dir()


def test_a_non_finite_loss_stops_training_and_keeps_the_last_good_checkpoint(env, capsys, monkeypatch):
    import json

    from maskplay.tasks.train import checkpoint_files as ckpt

    run_dir = env["root"] / "run-nan"
    cure = poison_fifth_step(monkeypatch)
    argv = ["pretrain", "--data", str(env["data"]), "--out", str(run_dir), *PRETRAIN, "--max-steps", "8",
            "--set", "run.save_every=2", "--set", "run.log_every=1"]
    code, _, err = run_cli(argv, capsys)
    line = assert_one_line_error(code, err, "pretrain", "step 5: the training loss is nan")
    assert "ckpt-000004" in line
    assert [p.name for _, p in ckpt.list_checkpoints(run_dir)] == ["ckpt-000002", "ckpt-000004"]
    ckpt.verify_checkpoint(run_dir / "ckpt-000004")
    assert not (run_dir / "final").exists()
    records = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 4 and "NaN" not in (run_dir / "metrics.jsonl").read_text()
    assert "ERROR: step 5: the training loss is nan" in (run_dir / "train.log").read_text()

    cure()  # the cause removed, the run resumes from the good checkpoint
    assert_resumes_from_the_fourth_step(run_dir, capsys)


def test_a_non_finite_loss_read_late_still_stops_before_anything_after_it_is_saved(env, capsys, monkeypatch):
    """run.check_every_step = false: step 5's nan is read at step 6, a checkpoint's step, and the run stops there
    without writing it; nothing after step 4 is logged, and the run resumes from ckpt-000004."""
    import json

    from maskplay.tasks.train import checkpoint_files as ckpt

    run_dir = env["root"] / "run-nan-late"
    cure = poison_fifth_step(monkeypatch)
    argv = ["pretrain", "--data", str(env["data"]), "--out", str(run_dir), *PRETRAIN, "--max-steps", "8",
            "--set", "run.save_every=2", "--set", "run.log_every=3", "--set", "run.check_every_step=false"]
    code, _, err = run_cli(argv, capsys)
    line = assert_one_line_error(code, err, "pretrain", "step 5: the training loss is nan; training stopped at step 6")
    assert "ckpt-000004" in line
    assert [p.name for _, p in ckpt.list_checkpoints(run_dir)] == ["ckpt-000002", "ckpt-000004"]
    assert not (run_dir / "final").exists()
    records = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in records) == 3 and "NaN" not in (run_dir / "metrics.jsonl").read_text()

    cure()
    assert_resumes_from_the_fourth_step(run_dir, capsys)


# ---- outputs that keep every line -------------------------------------------------------------------------------

def _blank_file(env: dict[str, Path]) -> Path:
    path = env["root"] / "blank.txt"
    path.write_text("the cat sat\n\na dog ran\n   \nit is good\n")
    return path


def test_blank_lines_keep_their_rows_in_every_format(env, capsys):
    import json

    from maskplay.tasks.score import Scorer

    path = _blank_file(env)
    want = Scorer.from_pretrained(env["model"]).score(["the cat sat", "a dog ran", "it is good"])
    code, out, err = run_cli(["score", str(env["model"]), "--file", str(path), "--format", "jsonl"], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["index"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r.get("empty", False) for r in rows] == [False, True, False, True, False]
    assert rows[1]["log_prob"] is None and rows[3]["text"] == "   "
    assert [rows[k]["log_prob"] for k in (0, 2, 4)] == pytest.approx([s.log_prob for s in want], abs=1e-5)
    assert "2 empty line(s) kept as empty rows (2, 4)" in err

    code, out, _ = run_cli(["score", str(env["model"]), "--file", str(path), "--format", "tsv"], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6 and lines[2] == "2\t\t0\t\t" and lines[3].startswith("3\t-")
    code, out, _ = run_cli(["score", str(env["model"]), "--file", str(path)], capsys)
    assert code == 0 and "(empty line)" in out.splitlines()[2] and "nan" not in out

    npy = env["root"] / "blank.npy"
    code, out, err = run_cli(["embed", str(env["model"]), "--file", str(path), "--out", str(npy)], capsys)
    assert code == 0, err
    matrix, mask = np.load(npy), np.load(env["root"] / "blank.mask.npy")
    assert matrix.shape[0] == 5 and mask.tolist() == [True, False, True, False, True]
    assert not matrix[~mask].any() and np.abs(matrix[mask]).sum(axis=1).all()
    code, _, _ = run_cli(["embed", str(env["model"]), "--file", str(env["text"]), "--out", str(npy)], capsys)
    assert code == 0 and not (env["root"] / "blank.mask.npy").exists()  # a stale mask is removed
    out_jsonl = env["root"] / "blank.jsonl"
    code, _, _ = run_cli(["embed", str(env["model"]), "--file", str(path), "--out", str(out_jsonl)], capsys)
    records = [json.loads(line) for line in out_jsonl.read_text().splitlines()]
    assert code == 0 and records[1] == {"index": 2, "text": "", "empty": True, "embedding": None}


def _score_out(env: dict[str, Path], capsys, path: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(["score", str(env["model"]), "--file", str(path), "--out", str(out), "--batch-size", "2", *extra],
                   capsys)


@pytest.mark.parametrize("fmt", ["jsonl", "tsv", "table"])
def test_score_resumes_a_partly_written_output(env, capsys, monkeypatch, fmt):
    from maskplay.tasks.score import Scorer

    path = env["root"] / "seven.txt"
    path.write_text("the cat sat\na dog ran\nit is good\n\nthe mat\na cat ran on the mat\nthe dog\n")
    whole = env["root"] / f"whole.{fmt}"
    code, _, err = _score_out(env, capsys, path, whole, "--format", fmt)
    assert code == 0 and "wrote" in err
    expected = whole.read_text()
    assert oct(whole.stat().st_mode & 0o777) == oct(0o666 & ~_umask())

    # a run killed while writing its third batch: two batches whole, then half a line
    cut = env["root"] / f"cut.{fmt}"
    head = expected.splitlines(keepends=True)
    keep = 4 if fmt == "jsonl" else 5  # rows 1-4 (+ the header)
    cut.write_text("".join(head[:keep]) + head[keep][: len(head[keep]) // 2])
    scored: list[str] = []
    real = Scorer.score

    def counting(self, sentences):
        scored.extend(sentences)
        return real(self, sentences)

    monkeypatch.setattr(Scorer, "score", counting)
    code, _, err = _score_out(env, capsys, path, cut, "--format", fmt, "--resume")
    assert code == 0, err
    assert cut.read_text() == expected
    assert scored == ["the mat", "a cat ran on the mat", "the dog"]  # nothing already written is scored again


def test_resume_refuses_an_output_of_another_input(env, capsys):
    path = env["root"] / "other.txt"
    path.write_text("the cat sat\na dog ran\n")
    out = env["root"] / "other.jsonl"
    out.write_text('{"index": 1, "text": "something else"}\n')
    code, _, err = _score_out(env, capsys, path, out, "--format", "jsonl", "--resume")
    assert_one_line_error(code, err, "score", "other.jsonl:1")
    assert out.read_text() == '{"index": 1, "text": "something else"}\n'  # left as it was


@pytest.mark.parametrize("command", ["score", "embed", "eval"])
def test_a_second_writer_of_the_same_out_is_refused(env, capsys, command):
    from filelock import FileLock

    out = env["root"] / {"score": "locked.jsonl", "embed": "locked.npy", "eval": "locked.json"}[command]
    argv = {"score": ["score", str(env["model"]), "--file", str(env["text"]), "--out", str(out), "--format", "jsonl"],
            "embed": ["embed", str(env["model"]), "--file", str(env["text"]), "--out", str(out)],
            "eval": ["eval", "sts", str(env["model"]), "--datasets", "stsb", "--out", str(out), "--data",
                     _sts_root(env, "sts-ok", ["1.0", "4.0", "2.5", "3.0"])]}[command]
    with FileLock(str(out.parent / f".{out.name}.lock")):  # another maskplay process, busy writing `out`
        code, _, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, command, "being written by another process")
    assert not out.exists()
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err  # the lock is free again


def test_max_pieces_guards_huge_lines_and_long_ones_are_announced(env, capsys):
    path = env["root"] / "long.txt"
    path.write_text("a dog\n" + "the cat sat on the mat " * 600 + "\n")
    code, _, err = run_cli(["score", str(env["model"]), "--file", str(path), "--overflow", "window",
                            "--max-pieces", "1000"], capsys)
    assert_one_line_error(code, err, "score", "long.txt:2: has 3,600 word pieces, more than --max-pieces 1,000")
    code, out, err = run_cli(["score", str(env["model"]), "--file", str(path), "--overflow", "window",
                              "--format", "tsv"], capsys)
    assert code == 0 and "long.txt:2: 3,600 pieces, scored in 116 windows" in err
    assert len(out.splitlines()) == 3


# ---- int8 on a CPU whose kernel is wrong -----------------------------------------------------------------------

def test_int8_is_refused_in_one_line_when_the_kernel_fails_its_check(env, capsys, monkeypatch):
    import maskplay.runtime.quant as quant

    if not quant.ONEDNN_INT8:
        pytest.skip("this PyTorch build has no oneDNN int8 kernel (int8 runs the reference arithmetic)")
    monkeypatch.setattr(quant, "_WEIGHT_RANGE", None)
    monkeypatch.setattr(quant, "_KERNEL_ERROR", None)
    monkeypatch.setattr(quant, "_kernel_error", lambda weight_range: 0.25)
    code, out, err = run_cli(["score", str(env["model"]), "a cat", "--precision", "int8"], capsys)
    assert_one_line_error(code, err, "score", "does not compute the reference arithmetic")
    assert "use --precision fp32 or bf16" in err and out == ""  # not even the table header


def test_saved_model_files_follow_the_umask(tmp_path):
    """safetensors' save_file recreates the temporary file, dropping the mode set on it: checked after writing."""
    from maskplay import preset
    from maskplay.families import build_model

    build_model(preset("tiny", family="bert")).save_pretrained(tmp_path / "m")
    for name in ("model.safetensors", "config.json"):
        assert oct((tmp_path / "m" / name).stat().st_mode & 0o777) == oct(0o666 & ~_umask()), name

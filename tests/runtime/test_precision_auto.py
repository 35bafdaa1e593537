"""precision = "auto" (maskplay.runtime.precision_probe): the decision with stubbed timings, the on-disk cache, the probe
under an emulated bf16 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2, in a subprocess), the warning for an
explicit bf16 there, CUDA, and the trainer's and the CLIs' use of it (resume included)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from maskplay.config import preset
from maskplay.runtime import precision_probe as pp
from maskplay.runtime.precision import Precision
from maskplay.tasks.train import train
from maskplay.tasks.train.config import PRECISIONS, RunSection, load_train_config
from tests.tasks.train.test_train import make_data, small_config

ROOT = Path(__file__).resolve().parents[2]
MINI = preset("mini")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setenv(pp.CACHE_ENV, str(directory))
    monkeypatch.delenv(pp.REPROBE_ENV, raising=False)
    monkeypatch.delenv(pp.AUTO_ENV, raising=False)  # tests/conftest.py pins fp32 for the rest of the suite
    return directory


def stub_timings(monkeypatch, fp32: float, bf16: float) -> list[tuple]:
    """Replace the matmul timer: every fp32 product takes `fp32` s per row, every bf16 one `bf16`; returns the log
    of calls."""
    calls: list[tuple] = []

    def fake(m, k, n, dtype, budget=0.05, give_up=float("inf")):
        calls.append((m, k, n, dtype))
        return m * (fp32 if dtype == torch.float32 else bf16)

    monkeypatch.setattr(pp, "time_matmul", fake)
    return calls


# ---- the decision ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fp32,bf16,expected", [(4.0, 1.0, "bf16"), (1.0, 1.0, "fp32"), (1.0, 2.0, "fp32"),
                                                (1.0, 100.0, "fp32"), (1.3, 1.0, "bf16"), (1.2, 1.0, "fp32")])
def test_auto_picks_bf16_only_where_it_measures_faster(monkeypatch, fp32, bf16, expected):
    stub_timings(monkeypatch, fp32, bf16)
    for inference in (False, True):
        choice = pp.resolve("auto", "cpu", MINI, inference=inference)
        assert choice.precision.value == expected
        assert choice.ratio == pytest.approx(fp32 / bf16)
    assert "precision auto -> " + expected in choice.describe()
    assert f"{fp32 / bf16:.2g}x" in choice.describe()


def test_auto_never_picks_int8_and_explicit_choices_stand(monkeypatch):
    calls = stub_timings(monkeypatch, 100.0, 1.0)
    assert pp.resolve("auto", "cpu", MINI, inference=True).precision is Precision.bf16  # not int8
    calls.clear()
    for name in ("fp32", "int8"):
        assert pp.resolve(name, "cpu", MINI, inference=True) == pp.Choice(name, Precision(name))
    assert calls == []  # nothing to measure for them
    with pytest.raises(ValueError, match="inference only"):
        pp.resolve("int8", "cpu", MINI)


def test_an_emulated_bf16_stops_the_probe_early_and_an_explicit_bf16_warns(monkeypatch):
    calls = stub_timings(monkeypatch, 1.0, 50.0)
    choice = pp.resolve("auto", "cpu", MINI)
    assert choice.precision is Precision.fp32 and choice.ratio == pytest.approx(0.02)
    assert {(k, n) for _, k, n, _ in calls} == {(MINI.hidden_size, MINI.hidden_size)}  # the first shape only
    warnings: list[str] = []
    for name in ("bf16", "bf16-autocast"):
        choice = pp.resolve(name, "cpu", MINI, warn=warnings.append)
        assert choice.precision is Precision(name) and choice.source == "cache"
    assert len(warnings) == 2 and "50.0x slower than fp32" in warnings[0] and "emulated" in warnings[0]
    # a mere 1.5x slowdown is reported by auto's choice, not warned about
    stub_timings(monkeypatch, 1.0, 1.5)
    monkeypatch.setenv(pp.REPROBE_ENV, "1")
    warnings.clear()
    assert pp.resolve("bf16", "cpu", MINI, warn=warnings.append).precision is Precision.bf16
    assert warnings == []


def test_the_probe_weights_each_product_by_its_share_of_the_model():
    shapes = pp.shapes_of(MINI)
    assert shapes == [(4 * MINI.num_layers, MINI.hidden_size, MINI.hidden_size),
                      (MINI.num_layers, MINI.hidden_size, MINI.intermediate_size),
                      (MINI.num_layers, MINI.intermediate_size, MINI.hidden_size), (1, MINI.hidden_size, MINI.vocab_size)]


def test_time_matmul_stops_at_its_budget(monkeypatch):
    clock = iter(range(0, 1000, 10))  # every call to the timer moves 10 s on: each product "takes" 10 s
    monkeypatch.setattr(pp.time, "perf_counter", lambda: next(clock))
    assert pp.time_matmul(4, 4, 4, torch.float32, budget=25) == 10  # three timed calls, then over budget
    assert next(clock) == 60


def test_the_environment_can_say_what_auto_means(monkeypatch):
    calls = stub_timings(monkeypatch, 1.0, 1.0)
    monkeypatch.setenv(pp.AUTO_ENV, "bf16")
    choice = pp.resolve("auto", "cpu", MINI)
    assert (choice.precision, choice.source, calls) == (Precision.bf16, "env", [])
    assert "set by MASKPLAY_AUTO_PRECISION" in choice.describe()
    assert pp.resolve("fp32", "cpu", MINI).precision is Precision.fp32  # explicit choices are not affected
    monkeypatch.setenv(pp.AUTO_ENV, "int8")
    with pytest.raises(ValueError, match="MASKPLAY_AUTO_PRECISION='int8'"):
        pp.resolve("auto", "cpu", MINI)


def test_cuda_auto_is_bf16_when_supported(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported, expected in ((True, Precision.bf16), (False, Precision.fp32)):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda s=supported: s)
        choice = pp.resolve("auto", "cuda", MINI)
        assert choice.precision is expected and choice.source == "cuda" and "CUDA" in choice.describe()


# ---- the cache -----------------------------------------------------------------------------------------------------

def test_the_ratio_is_cached_per_machine_and_shapes_and_reprobed_on_request(monkeypatch, cache_dir):
    calls = stub_timings(monkeypatch, 3.0, 1.0)
    assert pp.resolve("auto", "cpu", MINI).source == "probe"
    path = cache_dir / pp.CACHE_FILE
    entries = json.loads(path.read_text())
    [(key, entry)] = entries.items()
    assert entry["ratio"] == pytest.approx(3.0) and f"torch {torch.__version__}" in key
    assert "flags" in key and str(pp.shapes_of(MINI)) in key
    n = len(calls)
    again = pp.resolve("auto", "cpu", MINI)
    assert (again.source, again.precision, len(calls)) == ("cache", Precision.bf16, n)  # nothing measured
    # another model's shapes, and another ISA limit, are measured separately
    assert pp.resolve("auto", "cpu", preset("tiny")).source == "probe"
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA")  # `make test` also runs this file under AVX2
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41" if isa != "SSE41" else "AVX2")
    assert pp.resolve("auto", "cpu", MINI).source == "probe"
    if isa is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", isa)
    assert len(json.loads(path.read_text())) == 3
    # MASKPLAY_REPROBE=1 measures again and replaces the entry
    stub_timings(monkeypatch, 1.0, 1.0)
    monkeypatch.setenv(pp.REPROBE_ENV, "1")
    choice = pp.resolve("auto", "cpu", MINI)
    assert (choice.source, choice.precision) == ("probe", Precision.fp32)
    monkeypatch.delenv(pp.REPROBE_ENV)
    assert pp.resolve("auto", "cpu", MINI).source == "cache"
    assert json.loads(path.read_text())[key]["ratio"] == pytest.approx(1.0)


def test_a_damaged_or_unwritable_cache_only_means_measuring_again(monkeypatch, cache_dir):
    stub_timings(monkeypatch, 3.0, 1.0)
    cache_dir.mkdir()
    (cache_dir / pp.CACHE_FILE).write_text("{not json")
    assert pp.resolve("auto", "cpu", MINI).source == "probe"
    assert len(json.loads((cache_dir / pp.CACHE_FILE).read_text())) == 1  # rewritten whole
    (cache_dir / pp.CACHE_FILE).write_text(json.dumps({pp.machine_key(pp.shapes_of(MINI), 256): {"ratio": "x"}}))
    assert pp.resolve("auto", "cpu", MINI).source == "probe"
    blocker = cache_dir / "file"
    blocker.write_text("")
    monkeypatch.setenv(pp.CACHE_ENV, str(blocker / "sub"))  # a directory that cannot be created
    assert pp.resolve("auto", "cpu", MINI).precision is Precision.bf16


def test_the_default_cache_is_under_the_user_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv(pp.CACHE_ENV)
    monkeypatch.delenv("MASKPLAY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pp.cache_path() == tmp_path / "xdg" / "maskplay" / pp.CACHE_FILE
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert pp.cache_path() == Path.home() / ".cache" / "maskplay" / pp.CACHE_FILE


def test_the_probe_measures_into_the_cache_the_models_are_fetched_into(monkeypatch, tmp_path):
    """$MASKPLAY_CACHE moves the probe's file with the models and data (download.cache_root); $MASKPLAY_CACHE_DIR,
    its older name, still does where $MASKPLAY_CACHE is not set."""
    from maskplay.runtime.download import cache_root

    stub_timings(monkeypatch, 3.0, 1.0)
    monkeypatch.setenv("MASKPLAY_CACHE_DIR", str(tmp_path / "old"))
    monkeypatch.setenv("MASKPLAY_CACHE", str(tmp_path / "mine"))
    assert pp.resolve("auto", "cpu", MINI).source == "probe"
    assert pp.cache_path() == cache_root() / pp.CACHE_FILE == tmp_path / "mine" / pp.CACHE_FILE
    assert (tmp_path / "mine" / pp.CACHE_FILE).is_file() and not (tmp_path / "old").exists()
    monkeypatch.delenv("MASKPLAY_CACHE")
    assert pp.cache_path() == tmp_path / "old" / pp.CACHE_FILE


# ---- a real probe where bf16 is emulated ----------------------------------------------------------------------------

PROBE = """
import sys, time
from maskplay import precision_probe as pp
from maskplay.config import preset
start = time.perf_counter()
choice = pp.resolve("auto", "cpu", preset("mini"))
seconds = time.perf_counter() - start
warned = []
explicit = pp.resolve("bf16", "cpu", preset("mini"), warn=warned.append)
print(choice.precision.value, choice.ratio, choice.source, seconds, explicit.source, len(warned))
print(warned[0] if warned else "")
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the AVX2 limit is an x86 setting")
def test_the_probe_picks_fp32_where_bf16_is_emulated(cache_dir):
    env = {k: v for k, v in os.environ.items() if k != pp.AUTO_ENV}
    env.update({"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", pp.CACHE_ENV: str(cache_dir),
                "OMP_NUM_THREADS": "1"})
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    line, warning = done.stdout.splitlines()[:2]
    precision, ratio, source, seconds, explicit_source, warned = line.split()
    assert (precision, source, explicit_source, warned) == ("fp32", "probe", "cache", "1")
    assert float(ratio) < pp.EMULATED_BELOW
    assert float(seconds) < 1.0  # the probe stops at the first emulated product
    assert "slower than fp32" in warning and "emulated" in warning
    assert "AVX2" in next(iter(json.loads((cache_dir / pp.CACHE_FILE).read_text())))


# ---- training ------------------------------------------------------------------------------------------------------

def test_auto_is_the_default_and_the_configs_use_it():
    assert RunSection().precision == "auto" and PRECISIONS[0] == "auto"
    for path in sorted((ROOT / "configs").glob("*.toml")):
        assert load_train_config(path).run.precision == "auto", path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("data"))


def test_a_run_logs_the_choice_saves_auto_and_resumes_across_equal_resolutions(monkeypatch, data, tmp_path):
    stub_timings(monkeypatch, 3.0, 1.0)  # bf16 "3x faster": auto -> bf16
    run = tmp_path / "run"
    part = train(small_config(data, run, "run.max_minutes=1e-9", family="bert"))
    assert part.step == 1
    log = (run / "train.log").read_text()
    assert "precision auto -> bf16 (bf16 matmuls 3x fp32's speed" in log and "cpu, bf16;" in log
    assert 'precision = "auto"' in (run / "config.toml").read_text()  # auto itself is what is saved
    state = json.loads((run / "ckpt-000001" / "state.json").read_text())
    assert state["precision"] == "bf16"
    # resumed with an explicit bf16 (what auto chose) or auto again: accepted
    train(small_config(data, run, "run.max_minutes=1e-9", "run.precision=bf16", family="bert"), resume=True)
    rest = train(small_config(data, run, "optim.max_steps=3", family="bert"), resume=True)
    assert rest.step == 3
    # explicit fp32 differs from what the checkpoint was trained in: refused as before
    with pytest.raises(ValueError, match=r"differ.*run\.precision"):
        train(small_config(data, run, "optim.max_steps=4", "run.precision=fp32", family="bert"), resume=True)
    # auto resolving differently on this "machine" now: goes on, with a warning
    stub_timings(monkeypatch, 1.0, 1.0)
    monkeypatch.setenv(pp.REPROBE_ENV, "1")
    more = train(small_config(data, run, "optim.max_steps=4", family="bert"), resume=True)
    assert more.step == 4
    log = (run / "train.log").read_text()
    assert "precision auto -> fp32" in log and "WARNING: run.precision auto resolved to fp32" in log


def test_an_explicit_bf16_run_resumes_under_auto_when_auto_agrees(monkeypatch, data, tmp_path):
    stub_timings(monkeypatch, 3.0, 1.0)
    run = tmp_path / "run"
    train(small_config(data, run, "run.max_minutes=1e-9", "run.precision=bf16"))
    from maskplay.tasks.train import checkpoint_files as ckpt

    state_path, manifest_path = run / "ckpt-000001" / ckpt.STATE_FILE, run / "ckpt-000001" / ckpt.MANIFEST
    state_path.write_text(json.dumps({k: v for k, v in json.loads(state_path.read_text()).items() if k != "precision"}))
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][ckpt.STATE_FILE] = {"sha256": ckpt.sha256(state_path), "bytes": state_path.stat().st_size}
    manifest_path.write_text(json.dumps(manifest))
    # a checkpoint from before `auto` (no precision in state.json): the saved config's bf16 is what it used
    rest = train(small_config(data, run, "optim.max_steps=2"), resume=True)
    assert rest.step == 2


# ---- the inference commands ----------------------------------------------------------------------------------------

def test_score_and_generate_default_to_auto_and_log_the_choice(monkeypatch, tmp_path, capsys):
    from maskplay.cli import main
    from tests.tasks.score.test_score_support import save_model_dir, small_tokenizer, tiny

    stub_timings(monkeypatch, 1.0, 1.0)
    tok = small_tokenizer(tmp_path)
    model_dir = save_model_dir(tmp_path / "tta", tiny("tta", tok), tok)
    assert main(["score", str(model_dir), "the cat sat", "--format", "tsv"]) == 0
    err = capsys.readouterr().err
    assert "maskplay score: precision auto -> fp32 (bf16 matmuls 1x fp32's speed" in err
    stub_timings(monkeypatch, 50.0, 1.0)
    monkeypatch.setenv(pp.REPROBE_ENV, "1")
    (tmp_path / "in.txt").write_text("the cat sat\n")
    assert main(["embed", str(model_dir), "--file", str(tmp_path / "in.txt"), "--out", str(tmp_path / "e.npy")]) == 0
    assert "maskplay embed: precision auto -> bf16" in capsys.readouterr().err
    gpt_dir = save_model_dir(tmp_path / "gpt", tiny("gpt", tok), tok)
    assert main(["generate", str(gpt_dir), "the cat", "--max-new-tokens", "2", "--stream", "never"]) == 0
    assert "maskplay generate: precision auto -> bf16" in capsys.readouterr().err
    stub_timings(monkeypatch, 1.0, 50.0)
    assert main(["score", str(model_dir), "the cat sat", "--precision", "bf16"]) == 0
    assert "maskplay score: WARNING: precision bf16: bf16 matmuls measured 50.0x slower" in capsys.readouterr().err

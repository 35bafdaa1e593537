"""The server, lm-eval and model directories under hostile input. Each case was a 500, a traceback, an
unbounded allocation or a path outside the model directory before its fix; the server cases run in process
(FastAPI's TestClient on create_app), with the bundled gpt-mini-wiki."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from maskplay.cli.common import read_input

pytest.importorskip("fastapi", reason="maskplay serve needs the serve extra: pip install 'maskplay[serve]'")
pytest.importorskip("httpx", reason="the serve tests need httpx (the test extra)")

import torch  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from maskplay.runtime.precision import Precision  # noqa: E402
from maskplay.tasks.serve.app import create_app  # noqa: E402
from maskplay.tasks.serve.batching import Batcher  # noqa: E402
from maskplay.tasks.serve.guards import default_allowed_hosts  # noqa: E402
from maskplay.tasks.serve.service import ModelService  # noqa: E402


@pytest.fixture(scope="module")
def service() -> ModelService:
    return ModelService("gpt-mini-wiki", torch.device("cpu"), Precision.fp32)


def client_of(service: ModelService, **options) -> TestClient:
    """The app as `maskplay serve` makes it on 127.0.0.1 (its Host check included)."""
    options.setdefault("allowed_hosts", default_allowed_hosts("127.0.0.1"))
    return TestClient(create_app(service, Batcher(), **options), base_url="http://127.0.0.1:8000")


@pytest.fixture(scope="module")
def client(service):
    with client_of(service) as c:
        yield c


def error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


# ---- item 1: lone surrogates ----------------------------------------------------------------------------------

LONE = '"the cat \\ud800 sat"'


@pytest.mark.parametrize("path,body,param", [
    ("/v1/score", f'{{"input": {LONE}}}', "input"),
    ("/v1/score", f'{{"input": ["fine .", {LONE}]}}', "input"),
    ("/v1/embeddings", f'{{"input": {LONE}}}', "input"),
    ("/v1/completions", f'{{"prompt": {LONE}, "max_tokens": 2}}', "prompt"),
    ("/v1/completions", f'{{"prompt": "a", "max_tokens": 2, "stop": [{LONE}]}}', "stop"),
    ("/tokenize", f'{{"prompt": {LONE}}}', "prompt"),
])
def test_a_lone_surrogate_is_a_400_naming_the_field(client, path, body, param):
    found = error(client.post(path, content=body, headers={"content-type": "application/json"}), 400)
    assert found["param"] == param and "surrogate" in found["message"]


def test_a_paired_surrogate_escape_is_text(client):
    response = client.post("/tokenize", content='{"prompt": "a \\ud83d\\ude00 b"}',
                           headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text


def test_the_cli_refuses_a_sentence_argument_that_is_not_utf8():
    # argv's undecodable bytes reach Python as lone surrogates (surrogateescape)
    args = argparse.Namespace(sentences=["fine .", "the cat \udcff sat"], file=None, empty="keep")
    with pytest.raises(ValueError, match="sentence argument 2 is not valid UTF-8"):
        read_input(args)


def test_generate_refuses_a_prompt_argument_that_is_not_utf8(capsys):
    from maskplay.cli import main

    assert main(["generate", "gpt-mini-wiki", "the cat \udcff", "--max-new-tokens", "2"]) != 0
    err = capsys.readouterr().err.strip()
    assert "prompt argument 1 is not valid UTF-8" in err and len(err.splitlines()) == 1


# ---- item 2: a model directory's sizes against its weights ----------------------------------------------------

@contextmanager
def address_space_cap(extra: int = 3 << 30):
    """RLIMIT_AS at what the process maps now plus `extra`: an allocation of the sizes below fails at once
    instead of paging the machine out (before the fix, the model was built first)."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = Path("/proc/self/status").read_text()
    mapped = int(re.search(r"VmSize:\s+(\d+) kB", status).group(1)) * 1024
    cap = mapped + extra if hard == resource.RLIM_INFINITY else min(hard, mapped + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from tests.tasks.score.test_score_support import save_model_dir, small_tokenizer, tiny

    root = tmp_path_factory.mktemp("hostile")
    tok = small_tokenizer(root)
    return save_model_dir(root / "model", tiny("gpt", tok), tok)


def edited_copy(source: Path, target: Path, **changes) -> Path:
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    return target


@pytest.mark.parametrize("changes", [
    {"hidden_size": 10**9, "num_heads": 1}, {"vocab_size": 10**12}, {"max_position": 10**9},
    {"intermediate_size": 10**12}, {"hidden_size": 2**70, "num_heads": 1}, {"num_layers": 10**6},
    {"hidden_size": 64},  # within bounds, but not these weights: the skeleton's comparison
    {"max_position": 10**9, "positions": "sinusoidal"},  # no table in the file: the computed one's size
], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_sizes_are_checked_against_the_weights_before_any_allocation(tiny_dir, tmp_path, changes):
    from maskplay.tasks.score import load_model_dir

    bad = edited_copy(tiny_dir, tmp_path / "bad", **changes)
    with address_space_cap(), pytest.raises(ValueError, match=r"config\.json") as found:
        load_model_dir(bad)
    assert len(str(found.value).splitlines()) == 1
    load_model_dir(tiny_dir)  # the unedited directory loads


def test_convert_from_hf_checks_sizes_before_building(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from maskplay.cli import main

    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(tmp_path / "hf")
    data = json.loads((tmp_path / "hf" / "config.json").read_text())
    data["hidden_size"] = 10**9
    data["num_attention_heads"] = 1
    (tmp_path / "hf" / "config.json").write_text(json.dumps(data))
    capsys.readouterr()  # transformers' progress bars
    with address_space_cap():
        code = main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "out")])
    assert code != 0 and not (tmp_path / "out").exists()
    err = capsys.readouterr().err.strip()
    assert "hidden_size = 1000000000" in err and len(err.splitlines()) == 1


# ---- item 3: a manifest's paths stay inside the model directory -----------------------------------------------

def _manifest(directory: Path, name: str) -> None:
    (directory / "manifest.json").write_text(json.dumps({"format": 1, "files": {name: {"sha256": "0", "bytes": 1}}}))


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "symlink"])
def test_a_manifest_cannot_point_outside_the_model_directory(tiny_dir, tmp_path, kind, capsys):
    from maskplay.cli import main

    model = edited_copy(tiny_dir, tmp_path / "model")
    secret = tmp_path / "secret.txt"
    secret.write_text("x" * 1221)
    if kind == "symlink":
        (model / "link.txt").symlink_to(secret)
    _manifest(model, {"absolute": str(secret), "dotdot": "../secret.txt", "symlink": "link.txt"}[kind])
    assert main(["score", str(model), "the cat sat ."]) != 0
    err = capsys.readouterr().err.strip()
    assert "manifest.json lists" in err and "1221" not in err and len(err.splitlines()) == 1


def test_a_checkpoint_manifest_cannot_point_outside_the_checkpoint(tmp_path):
    from maskplay.tasks.train.checkpoint_files import FORMAT_VERSION, MANIFEST, REQUIRED, CheckpointError, verify_checkpoint

    ckpt = tmp_path / "ckpt-1"
    ckpt.mkdir()
    (tmp_path / "outside").write_text("x")
    files = {"../outside": {"sha256": "0", "bytes": 1}, **{n: {"sha256": "0", "bytes": 1} for n in REQUIRED}}
    (ckpt / MANIFEST).write_text(json.dumps({"format": FORMAT_VERSION, "files": files}))
    with pytest.raises(CheckpointError, match="a path outside"):
        verify_checkpoint(ckpt)


# ---- item 5: lm-eval's pairs files and arguments --------------------------------------------------------------

def _pairs_loader():
    import importlib.util

    from maskplay.tasks.lm_eval_backend import TASKS_DIR

    spec = importlib.util.spec_from_file_location("maskplay_pairs_loader", TASKS_DIR / "pairs.py")
    loader = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loader)
    return loader


GOOD = '{"sentence_good": "the cat sat .", "sentence_bad": "the cat sit ."}\n'


@pytest.mark.parametrize("content,message", [
    (b"", r"pairs\.jsonl: no pairs"),
    ((GOOD + '{"sentence_good": "a').encode(), r"pairs\.jsonl:2: invalid JSON"),
    (b'{"sentence_good": "", "sentence_bad": "b ."}\n', r"pairs\.jsonl:1: sentence_good is empty"),
    (b'{"good": "a .", "bad": "b ."}\n', r"pairs\.jsonl:1: missing"),
    (GOOD.encode() + b'{"sentence_good": "caf\xe9", "sentence_bad": "b ."}\n', r"pairs\.jsonl.*2"),
], ids=["empty", "truncated", "empty-sentence", "keys", "not-utf8"])
def test_lm_eval_pairs_file_errors_name_the_file_and_line(tmp_path, content, message):
    pytest.importorskip("lm_eval")
    pytest.importorskip("datasets")
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        _pairs_loader().load(pairs=str(path))


@pytest.mark.parametrize("value", [5, [], [3], ""])
def test_lm_eval_pairs_metadata_must_name_files(value):
    pytest.importorskip("lm_eval")
    with pytest.raises(ValueError, match="metadata 'pairs' must be a file name"):
        _pairs_loader().load(pairs=value)


@pytest.mark.parametrize("argv", [["--limit", "-3"], ["--limit=0"], ["--limit", "x"], ["run", "--limit", "nan"]])
def test_lm_eval_limit_is_checked(argv):
    from maskplay.cli.lm_eval import lm_eval_argv

    with pytest.raises(ValueError, match="--limit"):
        lm_eval_argv(["--model", "maskplay", *argv])


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), -1.0, "hot"])
def test_lm_eval_generation_temperature_is_checked(temperature):
    pytest.importorskip("lm_eval")
    from maskplay.tasks.lm_eval_backend import MaskplayLM

    lm = MaskplayLM("gpt-mini-wiki", device="cpu", precision="fp32")
    with pytest.raises(ValueError, match="temperature"):
        lm.generate_texts(["the city"], {"do_sample": True, "temperature": temperature, "max_gen_toks": 2})


# ---- item 6: eval blimp-plot validates the result files -------------------------------------------------------

def _blimp_file(path: Path, edit) -> Path:
    from maskplay.tasks.eval.blimp import BlimpPair, evaluate_blimp
    from maskplay.tasks.eval.common import write_results

    pairs = [BlimpPair(f"good {k}", f"bad {k}", paradigm, phenomenon)
             for k, (paradigm, phenomenon) in enumerate([("adjunct_island", "island_effects"),
                                                         ("passive_1", "argument_structure")] * 2)]
    result = evaluate_blimp(lambda texts: [len(t) for t in texts], pairs)
    edit(result)
    write_results(path, {"task": "blimp", "model_dir": "runs/x", "method": "causal", "limit": None,
                         "results": result})
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda r: r["phenomena"]["island_effects"].pop("accuracy"), r"phenomena\['island_effects'\]\.accuracy is None"),
    (lambda r: r["phenomena"]["island_effects"].update(accuracy="high"), "'high', not a finite number"),
    (lambda r: r["paradigms"]["passive_1"].update(accuracy=float("nan")), "'nan', not a finite number"),
    (lambda r: r["paradigms"]["passive_1"].update(phenomenon="binding"), "'binding', which results.phenomena"),
    (lambda r: r.update(phenomena=[]), "results.phenomena is not an object"),
    (lambda r: r.update(macro_accuracy=None), "macro_accuracy is None"),
], ids=["no-accuracy", "high", "nan", "unlisted-phenomenon", "list", "no-macro"])
def test_blimp_plot_refuses_a_malformed_result_in_one_line(tmp_path, capsys, edit, message):
    from maskplay.cli import main

    good = _blimp_file(tmp_path / "good.json", lambda r: None)
    bad = _blimp_file(tmp_path / "bad.json", edit)
    capsys.readouterr()
    assert main(["eval", "blimp-plot", str(good), str(bad), "--labels", "a", "b",
                 "--out", str(tmp_path / "p.png")]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.json" in err and re.search(message, err), err
    assert main(["eval", "blimp-plot", str(good), "--out", str(tmp_path / "p.png")]) == 0


# ---- item 4: per-request limits; long jobs interleave with short ones -----------------------------------------

def test_a_900_kb_windowed_embedding_request_is_refused_naming_the_limit(client):
    text = " ".join(["the cat sat on the mat ."] * 36000)  # ~900 kB: under the body cap
    found = error(client.post("/v1/embeddings", json={"input": text, "overflow": "window"}), 400)
    assert found["code"] == "request_too_large" and "--max-request-" in found["message"]


def test_too_many_prompts_x_n_x_max_tokens_is_refused_naming_the_limit(client):
    found = error(client.post("/v1/completions", json={"prompt": ["the cat"] * 5000, "n": 16, "max_tokens": 64}),
                  400)
    assert "--max-request-tokens" in found["message"] and "5000 prompts x n 16 x max_tokens 64" in found["message"]
    assert client.post("/v1/completions", json={"prompt": ["the cat"] * 4, "max_tokens": 2}).status_code == 200


def test_request_limits_are_settable(service, client, monkeypatch):
    from maskplay.tasks.serve.limits import Limits

    monkeypatch.setattr(service, "limits", Limits(pieces=20, windows=3, generated=10))
    found = error(client.post("/v1/score", json={"input": ["the cat sat on the mat ."] * 4}), 400)
    assert "--max-request-pieces" in found["message"] and "limit of 20" in found["message"]
    assert client.post("/v1/score", json={"input": ["the cat sat on the mat ."] * 2}).status_code == 200
    long = " ".join(["the cat sat on the mat ."] * 40)  # ~280 pieces: 5 windows of 128
    found = error(client.post("/v1/embeddings", json={"input": long, "overflow": "truncate"}), 400)
    assert "--max-request-pieces" in found["message"]
    monkeypatch.setattr(service, "limits", Limits(pieces=10**6, windows=3, generated=10))
    assert "--max-request-windows" in error(client.post("/v1/embeddings", json={"input": long, "overflow": "window"}),
                                            400)["message"]
    assert "--max-request-tokens" in error(client.post("/v1/completions", json={"prompt": ["a", "b"], "n": 2,
                                                                                  "max_tokens": 3}), 400)["message"]
    with pytest.raises(ValueError, match="--max-request-windows"):
        Limits(windows=0)


def test_a_long_job_is_split_and_other_jobs_run_between_its_parts():
    import asyncio

    from maskplay.tasks.serve.batching import Batcher

    order = []

    def run(items):
        order.append(items[0][0])
        return [f"{job}:{k}" for job, k in items]

    async def main():
        batcher = Batcher(max_batch_size=4, max_wait_ms=0, max_queue=16)
        batcher.start()
        long = asyncio.ensure_future(batcher.submit("k", [("long", k) for k in range(40)], run))
        await asyncio.sleep(0)
        short = await batcher.submit("k", [("short", 0)], run)
        long_done = long.done()
        got = await long
        seeded = await batcher.submit("k", [("seeded", k) for k in range(10)], run, split=False)
        await batcher.stop()
        return short, long_done, got, seeded

    short, long_done, got, seeded = asyncio.run(main())
    assert short == ["short:0"] and not long_done  # answered while the long job still had parts to run
    assert got == [f"long:{k}" for k in range(40)] and order.index("short") <= 2
    assert order.count("long") == 10 and order.count("seeded") == 1 and len(seeded) == 10


def test_a_short_request_is_answered_while_a_long_one_runs(client):
    """Over HTTP: a 1,000-sentence /v1/score (about 32 model calls) and, once it runs, a one-sentence one; the
    short one is answered before the long one ends (before the fix it waited for all of it)."""
    import threading

    done = {}

    def long_request():
        response = client.post("/v1/score", json={"input": [f"the cat sat on mat {k} ." for k in range(1000)],
                                                  "explain": False})
        done["long"] = response.status_code

    thread = threading.Thread(target=long_request)
    thread.start()
    deadline = time.monotonic() + 60
    while not client.get("/health").json()["batching"]["running"] and time.monotonic() < deadline:
        time.sleep(0.01)  # the long job runs
    response = client.post("/v1/score", json={"input": "the cat sat ."})
    assert response.status_code == 200 and "long" not in done
    thread.join(timeout=300)
    assert done["long"] == 200


# ---- item 7: the rest --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host,status", [("127.0.0.1:8000", 200), ("localhost:8000", 200), ("[::1]:8000", 200),
                                         ("evil.example", 400), ("evil.example:8000", 400), ("", 400)])
def test_the_host_header_must_name_the_server(client, host, status):
    response = client.get("/health", headers={"host": host})
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["code"] == "invalid_host" and "--allowed-hosts" in response.text


def test_allowed_hosts_can_be_widened(service):
    assert default_allowed_hosts("0.0.0.0") == ["*"]
    assert "10.0.0.5" in default_allowed_hosts("10.0.0.5")
    with client_of(service, allowed_hosts=["models.example"]) as c:
        assert c.get("/health", headers={"host": "models.example:8000"}).status_code == 200
        assert c.get("/health", headers={"host": "evil.example"}).status_code == 400
    with client_of(service, allowed_hosts=["*"]) as c:
        assert c.get("/health", headers={"host": "anything.example"}).status_code == 200


def test_docs_page_needs_nothing_from_outside(client):
    page = client.get("/docs")
    assert page.status_code == 200 and "/v1/score" in page.text and "overflow" in page.text
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page.text)  # no script or style from a CDN


@pytest.mark.parametrize("headers", [{"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"},
                                     {}])
def test_a_post_without_a_json_content_type_names_the_header(client, headers):
    found = error(client.post("/v1/score", content=b'{"input": "a"}', headers=headers), 400)
    assert found["code"] == "invalid_content_type" and "Content-Type" in found["message"]


def test_a_seed_out_of_range_names_seed(client):
    found = error(client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2, "seed": 2**70}), 400)
    assert found["param"] == "seed"


def test_an_out_path_that_cannot_be_written_says_so(tmp_path, capsys):
    from maskplay.cli import main

    pairs = tmp_path / "p.jsonl"
    pairs.write_text(GOOD)
    assert main(["eval", "blimp", "gpt-mini-wiki", "--file", str(pairs), "--out", "/proc/x"]) != 0
    err = capsys.readouterr().err.strip()
    assert "cannot write in /proc" in err and "another process" not in err and len(err.splitlines()) == 1


def test_serve_finds_a_taken_port_before_loading_the_model(monkeypatch, capsys):
    import socket

    from maskplay.cli import main

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the port was checked")

    monkeypatch.setattr("maskplay.tasks.serve.service.ModelService.__init__", no_model)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "gpt-mini-wiki", "--port", str(port)]) != 0
    err = capsys.readouterr().err.strip()
    assert f"--port {port}" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_stopping_the_server_mid_job_answers_503_without_tracebacks(tmp_path):
    """Ctrl-C while a request waits for the model: the request gets a 503, the log no CancelledError."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import threading

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
           "MASKPLAY_AUTO_PRECISION": "fp32"}
    proc = subprocess.Popen([sys.executable, "-m", "maskplay", "serve", "gpt-mini-wiki", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url, got = f"http://127.0.0.1:{port}", {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)

        def seeded():  # a seeded sample is one model call: it is still running when the signal comes
            got["long"] = httpx.post(url + "/v1/completions", timeout=120, json={
                "prompt": ["the city"] * 120, "max_tokens": 40, "seed": 1}).status_code

        thread = threading.Thread(target=seeded)
        thread.start()
        while not httpx.get(url + "/health", timeout=10).json()["batching"]["running"]:
            time.sleep(0.01)
        waiting = threading.Thread(target=lambda: got.update(
            short=httpx.post(url + "/v1/score", json={"input": "a"}, timeout=120).status_code))
        waiting.start()
        while not httpx.get(url + "/health", timeout=10).json()["batching"]["queued"]:
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        thread.join(120)
        waiting.join(120)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert got == {"long": 503, "short": 503} and proc.returncode == 0
    assert "Traceback" not in err and "CancelledError" not in err, err[-2000:]


def test_a_fine_tuned_directory_is_checked_against_its_weights_too(tmp_path):
    from maskplay.tasks.finetune import FineTuned, HeadConfig
    from tests.tasks.score.test_score_support import small_tokenizer, tiny

    tok = small_tokenizer(tmp_path)
    FineTuned(tiny("tta", tok), HeadConfig(labels=["0", "1"], pooling="mean")).save_pretrained(tmp_path / "ft", tok)
    config = json.loads((tmp_path / "ft" / "config.json").read_text())
    config["vocab_size"] = 10**12
    (tmp_path / "ft" / "config.json").write_text(json.dumps(config))
    with address_space_cap(), pytest.raises(ValueError, match=r"config\.json: vocab_size = 1000000000000"):
        FineTuned.from_pretrained(tmp_path / "ft")


@pytest.mark.parametrize("command", [["score"], ["generate"], ["serve", "--port", "0"]])
def test_commands_refuse_oversized_configs_in_one_line(tiny_dir, tmp_path, capsys, monkeypatch, command):
    """The commands' precision probe (auto) multiplied matrices of the config's sizes before the model loaded."""
    from maskplay.cli import main

    monkeypatch.delenv("MASKPLAY_AUTO_PRECISION", raising=False)
    bad = edited_copy(tiny_dir, tmp_path / "bad", hidden_size=10**9, num_heads=1, intermediate_size=10**12)
    with address_space_cap():
        code = main([command[0], str(bad), *(["the cat ."] if command[0] != "serve" else command[1:])])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and "hidden_size = 1000000000" in err[-1], err


def test_a_failed_call_gives_its_memory_back(monkeypatch):
    """After a failed model call the batcher collects the garbage and trims the heap (glibc kept ~7 GB of a
    failed request's pages resident)."""
    import asyncio

    import maskplay.tasks.serve.batching as batching

    trimmed = []
    monkeypatch.setattr(batching, "release_memory", lambda: trimmed.append(1))

    def run(items):
        raise RuntimeError("out of memory")

    async def main():
        batcher = batching.Batcher(max_batch_size=4, max_wait_ms=0)
        batcher.start()
        with pytest.raises(RuntimeError):
            await batcher.submit("k", [1, 2], run)
        await batcher.stop()

    asyncio.run(main())
    assert trimmed == [1]

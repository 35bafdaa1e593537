"""maskplay serve: the real server started on a free port, driven by the OpenAI Python client, httpx, lm-eval's own
local-completions client and a headless Chromium; every number checked against the library (Scorer, Embedder,
generate) run in this process."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi", reason="maskplay serve needs the serve extra: pip install 'maskplay[serve]'")
httpx = pytest.importorskip("httpx", reason="the serve tests need httpx (the test extra)")

from maskplay.tasks.decoding import generate  # noqa: E402
from maskplay.tasks.score import Embedder, Scorer, load_model_dir  # noqa: E402
from maskplay.tasks.serve.batching import Batcher, QueueFull  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m maskplay serve MODEL ARGS` on a free port, stopped at the end."""

    def __init__(self, model: str, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               "MASKPLAY_AUTO_PRECISION": "fp32"}
        self.log = open(os.devnull, "w")  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", "maskplay", "serve", model, "--port", str(self.port),
                                      "--log-level", "warning", *args], env=env, stdout=self.log,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.proc.stderr.read()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the server did not answer /health within 120 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    def post(self, path: str, **kwargs) -> httpx.Response:
        return httpx.post(self.url + path, timeout=60, **kwargs)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()


@pytest.fixture(scope="module")
def gpt():
    server = Server("gpt-mini-wiki", "--max-wait-ms", "100")
    yield server
    assert server.proc.poll() is None, "the server died during the tests"
    server.stop()


@pytest.fixture(scope="module")
def tta():
    server = Server("tta-mini-wiki", "--max-wait-ms", "100", "--max-body-bytes", "4096")
    yield server
    assert server.proc.poll() is None, "the server died during the tests"
    server.stop()


@pytest.fixture(scope="module")
def models():
    return {name: load_model_dir(name) for name in ("gpt-mini-wiki", "tta-mini-wiki")}


def openai_client(server: Server):
    openai = pytest.importorskip("openai", reason="the OpenAI client tests need PyPI openai (the test extra)")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


SENTENCES = ["the cat sat on the mat .", "the cat sat on the democracy .", "paris is the capital of france .",
             "he plays the guitar in a band .", "the river flows into the sea .", "she wrote a book about birds .",
             "the election was held in may .", "the team won the cup in 1998 ."]


# ---- the batcher alone: its own oracle is running each job by itself ---------------------------------------

def test_batcher_never_mixes_results_and_isolates_errors():
    calls = []

    def run(items):
        calls.append(len(items))
        if "bad" in items:
            raise ValueError("a bad item")
        return [f"{x}!" for x in items]

    async def main():
        batcher = Batcher(max_batch_size=16, max_wait_ms=30, max_queue=64)
        batcher.start()
        jobs = [[f"{j}-{i}" for i in range(1 + j % 3)] for j in range(12)]
        jobs[5] = ["bad", "x"]
        got = await asyncio.gather(*(batcher.submit("k", job, run) for job in jobs), return_exceptions=True)
        await batcher.stop()
        return jobs, got, batcher.stats

    jobs, got, stats = asyncio.run(main())
    for job, result in zip(jobs, got, strict=True):
        if "bad" in job:
            assert isinstance(result, ValueError)
        else:
            assert result == [f"{x}!" for x in job]
    assert stats.calls < len(jobs) + len(jobs)  # batched (a failed call reruns its jobs alone)
    assert max(calls) > 3  # several jobs shared a call


def test_batcher_keeps_closed_loop_clients_in_one_call():
    """Clients that send their next request as soon as an answer comes (serve_load's clients) stay in one call:
    requests that waited through a call wait up to max_wait after it for the clients it answered, instead of
    going at once in a small call and splitting the clients into two groups that alternate."""
    calls = []

    def run(items):
        calls.append(len(items))
        time.sleep(0.06)  # a model call longer than max_wait
        return items

    async def main():
        batcher = Batcher(max_batch_size=8, max_wait_ms=25, max_queue=64)
        batcher.start()

        async def client(k):
            await asyncio.sleep(0.008 * k)  # the clients come one after another, the first alone
            for step in range(8):
                await batcher.submit("k", [(k, step)], run)
                await asyncio.sleep(0.0005 * k)  # each client a little slower to come back

        await asyncio.gather(*(client(k) for k in range(8)))
        await batcher.stop()

    asyncio.run(main())
    assert sum(calls) == 64
    assert sorted(calls[2:])[len(calls[2:]) // 2] == 8, calls  # after warming up, the median call serves all


def test_json_bodies_are_strict_json():
    """The hot routes' serialiser: plain JSON (non-ASCII kept), a non-finite float as null (as FastAPI's own path
    writes it; `-Infinity` is not JSON), and nothing else changed."""
    from maskplay.tasks.score.explain import colour_of
    from maskplay.tasks.serve.app import colour_hex, json_body, xterm_hex

    body = json_body({"text": "café", "log_prob": float("-inf"), "nan": float("nan"), "x": [1, 2.5, None]}).body
    assert json.loads(body) == {"text": "café", "log_prob": None, "nan": None, "x": [1, 2.5, None]}
    assert b"Infinity" not in body and "café".encode() in body
    assert [colour_hex(s) for s in (0.5, 3.5, 20.0)] == [xterm_hex(colour_of(s)) for s in (0.5, 3.5, 20.0)]


def test_batcher_queue_bound_and_batching_off():
    async def main():
        batcher = Batcher(max_batch_size=8, max_wait_ms=200, max_queue=2, enabled=True)
        batcher.start()
        first = [asyncio.ensure_future(batcher.submit("k", [1], lambda items: items)) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(QueueFull):
            await batcher.submit("k", [1], lambda items: items)
        assert await asyncio.gather(*first) == [[1], [1]]
        await batcher.stop()
        off = Batcher(max_batch_size=8, max_wait_ms=200, enabled=False)
        off.start()
        got = await asyncio.gather(*(off.submit("k", [k], lambda items: items) for k in range(5)))
        await off.stop()
        return got, off.stats

    got, stats = asyncio.run(main())
    assert got == [[k] for k in range(5)] and stats.calls == 5


# ---- the real server ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_embeddings_openai_client_match_embedder(tta, models):
    client = openai_client(tta)
    embedder = Embedder(*models["tta-mini-wiki"])
    got = client.embeddings.create(model="tta-mini-wiki", input=SENTENCES[:3])  # the client asks for base64
    expected = embedder.encode(SENTENCES[:3])
    np.testing.assert_allclose(np.array([d.embedding for d in got.data]), expected, rtol=1e-4, atol=1e-5)
    first = client.embeddings.create(model="tta-mini-wiki", input=SENTENCES[0], extra_body={"pooling": "first"})
    np.testing.assert_allclose(first.data[0].embedding, embedder.encode(SENTENCES[:1], pooling="first")[0],
                               rtol=1e-4, atol=1e-5)
    floats = tta.post("/v1/embeddings", json={"input": SENTENCES[:2], "encoding_format": "float"}).json()
    packed = tta.post("/v1/embeddings", json={"input": SENTENCES[:2], "encoding_format": "base64"}).json()
    for f, p in zip(floats["data"], packed["data"], strict=True):
        assert np.frombuffer(base64.b64decode(p["embedding"]), dtype="<f4").tolist() == \
            np.float32(f["embedding"]).tolist()


@pytest.mark.slow
def test_score_matches_scorer_with_the_odd_word_out(tta, models):
    scorer = Scorer(*models["tta-mini-wiki"])
    body = tta.post("/v1/score", json={"input": SENTENCES[:2]}).json()
    for record, s in zip(body["data"], scorer.score(SENTENCES[:2]), strict=True):
        assert math.isclose(record["log_prob"], s.log_prob, rel_tol=1e-5)
        assert [t["token"] for t in record["tokens"]] == s.tokens
        np.testing.assert_allclose([t["log_prob"] for t in record["tokens"]], s.token_log_probs, rtol=1e-5)
        worst = max(s.words(), key=lambda w: w.surprisal)
        assert record["odd_word_out"]["text"] == worst.text


@pytest.mark.slow
def test_completions_openai_client_greedy_stream_echo(gpt, models):
    client = openai_client(gpt)
    model, tokenizer = models["gpt-mini-wiki"]
    oracle = generate(model, ["the city of"], tokenizer=tokenizer, max_new_tokens=8).generations[0]
    got = client.completions.create(model="gpt-mini-wiki", prompt="the city of", max_tokens=8, temperature=0)
    assert got.choices[0].text.strip() == oracle.text and got.choices[0].finish_reason == oracle.finish_reason
    streamed = client.completions.create(model="gpt-mini-wiki", prompt="the city of", max_tokens=8, temperature=0,
                                         stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed) == got.choices[0].text
    # echo + max_tokens 0 scores a text: its pieces' log p equal the causal Scorer's
    echo = client.completions.create(model="gpt-mini-wiki", prompt=SENTENCES[1], max_tokens=0, echo=True,
                                     logprobs=1)
    expected = Scorer(model, tokenizer).score([SENTENCES[1]])[0]
    assert echo.choices[0].text == SENTENCES[1]
    assert echo.choices[0].logprobs.tokens == expected.tokens
    np.testing.assert_allclose(echo.choices[0].logprobs.token_logprobs, expected.token_log_probs, rtol=1e-4)
    stopped = client.completions.create(model="gpt-mini-wiki", prompt="the city of", max_tokens=8, temperature=0,
                                        stop=[" of"])
    cut = got.choices[0].text.index(" of")
    assert stopped.choices[0].text == got.choices[0].text[:cut] and stopped.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_completions_sampling_n_and_seed(gpt):
    body = {"prompt": ["the city of", "in 1990 ,"], "max_tokens": 6, "temperature": 1.0, "n": 2, "seed": 7,
            "logprobs": 2}
    first, again = gpt.post("/v1/completions", json=body).json(), gpt.post("/v1/completions", json=body).json()
    assert len(first["choices"]) == 4 and [c["text"] for c in first["choices"]] == [c["text"] for c in
                                                                                    again["choices"]]
    for c in first["choices"]:
        lp = c["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
        for value, top in zip(lp["token_logprobs"], lp["top_logprobs"], strict=True):
            assert value <= 0 and len(top) == 2 and max(top.values()) >= value - 1e-6


@pytest.mark.slow
def test_concurrent_requests_are_batched_and_never_mixed(gpt, models):
    model, tokenizer = models["gpt-mini-wiki"]
    scorer = Scorer(model, tokenizer)
    expected = scorer.score(SENTENCES)
    # A burst is gathered only when its requests reach the server while the model is busy; on a loaded 2-core
    # machine one burst can arrive spread out enough to go one call per request, so three bursts get the chance
    # (batching switched off, every burst costs eight calls and this fails).
    calls = []
    for _ in range(3):
        before = gpt.health()["batching"]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda s: gpt.post("/v1/score", json={"input": s}).json(), SENTENCES))
        after = gpt.health()["batching"]
        for s, answer, alone in zip(SENTENCES, answers, expected, strict=True):
            assert answer["data"][0]["text"] == s
            assert math.isclose(answer["data"][0]["log_prob"], alone.log_prob, rel_tol=1e-4)
        assert after["requests"] - before["requests"] == 8
        calls.append(after["model_calls"] - before["model_calls"])
        if calls[-1] < 8:
            break
    assert min(calls) < 8, calls
    prompts = SENTENCES[:6]
    with ThreadPoolExecutor(6) as pool:
        texts = list(pool.map(lambda p: gpt.post("/v1/completions", json={
            "prompt": p, "max_tokens": 6, "temperature": 0}).json()["choices"][0]["text"], prompts))
    for p, text in zip(prompts, texts, strict=True):
        alone = generate(model, [p], tokenizer=tokenizer, max_new_tokens=6).generations[0]
        assert text.strip() == alone.text


@pytest.mark.slow
def test_errors_a_client_can_act_on(tta, gpt):
    def error(response, status):
        assert response.status_code == status, response.text
        body = response.json()["error"]
        assert set(body) == {"message", "type", "param", "code"}
        return body

    bad_json = tta.post("/v1/score", content=b'{"input": ', headers={"content-type": "application/json"})
    assert error(bad_json, 400)["code"] == "invalid_json"
    assert error(tta.post("/v1/embeddings", json={"input": 3}), 400)["param"] == "input"
    assert error(tta.post("/v1/embeddings", json={"input": "a", "layer": "2"}), 400)["param"] == "layer"
    assert error(tta.post("/v1/score", json={}), 400)["message"] == "missing required field 'input'"
    big = error(tta.post("/v1/score", json={"input": ["word " * 1000]}), 413)
    assert "4,096 bytes" in big["message"]
    long = error(tta.post("/v1/score", json={"input": ["word " * 300]}), 400)
    assert long["code"] == "context_length_exceeded" and "128" in long["message"]
    assert error(tta.post("/v1/score", json={"input": ["ok .", " "]}), 400)["message"].startswith("input[1] is empty")
    assert error(tta.post("/v1/score", json={"input": "a", "model": "gpt-4"}), 404)["code"] == "model_not_found"
    assert "cannot generate" in error(tta.post("/v1/completions", json={"prompt": "a", "max_tokens": 3}),
                                      400)["message"]
    assert error(gpt.post("/v1/completions", json={"prompt": "a", "max_tokens": 500}), 400)["code"] == \
        "context_length_exceeded"
    assert error(tta.post("/v1/embeddings", json={"input": "a", "diagonal_mask": False, "pooling": "sif",
                                                  "layer": 99}), 400)["message"]
    assert tta.health()["status"] == "ok" and gpt.health()["status"] == "ok"


def wait_for(server: Server, predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate(server.health()["batching"]):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.005)


@pytest.mark.slow
def test_full_queue_is_503_with_retry_after():
    """--max-queue 1: while a long call runs and one request waits, the next is refused with Retry-After. UniLM
    generates too (its frame: [SOS] source [SEP])."""
    server = Server("unilm-titles-mini", "--max-queue", "1")
    try:
        source = "the history of paris is long and the city was founded by romans ."
        model, tokenizer = load_model_dir("unilm-titles-mini")
        title = server.post("/v1/completions", json={"prompt": source, "max_tokens": 10, "temperature": 0}).json()
        assert title["choices"][0]["text"].strip() == generate(model, [source], tokenizer=tokenizer,
                                                               max_new_tokens=10).generations[0].text
        with ThreadPoolExecutor(2) as pool:
            # one long input (a job of many inputs is split, and others run between its parts)
            long = pool.submit(server.post, "/v1/embeddings", json={"input": " ".join(SENTENCES * 60),
                                                                    "overflow": "window"})
            wait_for(server, lambda b: b["running"], "the long call")
            waiting = pool.submit(server.post, "/v1/score", json={"input": "a"})
            wait_for(server, lambda b: b["queued"] == 1, "a waiting request")
            refused = server.post("/v1/score", json={"input": "b"})
            assert server.health()["batching"]["running"], "the long call ended too soon: the test proves nothing"
            assert long.result().status_code == 200 and waiting.result().status_code == 200
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "queue_full"
        assert server.health()["batching"]["refused"] == 1
    finally:
        server.stop()


@pytest.mark.slow
def test_tokenizer_routes_and_models(gpt):
    info = httpx.get(gpt.url + "/tokenizer_info").json()
    assert info["eos_token"] == "[EOS]" and info["bos_token"] == "[SOS]"
    ids = gpt.post("/tokenize", json={"prompt": "the cat [EOS]", "add_special_tokens": False}).json()["tokens"]
    assert ids[-1] == gpt.post("/tokenize", json={"prompt": "[EOS]", "add_special_tokens": False}).json()["tokens"][0]
    assert gpt.post("/detokenize", json={"tokens": ids[:-1]}).json()["prompt"] == "the cat"
    models = httpx.get(gpt.url + "/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["gpt-mini-wiki"] and models[0]["max_model_len"] == 128
    assert httpx.get(gpt.url + "/openapi.json").status_code == 200


@pytest.mark.slow
def test_lm_eval_local_completions_with_the_remote_tokenizer(gpt, models):
    """lm-eval's own client, as it evaluates a vLLM server: prompts as token ids from /tokenize, echo + logprobs."""
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'lm-eval[api]')")
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    lm = LocalCompletionsAPI(base_url=gpt.url + "/v1/completions", model="gpt-mini-wiki", tokenizer_backend="remote",
                             tokenized_requests=True, num_concurrent=1, max_length=128, max_retries=1)
    pairs = [("the cat sat on the", " mat ."), ("paris is the capital of", " france ."),
             ("paris is the capital of", " democracy .")]
    got = lm.loglikelihood([Instance("loglikelihood", {}, pair, k) for k, pair in enumerate(pairs)],
                           disable_tqdm=True)
    model, tokenizer = models["gpt-mini-wiki"]
    scores = Scorer(model, tokenizer).score([c + x for c, x in pairs])
    for (context, _), (value, greedy), s in zip(pairs, got, scores, strict=True):
        n_context = len(tokenizer.backend.encode(context, add_special_tokens=False).ids)
        assert math.isclose(value, math.fsum(s.token_log_probs[n_context:]), rel_tol=1e-4)
        assert isinstance(greedy, bool)
    assert got[1][0] > got[2][0]  # france is the likelier capital
    out = lm.generate_until([Instance("generate_until", {}, ("the city of", {"until": ["\n"], "max_gen_toks": 6}), 0)],
                            disable_tqdm=True)
    oracle = generate(model, ["the city of"], tokenizer=tokenizer, max_new_tokens=6).generations[0]
    assert out[0].strip() == oracle.text


@pytest.mark.slow
def test_page_in_headless_chromium(tta, models):
    """Type a sentence, wait for the colours, check the most surprising token against /v1/score."""
    if not Path(CHROMIUM).is_file() or shutil.which(CHROMIUM) is None:
        pytest.skip(f"no browser: {CHROMIUM} is absent (apt-get install --no-install-recommends chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
    sentence = "the cat sat on the democracy ."
    expected = tta.post("/v1/score", json={"input": sentence}).json()["data"][0]
    top = max(expected["tokens"], key=lambda t: t["surprisal"])
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 640})
            page.goto(tta.url + "/")
            page.fill("#sentences", "")
            page.type("#sentences", sentence, delay=5)
            page.fill("#second", "a dog lay on the rug .\nthe vote was held in june .")
            page.wait_for_function(f"document.querySelector('#results .tok') && document.querySelector('#results')"
                                   f".textContent.includes({sentence!r}) && document.querySelectorAll('#results "
                                   ".sentence').length === 1")
            page.wait_for_selector("#ranking table")
            spans = page.eval_on_selector_all("#results .tok", "els => els.map(e => [e.textContent, "
                                                                "parseFloat(e.dataset.surprisal), e.className])")
            shown = max(spans, key=lambda s: s[1])
            assert shown[0] == sentence[top["start"]:top["end"]] and "top" in shown[2]
            assert " ".join(s[0] for s in spans if "odd" in s[2]) == expected["odd_word_out"]["text"]
            shot = os.environ.get("MASKPLAY_SERVE_SCREENSHOT")
            page.screenshot(path=shot or None, full_page=True)
        finally:
            browser.close()

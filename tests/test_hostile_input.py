"""Issue 46: the server, lm-eval and model directories under hostile input. Each case was a 500, a traceback, an
unbounded allocation or a path outside the model directory before its fix; the server cases run in process
(FastAPI's TestClient on create_app), with the bundled gpt-mini-wiki."""

from __future__ import annotations

import argparse

import pytest

from maskplay.cli.common import read_input

pytest.importorskip("fastapi", reason="maskplay serve needs the serve extra: pip install 'maskplay[serve]'")
pytest.importorskip("httpx", reason="the serve tests need httpx (the serve extra)")

import torch  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from maskplay.precision import Precision  # noqa: E402
from maskplay.serve.app import create_app  # noqa: E402
from maskplay.serve.batching import Batcher  # noqa: E402
from maskplay.serve.service import ModelService  # noqa: E402


@pytest.fixture(scope="module")
def service() -> ModelService:
    return ModelService("gpt-mini-wiki", torch.device("cpu"), Precision.fp32)


def client_of(service: ModelService, **options) -> TestClient:
    limits = {k: options.pop(k) for k in list(options) if k.startswith("max_") and k != "max_body_bytes"}
    return TestClient(create_app(service, Batcher(**limits), **options), base_url="http://127.0.0.1")


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

"""The server's errors as OpenAI names them, so that clients which branch on them work: a max_tokens past the
model's context is `context_length_exceeded` (param max_tokens) however large, before the request's size is weighed,
streamed or not; OpenAI's error object has exactly message, type, param and code, with OpenAI's types. Checked in
process (FastAPI's TestClient on create_app, the bundled gpt-mini-wiki: 128 positions), and through the OpenAI
Python client where it is installed."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="maskplay serve needs the serve extra: pip install 'maskplay[serve]'")
pytest.importorskip("httpx", reason="the serve tests need httpx (the serve extra)")

import torch  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from maskplay.runtime.precision import Precision  # noqa: E402
from maskplay.tasks.serve.app import create_app  # noqa: E402
from maskplay.tasks.serve.batching import Batcher  # noqa: E402
from maskplay.tasks.serve.errors import error_body  # noqa: E402
from maskplay.tasks.serve.guards import default_allowed_hosts  # noqa: E402
from maskplay.tasks.serve.service import ModelService  # noqa: E402

BASE = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def service() -> ModelService:
    return ModelService("gpt-mini-wiki", torch.device("cpu"), Precision.fp32)


@pytest.fixture(scope="module")
def client(service):
    app = create_app(service, Batcher(), allowed_hosts=default_allowed_hosts("127.0.0.1"))
    with TestClient(app, base_url=BASE) as c:
        yield c


def openai_error(response, status: int = 400) -> dict:
    """OpenAI's error object, exactly: {"error": {"message", "type", "param", "code"}}."""
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["error"] and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("max_tokens", [127, 128, 200, 20_000, 10**9, 2**70])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("prompts", [1, 3])
def test_max_tokens_past_the_context_is_context_length_exceeded(client, service, max_tokens, stream, prompts):
    found = openai_error(client.post("/v1/completions", json={"prompt": ["the cat"] * prompts if prompts > 1
                                                              else "the cat", "max_tokens": max_tokens,
                                                              "stream": stream}))
    assert found == {**found, "type": "invalid_request_error", "param": "max_tokens",
                     "code": "context_length_exceeded"}
    assert f"max_tokens {max_tokens}" in found["message"] and str(service.max_tokens) in found["message"]


def test_the_largest_max_tokens_the_context_holds_is_answered(client, service):
    most = service.max_tokens - len(service.prefix) - len(service.suffix) - 1
    response = client.post("/v1/completions", json={"prompt": [5], "max_tokens": most})
    assert response.status_code == 200, response.text
    found = openai_error(client.post("/v1/completions", json={"prompt": [5], "max_tokens": most + 1}))
    assert found["code"] == "context_length_exceeded" and f"at most {most}" in found["message"]


def test_a_prompt_that_leaves_no_room_for_max_tokens_names_the_prompt(client):
    found = openai_error(client.post("/v1/completions", json={"prompt": "the cat " * 70, "max_tokens": 10}))
    assert (found["param"], found["code"]) == ("prompt", "context_length_exceeded")


def test_a_request_over_the_servers_size_within_the_context_is_still_request_too_large(client):
    found = openai_error(client.post("/v1/completions", json={"prompt": ["the cat"] * 5000, "n": 16,
                                                              "max_tokens": 64}))
    assert found["code"] == "request_too_large"


@pytest.mark.parametrize("status,kind", [(400, "invalid_request_error"), (404, "invalid_request_error"),
                                         (413, "invalid_request_error"), (500, "server_error"),
                                         (503, "server_error")])
def test_error_types_are_openais(status, kind):
    assert error_body(status, "x")["error"]["type"] == kind


def test_the_openai_client_sees_the_code(client, service):
    openai = pytest.importorskip("openai")
    api = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", http_client=client, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        api.completions.create(model=service.name, prompt="the cat", max_tokens=10_000)
    assert err.value.code == "context_length_exceeded" and err.value.param == "max_tokens"
    assert err.value.body["type"] == "invalid_request_error"

"""The request bodies, in OpenAI's shape where OpenAI has the endpoint (and vLLM's for the tokenizer routes).

Fields a body has that are not listed here are ignored, as vLLM does (clients send `user`, `seed`, ...); a listed
field of the wrong type is a 400 naming it (maskplay.tasks.serve.errors)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import APIError

Prompt = str | list[str] | list[int] | list[list[int]]


class Request(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)  # strict: "3" is not a number, 1 is not a string

    model: str | None = None

    @model_validator(mode="after")
    def _no_lone_surrogates(self) -> Request:
        """JSON's \\ud800 escapes decode to a str no tokenizer can encode (a lone UTF-16 surrogate): a 400 naming
        the field, as invalid UTF-8 bytes are. An APIError, not a ValueError: pydantic would file the latter under
        no field."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            for k, text in enumerate([value] if isinstance(value, str) else value if isinstance(value, list) else []):
                if isinstance(text, str) and not is_utf8(text):
                    where = name if isinstance(value, str) else f"{name}[{k}]"
                    raise APIError(400, f"{where} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape not in a "
                                        "pair): not text", name, "invalid_value")
        return self


def is_utf8(text: str) -> bool:
    """Whether `text` can be encoded as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class EmbeddingRequest(Request):
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None  # OpenAI's truncation of the vector: refused unless it is the full width
    # maskplay's pooling options (maskplay.tasks.score.Embedder.encode)
    pooling: Literal["mean", "sif", "first", "last"] = "mean"
    layer: int = -1
    normalize: bool = False
    diagonal_mask: bool = True  # T-TA only: False lets each position see its own token
    static: bool = False
    overflow: Literal["error", "truncate", "window"] = "error"


class CompletionRequest(Request):
    prompt: Prompt
    max_tokens: int = Field(16, ge=0)
    temperature: float = Field(1.0, ge=0.0, le=2.0, strict=False)  # 0 = greedy; an int is a number here
    top_p: float = Field(1.0, gt=0.0, le=1.0, strict=False)
    n: int = Field(1, ge=1, le=16)
    stop: str | list[str] | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    stream: bool = False
    seed: int | None = Field(None, ge=0, lt=2**63)  # what torch.manual_seed takes (maskplay generate --seed)


class ScoreRequest(Request):
    input: str | list[str]
    explain: bool = True  # the odd word out and a plain-text explanation (maskplay score --explain)


class TokenizeRequest(Request):
    prompt: str
    add_special_tokens: bool = True  # vLLM's default: the family's frame ([SOS] ...) around the pieces


class DetokenizeRequest(Request):
    tokens: list[int]

"""What one request may ask of the served model: the limits `maskplay serve` takes at start (docs/guides/serving.md). No
import of the serve extra here: the command line reads the defaults without it."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the model (docs/guides/serving.md), each settable at `maskplay serve` start; a request
    over one is a 400 naming the option, before it reaches the queue."""

    pieces: int = 65536  # word pieces over all inputs of a /v1/score or /v1/embeddings request
    windows: int = 512  # windows an /v1/embeddings request with overflow "window" is split into
    generated: int = 16384  # prompts x n x max(max_tokens, 1) of a /v1/completions request

    def __post_init__(self) -> None:
        for name, option in (("pieces", "pieces"), ("windows", "windows"), ("generated", "tokens")):
            if getattr(self, name) < 1:
                raise ValueError(f"--max-request-{option} must be at least 1, got {getattr(self, name)}")


def windows_of(pieces: int, max_tokens: int) -> int:
    """How many windows of max_tokens - 2 pieces, advancing by half a window, a text of `pieces` pieces is
    scored or pooled in (score.passes.make_segments)."""
    width = max(1, max_tokens - 2)
    return 1 if pieces <= width else 1 + math.ceil((pieces - width) / max(1, width // 2))

"""Deprecated: `maskplay.generation` was both the families' generation helpers and the decoding task. The task is
now maskplay.decoding (generate, GenerationConfig, Generated, GenerationOutput, filter_logits, ...), the helpers
maskplay.generation_hooks (can_generate, forward_cached, last_real, ...). Importing a name from here still works
and warns (DeprecationWarning) with its new place."""

from __future__ import annotations

import warnings
from typing import Any

from . import decoding, generation_hooks

_HOOKS = ("Generative", "can_generate", "generating_families", "require_generative", "embed_at", "forward_cached",
          "last_real", "check_ids")
_DECODING = ("STRATEGIES", "TokenCallback", "GenerationConfig", "Generated", "GenerationOutput", "filter_logits",
             "default_stop_ids", "generate")
MOVED = {**{name: generation_hooks for name in _HOOKS}, **{name: decoding for name in _DECODING}}


def __getattr__(name: str) -> Any:
    if name not in MOVED:
        raise AttributeError(f"module 'maskplay.generation' has no attribute {name!r}")
    module = MOVED[name]
    warnings.warn(f"maskplay.generation is deprecated: import {name} from {module.__name__}", DeprecationWarning,
                  stacklevel=2)
    return getattr(module, name)

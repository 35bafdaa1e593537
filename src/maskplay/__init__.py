"""maskplay: Transformer language models whose family is defined by the attention mask.

Every family (T-TA, BERT, GPT, ELECTRA, UniLM, XLNet, GPT-BERT) and the main entry points: a model from a
directory (`MaskplayModel.from_pretrained`), `Scorer` and `Embedder` (maskplay.tasks.score), `generate`
(maskplay.tasks.decoding), `TrainConfig` (run it with maskplay.tasks.train.train), `load_finetuned`
(maskplay.tasks.finetune), `load_tokenizer`. The tasks are imported when first asked for, so `import maskplay` stays
the core and families.
(The tasks are maskplay.tasks' sub-packages; their old paths, maskplay.train and the like, still import with a
DeprecationWarning: maskplay._moved.)"""

from __future__ import annotations

import importlib
from typing import Any

from . import (
    _moved,  # noqa: F401  (its import hook: the modules' old paths still import, with a warning)
    registry,
)

__version__ = "0.2.0"

# The built-in families register themselves when maskplay.families is imported: on the first lookup of the table
# (registry.registered), or when a name below is first asked for. Nothing here imports torch, so that
# `maskplay --version` and `--help` answer at once.
registry.load_on_first_lookup("maskplay.families")

# name -> the module that defines it, imported on first use (the tasks sit above the families)
_ENTRY_POINTS = {"ModelConfig": "maskplay.config", "preset": "maskplay.config", "load_tokenizer": "maskplay.data.tokenizer",
                 **{name: "maskplay.families" for name in ("GPT", "TTA", "BertMLM", "Electra", "GPTBert", "MaskplayModel",
                                                           "UniLM", "XLNet", "build_model")},
                 "ModelOutput": "maskplay.nn.outputs",
                 "Scorer": "maskplay.tasks.score", "Embedder": "maskplay.tasks.score", "generate": "maskplay.tasks.decoding",
                 "TrainConfig": "maskplay.tasks.train", "load_finetuned": "maskplay.tasks.finetune"}
# the layers' packages, as attributes of the package (`maskplay.families.X` after `import maskplay`)
_SUBPACKAGES = ("config", "data", "families", "nn", "runtime", "tasks", "cli")

__all__ = ["ModelConfig", "preset", "TTA", "BertMLM", "GPT", "Electra", "UniLM", "XLNet", "GPTBert", "MaskplayModel",
           "build_model", "ModelOutput", "load_tokenizer", "Scorer", "Embedder", "generate", "TrainConfig",
           "load_finetuned"]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"maskplay.{name}")
    if name not in _ENTRY_POINTS:
        raise AttributeError(f"module 'maskplay' has no attribute {name!r}")
    return getattr(importlib.import_module(_ENTRY_POINTS[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_ENTRY_POINTS, *_SUBPACKAGES})

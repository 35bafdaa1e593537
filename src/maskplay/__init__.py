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

from . import _moved  # noqa: F401  (its import hook: the modules' old paths still import, with a warning)
from .config import ModelConfig, preset
from .data.tokenizer import load_tokenizer
from .families import GPT, TTA, BertMLM, Electra, GPTBert, MaskplayModel, UniLM, XLNet, build_model
from .nn.outputs import ModelOutput

__version__ = "0.2.0"

# name -> the module that defines it, imported on first use (the tasks sit above the families)
_ENTRY_POINTS = {"Scorer": "maskplay.tasks.score", "Embedder": "maskplay.tasks.score", "generate": "maskplay.tasks.decoding",
                 "TrainConfig": "maskplay.tasks.train", "load_finetuned": "maskplay.tasks.finetune"}

__all__ = ["ModelConfig", "preset", "TTA", "BertMLM", "GPT", "Electra", "UniLM", "XLNet", "GPTBert", "MaskplayModel",
           "build_model", "ModelOutput", "load_tokenizer", *_ENTRY_POINTS]


def __getattr__(name: str) -> Any:
    if name not in _ENTRY_POINTS:
        raise AttributeError(f"module 'maskplay' has no attribute {name!r}")
    return getattr(importlib.import_module(_ENTRY_POINTS[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_ENTRY_POINTS})

"""maskplay: Transformer language models whose family is defined by the attention mask.

Every family (T-TA, BERT, GPT, ELECTRA, UniLM, XLNet, GPT-BERT) and the main entry points: a model from a
directory (`MaskplayModel.from_pretrained`), `Scorer` and `Embedder` (maskplay.score), `generate`
(maskplay.decoding), `TrainConfig` (run it with maskplay.train.train), `load_finetuned` (maskplay.finetune),
`load_tokenizer`. The tasks are imported when first asked for, so `import maskplay` stays the core and families.
(`train` and `finetune` are the names of their sub-packages here: `maskplay.train` is the module, as Python binds a
submodule to its package's attribute once it is imported.)"""

from __future__ import annotations

import importlib
from typing import Any

from .config import ModelConfig, preset
from .families import GPT, TTA, BertMLM, Electra, GPTBert, MaskplayModel, UniLM, XLNet, build_model
from .outputs import ModelOutput
from .tokenizer import load_tokenizer

__version__ = "0.1.0"

# name -> the module that defines it, imported on first use (the tasks sit above the families)
_ENTRY_POINTS = {"Scorer": "maskplay.score", "Embedder": "maskplay.score", "generate": "maskplay.decoding",
                 "TrainConfig": "maskplay.train", "load_finetuned": "maskplay.finetune"}

__all__ = ["ModelConfig", "preset", "TTA", "BertMLM", "GPT", "Electra", "UniLM", "XLNet", "GPTBert", "MaskplayModel",
           "build_model", "ModelOutput", "load_tokenizer", *_ENTRY_POINTS]


def __getattr__(name: str) -> Any:
    if name not in _ENTRY_POINTS:
        raise AttributeError(f"module 'maskplay' has no attribute {name!r}")
    return getattr(importlib.import_module(_ENTRY_POINTS[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_ENTRY_POINTS})

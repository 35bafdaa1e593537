# ruff: noqa: I001 - the import order is the registration order, the order every list of families is given in
"""The families: one module each over the one backbone, every rule a family decides in its class (the
contract: base.py). Importing this package registers the built-in seven."""

from .base import MaskplayModel, build_model, families, family_class
from .tta import TTA
from .bert import BertMLM
from .gpt import GPT
from .electra import Electra
from .unilm import UniLM
from .xlnet import XLNet
from .gpt_bert import GPTBert
from . import hf  # noqa: F401 - the HuggingFace converters, and MaskplayModel.from_pretrained's reader of their directories

# name -> class for the built-in families (registry.FAMILIES also holds any family registered later)
FAMILY_CLASSES: dict[str, type[MaskplayModel]] = {cls.family: cls for cls in families()}

__all__ = ["BertMLM", "Electra", "GPT", "GPTBert", "TTA", "UniLM", "XLNet", "FAMILY_CLASSES", "MaskplayModel", "build_model",
           "families", "family_class"]

from .base import MaskplayModel, build_model, families, family_class
from .bert import BertMLM
from .electra import Electra
from .gpt import GPT
from .tta import TTA  # noqa: I001 (the registration order: the order names are listed in)
from .unilm import UniLM
from .xlnet import XLNet

# the built-in families, registered in this order by importing them above
FAMILY_CLASSES: dict[str, type[MaskplayModel]] = {cls.family: cls for cls in families()}

__all__ = ["BertMLM", "Electra", "GPT", "TTA", "UniLM", "XLNet", "FAMILY_CLASSES", "MaskplayModel", "build_model",
           "families", "family_class"]

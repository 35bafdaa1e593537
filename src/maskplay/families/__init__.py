from ..modeling import MaskplayModel
from .bert import BertMLM
from .gpt import GPT
from .tta import TTA

FAMILY_CLASSES: dict[str, type[MaskplayModel]] = {"tta": TTA, "bert": BertMLM, "gpt": GPT}

__all__ = ["BertMLM", "GPT", "TTA", "FAMILY_CLASSES"]

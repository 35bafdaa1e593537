from ..modeling import MaskplayModel
from .bert import BertMLM
from .electra import Electra
from .gpt import GPT
from .tta import TTA
from .unilm import UniLM
from .xlnet import XLNet

FAMILY_CLASSES: dict[str, type[MaskplayModel]] = {"tta": TTA, "bert": BertMLM, "gpt": GPT, "electra": Electra,
                                                  "unilm": UniLM, "xlnet": XLNet}

__all__ = ["BertMLM", "Electra", "GPT", "TTA", "UniLM", "XLNet", "FAMILY_CLASSES"]

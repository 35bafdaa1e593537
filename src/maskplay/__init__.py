"""maskplay: Transformer language models whose family is defined by the attention mask."""

from .config import ModelConfig, preset
from .families import GPT, TTA, BertMLM, Electra, GPTBert, MaskplayModel, UniLM, XLNet, build_model
from .outputs import ModelOutput

__version__ = "0.1.0"
__all__ = ["ModelConfig", "preset", "TTA", "BertMLM", "GPT", "Electra", "UniLM", "XLNet", "GPTBert", "MaskplayModel",
           "build_model", "ModelOutput"]

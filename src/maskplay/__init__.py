"""maskplay: Transformer language models whose family is defined by the attention mask."""

from .config import ModelConfig, preset
from .families import GPT, TTA, BertMLM, Electra, MaskplayModel, UniLM, build_model
from .outputs import ModelOutput

__version__ = "0.1.0"
__all__ = ["ModelConfig", "preset", "TTA", "BertMLM", "GPT", "Electra", "UniLM", "MaskplayModel", "build_model",
           "ModelOutput"]

"""Pretraining: one loop for every family, exact resumption, DDP under torchrun. See docs/guides/training.md."""

from .config import DataSection, ModelSection, OptimSection, RunSection, TrainConfig, load_train_config
from .loop import TrainResult, train

__all__ = ["TrainConfig", "ModelSection", "OptimSection", "DataSection", "RunSection", "load_train_config",
           "train", "TrainResult"]

from .dataset import TokenDataset, pad_batch

__all__ = ["TokenDataset", "pad_batch"]

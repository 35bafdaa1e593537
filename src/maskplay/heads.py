"""BERT's masked-LM head, exactly: Dense -> GELU -> LayerNorm -> x @ E_tok^T + b, the decoder being the
token-embedding table itself (passed in, never copied) with a separate per-token bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig


class LMHead(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: Tensor, embedding_weight: Tensor) -> Tensor:
        """Apply only to the positions being predicted: pass hidden[selected], not the whole sequence."""
        return F.linear(self.norm(F.gelu(self.dense(hidden))), embedding_weight, self.bias)

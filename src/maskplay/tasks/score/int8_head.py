"""The LM head for int8 scoring on a CPU without fast bf16: its transform as the model has it, and its vocabulary
projection (hidden x V, the largest matmul of a one-pass score: more multiply-adds than T-TA's three layers at
the paper's size) as uint8 activations x int8 weights, one weight scale per vocabulary row.

Why: with the encoder in int8 and the projection left in fp32, the projection takes most of the time of an int8
one-pass score (docs/results/precision.md). HuggingFace's documented int8 route (torch.ao quantize_dynamic)
quantises the projection too. The log-softmax stays fp32. The activations are quantised once per block of
ROW_BLOCK rows, so a row's log-probabilities depend slightly on the rows scored beside it, as in the int8
encoder."""

from __future__ import annotations

from torch import Tensor, nn

from ...nn.heads import projected_log_probs
from ...runtime.quant import Int8Linear


class Int8VocabularyHead:
    """log p(targets) from an LM head (heads.LMHead or heads.PlainLMHead) whose vocabulary projection runs in
    int8. The head and the embedding table are read once, at construction; the model is not changed. `projection`:
    that projection already made (an int8 copy's `int8_projection`, precision.quantize_int8), so that the weights
    are not held twice."""

    def __init__(self, head: nn.Module, embedding_weight: Tensor, projection: Int8Linear | None = None) -> None:
        self.head = head
        weight = head.weight(embedding_weight)
        self.projection = projection if projection is not None else Int8Linear.from_weight(weight, head.bias)
        self.vocab_size = weight.shape[0]

    def log_probs(self, hidden: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
        """log_softmax(transform(hidden) @ W.T + b)[n, targets[n]] in fp32, (N,), with W.T in int8; blocked and
        chunked as heads.linear_log_probs (heads.projected_log_probs)."""
        project = self.projection if temperature == 1.0 else lambda rows: self.projection(rows).div_(temperature)
        return projected_log_probs(self.head.transform(hidden.float()), project, self.vocab_size, targets)

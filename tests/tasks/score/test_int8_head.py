"""The int8 vocabulary projection of int8 scoring: the arithmetic it claims (int8 weights with a scale per
vocabulary row, uint8 activations quantised per block of rows, fp32 log-softmax), checked in float64, and its
distance from the fp32 head."""

from __future__ import annotations

import pytest
import torch

from maskplay.config import ModelConfig
from maskplay.nn.heads import ROW_BLOCK, LMHead, PlainLMHead, linear_log_probs
from maskplay.runtime.quant import quantize_activations
from maskplay.tasks.score.int8_head import Int8VocabularyHead


def config(lm_head: str) -> ModelConfig:
    return ModelConfig(vocab_size=700, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=128,
                       lm_head=lm_head)


def float64_oracle(head: Int8VocabularyHead, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """What the int8 head should compute: each block of ROW_BLOCK rows quantised on its own, the integer
    product dequantised, the log-softmax in float64."""
    x = head.head.transform(hidden.float())
    out = []
    for start in range(0, x.shape[0], ROW_BLOCK):
        q, scale, zero_point = quantize_activations(x[start:start + ROW_BLOCK])
        logits = head.projection.reference(q, scale, zero_point, torch.float64)
        out.append(torch.log_softmax(logits, -1).gather(1, targets[start:start + ROW_BLOCK, None])[:, 0])
    return torch.cat(out)


@pytest.mark.parametrize("lm_head", ["mlm", "tied", "untied"])
def test_int8_head_computes_its_arithmetic_and_stays_near_fp32(lm_head):
    torch.manual_seed(0)
    cfg = config(lm_head)
    head = (LMHead(cfg) if lm_head == "mlm" else PlainLMHead(cfg)).eval()
    with torch.no_grad():
        head.bias.normal_(0, 0.5) if lm_head == "mlm" else None
    embedding = torch.randn(cfg.vocab_size, cfg.hidden_size) * 0.5
    hidden = torch.randn(ROW_BLOCK + 37, cfg.hidden_size)  # two blocks, the second short
    targets = torch.randint(0, cfg.vocab_size, (hidden.shape[0],))
    int8 = Int8VocabularyHead(head, embedding)
    with torch.inference_mode():
        got = int8.log_probs(hidden, targets)
        want = float64_oracle(int8, hidden, targets)
        weight = embedding if lm_head != "untied" else head.decoder.weight
        fp32 = linear_log_probs(head.transform(hidden), weight, head.bias, targets)
    assert got.dtype == torch.float32 and got.shape == targets.shape
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=0)
    assert (got - fp32).abs().max() < 0.3  # int8 rounding (logits of std ~4 here), not a wrong weight or bias
    assert (got - fp32).abs().max() > 0  # it is the int8 path, not the fp32 one


def test_temperature_divides_the_int8_logits():
    torch.manual_seed(1)
    cfg = config("mlm")
    head = LMHead(cfg).eval()
    embedding = torch.randn(cfg.vocab_size, cfg.hidden_size)
    hidden, targets = torch.randn(9, cfg.hidden_size), torch.randint(0, cfg.vocab_size, (9,))
    int8 = Int8VocabularyHead(head, embedding)
    with torch.inference_mode():
        x = head.transform(hidden)
        q, scale, zero_point = quantize_activations(x)
        logits = int8.projection.reference(q, scale, zero_point, torch.float64) / 2.5
        want = torch.log_softmax(logits, -1).gather(1, targets[:, None])[:, 0]
        got = int8.log_probs(hidden, targets, temperature=2.5)
    torch.testing.assert_close(got.double(), want, atol=2e-4, rtol=0)

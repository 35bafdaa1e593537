"""The key/value projection of a slice of rows (XLNet's content stream: the first L rows of the two streams
concatenated) equals the layers' own outputs and runs as one 2-D matrix product, not as a batched product against
one copy of the weight per sequence (what F.linear does with a strided 3-D input: 11 % of XLNet's scoring time at
the tta-paper size, benchmarks/probes/profile_score.py)."""

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from maskplay import preset
from maskplay.families import build_model
from maskplay.nn.attention.dense import fused_linear


class Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_a_strided_slice_is_projected_by_one_matmul():
    torch.manual_seed(0)
    key, value = nn.Linear(16, 8), nn.Linear(16, 8)
    both = torch.randn(4, 2 * 6, 16)
    rows = both[:, :6]  # not viewable as (24, 16)
    assert not rows.is_contiguous()
    with torch.no_grad(), Ops() as ops:  # at inference F.linear batches a strided input against copied weights
        k, v = fused_linear(rows, key, value)
    torch.testing.assert_close(k, key(rows))
    torch.testing.assert_close(v, value(rows))
    assert not any(name.startswith("bmm") for name in ops.names), ops.names


def test_xlnet_scoring_copies_no_weight_per_sequence():
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="xlnet")).eval()
    ids = torch.randint(7, model.config.vocab_size, (3, 9))
    weights = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}

    class WeightBatches(TorchDispatchMode):
        """The batched products whose second operand has a weight's shape (transposed, as F.linear uses it)."""

        def __init__(self) -> None:
            super().__init__()
            self.found: list[tuple[int, ...]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func.__name__.startswith("bmm") and tuple(args[1].shape[-2:][::-1]) in weights:
                self.found.append(tuple(args[1].shape))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), WeightBatches() as batches:
        model(ids, left_to_right=True)
    assert not batches.found, batches.found

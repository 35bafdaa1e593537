"""run.compile: the trainer's forward and backward under torch.compile give the eager run's weights (to rounding),
with the head's plain cross-entropy standing in for its CPU-fused one inside the compiled graph."""

from __future__ import annotations

import pytest
import torch

from maskplay.train import train
from tests.test_train import NO_DROPOUT, make_data, small_config, weights

pytestmark = pytest.mark.slow  # compiling takes a minute or more on a busy 2-core machine


def test_compiled_training_gives_the_eager_weights(tmp_path):
    data = make_data(tmp_path / "data")
    common = [*NO_DROPOUT, "optim.max_steps=3", "optim.warmup_steps=1", "run.precision=fp32", "data.bucket_window=1"]
    eager = train(small_config(data, tmp_path / "eager", *common, family="gpt"))
    compiled = train(small_config(data, tmp_path / "compiled", *common, "run.compile=true", family="gpt"))
    a, b = weights(eager.run_dir), weights(compiled.run_dir)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")

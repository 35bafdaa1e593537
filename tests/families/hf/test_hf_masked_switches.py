"""The switches the HuggingFace masked LMs need (docs/guides/switches.md): head_gelu_tanh (the LM head's GELU
in its tanh approximation) and relative_buckets / relative_max_distance (the disentangled table's buckets); each
default builds today's model, and config.json leaves them out at their defaults."""

from __future__ import annotations

import json

import pytest
import torch

from maskplay import preset
from maskplay.config import ModelConfig
from maskplay.families import MaskplayModel, build_model


def test_head_gelu_tanh_is_the_tanh_formula():
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="bert", head_gelu_tanh=True)).eval()
    h = torch.randn(5, 32)
    x = model.head.dense(h)
    tanh = 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x ** 3)))
    torch.testing.assert_close(model.head.transform(h), model.head.norm(tanh))
    exact = build_model(preset("tiny", family="bert"))
    exact.load_state_dict(model.state_dict())
    assert not torch.allclose(exact.head.transform(h), model.head.transform(h), atol=1e-6)


def test_relative_buckets_size_the_table_and_default_to_gpt_berts():
    default = build_model(preset("tiny", family="bert", positions="disentangled"))
    assert default.encoder.relative.table.shape[0] == 2 * 32 - 1
    wide = build_model(preset("tiny", family="bert", positions="disentangled", relative_buckets=8,
                              relative_max_distance=40))
    assert wide.encoder.relative.table.shape[0] == 15
    assert int(wide.encoder.relative.row.max()) == 14  # the farthest distance reads the last row
    with pytest.raises(ValueError, match="relative_buckets"):
        ModelConfig(family="bert", relative_buckets=64, relative_max_distance=20)


def test_defaults_stay_out_of_config_json_and_changes_round_trip(tmp_path):
    assert not {"head_gelu_tanh", "relative_buckets", "relative_max_distance"} & set(ModelConfig().to_dict())
    model = build_model(preset("tiny", family="bert", positions="disentangled", relative_buckets=8,
                               relative_max_distance=40, head_gelu_tanh=True))
    model.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    assert (data["relative_buckets"], data["relative_max_distance"], data["head_gelu_tanh"]) == (8, 40, True)
    assert MaskplayModel.from_pretrained(tmp_path).config == model.config
    assert "head_gelu_tanh = True" in model.config.architecture_changes()  # no HuggingFace BERT counterpart

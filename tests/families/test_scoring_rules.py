"""The scoring contract's small types: a ScoreRule refuses what the scorer could not run, and the encoder's pass
modes cannot be combined with what they exclude."""

from __future__ import annotations

import pytest
import torch

from maskplay import preset
from maskplay.families import build_model, families
from maskplay.nn.cache import KVCache
from maskplay.nn.pass_modes import Cached, LastLayerRows
from maskplay.nn.score_rules import BATCHINGS, ScoreRule


def test_a_rule_refuses_an_unknown_batching_head_or_stray_parts():
    with pytest.raises(ValueError, match="batching must be one of"):
        ScoreRule("x", "two-pass")
    with pytest.raises(ValueError, match="head must be one of"):
        ScoreRule("x", head="logits")
    with pytest.raises(ValueError, match="parts go with batching 'sum'"):
        ScoreRule("x", parts=("pll",))
    with pytest.raises(ValueError, match="parts go with batching 'sum'"):
        ScoreRule("x", "sum")


def test_every_family_declares_runnable_rules():
    """Each rule's batching is one the scorer runs, and a sum names rules of the same family."""
    for cls in families():
        assert cls.score_methods == tuple(rule.name for rule in cls.score_rules)
        for rule in cls.score_rules:
            assert rule.batching in BATCHINGS
            for part in rule.parts:
                assert cls.score_rule(part).batching != "sum"


def test_a_cached_pass_takes_no_key_value_source_and_rows_stay_in_range():
    model = build_model(preset("tiny", family="gpt")).eval()
    h = torch.zeros(2, 1, model.config.hidden_size)
    cache = KVCache(model.config.num_layers)
    _, mask = cache.extend(torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="not with kv"):
        model.encoder(h, mask, kv=h, mode=Cached(cache))
    with pytest.raises(ValueError, match=r"last_layer_rows must hold a \(2,\) tensor"):
        model.encoder(torch.zeros(2, 4, model.config.hidden_size), torch.ones(2, 1, 4, 4, dtype=torch.bool),
                      mode=LastLayerRows(torch.tensor([0, 4])))

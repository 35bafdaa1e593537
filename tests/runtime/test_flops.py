"""FLOP counts: a family's own count (its training_flops_per_token, in its family's file) against the count
written out by hand from the paper's description of its step."""

from __future__ import annotations

from maskplay.config import preset
from maskplay.families.xlnet import training_flops
from maskplay.runtime.flops import family_training_flops_per_token, training_flops_per_token


def block(h: int, f: int, n: int) -> int:
    return 8 * h * h + 4 * h * f + 4 * n * h  # Q, K, V, O; the FFN's two matrices; scores and values over n keys


def test_xlnet_counts_its_two_streams():
    config = preset("tiny", family="xlnet")  # 2 layers, hidden 32, FFN 64, vocabulary 100, K = 6
    layer = block(32, 64, 16)
    # the content stream skips the last layer, the query stream runs 1/6 of the rows, the tied head at those rows
    assert family_training_flops_per_token(config, 16) == 3 * (1 * layer + 2 * layer / 6 + 2 * 32 * 100 / 6)
    # HuggingFace: both streams over every row of every layer, the head still at the targets alone
    assert training_flops(config, 16, full=True) == 3 * (4 * layer + 2 * 32 * 100 / 6)


def test_electra_counts_both_towers():
    config = preset("tiny", family="electra")  # generator: a quarter as wide (hidden 8, 1 head, FFN 16)
    forward = (2 * block(32, 64, 16) + 2 * 32 * 32 + 2 * 32  # the discriminator's blocks and replaced-token head
               + 2 * block(8, 16, 16) + 0.15 * (2 * 8 * 32 + 2 * 32 * 100)  # the generator's at 15 % of tokens
               + 2 * 32 * 8)  # the generator's projection from the shared embedding width
    assert family_training_flops_per_token(config, 16) == 3 * forward


def test_a_family_without_its_own_count_gets_the_one_tower_formula():
    config = preset("tiny", family="bert")
    assert family_training_flops_per_token(config, 16) == training_flops_per_token(config, 16, 0.15)

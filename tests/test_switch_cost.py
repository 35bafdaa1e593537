"""benchmarks/probes/switch_cost.py: each variant takes out the piece it names (its overrides change the recipe's config
or optimizer there, and nothing else), and the plain variant takes out every piece."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "probes"))
import switch_cost  # noqa: E402
from gpu_train_speed import model_config, shapes  # noqa: E402

from maskplay.config import apply_overrides  # noqa: E402


def changed(family: str, model_sets: list[str]) -> set[str]:
    recipe = model_config(shapes(True)["babylm"], family, recipe=True)
    other = apply_overrides(recipe, model_sets)
    fields = {f.name for f in dataclasses.fields(recipe)}
    out = {name for name in fields - {"sections"} if getattr(recipe, name) != getattr(other, name)}
    if family == "gpt-bert" and recipe.gpt_bert != other.gpt_bert:
        out |= {f"gpt_bert.{k}" for k, v in vars(recipe.gpt_bert).items() if getattr(other.gpt_bert, k) != v}
    return out


def test_each_variant_takes_out_the_piece_it_names():
    expected = {"no disentangled positions (learned absolute)": {"positions"},
                "no DenseFormer (plain residual)": {"denseformer"}, "GELU feed-forward (not GEGLU)": {"ffn"},
                "no value gate": {"value_gate"},
                "no attention-output and FFN-inner norms": {"attention_output_norm", "ffn_inner_norm"},
                "no z-loss (GPT-BERT)": {"gpt_bert.z_loss"}, "fused AdamW (not LAMB)": set(),
                "with hidden dropout 0.1 (as pretrain trains)": {"hidden_dropout"}}
    variants = switch_cost.variants_for("gpt-bert", None)
    assert set(variants) == {"recipe", "plain (every piece out)", *expected}
    for name, fields in expected.items():
        assert changed("gpt-bert", variants[name][0]) == fields, name
    assert variants["fused AdamW (not LAMB)"][1] == ["optimizer=adamw"]
    every = set().union(*(f for n, f in expected.items() if not n.startswith("with")))
    assert changed("gpt-bert", variants["plain (every piece out)"][0]) == every
    assert changed("gpt-bert", variants["recipe"][0]) == set()
    # the other families have no z-loss to take out; --pieces picks variants by a word of their names
    tta = switch_cost.variants_for("tta", None)
    assert "no z-loss (GPT-BERT)" not in tta and changed("tta", tta["plain (every piece out)"][0]) == every - {
        "gpt_bert.z_loss"}
    assert list(switch_cost.variants_for("gpt", ["DenseFormer"])) == ["recipe", "no DenseFormer (plain residual)"]

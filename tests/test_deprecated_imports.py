"""Modules that moved keep their old import paths as deprecation shims: every old name is the same object as at its
new place, and importing it warns (DeprecationWarning) naming that place; an unknown name is an AttributeError."""

from __future__ import annotations

import importlib

import pytest

# old module -> (one name, its new module)
MOVED = {
    "maskplay.generation": [("generate", "maskplay.tasks.decoding"), ("GenerationConfig", "maskplay.tasks.decoding"),
                            ("forward_cached", "maskplay.nn.generation_hooks"),
                            ("can_generate", "maskplay.nn.generation_hooks")],
    "maskplay.convert": [("from_hf", "maskplay.families.hf"), ("maskplay_to_hf_bert", "maskplay.families.hf.bert"),
                         ("gpt_to_hf_bert_lm_head", "maskplay.families.hf.gpt"),
                         ("finetuned_to_hf_sequence_classification", "maskplay.tasks.finetune.convert")],
    "maskplay.convert_xlnet": [("hf_xlnet_to_maskplay", "maskplay.families.hf.xlnet")],
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_import_path_warns_and_gives_the_same_object(old):
    module = importlib.import_module(old)
    for name, new in MOVED[old]:
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {name} from {new}$"):
            value = getattr(module, name)
        assert value is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_from_import_of_an_old_name_warns():
    with pytest.warns(DeprecationWarning, match="import generate from maskplay.tasks.decoding"):
        from maskplay.generation import generate
    from maskplay.tasks.decoding import generate as new

    assert generate is new


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_name_still_resolves(old):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning):
        for name in module.MOVED:
            getattr(module, name)

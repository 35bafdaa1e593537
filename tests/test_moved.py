"""maskplay._moved: an old import path warns (DeprecationWarning) naming the new one and gives the same
module object; a package's submodules follow it; a module whose names moved one by one serves each name from its new
module; a path that never existed is still a ModuleNotFoundError."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from maskplay._moved import MODULES, NAMES


def _fresh(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


@pytest.mark.parametrize("old", sorted(MODULES))
def test_an_old_module_path_warns_and_is_the_same_module(old):
    new = importlib.import_module(f"maskplay.{MODULES[old]}")
    _fresh(f"maskplay.{old}")
    with pytest.warns(DeprecationWarning, match=rf"maskplay\.{old} is deprecated: import maskplay\.{MODULES[old]}$"):
        module = importlib.import_module(f"maskplay.{old}")
    assert module is new
    assert module.__spec__.name == new.__name__  # the real module keeps its own spec


def test_a_submodule_of_an_old_package_is_the_new_submodule():
    from maskplay.tasks.train import loop

    _fresh("maskplay.train")
    with pytest.warns(DeprecationWarning, match="import maskplay.tasks.train.loop$"):
        import maskplay.train.loop as old
    assert old is loop


def test_from_import_of_an_old_module_gives_its_names():
    from maskplay.nn.masks import causal

    _fresh("maskplay.masks")
    with pytest.warns(DeprecationWarning, match="maskplay.masks is deprecated"):
        from maskplay.masks import causal as old
    assert old is causal


def test_the_new_paths_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module("maskplay.nn.backbone")
        importlib.import_module("maskplay.tasks.score")


@pytest.mark.parametrize("name", ["maskplay.no_such_module", "maskplay.train.no_such_module", "maskplay.nn.backbone2"])
def test_an_unknown_path_is_still_not_found(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_every_name_of_a_name_by_name_module_resolves():
    for old, names in NAMES.items():
        module = importlib.import_module(f"maskplay.{old}")
        for name, new in names.items():
            with pytest.warns(DeprecationWarning, match=f"maskplay.{old} is deprecated: import {name} from maskplay.{new}$"):
                value = getattr(module, name)
            assert value is getattr(importlib.import_module(f"maskplay.{new}"), name)

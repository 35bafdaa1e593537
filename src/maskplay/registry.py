"""The one table of families: name -> family class. maskplay.families.base fills it as each family class is
defined (a family registers itself by subclassing); everything else looks a family up here by name and asks it,
never compares names. The core reads only the config rules (FamilyRules) so that it never imports a family."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Protocol


class FamilyRules(Protocol):
    """What the core asks of a family when it checks a config."""

    family: ClassVar[str]
    two_streams: ClassVar[bool]  # XLNet's content + query streams: Transformer-XL positions, no single-stream kinds
    xl_positions: ClassVar[bool]  # one stream that may take positions = "transformer-xl" too (GPT, Transformer-XL's)
    settings: ClassVar[type | None]  # the family's own config section, a dataclass ([model.<section_name>])

    @classmethod
    def check_config(cls, config: Any) -> None: ...  # a ModelConfig (not imported: config.py imports this module)


FAMILIES: dict[str, Any] = {}  # name -> family class (a maskplay.families.base.MaskplayModel subclass)

# Modules that register families, imported on the first lookup: the package root names the built-in families here
# (`import maskplay` imports neither them nor torch, so that the command line starts fast), and a lookup through the
# functions below finds them whatever was imported first. The core itself never names a family module.
_TO_LOAD: list[str] = []


def load_on_first_lookup(module: str) -> None:
    """Import `module` (which registers families) before the next lookup of the table."""
    if module not in _TO_LOAD:
        _TO_LOAD.append(module)


def registered() -> dict[str, Any]:
    """FAMILIES, once the modules named by load_on_first_lookup are imported."""
    while _TO_LOAD:
        importlib.import_module(_TO_LOAD.pop(0))  # taken off first: a lookup while it is imported does not recurse
    return FAMILIES


def register(cls: Any) -> None:
    """Add a family class under its `family` name; a second class with a taken name is refused, unless it
    subclasses the registered one (a family refined in place, e.g. in a test)."""
    name = cls.family
    old = FAMILIES.get(name)
    if old is not None and old is not cls and not issubclass(cls, old) and old.__qualname__ != cls.__qualname__:
        raise ValueError(f"family {name!r} is already registered by {old.__module__}.{old.__qualname__}")
    FAMILIES[name] = cls


def family_names() -> tuple[str, ...]:
    """The registered families, in registration order (the built-in seven first)."""
    return tuple(registered())


def section_name(family: str) -> str:
    """The TOML / JSON name of a family's own config section: its name as an identifier ("gpt-bert": gpt_bert)."""
    return family.replace("-", "_")


def family_sections() -> dict[str, type]:
    """The registered families' own config sections (a family's `settings`) by section name, in registration
    order: what ModelConfig holds besides its fields (config.FamilySections)."""
    return {section_name(name): cls.settings for name, cls in registered().items() if getattr(cls, "settings", None)}


def rules(name: str) -> FamilyRules:
    if name not in registered():
        raise ValueError(f"family must be one of {family_names()}, got {name!r}")
    return FAMILIES[name]

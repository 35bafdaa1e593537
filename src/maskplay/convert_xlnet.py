"""Deprecated: the XLNet converter's old address; it is maskplay.families.hf.xlnet. Importing a name from here still
works and warns (DeprecationWarning) with its new module."""

from __future__ import annotations

from typing import Any

from .convert import moved
from .families.hf import xlnet

MOVED = {name: xlnet for name in ("XLNET_SPECIAL_IDS", "config_from_hf_xlnet", "hf_xlnet_config_dict",
                                  "hf_xlnet_to_maskplay", "maskplay_to_hf_xlnet")}


def __getattr__(name: str) -> Any:
    return moved("maskplay.convert_xlnet", MOVED, name)

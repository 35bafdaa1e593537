"""HuggingFace XLNetLMHeadModel <-> maskplay XLNet: the converter is maskplay.families.hf.xlnet; these names stay
importable from here."""

from .families.hf.xlnet import (
    XLNET_SPECIAL_IDS,
    config_from_hf_xlnet,
    hf_xlnet_config_dict,
    hf_xlnet_to_maskplay,
    maskplay_to_hf_xlnet,
)

__all__ = ["XLNET_SPECIAL_IDS", "config_from_hf_xlnet", "hf_xlnet_config_dict", "hf_xlnet_to_maskplay",
           "maskplay_to_hf_xlnet"]

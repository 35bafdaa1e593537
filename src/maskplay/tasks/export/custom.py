"""maskplay -> HuggingFace custom code: config.json (with auto_map) and the weights under the names of the
standalone modeling file (hf_code/modeling_maskplay.py, copied beside them). Which switches that file implements is
stated here; any other switch set away from the family's default is refused in one line naming it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

if TYPE_CHECKING:
    from ...families import MaskplayModel

CODE_DIR = Path(__file__).resolve().parent / "hf_code"
CODE_FILES = ("configuration_maskplay.py", "modeling_maskplay.py")

# the architecture switches (config.ARCHITECTURE_SWITCHES) modeling_maskplay.py implements, at any value but those
# listed against them
IMPLEMENTED = {"positions": ("transformer-xl",), "key_size": (), "norm": (), "norm_placement": (), "ffn": (),
               "ffn_bias": (), "share_layers": (), "norm_affine": (), "attention_output_norm": (),
               "ffn_inner_norm": (), "gelu_tanh": (), "value_gate": (), "denseformer": (), "head_norm": (),
               "weight_init": (), "attention": ("synthesizer-random", "synthesizer-dense", "lsra"),
               "talking_heads": (True,)}
PREFIX = "maskplay."  # the backbone's weights in the head classes (base_model_prefix)


def unsupported(model: MaskplayModel) -> list[str]:
    """The switches of `model` the standalone file does not implement, as "name = value"."""
    config = model.config
    found = [change for change in config.architecture_changes()
             if change.split(" = ")[0] not in IMPLEMENTED
             or getattr(config, change.split(" = ")[0]) in IMPLEMENTED[change.split(" = ")[0]]]
    return found


def check_exportable(model: MaskplayModel) -> dict[str, Any]:
    """The family's hf_code rules, or a one-line ValueError saying what cannot leave as custom code."""
    rules = type(model).hf_code
    family = model.config.family
    if type(model).two_streams:
        raise ValueError(f"family {family!r} has no HuggingFace custom-code export: it predicts with two attention "
                         "streams (content and query) over a permuted order, which the one-stream modeling_maskplay.py "
                         "does not implement; export it to its twin (XLNetLMHeadModel: maskplay export --to-hf MODEL "
                         "--out DIR, without --custom-code)")
    if rules is None:
        parts = f": write a tower alone first (maskplay export MODEL --export {'|'.join(model.parts)})" \
            if model.parts else ""
        raise ValueError(f"family {family!r} has no HuggingFace custom-code export{parts}")
    bad = unsupported(model)
    if bad:
        raise ValueError(f"{', '.join(bad)}: modeling_maskplay.py does not implement this switch, so a {family} model "
                         "with it cannot be exported as custom code")
    return rules


def custom_config(model: MaskplayModel, ids: dict[str, int]) -> dict[str, Any]:
    """config.json of the custom-code export: maskplay's sizes and switches, the family's mask, auto_map."""
    rules = check_exportable(model)
    c = model.config
    classes = {"AutoConfig": "configuration_maskplay.MaskplayConfig", "AutoModel": "modeling_maskplay.MaskplayModel"}
    lm_head = rules.get("lm_head", True)  # False: a head the file lacks (ELECTRA's discriminator): AutoModel only
    if rules["mask"] != "causal" and lm_head:
        classes["AutoModelForMaskedLM"] = "modeling_maskplay.MaskplayForMaskedLM"
    if rules["causal_mask"] is not None:
        classes["AutoModelForCausalLM"] = "modeling_maskplay.MaskplayForCausalLM"
    main = "MaskplayForCausalLM" if rules["mask"] == "causal" else "MaskplayForMaskedLM" if lm_head else "MaskplayModel"
    fields = ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "ffn_width",
              "max_position", "type_vocab_size", "embedding_size", "positions", "attention_bias", "key_width", "norm",
              "norm_placement", "ffn", "ffn_bias", "share_layers", "norm_affine", "attention_output_norm",
              "ffn_inner_norm", "gelu_tanh", "value_gate", "denseformer", "head_norm", "layer_norm_eps",
              "initializer_range", "mask_token_id")
    return {"architectures": [main], "model_type": "maskplay", "auto_map": classes,
            **{name: getattr(c, name) for name in fields}, "separator_id": c.separator_id,
            "mask": rules["mask"], "causal_mask": rules["causal_mask"], "query_stream": rules["query_stream"],
            "segments": rules["segments"], "causal_buckets": bool(model.causal), "maskplay_family": c.family,
            "torch_dtype": "float32", **ids, "tie_word_embeddings": False}


BACKBONE = ("embeddings", "embeddings_project", "encoder")  # the standalone MaskplayModel's modules


def custom_state(model: MaskplayModel) -> dict[str, Tensor]:
    """The weights under the standalone file's names: the backbone under maskplay., the head under head. With
    hf_code's lm_head False (AutoModel only), the backbone alone, unprefixed, as MaskplayModel names it."""
    if not (type(model).hf_code or {}).get("lm_head", True):
        return backbone_state(model)
    return {(key if key.startswith("head.") else PREFIX + key): value for key, value in _float32(model).items()}


def backbone_state(model: MaskplayModel) -> dict[str, Tensor]:
    """The backbone's weights alone, as the standalone MaskplayModel (AutoModel) names them."""
    return {key: value for key, value in _float32(model).items() if key.split(".")[0] in BACKBONE}


def _float32(model: MaskplayModel) -> dict[str, Tensor]:
    return {key: (value.float() if value.is_floating_point() else value).detach().contiguous().cpu()
            for key, value in model.state_dict().items()}


def code_files() -> dict[str, str]:
    return {name: (CODE_DIR / name).read_text(encoding="utf-8") for name in CODE_FILES}

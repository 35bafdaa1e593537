"""What the HuggingFace masked-LM converters beyond BERT share (roberta.py, distilbert.py, albert.py, deberta.py):
each architecture is a maskplay BertMLM with some switches. A converter states its weight-name maps, how it reads
its config, and any table it reshapes; this base builds the model, names a missing weight by its HuggingFace
name, and loads strictly. They read HuggingFace only: their models export as BertForMaskedLM where the
architecture allows (the bert converter is the family's export), and refuse in one line where it does not."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ...config import ModelConfig
from ..base import MaskplayModel
from ..bert import BertMLM
from .common import HFCheckpoint, HFConverter, check_tied, from_hf_keys, to_hf_keys

# hidden_act values maskplay computes exactly: the exact GELU, or its tanh approximation (the feed-forward's
# gelu_tanh and the head's head_gelu_tanh, as HuggingFace applies hidden_act in both places)
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")


def activation_fields(act: Any, what: str) -> dict[str, Any]:
    """The ModelConfig switches of a HuggingFace hidden_act, or a one-line error naming it."""
    if act == "gelu":
        return {}
    if act in TANH_GELUS:
        return {"gelu_tanh": True, "head_gelu_tanh": True}
    raise ValueError(f"{what}: hidden_act {act!r} is not supported (gelu, {', '.join(TANH_GELUS)})")


def positive_ints(hf_config: Any, names: tuple[str, ...], what: str) -> None:
    """Keys check_hf_types does not know (DistilBERT's dim, ALBERT's groups, ...): a positive integer each."""
    for name in names:
        value = getattr(hf_config, name, None)
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"{what}: {name!r} = {value!r} is not a positive integer")


def special_layout(vocab: int, **ids: int) -> dict[str, Any]:
    """ModelConfig special-token fields for a vocabulary whose tokenizer is absent (`ids`: pad, unk, sos, eos,
    mask), so that a conversion without tokenizer.json still has its own ids, not bert-base-uncased's."""
    fields = {f"{k}_token_id": min(v, vocab - 1) for k, v in ids.items()}
    return {**fields, "sep_token_id": fields["eos_token_id"], "special_token_ids": sorted(set(fields.values()))}


class MaskedConverter(HFConverter):
    """One HuggingFace masked LM -> BertMLM. A subclass sets the maps and config_from_hf; `encoders` maps the
    headless architectures (RobertaModel, ... as sentence-transformers ships them) to the prefix the masked
    class puts on the same weights."""

    family = "bert"
    model_type = ""  # config.json's model_type (recognise)
    top: dict[str, str] = {}
    layers = ""
    layer_map: dict[str, str] | None = None
    skip: tuple[str, ...] = ()  # buffers HuggingFace may save
    decoder = ("", "")  # (tied decoder weight, word embeddings) in HuggingFace's names
    decoder_bias = ("", "")  # (decoder bias, the head's bias): the same tensor when both are saved
    segment_table = True  # whether the architecture has a token-type table (to name a missing one)
    head_prefix = ""  # the LM head's weights start so (recognise)
    encoders: dict[str, str] = {}

    def recognise(self, data: dict[str, Any], state: dict[str, Tensor]) -> str | None:
        if data.get("model_type") == self.model_type and any(k.startswith(self.head_prefix) for k in state):
            return self.architectures[0]
        return None

    def describe(self, architecture: str, model: MaskplayModel, paired: bool = False) -> str:
        changes = model.config.architecture_changes()
        return f"bert ({architecture}{': ' + ', '.join(changes) if changes else ''})"

    def config_from_hf(self, hf_config: Any) -> ModelConfig:
        raise NotImplementedError

    def reshape(self, state: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
        """HuggingFace tables maskplay holds in another shape (RoBERTa's offset positions, ...): none here."""
        return state

    def state_from_hf(self, hf_state: dict[str, Tensor], hf_config: Any) -> dict[str, Tensor]:
        """The renamed weights; the tied decoder must be the word table and its bias the head's."""
        decoder, word = self.decoder
        check_tied(hf_state, decoder, word)
        bias, head_bias = self.decoder_bias
        if bias in hf_state and head_bias in hf_state and not torch.equal(hf_state[bias], hf_state[head_bias]):
            raise ValueError(f"{bias} differs from {head_bias}")
        state = self.reshape(dict(hf_state), hf_config)
        return from_hf_keys(state, self.top, self.layers, skip=(*self.skip, decoder, bias), layer_map=self.layer_map)

    def hf_name(self, key: str, value: Tensor) -> str:
        """The HuggingFace name of maskplay weight `key` (the maskplay name where it has none)."""
        try:
            (name,) = to_hf_keys({key: value}, self.top, self.layers, self.layer_map, segment_table=False)
        except ValueError:
            return key
        return name

    def from_hf(self, architecture: str, checkpoint: HFCheckpoint, generator: HFCheckpoint | None = None,
                special_ids: dict[str, Any] | None = None) -> MaskplayModel:
        if generator is not None:
            raise ValueError(f"a generator goes with an ElectraForPreTraining discriminator, not a {architecture}")
        hf_config, state = checkpoint
        config = self.config_from_hf(hf_config)
        if special_ids:
            config = dataclasses.replace(config, **special_ids)
        model = BertMLM(config)
        converted = self.state_from_hf(state, hf_config)
        want = model.state_dict()
        missing = sorted(self.hf_name(k, v) for k, v in want.items() if k not in converted)
        if missing:
            raise ValueError(f"the {architecture} checkpoint is missing weights: {missing}")
        model.load_strict(converted, source=f"the converted {architecture} weights")
        return model.eval()

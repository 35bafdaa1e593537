"""Property test (Hypothesis): a valid HuggingFace directory (tiny random BERT, RoBERTa, GPT-2 and LLaMA models
built with transformers' own classes) whose config.json is mutated - values of another type, sign or size, keys
removed, nested junk, huge numbers, RoPE settings - either loads through the library's loader
(MaskplayModel.from_pretrained) or fails with one line (ValueError / FileNotFoundError), never another exception.
As in tests/test_fuzz.py: a quick run of 150 derandomized examples in `make test`, a long run of 10,000 with
MASKPLAY_FUZZ_LONG=1 (`make fuzz`). An address-space cap turns an allocation the checks missed into a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("hypothesis")

from hypothesis import event  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from maskplay.families import MaskplayModel  # noqa: E402
from tests.families.hf.test_hf_hostile import BUILDERS  # noqa: E402
from tests.test_fuzz import fuzz, one_line  # noqa: E402
from tests.test_hostile_input import address_space_cap  # noqa: E402

KINDS = ("bert", "roberta", "gpt2", "llama", "distilbert", "albert", "deberta-v3", "xlm-roberta", "GPTNeoXForCausalLM",
         "OPTForCausalLM", "Qwen2ForCausalLM", "electra-discriminator", "electra-generator", "xlnet", "bert-decoder")


def _build(kind: str, directory: Path) -> None:
    """The tiny models of the other HuggingFace tests (no tokenizer: the converter's layout of special tokens)."""
    import torch

    from tests.families.hf.test_hf_causal import build
    from tests.families.hf.test_hf_masked import CASES

    if kind in BUILDERS:
        BUILDERS[kind](directory)
        return
    torch.manual_seed(0)
    small = dict(vocab_size=160, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=40)
    if kind in CASES:
        model = CASES[kind][0]()
    elif kind.startswith("electra"):
        config = transformers.ElectraConfig(**small, embedding_size=16)
        model = (transformers.ElectraForPreTraining if kind.endswith("discriminator") else
                 transformers.ElectraForMaskedLM)(config)
    elif kind == "xlnet":
        model = transformers.XLNetLMHeadModel(transformers.XLNetConfig(vocab_size=160, d_model=32, n_layer=2, n_head=4,
                                                                       d_inner=48))
    elif kind == "bert-decoder":
        model = transformers.BertLMHeadModel(transformers.BertConfig(**small, is_decoder=True))
    else:
        model = build(kind)
    model.save_pretrained(directory)
# keys a mutation may add: what the converters read that the saved configs may leave out
EXTRA_KEYS = ("architectures", "model_type", "rope_scaling", "rope_parameters", "rope_theta", "partial_rotary_factor",
              "num_key_value_heads", "head_dim", "is_decoder", "tie_word_embeddings", "type_vocab_size", "n_inner",
              "position_embedding_type", "hidden_act", "activation_function", "pad_token_id", "bos_token_id",
              "eos_token_id", "use_sliding_window", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """kind -> (a directory whose config.json each example rewrites, the valid config)."""
    root = tmp_path_factory.mktemp("hf-fuzz")
    out = {}
    for kind in KINDS:
        (root / kind).mkdir()
        _build(kind, root / kind)
        out[kind] = (root / kind, json.loads((root / kind / "config.json").read_text()))
    return out


JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 200), st.integers(-10**30, 10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
              st.sampled_from(["BertForMaskedLM", "LlamaForCausalLM", "gelu", "silu", "linear", "yarn", "default",
                               "bert", "llama", "gpt2", "roberta", "absolute", "rope_type", "type"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10) | st.sampled_from(
        ["rope_type", "type", "factor", "rope_theta", "partial_rotary_factor"]), inner, max_size=3)),
    max_leaves=6,
)


def _derived(value):
    """Values near a valid one: its sign flipped, zero, one more, halved, as a string, in a list."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return st.sampled_from([str(value), [value], None])
    return st.sampled_from([-value, 0, value + 1, value // 2 if isinstance(value, int) else value / 2, str(value),
                            [value], float(value) if isinstance(value, int) else int(value), 10**12])


@st.composite
def mutated(draw) -> tuple[str, dict]:
    kind = draw(st.sampled_from(KINDS))
    config = dict(_CONFIGS[kind])
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(sorted(set(config) | set(EXTRA_KEYS))))
        how = draw(st.sampled_from(["drop", "junk", "near"]))
        if how == "drop":
            config.pop(key, None)
        elif how == "junk" or key not in config:
            config[key] = draw(JUNK)
        else:
            config[key] = draw(_derived(config[key]))
    return kind, config


_CONFIGS: dict[str, dict] = {}  # the valid configs, for the strategy (filled by the fixture's first use)


@pytest.fixture(scope="module")
def configs(valid):
    _CONFIGS.update({kind: config for kind, (_, config) in valid.items()})
    yield valid
    for directory, config in valid.values():
        (directory / "config.json").write_text(json.dumps(config))


def _check(configs, case) -> None:
    kind, config = case
    directory = configs[kind][0]
    (directory / "config.json").write_text(json.dumps(config))  # NaN / Infinity as Python's json writes them
    try:
        with address_space_cap():
            MaskplayModel.from_pretrained(directory)
    except (ValueError, FileNotFoundError) as err:
        one_line(err)
        event("refused in one line")
    else:
        event("loaded")


test_a_mutated_config_loads_or_is_one_line, test_a_mutated_config_loads_or_is_one_line_long = \
    fuzz(case=mutated())(_check)


def test_the_unmutated_configs_load(valid):
    """The property's base: each valid config loads (so the examples' errors are their mutations')."""
    for directory, config in valid.values():
        (directory / "config.json").write_text(json.dumps(config))
        MaskplayModel.from_pretrained(directory)

"""HuggingFace masked LMs beyond BERT: a random model of each architecture, built from its config
class, saved with save_pretrained and read back, converted with `maskplay convert --from-hf`, gives the same fp32
logits (1e-5) and maskplay's PLL score gives a naive HuggingFace PLL loop's numbers; what cannot be exact is
refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import MaskplayModel
from maskplay.tasks.score import Scorer
from tests.families.hf.hf_masked_support import naive_pll, random_ids, randomised, saved_and_reloaded, write_tokenizer
from tests.tasks.score.test_score_support import SENTENCES, one_thread  # noqa: F401 (autouse fixture)

transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=160, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
ROBERTA_SPECIALS = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>", 159: "<mask>"}
BERT_SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
ALBERT_SPECIALS = {0: "<pad>", 1: "<unk>", 2: "[CLS]", 3: "[SEP]", 4: "[MASK]"}
DEBERTA_SPECIALS = {0: "[PAD]", 1: "[CLS]", 2: "[SEP]", 3: "[UNK]", 159: "[MASK]"}


def roberta(cls_config, cls_model):
    return cls_model(cls_config(**SIZES, max_position_embeddings=40, type_vocab_size=1, pad_token_id=1,
                                bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5))


CASES = {
    "roberta": (lambda: roberta(transformers.RobertaConfig, transformers.RobertaForMaskedLM), ROBERTA_SPECIALS),
    "xlm-roberta": (lambda: roberta(transformers.XLMRobertaConfig, transformers.XLMRobertaForMaskedLM),
                    ROBERTA_SPECIALS),
    "distilbert": (lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
        vocab_size=160, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=40)), BERT_SPECIALS),
    "distilbert-sinusoidal": (lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
        vocab_size=160, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=40,
        sinusoidal_pos_embds=True)), BERT_SPECIALS),
    "albert": (lambda: transformers.AlbertForMaskedLM(transformers.AlbertConfig(
        **SIZES, embedding_size=16, max_position_embeddings=40, hidden_act="gelu_new")), ALBERT_SPECIALS),
    # position_buckets 8 over distances up to 39: the log buckets act within these sentences
    "deberta-v3": (lambda: transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        **SIZES, max_position_embeddings=40, type_vocab_size=0, relative_attention=True, position_buckets=8,
        max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
        position_biased_input=False, layer_norm_eps=1e-7)), DEBERTA_SPECIALS),
    "deberta-v3-new-head": (lambda: transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        **SIZES, max_position_embeddings=40, type_vocab_size=0, relative_attention=True, position_buckets=8,
        pos_att_type="p2c|c2p", norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False,
        legacy=False)), DEBERTA_SPECIALS),
}


@pytest.fixture(scope="module", params=list(CASES))
def converted(request, tmp_path_factory):
    """(HuggingFace model as reloaded, maskplay model, its tokenizer, mask id, HuggingFace directory)."""
    from maskplay.cli.convert import convert_from_hf

    build, specials = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    hf = saved_and_reloaded(randomised(build()), root / "hf")
    mask = write_tokenizer(root / "hf", specials, hf.config.vocab_size)
    convert_from_hf(root / "hf", root / "maskplay")
    model = MaskplayModel.from_pretrained(root / "maskplay").eval()
    return hf, model, load_tokenizer(root / "maskplay"), mask, root / "hf"


def test_logits_match_huggingface(converted):
    hf, model, tok, _, _ = converted
    pad = model.config.pad_token_id
    ids = random_ids(hf.config.vocab_size, {pad}, (3, 23))
    attn = torch.ones_like(ids)
    attn[1, 15:] = 0
    ids[1, 15:] = pad  # RoBERTa reads its positions off the padding
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=attn).logits
        got = model(ids, attention_mask=attn).logits
    torch.testing.assert_close(got[attn.bool()], want[attn.bool()], atol=1e-5, rtol=1e-5)


def test_pll_matches_a_naive_huggingface_loop(converted):
    hf, model, tok, mask, _ = converted
    assert model.config.mask_token_id == mask and tok.special.mask == mask  # the tokenizer's layout, not BERT's
    got = Scorer(model, tok, batch_size=5).score(SENTENCES)
    for sentence, score in zip(SENTENCES, got, strict=True):
        want = naive_pll(hf, tok.encode(sentence), mask)
        assert score.token_log_probs == pytest.approx(want, abs=1e-5)
        assert score.log_prob == pytest.approx(sum(want), abs=1e-4)


def test_missing_weight_is_named_by_its_huggingface_name(converted, tmp_path):
    from safetensors.torch import load_file, save_file

    from maskplay.cli.convert import convert_from_hf

    *_, hf_dir = converted
    (tmp_path / "hf").mkdir()
    state = load_file(str(hf_dir / "model.safetensors"))
    name = next(k for k in state if k.endswith("layer.1.output.dense.weight") or k.endswith("ffn_output.weight")
                or k.endswith("layer.1.ffn.lin2.weight"))
    del state[name]
    save_file(state, str(tmp_path / "hf" / "model.safetensors"))
    (tmp_path / "hf" / "config.json").write_text((hf_dir / "config.json").read_text())
    with pytest.raises(ValueError, match=f"missing weights: \\['{name}'\\]"):
        convert_from_hf(tmp_path / "hf", tmp_path / "out")


def test_debertas_detection_head_is_left_out_as_huggingface_leaves_it(tmp_path):
    from safetensors.torch import load_file, save_file

    from maskplay.families.hf import from_hf
    from maskplay.families.hf.directory import read_hf_dir

    build, _ = CASES["deberta-v3"]
    randomised(build()).save_pretrained(tmp_path / "hf")
    state = load_file(str(tmp_path / "hf" / "model.safetensors"))
    model = from_hf(*read_hf_dir(tmp_path / "hf")[:1], read_hf_dir(tmp_path / "hf")[1:])
    state["mask_predictions.classifier.weight"] = torch.zeros(1, 32)  # the v3 checkpoints' RTD head
    save_file(state, str(tmp_path / "hf" / "model.safetensors"))
    again = from_hf(*read_hf_dir(tmp_path / "hf")[:1], read_hf_dir(tmp_path / "hf")[1:])
    assert all(torch.equal(again.state_dict()[k], v) for k, v in model.state_dict().items())


def test_architecture_is_recognised_without_architectures(converted, tmp_path):
    from maskplay.families.hf.directory import read_hf_dir

    hf, *_, hf_dir = converted
    data = json.loads((hf_dir / "config.json").read_text())
    named = data.pop("architectures")
    (tmp_path / "config.json").write_text(json.dumps(data))
    shutil.copyfile(hf_dir / "model.safetensors", tmp_path / "model.safetensors")  # a link out would be refused
    assert read_hf_dir(tmp_path)[0] == named[0]


def _refused(tmp_path, model, match):
    from maskplay.cli.convert import convert_from_hf

    model.save_pretrained(tmp_path / "hf")
    with pytest.raises(ValueError, match=match):
        convert_from_hf(tmp_path / "hf", tmp_path / "out")


def test_what_cannot_be_exact_is_refused_in_one_line(tmp_path):
    deberta = dict(**SIZES, max_position_embeddings=40, relative_attention=True, position_buckets=8,
                   pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True)
    _refused(tmp_path / "a", transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        **deberta, position_biased_input=True)), "position_biased_input = true.*no maskplay counterpart")
    _refused(tmp_path / "b", transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        **deberta, position_biased_input=False, conv_kernel_size=3)), "conv_kernel_size")
    _refused(tmp_path / "c", transformers.AlbertForMaskedLM(transformers.AlbertConfig(
        **{**SIZES, "num_hidden_layers": 4}, embedding_size=16, num_hidden_groups=2)), "num_hidden_groups = 2")
    _refused(tmp_path / "d", transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        **SIZES, hidden_act="relu")), "hidden_act 'relu' is not supported")


def test_an_unknown_architecture_lists_the_registry(tmp_path):
    """ModernBERT is refused (docs/guides/huggingface.md: per-layer local/global attention with two rotary bases); the list
    of what converts is the registry's, so every registered converter shows."""
    from maskplay.families.hf import architectures
    from maskplay.families.hf.directory import read_hf_dir

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["ModernBertForMaskedLM"],
                                                      "model_type": "modernbert"}))
    from safetensors.torch import save_file
    save_file({"x": torch.zeros(1)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="'ModernBertForMaskedLM' is not supported") as err:
        read_hf_dir(tmp_path)
    assert all(a in str(err.value) for a in architectures()) and "DebertaV2ForMaskedLM" in str(err.value)

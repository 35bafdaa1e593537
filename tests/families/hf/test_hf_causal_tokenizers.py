"""A causal HuggingFace directory with its own tokenizer.json (GPT-2's byte-level BPE with `<|endoftext|>` only;
LLaMA's `<unk>` / `<s>` / `</s>` with a post-processor adding `<s>`) loads and scores through `maskplay score DIR` and
Scorer.from_pretrained(DIR): a sentence is scored after the bos token, equal to a naive HuggingFace loop (its own
tokenizer, bos prepended) to 1e-4 nats; the roles maskplay's names do not find come from tokenizer_config.json /
config.json, and the missing ones fall back to the end token (maskplay.data.tokenizer.hf_roles)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tokenizers import Tokenizer as HFTokenizer  # noqa: E402
from tokenizers import decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

from maskplay.cli import main  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.tasks.score import Scorer  # noqa: E402

CORPUS = ["the cat sat on the mat.", "a dog ran in the park, and the cat saw it.", "Café déjà vu: naïve façade!",
          "The quick brown fox jumps over the lazy dog."] * 5
SENTENCES = ["the cat sat on the mat.", "Café déjà vu, a naïve dog!", "the park 😀"]
SMALL = dict(num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)


def byte_bpe(specials: list[str], template: str | None = None) -> HFTokenizer:
    """GPT-2's pipeline (ByteLevel pre-tokenizer and decoder) trained on CORPUS; `specials` first, or, for GPT-2's
    layout, `<|endoftext|>` added last."""
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    if not specials:
        tok.add_special_tokens(["<|endoftext|>"])
    tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=[("<s>", 1)]) if template \
        else processors.ByteLevel(trim_offsets=False)
    return tok


def random_weights(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.15) if p.dim() >= 2 else p.copy_(1 + 0.2 * torch.randn_like(p))
    return model.eval()


def gpt2_dir(directory):
    """GPT-2's layout: one special, <|endoftext|>, the last id, bos = eos = it, no pad."""
    backend = byte_bpe([])
    eot = backend.token_to_id("<|endoftext|>")
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>",
                                         eos_token="<|endoftext|>", unk_token="<|endoftext|>").save_pretrained(directory)
    config = transformers.GPT2Config(vocab_size=backend.get_vocab_size(), n_embd=48, n_layer=2, n_head=4,
                                     n_positions=64, bos_token_id=eot, eos_token_id=eot)
    random_weights(transformers.GPT2LMHeadModel(config)).save_pretrained(directory)
    return eot


def llama_dir(directory):
    """LLaMA's layout: <unk> <s> </s> at 0-2, a post-processor that adds <s> (maskplay adds it itself), no pad."""
    backend = byte_bpe(["<unk>", "<s>", "</s>"], template="<s> $A")
    transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                         unk_token="<unk>").save_pretrained(directory)
    config = transformers.LlamaConfig(vocab_size=backend.get_vocab_size(), hidden_size=48, intermediate_size=80,
                                      num_key_value_heads=2, bos_token_id=1, eos_token_id=2, **SMALL)
    random_weights(transformers.LlamaForCausalLM(config)).save_pretrained(directory)


def naive(directory, sentences):
    """HuggingFace's own tokenizer and model: the sum of log P(piece | bos, pieces before) of each sentence."""
    hf_tok = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    out = []
    for sentence in sentences:
        ids = [hf_tok.bos_token_id, *hf_tok(sentence, add_special_tokens=False).input_ids]
        with torch.no_grad():
            log_probs = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
        out.append(sum(log_probs[i - 1, ids[i]].item() for i in range(1, len(ids))))
    return out


@pytest.mark.parametrize("build", [gpt2_dir, llama_dir], ids=["gpt2", "llama"])
def test_maskplay_score_dir_equals_huggingface(build, tmp_path, capsys):
    build(tmp_path)
    want = naive(tmp_path, SENTENCES)
    capsys.readouterr()
    assert main(["score", str(tmp_path), *SENTENCES, "--format", "jsonl", "--precision", "fp32"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["method"] for r in rows] == ["causal"] * len(SENTENCES)
    assert [r["log_prob"] for r in rows] == pytest.approx(want, abs=1e-4)
    scores = Scorer.from_pretrained(tmp_path, precision="fp32").score(SENTENCES)
    assert [s.log_prob for s in scores] == pytest.approx(want, abs=1e-4)


def test_convert_from_hf_then_score_the_maskplay_directory(tmp_path, capsys):
    """`convert --from-hf` copies tokenizer_config.json beside tokenizer.json: the maskplay directory scores too."""
    gpt2_dir(tmp_path / "hf")
    want = naive(tmp_path / "hf", SENTENCES)
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mp")]) == 0
    assert "copied tokenizer.json, tokenizer_config.json" in capsys.readouterr().out
    scores = Scorer.from_pretrained(tmp_path / "mp", precision="fp32").score(SENTENCES)
    assert [s.log_prob for s in scores] == pytest.approx(want, abs=1e-4)


def test_gpt2_roles_fall_back_to_the_end_token(tmp_path):
    """GPT-2 has <|endoftext|> only: every role is it, and it is a special id (as the converter's config says)."""
    eot = gpt2_dir(tmp_path)
    special = load_tokenizer(tmp_path).special
    assert (special.sos, special.eos, special.pad, special.unk, special.mask, special.sep, special.all) == \
        (eot, eot, eot, eot, eot, eot, (eot,))
    assert load_tokenizer(tmp_path / "tokenizer.json").special == special  # the file, read with its directory


def test_llama_roles_and_a_pad_from_config(tmp_path):
    llama_dir(tmp_path)
    special = load_tokenizer(tmp_path).special
    assert (special.sos, special.eos, special.unk, special.pad, special.mask, special.all) == (1, 2, 0, 2, 2, (0, 1, 2))
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "pad_token_id": 0}))
    assert load_tokenizer(tmp_path).special.pad == 0


def test_config_ids_name_the_roles_without_tokenizer_config(tmp_path):
    """Only config.json's bos / eos ids (a list: its first), as an older GPT-2 directory has them."""
    eot = gpt2_dir(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "eos_token_id": [eot, 5]}))
    assert load_tokenizer(tmp_path).special.eos == eot


def test_no_start_or_end_token_is_one_line_error(tmp_path, capsys):
    gpt2_dir(tmp_path)
    (tmp_path / "tokenizer_config.json").unlink()
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "bos_token_id": None, "eos_token_id": None}))
    with pytest.raises(ValueError, match="has no start or end token"):
        load_tokenizer(tmp_path)
    capsys.readouterr()
    assert main(["score", str(tmp_path), "a cat"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no start or end token" in err and "Traceback" not in err


def test_a_maskplay_tokenizer_without_mask_is_still_refused(tmp_path):
    """Outside a HuggingFace directory the roles do not fall back: a masked model must have its [MASK]."""
    byte_bpe(["[PAD]", "[UNK]", "[CLS]", "[SEP]"]).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="none of the special tokens"):
        load_tokenizer(tmp_path)

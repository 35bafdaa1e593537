"""Random HuggingFace ELECTRA models (discriminator, generator, the pair), converted, give the same logits as
maskplay's; converted back, HuggingFace's own classes load them and give the same logits again."""

import json
import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from safetensors.torch import load_file  # noqa: E402

from maskplay import BertMLM, MaskplayModel  # noqa: E402
from maskplay.cli import main  # noqa: E402
from maskplay.families import Electra  # noqa: E402
from maskplay.families.hf import from_hf, hf_electra_config, to_hf  # noqa: E402
from maskplay.families.hf.electra import (  # noqa: E402
    config_from_hf_electra,
    hf_electra_discriminator_to_maskplay,
    hf_electra_generator_to_maskplay,
    maskplay_to_hf_electra,
    maskplay_to_hf_electra_discriminator,
    maskplay_to_hf_electra_generator,
)

VOCAB = 120


def hf_config(hidden: int, heads: int, intermediate: int, embedding: int = 16) -> "transformers.ElectraConfig":
    return transformers.ElectraConfig(vocab_size=VOCAB, embedding_size=embedding, hidden_size=hidden,
                                      num_hidden_layers=2, num_attention_heads=heads, intermediate_size=intermediate,
                                      max_position_embeddings=40, type_vocab_size=2)


def randomised(model, seed: int):
    """Random LayerNorms and biases, so that a missed transform, bias or projection shows."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.5)
    return model.eval()


def discriminator(embedding: int = 16, seed: int = 0):
    torch.manual_seed(seed)
    return randomised(transformers.ElectraForPreTraining(hf_config(32, 4, 64, embedding)), seed)


def generator(hidden: int = 8, heads: int = 1, intermediate: int = 16, embedding: int = 16, seed: int = 1,
              embeddings_from=None):
    torch.manual_seed(seed)
    model = randomised(transformers.ElectraForMaskedLM(hf_config(hidden, heads, intermediate, embedding)), seed)
    if embeddings_from is not None:  # the official pair: one embedding module for both towers
        model.electra.embeddings.load_state_dict(embeddings_from.electra.embeddings.state_dict())
    return model


@pytest.fixture(scope="module")
def batch():
    """Padding in two rows, and token types."""
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, VOCAB, (3, 13), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 9:] = 0
    attn[2, 4:] = 0
    types = torch.randint(0, 2, ids.shape, generator=g)
    return ids, attn, types


def hf_logits(model, batch):
    ids, attn, types = batch
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=attn, token_type_ids=types).logits[attn.bool()]


def our_logits(model, batch):
    ids, attn, types = batch
    with torch.no_grad():
        return model(ids, attention_mask=attn, token_type_ids=types).logits[attn.bool()]


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def checkpoint(model):
    return model.config, model.state_dict()


# ---- the discriminator ------------------------------------------------------------------------------------


@pytest.mark.parametrize("embedding", [16, 32], ids=["embedding16-hidden32", "embedding-equals-hidden"])
def test_discriminator_logits_match_huggingface(batch, embedding):
    hf = discriminator(embedding)
    model = Electra(config_from_hf_electra(hf.config)).eval()
    model.load_strict(hf_electra_discriminator_to_maskplay(hf.state_dict()))
    assert model.generator is None and (model.embeddings_project is None) == (embedding == 32)
    close(our_logits(model, batch), hf_logits(hf, batch))
    assert our_logits(model, batch).shape == (int(batch[1].sum()),)


@pytest.mark.parametrize("embedding", [16, 32])
def test_discriminator_back_to_huggingface(batch, embedding):
    hf = discriminator(embedding)
    model = from_hf("ElectraForPreTraining", checkpoint(hf))
    fresh = transformers.ElectraForPreTraining(hf_electra_config(model.config)).eval()
    fresh.load_state_dict(maskplay_to_hf_electra_discriminator(model.state_dict()), strict=True)
    close(hf_logits(fresh, batch), our_logits(model, batch))


# ---- the generator ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("hidden,heads", [(8, 1), (16, 2)])
def test_generator_logits_match_huggingface(batch, hidden, heads):
    hf = generator(hidden, heads, 2 * hidden)
    model = BertMLM(config_from_hf_electra(generator=hf.config)).eval()
    model.load_strict(hf_electra_generator_to_maskplay(hf.state_dict()))
    assert model.config.embedding_size == 16 and (model.embeddings_project is None) == (hidden == 16)
    close(our_logits(model, batch), hf_logits(hf, batch))
    assert model.head.bias.abs().sum() > 0  # generator_lm_head.bias was carried over


def test_generator_back_to_huggingface(batch):
    hf = generator(16, 2, 32)
    model = from_hf("ElectraForMaskedLM", checkpoint(hf))
    fresh = transformers.ElectraForMaskedLM(hf_electra_config(model.config)).eval()
    fresh.load_state_dict(maskplay_to_hf_electra_generator(model.state_dict()), strict=True)
    close(hf_logits(fresh, batch), our_logits(model, batch))


def test_generator_decoder_must_be_the_word_embeddings():
    state = dict(generator().state_dict())
    state["generator_lm_head.weight"] = state["generator_lm_head.weight"] + 1
    with pytest.raises(ValueError, match="generator_lm_head.weight differs"):
        hf_electra_generator_to_maskplay(state)


# ---- the pair ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_pair_gives_a_full_electra(batch, tied):
    disc = discriminator()
    gen = generator(8, 1, 16, embeddings_from=disc if tied else None)
    model = from_hf("ElectraForPreTraining", checkpoint(disc), checkpoint(gen))
    options = model.config.electra
    assert options.generator and options.generator_hidden_fraction == 0.25 and options.tie_embeddings is tied
    assert model.shares_embeddings is tied
    assert any(k.startswith("generator.embeddings.") for k in model.state_dict()) is not tied
    close(our_logits(model, batch), hf_logits(disc, batch))
    close(our_logits(model.generator, batch), hf_logits(gen, batch))
    # and back: the two HuggingFace models, each with its own copy of the embeddings
    (disc_cfg, disc_state), (gen_cfg, gen_state) = to_hf(model)
    assert disc_cfg["architectures"] == ["ElectraForPreTraining"] and gen_cfg["architectures"] == ["ElectraForMaskedLM"]
    for cls, cfg, state, want in ((transformers.ElectraForPreTraining, disc_cfg, disc_state, disc),
                                  (transformers.ElectraForMaskedLM, gen_cfg, gen_state, gen)):
        fresh = cls(transformers.ElectraConfig(**cfg)).eval()
        fresh.load_state_dict(state, strict=True)
        close(hf_logits(fresh, batch), hf_logits(want, batch))


def test_tied_pair_state_splits_into_two_models():
    disc = discriminator()
    model = from_hf("ElectraForPreTraining", checkpoint(disc), checkpoint(generator(embeddings_from=disc)))
    d, g = maskplay_to_hf_electra(model.state_dict())
    assert torch.equal(d["electra.embeddings.word_embeddings.weight"], g["electra.embeddings.word_embeddings.weight"])
    assert torch.equal(g["generator_lm_head.weight"], g["electra.embeddings.word_embeddings.weight"])


def test_generator_larger_than_discriminator_is_an_error():
    with pytest.raises(ValueError, match="generator_hidden_fraction.*larger"):
        from_hf("ElectraForPreTraining", checkpoint(discriminator()), checkpoint(generator(64, 8, 128)))


def test_generator_off_the_scaling_is_an_error():
    # hidden 8 = 1/4 of 32, but 2 heads where the scaling gives 1
    with pytest.raises(ValueError, match="generator_hidden_fraction = 0.25"):
        from_hf("ElectraForPreTraining", checkpoint(discriminator()), checkpoint(generator(8, 2, 16)))


def test_mismatched_embedding_sizes_are_an_error():
    with pytest.raises(ValueError, match="embedding_size"):
        from_hf("ElectraForPreTraining", checkpoint(discriminator(16)), checkpoint(generator(8, 1, 16, embedding=8)))


def test_unsupported_activation_is_an_error():
    cfg = hf_config(32, 4, 64)
    cfg.hidden_act = "relu"
    with pytest.raises(ValueError, match="hidden_act"):
        config_from_hf_electra(cfg)


# ---- strictness -------------------------------------------------------------------------------------------


def test_missing_or_unexpected_weights_are_errors():
    disc = discriminator()
    state = dict(disc.state_dict())
    with pytest.raises(ValueError, match="discriminator_predictions.extra.weight"):
        hf_electra_discriminator_to_maskplay({**state, "discriminator_predictions.extra.weight": torch.zeros(1)})
    missing = {k: v for k, v in state.items() if k != "electra.embeddings_project.bias"}
    with pytest.raises(ValueError, match=r"missing weights: \['electra.embeddings_project.bias'\]"):
        from_hf("ElectraForPreTraining", (disc.config, missing))
    gen_state = dict(generator().state_dict())
    del gen_state["generator_lm_head.bias"]
    with pytest.raises(ValueError, match="generator_lm_head.bias"):
        from_hf("ElectraForMaskedLM", (generator().config, gen_state))
    with pytest.raises(ValueError, match="mlm_head.dense.weight"):
        maskplay_to_hf_electra_discriminator({**hf_electra_discriminator_to_maskplay(state),
                                              "mlm_head.dense.weight": torch.zeros(1)})


# ---- the command line -------------------------------------------------------------------------------------


def save_hf(model, directory, tokenizer: bool = False):
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer:
        from maskplay.data.tokenizer import wordpiece_from_vocab

        vocab = directory / "vocab.txt"
        specials = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
        vocab.write_text("".join(specials.get(i, f"tok{i}") + "\n" for i in range(VOCAB)))
        wordpiece_from_vocab(vocab).save(str(directory / "tokenizer.json"))
    return directory


def test_cli_pair_round_trip(tmp_path, batch, capsys):
    disc = discriminator()
    gen = generator(embeddings_from=disc)
    save_hf(disc, tmp_path / "disc", tokenizer=True)
    save_hf(gen, tmp_path / "gen")
    assert main(["convert", "--from-hf", str(tmp_path / "disc"), "--generator", str(tmp_path / "gen"),
                 "--out", str(tmp_path / "mp")]) == 0
    assert "tied embeddings" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "mp").iterdir()) == ["config.json", "manifest.json", "model.safetensors",
                                                                  "tokenizer.json"]
    model = MaskplayModel.from_pretrained(tmp_path / "mp").eval()
    assert model.config.family == "electra" and model.config.mask_token_id == 103
    close(our_logits(model, batch), hf_logits(disc, batch))

    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "hf-disc"),
                 "--generator-out", str(tmp_path / "hf-gen")]) == 0
    for directory, cls, want in ((tmp_path / "hf-disc", transformers.ElectraForPreTraining, disc),
                                 (tmp_path / "hf-gen", transformers.ElectraForMaskedLM, gen)):
        assert json.loads((directory / "config.json").read_text())["architectures"] == [cls.__name__]
        back, info = cls.from_pretrained(directory, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
        close(hf_logits(back.eval(), batch), hf_logits(want, batch))
    assert (tmp_path / "hf-disc" / "tokenizer.json").is_file()


@pytest.mark.parametrize("kind", ["discriminator", "generator", "bert"])
def test_cli_single_model_round_trip(tmp_path, batch, capsys, kind):
    if kind == "bert":
        torch.manual_seed(3)
        cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=40)
        hf = randomised(transformers.BertForMaskedLM(cfg), 3)
    else:
        hf = discriminator() if kind == "discriminator" else generator()
    save_hf(hf, tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mp")]) == 0
    assert "no tokenizer.json" in capsys.readouterr().out
    model = MaskplayModel.from_pretrained(tmp_path / "mp").eval()
    assert model.config.family == ("electra" if kind == "discriminator" else "bert")
    close(our_logits(model, batch), hf_logits(hf, batch))
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "back")]) == 0
    back, info = type(hf).from_pretrained(tmp_path / "back", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    close(hf_logits(back.eval(), batch), hf_logits(hf, batch))


def test_cli_refuses_pickled_weights(tmp_path, capsys):
    directory = save_hf(discriminator(), tmp_path / "hf")
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"not unpickled")
    capsys.readouterr()  # transformers' own progress bars
    assert main(["convert", "--from-hf", str(directory), "--out", str(tmp_path / "mp")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pytorch_model.bin" in err and "safe_serialization=True" in err
    assert not (tmp_path / "mp").exists()


def test_cli_failure_leaves_no_output(tmp_path, capsys):
    disc = discriminator()
    save_hf(disc, tmp_path / "disc")
    save_hf(generator(64, 8, 128), tmp_path / "gen")  # larger than the discriminator
    assert main(["convert", "--from-hf", str(tmp_path / "disc"), "--generator", str(tmp_path / "gen"),
                 "--out", str(tmp_path / "mp")]) == 2
    assert "generator_hidden_fraction" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disc", "gen"]
    # a full ELECTRA without --generator-out: neither directory is written
    model = from_hf("ElectraForPreTraining", checkpoint(disc), checkpoint(generator(embeddings_from=disc)))
    model.save_pretrained(tmp_path / "mp")
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "hf")]) == 2
    assert "--generator-out" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()
    shutil.rmtree(tmp_path / "mp")


def test_cli_writes_tied_tensors_once_each(tmp_path):
    model = from_hf("ElectraForMaskedLM", checkpoint(generator()))
    model.save_pretrained(tmp_path / "mp")
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "hf")]) == 0
    state = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert torch.equal(state["generator_lm_head.weight"], state["electra.embeddings.word_embeddings.weight"])


def test_cli_maskplay_model_round_trip(tmp_path, batch):
    """A maskplay-native ELECTRA (no segment embeddings, maskplay's special-token layout, untied towers) -> HF ->
    maskplay: the same logits, and the special ids read back from the copied tokenizer.json."""
    from maskplay import preset
    from maskplay.data.tokenizer import SPECIAL_TOKENS, wordpiece_from_vocab
    from maskplay.families.electra import ElectraConfig

    torch.manual_seed(4)
    config = preset("tiny", family="electra", vocab_size=VOCAB, max_position=40, embedding_size=16,
                    electra=ElectraConfig(generator_hidden_fraction=0.5, tie_embeddings=False))
    model = randomised(Electra(config), 4)
    model.save_pretrained(tmp_path / "mp")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in [*SPECIAL_TOKENS, *(f"tok{i}" for i in range(VOCAB - 7))]))
    wordpiece_from_vocab(vocab).save(str(tmp_path / "mp" / "tokenizer.json"))
    assert main(["convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "d"),
                 "--generator-out", str(tmp_path / "g")]) == 0
    assert json.loads((tmp_path / "d" / "config.json").read_text())["type_vocab_size"] == 1
    assert main(["convert", "--from-hf", str(tmp_path / "d"), "--generator", str(tmp_path / "g"),
                 "--out", str(tmp_path / "back")]) == 0
    back = MaskplayModel.from_pretrained(tmp_path / "back").eval()
    assert not back.config.electra.tie_embeddings and back.config.electra.generator_hidden_fraction == 0.5
    assert (back.config.mask_token_id, back.config.sos_token_id, back.config.special_token_ids) == (4, 3, list(range(7)))
    ids, attn, _ = batch
    no_types = (ids, attn, None)
    close(our_logits(back, no_types), our_logits(model, no_types))
    close(our_logits(back.generator, no_types), our_logits(model.generator, no_types))

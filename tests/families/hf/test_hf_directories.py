"""HuggingFace directories as models everywhere: MaskplayModel / Scorer / Embedder.from_pretrained and
`maskplay score|embed|finetune` take a HuggingFace directory (safetensors or pytorch_model.bin read with
weights_only=True), converted in memory with one stderr line; headless encoders as sentence-transformers ships
them embed with its pooling and refuse to score in one line; an unknown architecture lists the registry's."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from maskplay.cli import main
from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import MaskplayModel
from maskplay.tasks.score import Embedder, Scorer
from tests.families.hf.hf_masked_support import naive_pll, randomised, write_tokenizer
from tests.tasks.score.test_score_support import SENTENCES, one_thread  # noqa: F401 (autouse fixture)

transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=160, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=40)
ROBERTA = dict(SIZES, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)
ROBERTA_SPECIALS = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>", 159: "<mask>"}
BERT_SPECIALS = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory):
    """(HuggingFace RobertaForMaskedLM, its directory as save_pretrained writes it, with a tokenizer.json)."""
    directory = tmp_path_factory.mktemp("roberta")
    hf = randomised(transformers.RobertaForMaskedLM(transformers.RobertaConfig(**ROBERTA)))
    hf.save_pretrained(directory)
    write_tokenizer(directory, ROBERTA_SPECIALS, 160)
    return hf, directory


def sentence_transformers_dir(directory, model, specials, mode="pooling_mode_mean_tokens", normalize=False):
    """A headless encoder laid out as sentence-transformers saves one: the model at the top, modules.json and
    1_Pooling/config.json (and a Normalize module last)."""
    model.save_pretrained(directory)
    write_tokenizer(directory, specials, model.config.vocab_size)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (directory / "modules.json").write_text(json.dumps(modules))
    (directory / "1_Pooling").mkdir()
    if mode.startswith("pooling_mode_"):  # before sentence-transformers 6: one boolean per mode
        modes = {m: m == mode for m in ("pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens")}
        pooling = {"word_embedding_dimension": 32, **modes}
    else:  # sentence-transformers 6
        pooling = {"embedding_dimension": 32, "pooling_mode": mode, "include_prompt": True}
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return directory


def test_scorer_reads_a_huggingface_directory(roberta_dir, capfd):
    hf, directory = roberta_dir
    capfd.readouterr()
    scorer = Scorer.from_pretrained(directory, batch_size=4)
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "HuggingFace RobertaForMaskedLM, converted in memory to bert" in err[0]
    assert scorer.method.value == "pll"  # the family's default
    for sentence, score in zip(SENTENCES, scorer.score(SENTENCES), strict=True):
        want = naive_pll(hf, scorer.tokenizer.encode(sentence), 159)
        assert score.token_log_probs == pytest.approx(want, abs=1e-5)


def test_score_command_on_a_huggingface_directory(roberta_dir, capsys):
    hf, directory = roberta_dir
    capsys.readouterr()
    assert main(["score", str(directory), "a dog ran", "--format", "jsonl", "--precision", "fp32"]) == 0
    out, err = capsys.readouterr()
    row = json.loads(out.splitlines()[0])
    assert row["method"] == "pll" and "converted in memory" in err
    ids = load_tokenizer(directory).encode("a dog ran")
    assert row["log_prob"] == pytest.approx(sum(naive_pll(hf, ids, 159)), abs=1e-4)


def test_an_embedding_table_padded_beyond_the_tokenizer(tmp_path, capfd):
    """DeBERTa-v3 has 128,100 rows for 128,001 pieces: the extra rows stay (they enter the softmax)."""
    hf = randomised(transformers.RobertaForMaskedLM(transformers.RobertaConfig(**{**ROBERTA, "vocab_size": 192})))
    hf.save_pretrained(tmp_path)
    write_tokenizer(tmp_path, {**ROBERTA_SPECIALS}, 160)
    capfd.readouterr()
    scorer = Scorer.from_pretrained(tmp_path)
    assert "note" not in capfd.readouterr().err and scorer.model.config.vocab_size == 192
    score = scorer.score(["a dog ran"])[0]
    assert score.token_log_probs == pytest.approx(naive_pll(hf, scorer.tokenizer.encode("a dog ran"), 159), abs=1e-5)


def test_sharded_safetensors_are_read(roberta_dir, tmp_path):
    hf, directory = roberta_dir
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").is_file() and len(list(tmp_path.glob("model-*"))) > 1
    (tmp_path / "tokenizer.json").write_text((directory / "tokenizer.json").read_text())
    a, b = MaskplayModel.from_pretrained(directory), MaskplayModel.from_pretrained(tmp_path)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())


def test_pytorch_model_bin_is_read_with_weights_only(roberta_dir, tmp_path):
    hf, directory = roberta_dir
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_text((directory / name).read_text())
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    a, b = MaskplayModel.from_pretrained(directory), MaskplayModel.from_pretrained(tmp_path)
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    torch.save({"weights": hf.state_dict(), "hook": print}, tmp_path / "pytorch_model.bin")  # more than tensors
    with pytest.raises(ValueError, match="weights_only.*safe_serialization=True"):
        MaskplayModel.from_pretrained(tmp_path)


@pytest.mark.parametrize("kind", ["roberta", "bert"])
def test_sentence_transformers_encoder_embeds_with_its_mean_pooling(kind, tmp_path, capfd):
    if kind == "roberta":
        hf = transformers.RobertaModel(transformers.RobertaConfig(**ROBERTA))
        specials = ROBERTA_SPECIALS
    else:
        hf = transformers.BertModel(transformers.BertConfig(**SIZES))
        specials = BERT_SPECIALS
    hf = randomised(hf)
    directory = sentence_transformers_dir(tmp_path / "st", hf, specials)
    capfd.readouterr()
    embedder = Embedder.from_pretrained(directory)
    err = capfd.readouterr().err
    assert "no LM head" in err and embedder.default_pooling.value == "mean-tokens"
    assert "its [CLS] pooler left out" in err  # BertModel and RobertaModel have one
    got = embedder.encode(SENTENCES)
    for sentence, vector in zip(SENTENCES, got, strict=True):
        ids = torch.tensor([embedder.tokenizer.encode(sentence)])
        with torch.no_grad():  # sentence-transformers' mean: every token under the attention mask
            want = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state.mean(1)[0]
        np.testing.assert_allclose(vector, want.numpy(), atol=1e-5)
    unit = Embedder.from_pretrained(sentence_transformers_dir(tmp_path / "n", hf, specials, normalize=True))
    np.testing.assert_allclose(unit.encode(SENTENCES), got / np.linalg.norm(got, axis=1, keepdims=True), atol=1e-6)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0)
    np.testing.assert_allclose(unit.encode(SENTENCES, normalize=False), got, atol=1e-6)
    first = Embedder.from_pretrained(sentence_transformers_dir(tmp_path / "cls", hf, specials, "pooling_mode_cls_token"))
    assert first.default_pooling.value == "first"
    assert Embedder.from_pretrained(sentence_transformers_dir(tmp_path / "6", hf, specials, "mean")).default_pooling.value \
        == "mean-tokens"
    capfd.readouterr()
    assert Embedder.from_pretrained(sentence_transformers_dir(tmp_path / "m", hf, specials, "max")).default_pooling.value \
        == "mean"
    assert "pooling max is not maskplay's: give --pooling" in capfd.readouterr().err


def test_encoder_commands_embed_and_finetune_score_refuses(tmp_path, capsys):
    hf = randomised(transformers.RobertaModel(transformers.RobertaConfig(**ROBERTA)))
    directory = sentence_transformers_dir(tmp_path / "st", hf, ROBERTA_SPECIALS)
    capsys.readouterr()
    assert main(["score", str(directory), "a dog ran", "--precision", "fp32"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 2 and "RobertaModel, an encoder without LM head" in err.splitlines()[-1]
    assert main(["convert", "--from-hf", str(directory), "--out", str(tmp_path / "mp")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "RobertaModel, an encoder without LM head: `maskplay convert` writes" in err
    assert main(["embed", str(directory), "--file", str(_lines(tmp_path, SENTENCES)), "--out", str(tmp_path / "e.npy"),
                 "--precision", "fp32"]) == 0
    assert "mean-tokens pooling" in capsys.readouterr().out
    assert np.load(tmp_path / "e.npy").shape == (len(SENTENCES), 32)
    rows = ["text\tlabel"] + [f"{s}\t{k % 2}" for k, s in enumerate(SENTENCES * 2)]
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    assert main(["finetune", str(directory), "--task", "classify", "--train", str(tmp_path / "train.tsv"),
                 "--dev", str(tmp_path / "train.tsv"), "--out", str(tmp_path / "ft"), "--max-steps", "2",
                 "--batch-size", "4"]) == 0
    assert (tmp_path / "ft" / "head_config.json").is_file()


def _lines(tmp_path, sentences):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(sentences) + "\n")
    return path


def test_unknown_architecture_is_one_line_listing_the_registry(tmp_path, capsys):
    from maskplay.families.hf import architectures

    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["MPNetModel"], "model_type": "mpnet"}))
    (tmp_path / "tokenizer.json").write_text("{}")
    assert main(["embed", str(tmp_path), "--file", str(_lines(tmp_path, ["a"])), "--out", str(tmp_path / "e.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'MPNetModel' is not one maskplay reads" in err
    assert all(a in err for a in (*architectures(), "RobertaModel", "BertModel"))


def test_serve_and_lm_eval_take_a_huggingface_directory(roberta_dir):
    from maskplay.runtime.precision import Precision
    from maskplay.tasks.serve.service import ModelService

    hf, directory = roberta_dir
    want = naive_pll(hf, load_tokenizer(directory).encode("a dog ran"), 159)
    service = ModelService(str(directory), torch.device("cpu"), Precision.fp32)
    assert service.scorer.score(["a dog ran"])[0].token_log_probs == pytest.approx(want, abs=1e-5)
    backend = pytest.importorskip("maskplay.tasks.lm_eval_backend", exc_type=ImportError)
    lm = backend.MaskplayLM(str(directory), precision="fp32", device="cpu", progress=False)
    assert lm.scorer.score(["a dog ran"])[0].token_log_probs == pytest.approx(want, abs=1e-5)


def test_eval_sts_on_a_sentence_transformers_directory(tmp_path, capsys):
    from tests.conftest import shared_path

    data = shared_path()
    hf = randomised(transformers.BertModel(transformers.BertConfig(**{**SIZES, "max_position_embeddings": 512})))
    directory = sentence_transformers_dir(tmp_path / "st", hf, BERT_SPECIALS)
    assert main(["eval", "sts", str(directory), "--limit", "6", "--data", str(data), "--out", str(tmp_path / "r.json"),
                 "--precision", "fp32"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["pooling"] == "mean-tokens"


def test_a_bare_config_read_names_the_huggingface_directory(roberta_dir):
    """Where only a maskplay config is read (pretrain --init), the HuggingFace one is named, not 13 unknown keys."""
    from maskplay.runtime.model_dir import read_model_config

    with pytest.raises(ValueError, match="is a HuggingFace config, not a maskplay one.*maskplay convert --from-hf"):
        read_model_config(roberta_dir[1])

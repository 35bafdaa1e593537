"""Fine-tuning (maskplay.tasks.finetune, `maskplay finetune` / `maskplay predict`): end to end on a tiny task, each family's
pooling, early stopping, save/load/predict, input formats and their errors, and the HuggingFace
sequence-classification twins (random HuggingFace model -> convert -> the same logits, and back)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from maskplay import preset
from maskplay.cli import main
from maskplay.families import build_model
from maskplay.tasks.finetune import (
    DEFAULT_POOLING,
    Example,
    FineTuned,
    FinetuneOptions,
    HeadConfig,
    encode_examples,
    finetune,
    make_batch,
    predict_rows,
    read_examples,
)
from tests.tasks.score.test_score_support import one_thread, save_model_dir, small_tokenizer  # noqa: F401 (autouse fixture)

FAMILIES = ["tta", "bert", "gpt", "electra", "unilm", "xlnet", "gpt-bert"]
WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "is", "it"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


def backbone(family, tok, seed=0, **overrides):
    torch.manual_seed(seed)
    return build_model(preset("tiny", family=family, **{**tok.model_config_ids(), **overrides}))


def task(n, seed=0, pair=False):
    """Label 1 when the sentence says "good", 0 when it says "bad", among random filler words."""
    r = random.Random(seed)
    out = []
    for i in range(n):
        label = i % 2
        words = [r.choice(WORDS) for _ in range(r.randint(2, 6))]
        words.insert(r.randint(0, len(words)), "good" if label else "bad")
        out.append(Example(" ".join(words), "a cat" if pair else None, str(label), f"mem:{i}"))
    return out


def write_tsv(path, examples, header=("sentence", "label")):
    path.write_text("\t".join(header) + "\n" + "".join(f"{ex.text}\t{ex.label}\n" for ex in examples))
    return path


# ---- end to end --------------------------------------------------------------------------------------------


def test_end_to_end_loss_falls_best_dev_kept_and_round_trip(tok, tmp_path):
    train, dev = task(48), task(24, seed=1)
    head = HeadConfig(labels=["0", "1"], pooling="first")
    result = finetune(backbone("bert", tok), tok, head, train, dev,
                      FinetuneOptions(lr=3e-3, epochs=12, batch_size=8, warmup=0.1, progress=False), log=lambda s: None)
    losses = [h["train_loss"] for h in result.history]
    assert len(result.history) == 12 and losses[-1] < 0.5 * losses[0], losses
    best = max(result.history, key=lambda h: h["dev_mcc"])
    assert result.best["step"] == best["step"] and result.best["dev_mcc"] > 0.8
    rows = encode_examples(dev, tok, result.model.config, False)
    outputs = predict_rows(result.model, rows)
    from maskplay.tasks.finetune import label_values, metrics

    assert metrics(head, outputs, label_values(dev, head).numpy())["dev_mcc".removeprefix("dev_")] == best["dev_mcc"]
    result.model.save_pretrained(tmp_path / "ft", tok)
    loaded = FineTuned.from_pretrained(tmp_path / "ft")
    np.testing.assert_array_equal(predict_rows(loaded, rows), outputs)
    assert loaded.head_config == head


def test_early_stopping_keeps_the_best_evaluation(tok, monkeypatch):
    import maskplay.tasks.finetune.loop as ft

    sequence = iter([0.1, 0.5, 0.3, 0.2, 0.9, 0.9])
    states = []
    real = ft.predict_rows

    def fake_metrics(head, outputs, labels):
        states.append(outputs.copy())
        return {"accuracy": 0.0, "mcc": next(sequence)}

    monkeypatch.setattr(ft, "metrics", fake_metrics)
    monkeypatch.setattr(ft, "predict_rows", real)
    train, dev = task(16), task(8, seed=1)
    result = finetune(backbone("tta", tok), tok, HeadConfig(labels=["0", "1"], pooling="mean"), train, dev,
                      FinetuneOptions(lr=1e-3, epochs=10, batch_size=8, patience=2, progress=False), log=lambda s: None)
    assert [h["dev_mcc"] for h in result.history] == [0.1, 0.5, 0.3, 0.2]  # stopped after 2 without improvement
    assert result.best["step"] == 4 and result.steps == 8
    # the weights returned are those of the second evaluation
    np.testing.assert_allclose(real(result.model, encode_examples(dev, tok, result.model.config, False)), states[1],
                               atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_learns_the_tiny_task(tok, family):
    train, dev = task(48), task(24, seed=1)
    result = finetune(backbone(family, tok), tok, HeadConfig(labels=["0", "1"], pooling=DEFAULT_POOLING[family]),
                      train, dev, FinetuneOptions(lr=3e-3, epochs=12, batch_size=8, progress=False), log=lambda s: None)
    losses = [h["train_loss"] for h in result.history]
    assert losses[-1] < 0.7 * losses[0], (family, losses)


def test_regression_on_pairs(tok):
    r = random.Random(0)
    rows = []
    for i in range(40):
        n = r.randint(0, 3)
        rows.append(Example(" ".join(["good"] * n + ["cat"]), "a dog", str(float(n)), f"mem:{i}"))
    head = HeadConfig(objective="regress", pair=True, pooling="first")
    result = finetune(backbone("bert", tok, type_vocab_size=2), tok, head, rows[:30], rows[30:],
                      FinetuneOptions(lr=3e-3, epochs=15, batch_size=8, progress=False), log=lambda s: None)
    assert result.best["dev_pearson"] > 0.8, result.history


# ---- pooling and the families' downstream reading ---------------------------------------------------------


def _naive_hidden(model, family, ids):
    kwargs = {"tta": {"diagonal_mask": False}, "unilm": {"mask_kind": 0, "token_type_ids": torch.zeros_like(ids)}}
    with torch.no_grad():
        return model.backbone(ids, **kwargs.get(family, {})).last_hidden_state[0]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("pooling", ["first", "mean", "last"])
def test_pooling_batched_equals_one_by_one(tok, family, pooling):
    model = FineTuned(backbone(family, tok), HeadConfig(labels=["0", "1"], pooling=pooling)).eval()
    rows = encode_examples(task(5), tok, model.config, False)
    with torch.no_grad():
        batched = model(**make_batch(rows, model.config, False))
        for k, row in enumerate(rows):
            hidden = _naive_hidden(model, family, torch.tensor([row]))
            pooled = {"first": hidden[0], "last": hidden[-1], "mean": hidden[1:-1].mean(0)}[pooling]
            torch.testing.assert_close(batched[k], model.classifier(pooled), atol=1e-5, rtol=1e-5)


def test_tta_drops_the_diagonal_mask_and_gpt_reads_the_last_token(tok):
    tta = FineTuned(backbone("tta", tok), HeadConfig(labels=["0", "1"], pooling="mean")).eval()
    ids = torch.tensor([tok.encode("the cat sat")])
    with torch.no_grad():
        with_diagonal = tta.backbone(ids).last_hidden_state
        assert torch.allclose(tta.features(ids), tta.backbone(ids, diagonal_mask=False).last_hidden_state)
        assert not torch.allclose(tta.features(ids), with_diagonal, atol=1e-4)
    gpt = FineTuned(backbone("gpt", tok), HeadConfig(labels=["0", "1"], pooling=DEFAULT_POOLING["gpt"])).eval()
    assert gpt.head_config.pooling == "last"
    a, b = torch.tensor([tok.encode("the cat sat")]), torch.tensor([tok.encode("the cat ran")])
    with torch.no_grad():
        assert not torch.allclose(gpt(a), gpt(b))  # the last token decides: a first-token read could not tell


def test_pairs_get_segments_and_one_separator(tok):
    model = backbone("bert", tok, type_vocab_size=2)
    rows = encode_examples([Example("the cat", "a dog", "1", "mem:1")], tok, model.config, True)
    sp = tok.special
    assert rows[0][0] == sp.sos and rows[0][-1] == sp.eos and rows[0].count(sp.sep) == 1
    batch = make_batch(rows, model.config, True)
    sep_at = rows[0].index(sp.sep)
    assert batch["token_type_ids"][0].tolist() == [0] * (sep_at + 1) + [1] * (len(rows[0]) - sep_at - 1)


def test_electra_with_generator_fine_tunes_its_discriminator(tok):
    full = backbone("electra", tok)
    assert full.generator is not None
    model = FineTuned(full, HeadConfig(labels=["0", "1"]))
    assert model.backbone.generator is None and not any(k.startswith("backbone.generator") for k in model.state_dict())


# ---- files -----------------------------------------------------------------------------------------------------


def test_formats_header_cola_stsb_and_columns(tmp_path):
    header = tmp_path / "h.csv"
    header.write_text('id,sent,gold\n1,"the cat, sat",yes\n2,a dog,no\n')
    rows = read_examples(header, text_column="sent", label_column="gold")
    assert [(r.text, r.label) for r in rows] == [("the cat, sat", "yes"), ("a dog", "no")]
    cola = tmp_path / "cola.tsv"
    cola.write_text("gj04\t1\t\tThe sailors rode the breeze.\ngj04\t0\t*\tThe more books I read.\n")
    assert [(r.text, r.label, r.pair) for r in read_examples(cola)] == [
        ("The sailors rode the breeze.", "1", None), ("The more books I read.", "0", None)]
    sts = tmp_path / "sts-dev.csv"
    sts.write_text('main-captions\tMSRvid\t2012test\t0000\t5.000\tA "man" dances.\tA man dances.\n'
                   "main-news\theadlines\t2013\t0001\t1.5\tx y\tz w\tsource-a\tsource-b\n")
    got = read_examples(sts, need_pairs=True)
    assert [(r.text, r.pair, r.label) for r in got] == [('A "man" dances.', "A man dances.", "5.000"),
                                                        ("x y", "z w", "1.5")]
    plain = tmp_path / "plain.txt"
    plain.write_text("the cat\n\na dog\n")
    assert [r.text for r in read_examples(plain, need_labels=False)] == ["the cat", "a dog"]


@pytest.mark.parametrize("content, columns, message", [
    ("sentence\tlabel\nthe cat\n", {}, "f.tsv:2: 1 fields, the header has 2"),
    ("sentence\tlabel\n\t1\n", {}, "f.tsv:2: empty text"),
    ("sentence\tgold\nthe cat\t1\n", {}, "f.tsv:1: no label column"),
    ("a\tb\nthe cat\t1\n", {"text_column": "sentence"}, "f.tsv:1: the first line is not a header"),
    ("gj04\t1\t\tok\ngj04\t2\t\tbad row\n", {}, "f.tsv:2: not a CoLA row"),
    ("g\tf\t2012\t1\t5.0\ta\tb\ng\tf\t2012\t1\tfive\ta\tb\n", {}, "f.tsv:2: not an STS-B row"),
    ("just some text\n", {}, "f.tsv:1: unrecognised format"),
])
def test_malformed_rows_name_file_and_line(tmp_path, content, columns, message):
    path = tmp_path / "f.tsv"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        read_examples(path, **columns)


def test_unknown_dev_label_and_bad_regression_label(tok):
    train = task(8)
    dev = [Example("the cat", None, "maybe", "dev.tsv:7")]
    with pytest.raises(ValueError, match=r"dev.tsv:7: label 'maybe' is not one of the training labels"):
        finetune(backbone("bert", tok), tok, HeadConfig(labels=["0", "1"]), train, dev,
                 FinetuneOptions(epochs=1, progress=False), log=lambda s: None)
    with pytest.raises(ValueError, match=r"mem:0: label 'x' is not a number"):
        finetune(backbone("bert", tok), tok, HeadConfig(objective="regress"), [Example("a", None, "x", "mem:0")], dev,
                 FinetuneOptions(epochs=1, progress=False), log=lambda s: None)
    with pytest.raises(ValueError, match="metric 'pearson' does not apply to classify"):
        finetune(backbone("bert", tok), tok, HeadConfig(labels=["0", "1"]), train, train,
                 FinetuneOptions(epochs=1, metric="pearson", progress=False), log=lambda s: None)
    with pytest.raises(ValueError, match="pooling must be one of"):
        HeadConfig(labels=["0", "1"], pooling="cls")


def test_loading_is_strict(tok, tmp_path):
    from safetensors.torch import load_file, save_file

    model = FineTuned(backbone("gpt", tok), HeadConfig(labels=["a", "b", "c"], pooling="last"))
    model.save_pretrained(tmp_path / "ft", tok)
    state = load_file(str(tmp_path / "ft" / "model.safetensors"))
    state["classifier.extra"] = torch.zeros(2)
    save_file(state, str(tmp_path / "ft" / "model.safetensors"))
    (tmp_path / "ft" / "manifest.json").unlink()
    with pytest.raises(ValueError, match=r"unexpected \['classifier.extra'\]"):
        FineTuned.from_pretrained(tmp_path / "ft")
    with pytest.raises(FileNotFoundError, match="head_config.json not found"):
        FineTuned.from_pretrained(save_model_dir(tmp_path / "plain", backbone("gpt", tok), tok))


# ---- the command line ------------------------------------------------------------------------------------------


def test_cli_finetune_then_predict(tok, tmp_path, capsys):
    model_dir = save_model_dir(tmp_path / "tta", backbone("tta", tok), tok)
    train = write_tsv(tmp_path / "train.tsv", task(32))
    dev = write_tsv(tmp_path / "dev.tsv", task(16, seed=1))
    code = main(["finetune", str(model_dir), "--task", "classify", "--train", str(train), "--dev", str(dev),
                 "--out", str(tmp_path / "out"), "--epochs", "3", "--batch-size", "8", "--lr", "3e-3",
                 "--results", str(tmp_path / "r.json")])
    assert code == 0
    summary = json.loads((tmp_path / "r.json").read_text())
    assert summary["head"]["pooling"] == "mean" and len(summary["history"]) == 3
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "out"), "--file", str(dev)]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert len(rows) == 16 and set(rows[0]["probs"]) == {"0", "1"}
    assert "mcc" in captured.err
    bad = tmp_path / "bad.tsv"
    bad.write_text("sentence\tlabel\nthe cat\t1\nthe dog\n")
    assert main(["finetune", str(model_dir), "--task", "classify", "--train", str(bad), "--dev", str(dev),
                 "--out", str(tmp_path / "o2")]) == 2
    assert f"{bad}:3: 1 fields" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["score", "DIR", "the cat sat"], ["embed", "DIR", "--out", "OUT.npy", "--file", "STS"],
                                     ["eval", "sts", "DIR", "--file", "STS"], ["generate", "DIR", "the cat"]])
def test_language_model_commands_on_a_fine_tuned_directory_say_what_it_is(tok, tmp_path, capsys, command):
    model = FineTuned(backbone("bert", tok), HeadConfig(labels=["bad", "good"], pooling="first", pair=True))
    model.save_pretrained(tmp_path / "ft", tok)
    sts = tmp_path / "sts.tsv"
    sts.write_text("".join(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{i}.0\tthe cat sat\ta dog ran\n"
                           for i in range(4)))
    names = {"DIR": str(tmp_path / "ft"), "OUT.npy": str(tmp_path / "out.npy"), "STS": str(sts)}
    capsys.readouterr()
    assert main([names.get(c, c) for c in command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, not the list of missing LM weights
    assert "missing" not in err and "is a fine-tuned bert classifier (2 labels: bad, good) of text pairs" in err
    assert f"maskplay predict {tmp_path / 'ft'} --file FILE" in err
    assert not (tmp_path / "out.npy").exists()


def test_python_loaders_refuse_a_fine_tuned_directory_and_finetune_starts_from_its_encoder(tok, tmp_path, capsys):
    from maskplay import MaskplayModel
    from maskplay.tasks.finetune import load_backbone
    from maskplay.tasks.train.config import ModelSection

    model = FineTuned(backbone("tta", tok), HeadConfig(objective="regress", pooling="mean"))
    model.save_pretrained(tmp_path / "ft", tok)
    with pytest.raises(ValueError, match=r"is a fine-tuned tta regressor \(one score\) written by `maskplay finetune`"):
        MaskplayModel.from_pretrained(tmp_path / "ft")
    with pytest.raises(ValueError, match="model.init: .* not a language model"):
        ModelSection(family="tta", init=str(tmp_path / "ft")).build(tok.model_config_ids())
    # fine-tuning again: the encoder's weights, a new head
    encoder, _ = load_backbone(tmp_path / "ft")
    for name, value in model.backbone.state_dict().items():
        torch.testing.assert_close(encoder.state_dict()[name], value, msg=name)
    train, dev = write_tsv(tmp_path / "train.tsv", task(16)), write_tsv(tmp_path / "dev.tsv", task(8, seed=1))
    assert main(["finetune", str(tmp_path / "ft"), "--task", "classify", "--train", str(train), "--dev", str(dev),
                 "--out", str(tmp_path / "again"), "--epochs", "1", "--batch-size", "8"]) == 0
    assert FineTuned.from_pretrained(tmp_path / "again").head_config.objective == "classify"


# ---- HuggingFace twins -------------------------------------------------------------------------------------------


def _hf_inputs(config):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(7, config.vocab_size, (3, 9), generator=g)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[1, 6:] = False
    ids[1, 6:] = 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    types[1, 6:] = 0
    return ids, mask, types


@pytest.mark.parametrize("architecture, labels", [("BertForSequenceClassification", 3),
                                                  ("BertForSequenceClassification", 1),
                                                  ("ElectraForSequenceClassification", 2)])
def test_hf_sequence_classification_parity_both_ways(architecture, labels):
    transformers = pytest.importorskip("transformers")
    from maskplay.tasks.finetune.convert import (
        finetuned_from_hf_sequence_classification,
        finetuned_to_hf_sequence_classification,
    )

    common = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, num_labels=labels)
    torch.manual_seed(0)
    if architecture.startswith("Bert"):
        hf = transformers.BertForSequenceClassification(transformers.BertConfig(**common)).eval()
    else:
        hf = transformers.ElectraForSequenceClassification(transformers.ElectraConfig(embedding_size=16, **common)).eval()
    with torch.no_grad():  # random biases and LayerNorms, so that a dropped one shows
        for p in hf.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.2)
    model = finetuned_from_hf_sequence_classification(architecture, hf.config, hf.state_dict())
    ids, mask, types = _hf_inputs(model.config)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask.long(), token_type_ids=types).logits
        got = model(ids, mask, token_type_ids=types)
    torch.testing.assert_close(got, want[:, 0] if labels == 1 else want, atol=1e-5, rtol=1e-5)
    assert model.head_config.objective == ("regress" if labels == 1 else "classify")
    data, state = finetuned_to_hf_sequence_classification(model)
    cls = getattr(transformers, architecture)
    config_cls = transformers.BertConfig if architecture.startswith("Bert") else transformers.ElectraConfig
    back = cls(config_cls(**{k: v for k, v in data.items() if k != "architectures"})).eval()
    back.load_state_dict(state, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=ids, attention_mask=mask.long(), token_type_ids=types).logits, want,
                                   atol=1e-5, rtol=1e-5)


def test_hf_export_only_for_matching_heads(tok):
    from maskplay.tasks.finetune.convert import finetuned_to_hf_sequence_classification

    for family, head, pooling, message in [("bert", "linear", "first", "--head bert --pooling first"),
                                           ("electra", "electra", "mean", "--head electra --pooling first"),
                                           ("tta", "bert", "first", "no HuggingFace sequence-classification twin")]:
        model = FineTuned(backbone(family, tok), HeadConfig(labels=["0", "1"], head=head, pooling=pooling))
        with pytest.raises(ValueError, match=message):
            finetuned_to_hf_sequence_classification(model)


def test_finetune_convert_cli_round_trip(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64, num_labels=3,
                                     id2label={0: "neg", 1: "neu", 2: "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2})
    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification(config).eval()
    hf.save_pretrained(tmp_path / "hf")
    assert main(["finetune-convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "mp")]) == 0
    model = FineTuned.from_pretrained(tmp_path / "mp")
    assert model.head_config.labels == ["neg", "neu", "pos"] and model.head_config.head == "bert"
    ids, mask, types = _hf_inputs(model.config)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=mask.long(), token_type_ids=types).logits
        torch.testing.assert_close(model(ids, mask, token_type_ids=types), want, atol=1e-5, rtol=1e-5)
    assert main(["finetune-convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "back")]) == 0
    back = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=ids, attention_mask=mask.long(), token_type_ids=types).logits, want,
                                   atol=1e-5, rtol=1e-5)
    assert back.config.id2label == {0: "neg", 1: "neu", 2: "pos"}
    capsys.readouterr()
    assert main(["finetune-convert", "--to-hf", str(tmp_path / "mp"), "--out", str(tmp_path / "back")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_cli_pairs_on_stsb_files_regress_and_predict_needs_pairs(tok, tmp_path, capsys):
    model_dir = save_model_dir(tmp_path / "bert", backbone("bert", tok, type_vocab_size=2), tok)
    r = random.Random(0)

    def sts(path, n):
        lines = []
        for i in range(n):
            k = r.randint(0, 3)
            lines.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{k + 0.5 * (i % 2):.3f}\t"
                         + " ".join(["good"] * k + ["cat"]) + "\ta dog ran")
        path.write_text("\n".join(lines) + "\n")
        return path

    train, dev = sts(tmp_path / "sts-train.csv", 24), sts(tmp_path / "sts-dev.csv", 12)
    assert main(["finetune", str(model_dir), "--task", "pairs", "--train", str(train), "--dev", str(dev),
                 "--out", str(tmp_path / "out"), "--epochs", "2", "--batch-size", "8", "--head", "bert"]) == 0
    model = FineTuned.from_pretrained(tmp_path / "out")
    assert model.head_config.objective == "regress" and model.head_config.pair
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "out"), "--file", str(dev)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 12 and "score" in captured.out and "pearson" in captured.err
    single = tmp_path / "single.txt"
    single.write_text("the cat\tthe dog\none text only\n")
    assert main(["predict", str(tmp_path / "out"), "--file", str(single)]) == 2
    assert f"{single}:2: this model reads text pairs (two texts separated by a tab)" in capsys.readouterr().err

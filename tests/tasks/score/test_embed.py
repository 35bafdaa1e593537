"""Sentence embeddings against a naive forward pass per sentence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from maskplay.tasks.score import Embedder, Pooling, encode
from tests.tasks.score.test_score_support import SENTENCES, one_thread, small_tokenizer, tiny  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


def naive(model, tok, sentence: str, layer: int, **kwargs) -> torch.Tensor:
    ids = torch.tensor([tok.encode(sentence)])
    with torch.no_grad():
        return model(ids, output_hidden_states=True, **kwargs).hidden_states[layer][0]


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra", "xlnet"])
@pytest.mark.parametrize("layer", [-1, 1])
def test_mean_pooling_excludes_sos_and_eos(tok, family, layer):
    model = tiny(family, tok)
    got = encode(model, tok, SENTENCES, layer=layer, batch_size=4)
    assert got.shape == (len(SENTENCES), model.config.hidden_size) and got.dtype == np.float32
    for row, sentence in zip(got, SENTENCES, strict=True):
        want = naive(model, tok, sentence, layer)[1:-1].mean(0)
        np.testing.assert_allclose(row, want.numpy(), atol=1e-5)


def test_tta_diagonal_mask_switch(tok):
    model = tiny("tta", tok)
    with_mask = encode(model, tok, SENTENCES[:3])
    without = encode(model, tok, SENTENCES[:3], diagonal_mask=False)
    for k, sentence in enumerate(SENTENCES[:3]):
        np.testing.assert_allclose(without[k], naive(model, tok, sentence, -1, diagonal_mask=False)[1:-1].mean(0),
                                   atol=1e-5)
    assert not np.allclose(with_mask, without, atol=1e-3)


def test_first_and_last_pooling_and_normalize(tok):
    model = tiny("bert", tok)
    first = encode(model, tok, SENTENCES, pooling=Pooling.FIRST)
    last = encode(model, tok, SENTENCES, pooling="last", normalize=True)
    for k, sentence in enumerate(SENTENCES):
        states = naive(model, tok, sentence, -1)
        np.testing.assert_allclose(first[k], states[0].numpy(), atol=1e-5)
        np.testing.assert_allclose(last[k], (states[-1] / states[-1].norm()).numpy(), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(last, axis=1), 1.0, atol=1e-6)


def test_order_is_kept_whatever_the_batching(tok):
    model = tiny("tta", tok)
    a = encode(model, tok, SENTENCES, batch_size=1)
    b = encode(model, tok, SENTENCES[::-1], batch_size=64)[::-1]
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_bad_arguments_are_clear_errors(tok):
    bert = Embedder(tiny("bert", tok), tok)
    with pytest.raises(ValueError, match="diagonal_mask=False applies to T-TA only"):
        bert.encode(["a"], diagonal_mask=False)
    with pytest.raises(ValueError, match=r"layer 3 is out of range for a 2-layer model \(valid: -3..2\)"):
        bert.encode(["a"], layer=3)
    with pytest.raises(ValueError, match="'max' is not a valid Pooling"):
        bert.encode(["a"], pooling="max")
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        bert.encode(["a", ""])
    assert bert.encode([]).shape == (0, 32)


def test_long_sentences_error_or_truncate(tok):
    model = tiny("tta", tok, max_position=8)
    long = "the cat sat on the mat and the dog"
    with pytest.raises(ValueError, match=r"sentence 0 has \d+ tokens .* 8 positions"):
        encode(model, tok, [long])
    got = encode(model, tok, [long], overflow="truncate")
    ids = tok.encode(long)
    cut = torch.tensor([[*ids[:7], tok.special.eos]])
    with torch.no_grad():
        want = model(cut).last_hidden_state[0, 1:-1].mean(0)
    np.testing.assert_allclose(got[0], want.numpy(), atol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_embeddings_are_close(tok, precision):
    model = tiny("tta", tok)
    a = encode(model, tok, SENTENCES)
    b = Embedder(model, tok, precision=precision).encode(SENTENCES)
    assert b.dtype == np.float32
    np.testing.assert_allclose(a, b, atol={"bf16": 0.1, "int8": 0.2}[precision])
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cosine.min() > 0.995 and not np.array_equal(a, b)  # tiny() has peaked, large weights: a hard case
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the model itself stays fp32


# ---- SIF pooling, static vectors, principal-component removal ---------------------------------------------


def _counts(vocab: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 1000, vocab).astype(np.float64)


@pytest.mark.parametrize("static", [False, True])
def test_sif_pooling_is_the_frequency_weighted_mean(tok, static):
    model = tiny("bert", tok)
    counts = _counts(model.config.vocab_size)
    got = Embedder(model, tok, piece_counts=counts).encode(SENTENCES, pooling="sif", sif_a=1e-2, static=static,
                                                           batch_size=3)
    p = counts / counts.sum()
    for row, sentence in zip(got, SENTENCES, strict=True):
        ids = tok.encode(sentence)[1:-1]
        w = torch.tensor([1e-2 / (1e-2 + p[i]) for i in ids], dtype=torch.float32)
        vectors = model.embeddings.word.weight[ids] if static else naive(model, tok, sentence, -1)[1:-1]
        want = (w[:, None] * vectors).sum(0) / w.sum()
        np.testing.assert_allclose(row, want.detach().numpy(), atol=1e-5)
    plain = Embedder(model, tok).encode(SENTENCES, static=static)
    assert not np.allclose(got, plain, atol=1e-3)  # the weights really act


def test_remove_components_takes_out_the_top_principal_directions(tok):
    model = tiny("tta", tok)
    embedder = Embedder(model, tok)
    plain = embedder.encode(SENTENCES).astype(np.float64)
    got = embedder.encode(SENTENCES, remove_components=2)
    _, _, vt = np.linalg.svd(plain, full_matrices=False)
    want = plain - plain @ vt[:2].T @ vt[:2]
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(got @ vt[:2].T, 0.0, atol=1e-4)


def test_piece_counts_from_a_prepared_corpus_a_file_and_the_model_directory(tok, tmp_path):
    from maskplay.data.dataset import write_split
    from maskplay.tasks.score import read_piece_counts
    from tests.tasks.score.test_score_support import save_model_dir

    model = tiny("bert", tok)
    vocab = model.config.vocab_size
    write_split(tmp_path / "corpus" / "train", [[5, 6, 6], [7, 6]], vocab)
    counts = read_piece_counts(tmp_path / "corpus", vocab)
    assert counts[6] == 3 and counts[5] == counts[7] == 1 and counts.sum() == 5
    directory = save_model_dir(tmp_path / "model", model, tok)
    np.save(directory / "piece_counts.npy", counts.astype(np.int64))
    loaded = Embedder.from_pretrained(directory)
    np.testing.assert_array_equal(loaded.piece_counts, counts)
    np.testing.assert_allclose(loaded.encode(SENTENCES, pooling="sif"),
                               Embedder(model, tok, piece_counts=counts).encode(SENTENCES, pooling="sif"), atol=1e-6)
    tok.save(tmp_path / "corpus")  # prepared with the model's vocabulary: accepted
    assert read_piece_counts(tmp_path / "corpus", vocab, tok).sum() == 5
    import json

    spec = json.loads((tmp_path / "corpus" / "tokenizer.json").read_text())
    words = spec["model"]["vocab"]
    a, b = sorted(words)[-2:]
    words[a], words[b] = words[b], words[a]  # another vocabulary: two pieces trade ids
    (tmp_path / "corpus" / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="corpus was prepared with another vocabulary than the model's"):
        read_piece_counts(tmp_path / "corpus", vocab, tok)
    np.save(tmp_path / "short.npy", np.ones(3))
    with pytest.raises(ValueError, match=rf"short.npy: piece counts must be {vocab} non-negative numbers"):
        read_piece_counts(tmp_path / "short.npy", vocab)
    with pytest.raises(ValueError, match="piece counts come from a `maskplay prepare` directory"):
        read_piece_counts(tmp_path, vocab)


def test_sif_arguments_are_clear_errors(tok):
    model = tiny("bert", tok)
    with pytest.raises(ValueError, match="pooling 'sif' weighs pieces by their corpus frequency"):
        Embedder(model, tok).encode(["a b"], pooling="sif")
    with pytest.raises(ValueError, match="piece_counts must have one count per vocabulary entry"):
        Embedder(model, tok, piece_counts=np.ones(3))
    embedder = Embedder(model, tok, piece_counts=_counts(model.config.vocab_size))
    with pytest.raises(ValueError, match="remove_components=2 needs more sentences than components"):
        embedder.encode(["a", "b"], remove_components=2)
    with pytest.raises(ValueError, match="static=True pools the word-piece embedding table: leave layer at -1"):
        embedder.encode(["a"], static=True, layer=1)
    with pytest.raises(ValueError, match="sif_a must be positive"):
        embedder.encode(["a"], pooling="sif", sif_a=0)
    with pytest.raises(ValueError, match="defines mean pooling only"):
        embedder.encode(["a"], pooling="sif", overflow="window")

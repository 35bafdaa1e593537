"""The models shipped in the package: small enough, load by name, and the demo runs with them."""

import pytest

from maskplay.families import MaskplayModel
from maskplay.runtime.model_dir import BUNDLED_MODELS, resolve_model_dir

BUNDLE = BUNDLED_MODELS["tta-mini-wiki"]


def assert_small_and_fp16(bundle) -> None:
    """Weights + tokenizer within 15 MB, every tensor stored in fp16."""
    from safetensors import safe_open

    weights = bundle / "model.safetensors"
    assert weights.stat().st_size + (bundle / "tokenizer.json").stat().st_size <= 15 * 2**20
    with safe_open(str(weights), framework="pt") as f:
        assert {str(f.get_slice(k).get_dtype()) for k in f.keys()} == {"F16"}


def test_bundled_model_is_small_fp16_and_loads_by_name():
    assert_small_and_fp16(BUNDLE)
    assert resolve_model_dir("tta-mini-wiki") == BUNDLE
    model = MaskplayModel.from_pretrained("tta-mini-wiki")
    assert model.family == "tta" and model.config.hidden_size == 256


def test_bundled_piece_counts_fit_the_vocabulary_and_sif_works_out_of_the_box():
    import numpy as np

    from maskplay.tasks.score import Embedder, read_piece_counts

    model = MaskplayModel.from_pretrained("tta-mini-wiki")
    counts = read_piece_counts(BUNDLE, model.config.vocab_size)
    assert counts.sum() > 10_000_000  # the prepared Wikipedia's training split, counted
    embedder = Embedder.from_pretrained("tta-mini-wiki")
    assert embedder.piece_counts is not None  # piece_counts.npy
    pairs = ["A man is playing a guitar.", "A man plays the guitar.", "The stock market fell sharply today."]
    vectors = embedder.encode(pairs, pooling="sif", static=True, normalize=True)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] and np.isfinite(vectors).all()


def test_bundled_unilm_is_small_fp16_and_generates_a_title():
    from maskplay.tasks.score.scorer import load_model_dir

    assert_small_and_fp16(BUNDLED_MODELS["unilm-titles-mini"])
    model, tok = load_model_dir("unilm-titles-mini")
    assert model.family == "unilm" and model.config.unilm.objective == "seq2seq"
    [title] = model.generate(["Mount Kilimanjaro is a dormant volcano in Tanzania. It is the highest mountain in "
                              "Africa."], tokenizer=tok, max_new_tokens=12).generations
    assert title.finish_reason == "stop" and "kilimanjaro" in title.text, title


def test_bundled_gpt_is_small_fp16_and_prefers_the_corrected_sentence():
    from maskplay.tasks.score import Scorer

    assert_small_and_fp16(BUNDLED_MODELS["gpt-mini-wiki"])
    model = MaskplayModel.from_pretrained("gpt-mini-wiki")
    assert model.family == "gpt" and model.config.hidden_size == 256
    scores = Scorer.from_pretrained("gpt-mini-wiki").score(
        ["He took a piece of cake from the plate.", "He took a peace of cake from the plate.",
         "The church was built in the twelfth century.", "The church was build in the twelfth century."])
    totals = [s.log_prob for s in scores]
    assert totals[0] > totals[1] and totals[2] > totals[3], totals


@pytest.mark.parametrize("name, family", [("gpt-two-hour", "gpt"), ("tta-two-hour", "tta"),
                                          ("tta-two-hour-gutenberg", "tta")])
def test_bundled_two_hour_model_is_small_fp16_and_prefers_the_grammatical_sentence(name, family):
    from maskplay.tasks.score import Scorer

    assert_small_and_fp16(BUNDLED_MODELS[name])
    model = MaskplayModel.from_pretrained(name)
    assert model.family == family and model.config.num_layers == 4 and model.config.positions == "rotary"
    scores = Scorer.from_pretrained(name).score(
        ["The dogs are barking in the garden.", "The dogs is barking in the garden.",
         "He took a piece of cake from the plate.", "He took a peace of cake from the plate.",
         "She has written three letters to her brother.", "She has wrote three letters to her brother."])
    totals = [s.log_prob for s in scores]
    assert totals[0] > totals[1] and totals[2] > totals[3] and totals[4] > totals[5], totals


@pytest.mark.slow
def test_demo_finds_the_odd_word_and_ranks_pairs(capsys):
    from maskplay.tasks.demo import main

    assert main(["--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "most surprising word" in out and "Sentence similarity" in out
    # the bundled model has learned something: the real-word error is the most surprising word of each sentence
    odd_words = out.split("does not fit")[1].split("Sentence similarity")[0]
    flagged = [line.strip() for line in odd_words.splitlines() if line.strip().startswith("->")]
    assert [line.split()[1] for line in flagged] == ["'peace'", "'there'", "'build'"], flagged
    # and the unrelated pair is the least similar
    ranked = [line for line in out.split("Sentence similarity")[1].splitlines() if "~" in line]
    assert "guitar.' ~ 'The stock market" in ranked[-1], ranked
    # and the bundled UniLM titles the paragraph
    assert "-> 'eiffel tower'" in out.split("A title for a paragraph")[1], out


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_scores_stay_within_005_nats_of_fp32(precision):
    """On real sentences and the trained bundled model: the mean per-token |log p - log p_fp32| <= 0.05."""
    import numpy as np

    from maskplay.tasks.score import Scorer

    sentences = ["The river flows into the sea near the old harbour.",
                 "She was elected to the city council in 1998 and served two terms.",
                 "The album was released in the United States by a small independent label."]
    ref = Scorer.from_pretrained("tta-mini-wiki").score(sentences)
    got = Scorer.from_pretrained("tta-mini-wiki", precision=precision).score(sentences)
    diff = np.concatenate([np.abs(np.subtract(a.token_log_probs, b.token_log_probs))
                           for a, b in zip(ref, got, strict=True)])
    assert 0 < diff.mean() <= 0.05, diff.mean()  # > 0: the reduced precision really ran

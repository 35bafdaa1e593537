"""Sentence scores against naive oracles: T-TA one pass vs one position at a time, bucketed PLL vs one forward
per masked copy (and vs HuggingFace BertForMaskedLM), GPT vs a plain causal loop; windows; bad input."""

from __future__ import annotations

import math

import pytest
import torch

from maskplay.tasks.score import Method, Overflow, Scorer
from maskplay.tasks.score.scorer import check_compatible, load_model_dir
from maskplay.tasks.score.text import decode_text, encode_ids, encode_texts, read_lines
from tests.tasks.score.test_score_support import SENTENCES, one_thread, save_model_dir, small_tokenizer, tiny  # noqa: F401 (autouse fixture)

ATOL = 2e-5


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


def full_log_probs(model, ids: list[int]) -> torch.Tensor:
    """(L, V) log-probabilities of one unpadded sequence, the head over every position."""
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].log_softmax(-1)


def naive_pll(model, tok, sentence: str, word_l2r: bool) -> list[float]:
    """One forward pass per masked copy, full-sequence logits, no batching."""
    ids = tok.encode(sentence)
    words = tok.backend.encode(sentence, add_special_tokens=False).word_ids
    out = []
    for i in range(1, len(ids) - 1):
        copy = list(ids)
        copy[i] = tok.special.mask
        if word_l2r:
            k = i
            while k + 1 < len(ids) - 1 and words[k] == words[i - 1]:  # words[k] is the word of position k + 1
                copy[k + 1] = tok.special.mask
                k += 1
        out.append(full_log_probs(model, copy)[i, ids[i]].item())
    return out


def test_tta_one_pass_equals_each_position_scored_alone(tok):
    model = tiny("tta", tok)
    got = Scorer(model, tok, batch_size=4).score(SENTENCES)
    for sentence, score in zip(SENTENCES, got, strict=True):
        ids = tok.encode(sentence)
        assert score.token_ids == ids[1:-1] and score.num_tokens == len(ids) - 2
        for i in range(1, len(ids) - 1):
            for replacement in (tok.special.mask, 7 + (ids[i] + 1) % 50):
                # T-TA's output i never depends on token i: hiding it must not change log p(token i).
                copy = list(ids)
                copy[i] = replacement
                want = full_log_probs(model, copy)[i, ids[i]].item()
                assert score.token_log_probs[i - 1] == pytest.approx(want, abs=ATOL)
        assert score.log_prob == pytest.approx(math.fsum(score.token_log_probs))
        assert score.method == "one-pass"


def test_tta_without_diagonal_mask_would_fail_the_oracle(tok):
    # The oracle above can fail: a model that sees token i gives a different log p than the masked copy.
    model = tiny("tta", tok)
    ids = tok.encode(SENTENCES[0])
    with torch.no_grad():
        seen = model(torch.tensor([ids]), diagonal_mask=False).logits[0].log_softmax(-1)[2, ids[2]].item()
    copy = list(ids)
    copy[2] = tok.special.mask
    assert abs(seen - full_log_probs(model, copy)[2, ids[2]].item()) > 1e-3


@pytest.mark.parametrize("method", [Method.PLL, Method.PLL_WORD])
def test_bucketed_pll_equals_one_forward_per_copy(tok, method):
    model = tiny("bert", tok)
    # batch_size 5: batches mix copies of several sentences of different lengths, with padding
    got = Scorer(model, tok, batch_size=5, method=method).score(SENTENCES)
    for sentence, score in zip(SENTENCES, got, strict=True):
        want = naive_pll(model, tok, sentence, word_l2r=method is Method.PLL_WORD)
        assert score.token_log_probs == pytest.approx(want, abs=ATOL)


def test_pll_word_differs_only_where_a_word_continues(tok):
    model = tiny("bert", tok)
    sentences = ["unbelievably good", "the dogs sat"]
    plain = Scorer(model, tok, method="pll").score(sentences)
    word = Scorer(model, tok, method="pll-word").score(sentences)
    for p, w in zip(plain, word, strict=True):
        for k, word_id in enumerate(p.word_ids):
            continues = k + 1 < len(p.word_ids) and p.word_ids[k + 1] == word_id
            if continues:
                assert abs(p.token_log_probs[k] - w.token_log_probs[k]) > 1e-4
            else:
                assert p.token_log_probs[k] == pytest.approx(w.token_log_probs[k], abs=ATOL)


def test_bert_auto_is_pll(tok):
    model = tiny("bert", tok)
    assert Scorer(model, tok).method is Method.PLL


def test_pll_matches_huggingface_naive_pll(tok):
    transformers = pytest.importorskip("transformers")
    from maskplay.families.hf.bert import maskplay_to_hf_bert

    model = tiny("bert", tok, type_vocab_size=1)
    cfg = model.config
    hf = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position, type_vocab_size=1, layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=cfg.pad_token_id)).eval()
    loaded = hf.load_state_dict(maskplay_to_hf_bert(model.state_dict()), strict=False)
    assert not loaded.unexpected_keys and all(k.endswith("_ids") for k in loaded.missing_keys), loaded  # buffers only
    got = Scorer(model, tok, batch_size=7).score(SENTENCES[:4])
    for sentence, score in zip(SENTENCES[:4], got, strict=True):
        ids = tok.encode(sentence)
        copies = torch.tensor([ids] * (len(ids) - 2))
        positions = torch.arange(1, len(ids) - 1)
        copies[torch.arange(len(positions)), positions] = tok.special.mask
        with torch.no_grad():
            logits = hf(input_ids=copies).logits  # full-sequence head, the naive way
        want = logits[torch.arange(len(positions)), positions].log_softmax(-1)[
            torch.arange(len(positions)), torch.tensor(ids[1:-1])]
        assert score.token_log_probs == pytest.approx(want.tolist(), abs=1e-4)


def test_tta_pll_equals_one_pass(tok):
    model = tiny("tta", tok)
    one = Scorer(model, tok).score(SENTENCES)
    pll = Scorer(model, tok, method="pll", batch_size=3).score(SENTENCES)
    for a, b in zip(one, pll, strict=True):
        assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=ATOL)


def test_gpt_equals_causal_loop(tok):
    model = tiny("gpt", tok)
    got = Scorer(model, tok, batch_size=4).score(SENTENCES)
    for sentence, score in zip(SENTENCES, got, strict=True):
        ids = tok.encode(sentence)
        want = []
        for t in range(1, len(ids) - 1):  # [EOS] is not scored, [SOS] is context only
            with torch.no_grad():
                logits = model(torch.tensor([ids[:t]])).logits[0, -1]
            want.append(logits.log_softmax(-1)[ids[t]].item())
        assert score.token_log_probs == pytest.approx(want, abs=ATOL)
    assert got[0].method == "causal"


def test_batch_size_does_not_change_scores(tok):
    model = tiny("bert", tok)
    one = Scorer(model, tok, batch_size=1).score(SENTENCES)
    many = Scorer(model, tok, batch_size=64).score(SENTENCES)
    assert [s.log_prob for s in one] == pytest.approx([s.log_prob for s in many], abs=1e-4)


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra", "xlnet"])
def test_bf16_is_close_to_fp32(tok, family):
    model = tiny(family, tok)
    a = Scorer(model, tok).score(SENTENCES[:3])
    b = Scorer(model, tok, precision="bf16").score(SENTENCES[:3])
    c = Scorer(model, tok, precision="bf16-autocast").score(SENTENCES[:3])
    for x, y, z in zip(a, b, c, strict=True):
        assert x.token_log_probs == pytest.approx(y.token_log_probs, abs=0.15)
        assert x.token_log_probs == pytest.approx(z.token_log_probs, abs=0.15)
        assert x.token_log_probs != pytest.approx(y.token_log_probs, abs=1e-5)  # bf16 really ran


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra", "xlnet", "unilm", "gpt-bert"])
def test_bf16_runner_is_the_model_with_bf16_parameters(tok, family):
    """The bf16 runner's module copy computes exactly what the fp32 model computes with its parameters swapped
    for bf16 ones (functional_call: the oracle, and the runner's former implementation); it follows the model's
    training mode and leaves the model's own weights in fp32."""
    from torch.func import functional_call

    from maskplay.tasks.score.passes import Runner, pad_rows

    model = tiny(family, tok).eval()
    ids, attention = pad_rows([tok.encode(s) for s in SENTENCES[:3]], tok.special.pad, torch.device("cpu"))
    runner = Runner(model, "bf16")
    params = {name: p.detach().to(torch.bfloat16) for name, p in model.named_parameters()}
    with torch.no_grad():
        want = functional_call(model, params, args=(ids,), kwargs={"attention_mask": attention}, tie_weights=True,
                               strict=False).last_hidden_state
        got = runner.forward(ids, attention_mask=attention).last_hidden_state
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    model.train()
    runner.forward(ids, attention_mask=attention)
    assert runner.bf16_model.training


def test_words_sum_their_pieces(tok):
    score = Scorer(tiny("tta", tok), tok).score(["unbelievably good"])[0]
    words = score.words()
    assert [w.text for w in words] == ["unbelievably", "good"]
    assert words[0].pieces == (0, 1, 2, 3)
    assert words[0].log_prob == pytest.approx(sum(score.token_log_probs[:4]))
    assert words[1].surprisal == pytest.approx(-score.token_log_probs[4])


# ---- long sentences ------------------------------------------------------------------------------------

LONG = " ".join(["the cat sat on the mat"] * 5)  # 30 pieces


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra"])
def test_long_sentence_is_an_error_naming_it(tok, family):
    model = tiny(family, tok, max_position=16)
    with pytest.raises(ValueError, match=r"sentence 1 has 32 tokens .* 16 positions"):
        Scorer(model, tok).score(["a dog", LONG])


@pytest.mark.parametrize("family", ["tta", "gpt"])
def test_windows_score_each_piece_once_with_its_best_window(tok, family):
    width, max_position = 14, 16
    model = tiny(family, tok, max_position=max_position)
    score = Scorer(model, tok, overflow=Overflow.WINDOW).score([LONG])[0]
    pieces = tok.encode(LONG)[1:-1]
    n = len(pieces)
    starts = sorted(set(list(range(0, n - width, width // 2)) + [n - width]))
    assert score.num_tokens == n and score.windows > 1
    for j in range(n):
        holding = [s for s in starts if s <= j < s + width]
        if family == "gpt":
            s = min(holding)  # the most left context
        else:
            s = max(holding, key=lambda s: (min(j - s, s + width - 1 - j), -s))
        window = [tok.special.sos, *pieces[s:s + width], tok.special.eos]
        pos = j - s + 1
        if family == "gpt":
            want = full_log_probs(model, window[:pos])[-1, pieces[j]].item()
        else:
            want = full_log_probs(model, window)[pos, pieces[j]].item()
        assert score.token_log_probs[j] == pytest.approx(want, abs=ATOL), j


def test_windows_leave_short_sentences_alone(tok):
    model = tiny("bert", tok)
    a = Scorer(model, tok).score(SENTENCES)
    b = Scorer(model, tok, overflow="window").score(SENTENCES)
    assert [s.token_log_probs for s in a] == [s.token_log_probs for s in b]
    assert all(s.windows == 1 for s in b)


# ---- bad input -----------------------------------------------------------------------------------------

def test_empty_sentence_is_an_error_naming_its_index(tok):
    scorer = Scorer(tiny("tta", tok), tok)
    with pytest.raises(ValueError, match="sentence 2 is empty"):
        scorer.score(["a dog", "the cat", "   "])
    with pytest.raises(ValueError, match="sentence 0 is '\\\\x00\\\\x01', which has no tokens"):
        scorer.score(["\x00\x01"])
    with pytest.raises(ValueError, match="sentence 1 is a int"):
        scorer.score(["a", 3])
    with pytest.raises(ValueError, match="single str"):
        scorer.score("a dog")
    assert scorer.score([]) == []


def test_methods_that_do_not_apply_are_errors(tok):
    with pytest.raises(ValueError, match="'pll' does not apply to a 'gpt' model"):
        Scorer(tiny("gpt", tok), tok, method="pll")
    with pytest.raises(ValueError, match="'one-pass' does not apply to a 'bert' model"):
        Scorer(tiny("bert", tok), tok, method=Method.ONE_PASS)
    with pytest.raises(ValueError, match="'nope' is not a valid Method"):
        Scorer(tiny("bert", tok), tok, method="nope")
    with pytest.raises(ValueError, match="truncate"):
        Scorer(tiny("bert", tok), tok, overflow="truncate")


def test_model_and_tokenizer_must_match(tok):
    from maskplay.data.tokenizer import load_tokenizer
    from tests.conftest import shared_path

    other = load_tokenizer(shared_path("tta-vocab"))
    with pytest.raises(ValueError, match="vocab_size: model 118 vs tokenizer 29530"):
        check_compatible(tiny("tta", tok), other)


def test_model_dir_round_trip_and_missing_tokenizer(tok, tmp_path):
    model = tiny("gpt", tok)
    save_model_dir(tmp_path / "m", model, tok)
    loaded, loaded_tok = load_model_dir(tmp_path / "m")
    a = Scorer(model, tok).score(SENTENCES[:2])
    b = Scorer(loaded, loaded_tok).score(SENTENCES[:2])
    assert [s.log_prob for s in a] == pytest.approx([s.log_prob for s in b], abs=1e-5)
    (tmp_path / "m" / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json not found"):
        Scorer.from_pretrained(tmp_path / "m")


def test_text_files_are_strict_utf8(tmp_path):
    with pytest.raises(ValueError, match=r"f.txt:\d+: invalid UTF-8 at byte offset 7"):
        decode_text(b"ok\nfine\xff\n", "f.txt")
    with pytest.raises(ValueError, match=r":1: NUL byte at byte offset 3"):
        decode_text(b"abc\x00", "g")
    assert decode_text(b"\xef\xbb\xbfhi", "bom") == "hi"
    path = tmp_path / "s.txt"
    path.write_bytes(b"one\r\ntwo\x0cthree\n\nfour\n")
    with pytest.raises(ValueError, match=r"s.txt:3: empty line"):
        read_lines(path)
    path.write_bytes(b"one\r\ntwo\x0cthree\n")
    assert read_lines(path) == [(1, "one"), (2, "two\x0cthree")]  # a form feed does not split a line


def test_encode_texts_matches_the_tokenizer(tok):
    for enc, ids in zip(encode_texts(tok, SENTENCES), tok.encode_batch(SENTENCES), strict=True):
        assert [tok.special.sos, *enc.ids, tok.special.eos] == ids
        assert len(enc.word_ids) == len(enc.offsets) == len(enc.ids)


def test_encode_ids_matches_encode_texts(tok):
    texts = [*SENTENCES, "Ünïcödé — naïve café, 1998!", "a  b\tc"]
    assert encode_ids(tok, texts) == [enc.ids for enc in encode_texts(tok, texts)]
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        encode_ids(tok, ["a dog", "  "])
    with pytest.raises(ValueError, match="sentence 0 is a int"):
        encode_ids(tok, [3])


def test_scoring_leaves_the_model_trainable(tok):
    model = tiny("bert", tok)
    Scorer(model, tok).score(["a dog"])
    from maskplay.tasks.score import Embedder

    Embedder(model, tok).encode(["a dog"])
    assert all(p.requires_grad for p in model.parameters())  # scoring does not touch the model's flags


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_copies_follow_changes_to_the_weights(tok, precision):
    """The bf16 / int8 copies are reused across calls, but never once a parameter has changed."""
    model = tiny("bert", tok)
    scorer = Scorer(model, tok, precision=precision)
    before = scorer.score(SENTENCES[:2])
    assert scorer.score(SENTENCES[:2])[0].token_log_probs == before[0].token_log_probs  # reused: identical
    with torch.no_grad():
        model.head.bias[tok.encode(SENTENCES[0])[1]] += 5.0  # in place: the first piece becomes likelier
    after = scorer.score(SENTENCES[:2])
    assert after[0].token_log_probs[0] > before[0].token_log_probs[0] + 1.0
    with torch.no_grad():
        model.encoder.layers[-1].ffn.down.bias[::2] += 3.0  # int8 in the int8 copy; uneven, or LayerNorm undoes it
    shifted = scorer.score(SENTENCES[:2])
    assert shifted[0].token_log_probs != pytest.approx(after[0].token_log_probs, abs=1e-3)
    with torch.no_grad():
        model.embeddings.word.weight = torch.nn.Parameter(model.embeddings.word.weight * 0.0)  # replaced
    flat = scorer.score(SENTENCES[:2])
    assert flat[0].token_log_probs != pytest.approx(shifted[0].token_log_probs, abs=1e-3)


# ---- ELECTRA -------------------------------------------------------------------------------------------

def test_electra_discriminator_scores_are_log_p_original_of_each_piece_alone(tok):
    """Oracle: the discriminator on each unpadded sentence alone, log sigmoid(-logit) per piece."""
    model = tiny("electra", tok)
    got = Scorer(model, tok, batch_size=3).score(SENTENCES)
    for sentence, score in zip(SENTENCES, got, strict=True):
        ids = tok.encode(sentence)
        with torch.no_grad():
            want = torch.nn.functional.logsigmoid(-model(torch.tensor([ids])).logits[0])[1:-1]
        assert score.token_log_probs == pytest.approx(want.tolist(), abs=ATOL)
        assert score.method == "discriminator"
        assert score.replaced_probs == pytest.approx((1 - want.exp()).tolist(), abs=ATOL)


def test_electra_pll_is_the_generators_pll(tok):
    model = tiny("electra", tok)
    got = Scorer(model, tok, method=Method.PLL).score(SENTENCES[:3])
    generator = model.standalone("generator").eval()
    for sentence, score in zip(SENTENCES[:3], got, strict=True):
        assert score.token_log_probs == pytest.approx(naive_pll(generator, tok, sentence, False), abs=ATOL)
        assert score.replaced_probs is None


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_electra_pll_runs_the_generator_at_a_reduced_precision(tok, precision):
    """The generator is copied out under inference mode; the reduced-precision runner's copy of it must not ask its
    inference tensors for a version counter (`maskplay eval blimp ELECTRA --method pll` failed so on a CPU where
    auto means bf16)."""
    model = tiny("electra", tok)
    want = Scorer(model, tok, method=Method.PLL).score(SENTENCES[:3])
    got = Scorer(model, tok, method=Method.PLL, precision=precision).score(SENTENCES[:3])
    for x, y in zip(want, got, strict=True):
        assert x.token_log_probs == pytest.approx(y.token_log_probs, abs=0.15)


@pytest.mark.parametrize("auto", ["fp32", "bf16"])
def test_int8_scoring_runs_the_head_in_int8_whether_or_not_bf16_is_fast(tok, monkeypatch, auto):
    """Whatever this CPU's fastest float precision (the probe, here pinned through MASKPLAY_AUTO_PRECISION), an int8
    scorer runs its vocabulary projection in int8; the scores stay close to fp32's."""
    from maskplay.tasks.score.scorer import Runner

    monkeypatch.setenv("MASKPLAY_AUTO_PRECISION", auto)
    model = tiny("tta", tok)
    runner = Runner(model, "int8")
    assert not runner.bf16_head and runner.int8_head is not None
    assert next(runner.head.parameters()).dtype == torch.float32
    assert runner.int8_head.projection is runner.model.head.int8_projection  # quantised once, not twice
    ref = Scorer(model, tok).score(SENTENCES[:3])
    got = Scorer(model, tok, precision="int8").score(SENTENCES[:3])
    for a, b in zip(ref, got, strict=True):
        assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=0.3)


@pytest.mark.parametrize("auto", ["fp32", "bf16"])
def test_the_python_api_takes_precision_auto(tok, monkeypatch, auto):
    from maskplay.runtime.precision import Precision
    from maskplay.tasks.score.embed import Embedder

    monkeypatch.setenv("MASKPLAY_AUTO_PRECISION", auto)  # what the probe would decide, pinned
    model = tiny("bert", tok)
    assert Scorer(model, tok, precision="auto").precision is Precision(auto)
    assert Embedder(model, tok, precision="auto").precision is Precision(auto)
    assert Scorer(model, tok, precision="fp32").precision is Precision.fp32


def test_every_family_has_a_natural_score_and_unilm_scores_like_its_bert(tok):
    """A family added without a scoring method would make `maskplay score` a traceback."""
    from maskplay.families import FAMILY_CLASSES
    from maskplay.tasks.score.scorer import resolve_method

    for family in FAMILY_CLASSES:
        resolve_method(family, "auto")
    bert = tiny("bert", tok)
    unilm = tiny("unilm", tok)
    unilm.load_state_dict(bert.state_dict())
    a = Scorer(bert, tok).score(SENTENCES[:2])
    b = Scorer(unilm, tok).score(SENTENCES[:2])
    for x, y in zip(a, b, strict=True):
        assert x.token_log_probs == pytest.approx(y.token_log_probs, abs=ATOL)

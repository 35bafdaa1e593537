"""XLNet's two scores through `Scorer`, against oracles: the causal score (one pass) against one permutation-LM
forward per token under the left-to-right order, and against HuggingFace XLNetLMHeadModel with the equivalent
perm_mask; the PLL (one query per token) against HuggingFace with "nobody sees token i". (Pretrain, resume and
score end to end: tests/tasks/train/test_train.py.)"""

from __future__ import annotations

import math

import pytest
import torch

from maskplay.nn.masks import to_perm_mask
from maskplay.tasks.score import Scorer
from tests.tasks.score.test_score_support import SENTENCES, one_thread, small_tokenizer, tiny  # noqa: F401 (autouse fixture)

ATOL = 2e-5


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


def test_causal_is_the_left_to_right_chain_rule(tok):
    model = tiny("xlnet", tok)
    got = Scorer(model, tok, batch_size=3).score(SENTENCES)
    assert got[0].method == "causal"
    for sentence, score in zip(SENTENCES, got, strict=True):
        ids = torch.tensor([tok.encode(sentence)])
        L = ids.shape[1]
        want = []
        for t in range(1, L - 1):  # one permutation-LM pass per token, the order left to right, the query at t
            with torch.no_grad():
                out = model(ids, order=torch.arange(L)[None], target_positions=torch.tensor([[t]]))
            want.append(out.logits[0, 0].log_softmax(-1)[ids[0, t]].item())
        assert score.token_log_probs == pytest.approx(want, abs=ATOL)
        assert score.log_prob == pytest.approx(math.fsum(want), abs=1e-4)


def _huggingface(model):
    transformers = pytest.importorskip("transformers")
    from maskplay.families.hf import to_hf

    (config, state), = to_hf(model)
    hf = transformers.XLNetLMHeadModel(transformers.XLNetConfig(**config)).eval()
    hf.load_state_dict(state, strict=True)
    return hf


def test_both_scores_match_huggingface(tok):
    model = tiny("xlnet", tok)
    hf = _huggingface(model)
    causal = Scorer(model, tok).score(SENTENCES[:4])
    pll = Scorer(model, tok, method="pll").score(SENTENCES[:4])
    for sentence, c, p in zip(SENTENCES[:4], causal, pll, strict=True):
        ids = torch.tensor([tok.encode(sentence)])
        L = ids.shape[1]
        for t in range(1, L - 1):
            mapping = torch.nn.functional.one_hot(torch.tensor([[t]]), L).float()
            before = torch.arange(L)[None, :] < torch.arange(L)[:, None]  # i may see j < i
            others = torch.ones(L, L, dtype=torch.bool)
            others[:, t] = False  # nobody sees token t
            with torch.no_grad():
                for may, score in ((before, c), (others, p)):
                    logits = hf(ids, perm_mask=to_perm_mask(may[None]), target_mapping=mapping).logits
                    want = logits[0, 0].log_softmax(-1)[ids[0, t]].item()
                    assert score.token_log_probs[t - 1] == pytest.approx(want, abs=ATOL)


def test_causal_boundaries_matches_huggingface_under_the_boundaries_first_order(tok):
    """Each piece from [SOS], [EOS] and the pieces before it: HuggingFace with a perm_mask built by a loop over
    the order [SOS], [EOS], p1 .. pn (i may see j when j comes strictly earlier), one target per pass; the Scorer
    batches padded rows of different lengths (batch_size=3) in one pass."""
    model = tiny("xlnet", tok)
    hf = _huggingface(model)
    got = Scorer(model, tok, batch_size=3, method="causal-boundaries").score(SENTENCES[:5])
    plain = Scorer(model, tok, batch_size=3).score(SENTENCES[:5])
    assert got[0].method == "causal-boundaries"
    for sentence, score, p in zip(SENTENCES[:5], got, plain, strict=True):
        ids = torch.tensor([tok.encode(sentence)])
        L = ids.shape[1]
        order = [0, L - 1, *range(1, L - 1)]
        rank = {pos: step for step, pos in enumerate(order)}
        may = torch.tensor([[rank[j] < rank[i] for j in range(L)] for i in range(L)])
        want = []
        for t in range(1, L - 1):
            mapping = torch.nn.functional.one_hot(torch.tensor([[t]]), L).float()
            with torch.no_grad():
                logits = hf(ids, perm_mask=to_perm_mask(may[None]), target_mapping=mapping).logits
            want.append(logits[0, 0].log_softmax(-1)[ids[0, t]].item())
        assert score.token_log_probs == pytest.approx(want, abs=ATOL)
        assert score.token_log_probs != pytest.approx(p.token_log_probs, abs=ATOL)  # [EOS] in view changes them


def test_causal_boundaries_is_for_xlnet_without_memory(tok):
    with pytest.raises(ValueError, match="method 'causal-boundaries' does not apply to a 'gpt' model"):
        Scorer(tiny("gpt", tok), tok, method="causal-boundaries")
    with pytest.raises(ValueError, match="overflow='memory' scores with method 'causal'"):
        Scorer(tiny("xlnet", tok), tok, method="causal-boundaries", overflow="memory")


def test_pll_word_hides_the_rest_of_the_word(tok):
    model = tiny("xlnet", tok)
    plain = Scorer(model, tok, method="pll").score(SENTENCES)
    word = Scorer(model, tok, method="pll-word").score(SENTENCES)
    for a, b in zip(plain, word, strict=True):
        continues = [i for i in range(len(a.word_ids) - 1) if a.word_ids[i] == a.word_ids[i + 1]]
        for i in range(len(a.token_log_probs)):
            if i not in continues:
                assert a.token_log_probs[i] == pytest.approx(b.token_log_probs[i], abs=ATOL)
    assert any(a.token_log_probs != pytest.approx(b.token_log_probs, abs=ATOL) for a, b in zip(plain, word, strict=True))

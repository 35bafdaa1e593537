"""The minicons-shaped API (maskplay.tasks.score.api): the same numbers as minicons' MaskedLMScorer and as a naive
HuggingFace PLL loop (mlm-scoring's rule) on a random BertForMaskedLM converted with `maskplay convert`, the
docs/guides/scoring.md example; and the same numbers as Scorer for every family."""

from __future__ import annotations

import math
import string

import pytest
import torch

from maskplay.tasks.score import Method, Scorer
from maskplay.tasks.score.api import IncrementalLMScorer, LMScorer, MaskedLMScorer
from tests.tasks.score.test_score_support import SENTENCES, WORDS, one_thread, small_tokenizer, tiny  # noqa: F401 (autouse fixture)

transformers = pytest.importorskip("transformers")

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # bert-base's tokens (not its ids), no [SOS]/[EOS]
METRICS = ["original", "within_word_l2r"]


def hf_tokenizer(vocab_file):
    """A BertTokenizerFast over vocab_file, built on maskplay's WordPiece pipeline (transformers 5's
    BertTokenizerFast(vocab_file=...) maps every word to [UNK] here)."""
    from tokenizers import processors

    from maskplay.data.tokenizer import wordpiece_from_vocab

    backend = wordpiece_from_vocab(vocab_file)
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                           special_tokens=[("[CLS]", cls), ("[SEP]", sep)])

    return transformers.BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]",
                                          sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")


@pytest.fixture(scope="module")
def hf_bert(tmp_path_factory):
    """(HF model, HF tokenizer, maskplay model directory): a random BertForMaskedLM saved as HuggingFace saves it,
    then `maskplay convert --from-hf` (convert_from_hf) into a maskplay directory."""
    from maskplay.cli.convert import convert_from_hf

    root = tmp_path_factory.mktemp("hf-bert")
    pieces = [*BERT_SPECIALS, *WORDS, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
              *string.digits, *string.punctuation]
    vocab = list(dict.fromkeys(pieces))
    (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = hf_tokenizer(root / "vocab.txt")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=96, max_position_embeddings=64, pad_token_id=0)
    hf = transformers.BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)  # peaked attention: every token matters to the others
            elif "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    hf.save_pretrained(root / "hf")
    tok.save_pretrained(root / "hf")
    convert_from_hf(root / "hf", root / "maskplay")
    return hf, tok, root / "maskplay"


def naive_hf_pll(hf, tok, sentence: str, word_l2r: bool = False) -> list[float]:
    """mlm-scoring's rule on the HuggingFace model, the slow way: one copy per piece ([CLS]/[SEP] never scored)
    with that piece masked (and, word_l2r, the rest of its word), the head over every position."""
    enc = tok(sentence)
    ids, words = enc["input_ids"], enc.word_ids()
    out = []
    for i in range(1, len(ids) - 1):
        copy = list(ids)
        for j in range(i, len(ids) - 1):
            if j == i or (word_l2r and words[j] == words[i]):
                copy[j] = tok.mask_token_id
        with torch.no_grad():
            logits = hf(input_ids=torch.tensor([copy])).logits[0, i]
        out.append(logits.log_softmax(-1)[ids[i]].item())
    return out


@pytest.mark.parametrize("metric", METRICS)
def test_converted_bert_gives_minicons_numbers(hf_bert, metric):
    """The docs/guides/scoring.md example: minicons on the HuggingFace directory, maskplay on its conversion."""
    minicons_scorer = pytest.importorskip("minicons.scorer")
    _, tok, directory = hf_bert
    theirs = minicons_scorer.MaskedLMScorer(str(directory.parent / "hf"), "cpu")
    if not hasattr(theirs.tokenizer, "batch_encode_plus"):  # transformers 5: the docs' one-line fix for minicons
        theirs.tokenizer.batch_encode_plus = theirs.tokenizer
    ours = MaskedLMScorer(directory, "cpu")
    total = lambda x: x.sum(0).item()  # noqa: E731 (the example's reduction, as minicons users write it)
    want = theirs.sequence_score(SENTENCES, reduction=total, PLL_metric=metric)
    got = ours.sequence_score(SENTENCES, reduction=total, PLL_metric=metric)
    assert got == pytest.approx(want, abs=1e-4)
    # minicons' default reduction (the mean per piece) and its token_score, piece by piece
    assert ours.sequence_score(SENTENCES, PLL_metric=metric) == pytest.approx(
        theirs.sequence_score(SENTENCES, PLL_metric=metric), abs=1e-5)
    for a, b in zip(ours.token_score(SENTENCES, PLL_metric=metric), theirs.token_score(SENTENCES, PLL_metric=metric),
                    strict=True):
        assert [t for t, _ in a] == [t for t, _ in b]  # the same pieces, [CLS]/[SEP] in neither
        assert [v for _, v in a] == pytest.approx([v for _, v in b], abs=1e-5)
    if metric == "original":  # minicons' default (0.3.39) is the plain PLL
        assert theirs.sequence_score(SENTENCES) == pytest.approx(ours.sequence_score(SENTENCES), abs=1e-5)


@pytest.mark.parametrize("metric", METRICS)
def test_converted_bert_gives_the_naive_huggingface_pll(hf_bert, metric):
    """Without minicons: mlm-scoring's rule computed on the HuggingFace model one copy at a time."""
    hf, tok, directory = hf_bert
    ours = MaskedLMScorer(directory, "cpu", PLL_metric=metric, batch_size=7)
    got = ours.sequence_score(SENTENCES, reduction="sum")
    pieces = ours.token_score(SENTENCES)
    for sentence, value, tokens in zip(SENTENCES, got, pieces, strict=True):
        want = naive_hf_pll(hf, tok, sentence, word_l2r=metric == "within_word_l2r")
        assert [v for _, v in tokens] == pytest.approx(want, abs=1e-4)
        assert value == pytest.approx(math.fsum(want), abs=1e-4)
    method = "pll" if metric == "original" else "pll-word"
    same = Scorer.from_pretrained(directory, method=method, batch_size=7).score(SENTENCES)
    assert got == pytest.approx([s.log_prob for s in same], abs=1e-9)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return small_tokenizer(tmp_path_factory.mktemp("vocab"))


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "electra"])
def test_every_family_gives_scorer_numbers(tok, family):
    model = tiny(family, tok)
    want = Scorer(model, tok).score(SENTENCES)
    api = LMScorer(model, tokenizer=tok)
    assert api.method.value == {"tta": "one-pass", "bert": "pll", "gpt": "causal", "electra": "discriminator"}[family]
    assert api.sequence_score(SENTENCES, reduction="sum") == pytest.approx([s.log_prob for s in want], abs=1e-9)
    assert api.sequence_score(SENTENCES) == pytest.approx([s.mean_log_prob for s in want], abs=1e-9)  # "mean"
    seen = api.sequence_score(SENTENCES, reduction=lambda x: x)
    assert all(x.dtype == torch.float64 and x.shape == (s.num_tokens,) for x, s in zip(seen, want, strict=True))
    tokens = api.token_score(SENTENCES)
    assert [[t for t, _ in row] for row in tokens] == [s.tokens for s in want]
    assert [[v for _, v in row] for row in tokens] == [s.token_log_probs for s in want]
    words = api.word_score(SENTENCES)
    assert words == [[(w.text, pytest.approx(w.log_prob, abs=1e-12)) for w in s.words()] for s in want]
    # the transformations, as minicons has them
    s, row = want[3], api.token_score(SENTENCES[3])[0]  # a single str is one sentence
    assert [v for _, v in api.token_score([SENTENCES[3]], surprisal=True, base_two=True)[0]] == pytest.approx(
        [-v / math.log(2) for v in s.token_log_probs])
    assert [v for _, v in api.token_score([SENTENCES[3]], prob=True)[0]] == pytest.approx(
        [math.exp(v) for v in s.token_log_probs])
    assert [v for _, v in row] == s.token_log_probs
    assert api.sequence_score([SENTENCES[3]], reduction="sum", base_two=True)[0] == pytest.approx(s.log_prob / math.log(2))
    assert [w for w, _ in api.word_score(["It's a zebra"], surprisal=True)[0]] == ["It", "'", "s", "a", "zebra"]


def test_word_scores_with_pll_word_l2r(tok):
    model = tiny("bert", tok)
    plain = Scorer(model, tok).score(SENTENCES)
    l2r = Scorer(model, tok, method="pll-word").score(SENTENCES)
    api = MaskedLMScorer(model, tokenizer=tok)
    assert api.method is Method.PLL  # minicons' default: "original"
    assert api.word_score(SENTENCES) == [[(w.text, pytest.approx(w.log_prob, abs=1e-12)) for w in s.words()]
                                         for s in plain]
    by_call = api.word_score(SENTENCES, PLL_metric="within_word_l2r")
    assert by_call == [[(w.text, pytest.approx(w.log_prob, abs=1e-12)) for w in s.words()] for s in l2r]
    assert by_call != api.word_score(SENTENCES)  # multi-piece words differ
    by_default = MaskedLMScorer(model, tokenizer=tok, PLL_metric="within_word_l2r")
    assert by_default.method is Method.PLL_WORD and by_default.word_score(SENTENCES) == by_call
    assert by_default.sequence_score(SENTENCES, PLL_metric="original") == api.sequence_score(SENTENCES)


def test_classes_and_options_check_what_applies(tok):
    tta, bert, gpt, electra = (tiny(f, tok) for f in ("tta", "bert", "gpt", "electra"))
    assert MaskedLMScorer(tta, tokenizer=tok, PLL_metric="original").method is Method.ONE_PASS  # equal, faster
    assert MaskedLMScorer(tta, tokenizer=tok, PLL_metric="within_word_l2r").method is Method.PLL_WORD
    assert MaskedLMScorer(electra, tokenizer=tok).method is Method.PLL  # the generator's PLL
    assert MaskedLMScorer(electra, tokenizer=tok, PLL_metric="within_word_l2r").method is Method.PLL_WORD
    assert IncrementalLMScorer(gpt, tokenizer=tok).method is Method.CAUSAL
    with pytest.raises(ValueError, match="MaskedLMScorer scores tta / bert / electra / unilm / xlnet / gpt-bert models, "
                                         "not 'gpt'.*Incremental"):
        MaskedLMScorer(gpt, tokenizer=tok)
    with pytest.raises(ValueError, match="IncrementalLMScorer scores gpt / xlnet / gpt-bert models, not 'bert'"):
        IncrementalLMScorer(bert, tokenizer=tok)
    with pytest.raises(ValueError, match="needs its tokenizer"):
        MaskedLMScorer(bert)
    with pytest.raises(ValueError, match="PLL_metric 'l2r' is not one of"):
        MaskedLMScorer(bert, tokenizer=tok, PLL_metric="l2r")
    with pytest.raises(ValueError, match="disagree"):
        MaskedLMScorer(bert, tokenizer=tok, PLL_metric="original", method="pll-word")
    with pytest.raises(ValueError, match="PLL_metric applies to models scored by PLL, not to method 'causal'"):
        IncrementalLMScorer(gpt, tokenizer=tok).token_score(["a dog"], PLL_metric="original")
    api = LMScorer(bert, tokenizer=tok)
    with pytest.raises(ValueError, match="reduction 'max' is not one of"):
        api.sequence_score(["a dog"], reduction="max")
    with pytest.raises(ValueError, match="prob and base_two"):
        api.sequence_score(["a dog"], prob=True, base_two=True)
    with pytest.raises(ValueError, match="surprisal and prob"):
        api.token_score(["a dog"], surprisal=True, prob=True)
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        api.sequence_score(["a dog", " "])


def test_xlnet_is_incremental_and_masked(tok):
    """XLNet scores both ways: IncrementalLMScorer gives its causal score, MaskedLMScorer its PLL."""
    xlnet = tiny("xlnet", tok)
    assert IncrementalLMScorer(xlnet, tokenizer=tok).method is Method.CAUSAL
    assert MaskedLMScorer(xlnet, tokenizer=tok).method is Method.PLL
    assert MaskedLMScorer(xlnet, tokenizer=tok, PLL_metric="within_word_l2r").method is Method.PLL_WORD

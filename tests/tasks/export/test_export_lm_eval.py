"""lm-evaluation-harness's own `hf` model on a causal export (custom code, and the BertLMHeadModel twin): it loads
with no prefix_token_id (the [SOS] id is the tokenizer's and config.json's BOS), and its log-likelihoods on the
shipped offline pairs task equal maskplay's backend (`maskplay lm-eval --model maskplay`) request by request."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is an optional extra: pip install -e '.[lm-eval]'")
pytest.importorskip("transformers")

from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

from maskplay.tasks.export import export_to_hf  # noqa: E402
from maskplay.tasks.lm_eval_backend import TASKS_DIR, MaskplayLM  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))


def _requests() -> list[Instance]:
    """What the pairs task asks (doc_to_text "", each choice after lm-eval's target delimiter " ")."""
    rows = [json.loads(line) for line in (TASKS_DIR / "sample_pairs.jsonl").read_text().splitlines()]
    return [Instance(request_type="loglikelihood", doc={}, arguments=("", " " + row[key]), idx=k)
            for k, row in enumerate(rows) for key in ("sentence_good", "sentence_bad")]


def _assert_equal(export, ours_lm) -> None:
    requests = _requests()
    theirs = HFLM(pretrained=str(export), trust_remote_code=True, dtype="float32", device="cpu",
                  batch_size=4).loglikelihood(requests)
    ours = ours_lm.loglikelihood(requests)
    for (a, _), (b, _) in zip(theirs, ours, strict=True):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-4), (a, b)


@pytest.mark.parametrize("name", ["gpt-two-hour", "gpt-mini-wiki"])  # custom code; the twin
def test_hf_model_equals_maskplay_backend(name, tmp_path):
    lines = export_to_hf(name, tmp_path / "hf")
    assert ("custom code" in lines[0]) == (name == "gpt-two-hour")
    _assert_equal(tmp_path / "hf", MaskplayLM(name, device="cpu", precision="fp32"))


def test_gpt_bert_causal_mode_under_the_hf_model(tmp_path):
    """GPT-BERT's export maps AutoModelForCausalLM to its causal mode: lm-eval's hf model reads it as maskplay's
    causal method does."""
    from tests.tasks.export.test_export_hf import GPT_BERT_RECIPE, saved, tiny

    source = saved(tiny("gpt-bert", **GPT_BERT_RECIPE), tmp_path / "mp")
    export_to_hf(source, tmp_path / "hf")
    _assert_equal(tmp_path / "hf", MaskplayLM(str(source), method="causal", device="cpu", precision="fp32"))

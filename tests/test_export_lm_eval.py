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

from maskplay.export import export_to_hf  # noqa: E402
from maskplay.lm_eval_backend import TASKS_DIR, MaskplayLM  # noqa: E402


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))


@pytest.mark.parametrize("name", ["gpt-two-hour", "gpt-mini-wiki"])  # custom code; the twin
def test_hf_model_equals_maskplay_backend(name, tmp_path):
    lines = export_to_hf(name, tmp_path / "hf")
    rows = [json.loads(line) for line in (TASKS_DIR / "sample_pairs.jsonl").read_text().splitlines()]
    # what the pairs task asks (doc_to_text "", each choice after lm-eval's target delimiter " ")
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=("", " " + row[key]), idx=k)
                for k, row in enumerate(rows) for key in ("sentence_good", "sentence_bad")]
    theirs = HFLM(pretrained=str(tmp_path / "hf"), trust_remote_code=True, dtype="float32", device="cpu",
                  batch_size=4).loglikelihood(requests)
    ours = MaskplayLM(name, device="cpu", precision="fp32").loglikelihood(requests)
    assert ("custom code" in lines[0]) == (name == "gpt-two-hour")
    for (a, _), (b, _) in zip(theirs, ours, strict=True):
        assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-4), (a, b)

"""`maskplay export --to-sentence-transformers`: SentenceTransformer(DIR, trust_remote_code=True) gives `maskplay
embed`'s vectors (the oracle: maskplay's Embedder on the same model) for each pooling, padding included."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("sentence_transformers", reason="sentence-transformers: pip install -e '.[test]'")

from sentence_transformers import SentenceTransformer  # noqa: E402

from maskplay.cli import main  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.tasks.score.embed import Embedder  # noqa: E402
from tests.tasks.export.test_export_hf import GPT_BERT_RECIPE, TOKENIZER, TWO_HOUR, saved, tiny  # noqa: E402

SENTENCES = ["the cat sat on the mat .", "a dog", "history of the city of rome and its empire", "yes"]


@pytest.mark.parametrize("family,switches,pooling", [
    ("tta", TWO_HOUR, "mean"), ("gpt", {}, "last"), ("bert", dict(type_vocab_size=2), "first"),
    ("gpt-bert", GPT_BERT_RECIPE, "mean"), ("unilm", {}, None), ("electra", {}, None)])
def test_vectors_equal_maskplay_embed(family, switches, pooling, tmp_path):
    model = tiny(family, **switches)
    source = saved(model, tmp_path / "mp")
    args = ["export", "--to-sentence-transformers", str(source), "--out", str(tmp_path / "st")]
    assert main(args + (["--pooling", pooling] if pooling else [])) == 0
    assert json.loads((tmp_path / "st" / "modules.json").read_text())[1]["path"] == "1_Pooling"
    assert set(json.loads((tmp_path / "st" / "config.json").read_text())["auto_map"]) == {"AutoConfig", "AutoModel"}
    st = SentenceTransformer(str(tmp_path / "st"), trust_remote_code=True, device="cpu")
    theirs = st.encode(SENTENCES, convert_to_numpy=True, batch_size=3)
    ours = Embedder(model, load_tokenizer(TOKENIZER)).encode(SENTENCES, pooling=pooling or model.default_pooling)
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=1e-5)


def test_sif_pooling_is_refused(tmp_path, capsys):
    source = saved(tiny("tta"), tmp_path / "mp")
    with pytest.raises(SystemExit):  # argparse's one-line error
        main(["export", "--to-sentence-transformers", str(source), "--pooling", "sif", "--out", str(tmp_path / "x")])
    assert "invalid choice" in capsys.readouterr().err

"""scripts/bundle.py, what `make bundle-tta` exports with: fp16 weights that load strictly and score like the
fp32 model, the tokenizer, the training split's piece counts, the model card kept; a corpus prepared with another
vocabulary is refused."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from maskplay import MaskplayModel
from maskplay.config import preset
from maskplay.data.dataset import write_split
from maskplay.data.tokenizer import SPECIAL_TOKENS, load_tokenizer
from maskplay.families import build_model

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 60


def tokenizer_dir(directory: Path, prefix: str = "w") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    words = SPECIAL_TOKENS + [f"{prefix}{i}" for i in range(len(SPECIAL_TOKENS), VOCAB)]
    (directory / "vocab.txt").write_text("\n".join(words) + "\n")
    load_tokenizer(directory / "vocab.txt").save(directory)
    return directory


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bundle.py"), *args], capture_output=True, text=True)


def test_bundle_exports_fp16_weights_tokenizer_and_piece_counts(tmp_path):
    data = tokenizer_dir(tmp_path / "data")
    rng = np.random.default_rng(0)
    seqs = [[3, *rng.integers(7, VOCAB, 8).tolist(), 1] for _ in range(50)]
    write_split(data / "train", seqs, VOCAB)
    tok = load_tokenizer(data)
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="tta", **tok.model_config_ids()))
    model.save_pretrained(tmp_path / "final")
    tok.save(tmp_path / "final")
    out = tmp_path / "asset"
    out.mkdir()
    (out / "README.md").write_text("# card\n")
    (out / "stale.bin").write_text("old")
    done = run(str(tmp_path / "final"), str(out), "--piece-counts", str(data))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.json", "manifest.json", "model.safetensors",
                                                    "piece_counts.npy", "tokenizer.json"]
    assert (out / "README.md").read_text() == "# card\n"
    counts = np.load(out / "piece_counts.npy", allow_pickle=False)
    assert counts.sum() == 50 * 10 and counts[3] == 50 and counts[1] == 50
    bundled = MaskplayModel.from_pretrained(out)
    assert all(t.dtype == torch.float16 for t in load_file(str(out / "model.safetensors")).values())
    ids = torch.tensor([seqs[0]])
    with torch.no_grad():
        expected = model.eval()(ids).logits
        got = bundled.float().eval()(ids).logits
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=0)
    # counts of a corpus tokenized with another vocabulary would weigh the wrong pieces
    other = tokenizer_dir(tmp_path / "other", prefix="v")
    write_split(other / "train", seqs, VOCAB)
    refused = run(str(tmp_path / "final"), str(out), "--piece-counts", str(other))
    assert refused.returncode != 0 and "another vocabulary" in refused.stderr
    assert (out / "model.safetensors").exists()  # refused before anything in the asset directory was touched

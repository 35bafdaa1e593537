"""Does the replaced-token signal reach ELECTRA's discriminator? A 64-wide ELECTRA on WikiText-2 valid
sentences (the setting of tests/tasks/train/test_learning.py): first with its own generator's samples, then with uniformly
random replacements. Prints the discriminator's BCE, its accuracy and the base-rate entropy every 50 steps.

    python scripts/electra_signal_check.py      # needs ../shared/data; one thread, about a minute
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from maskplay import preset  # noqa: E402
from maskplay.data.dataset import pad_batch  # noqa: E402
from maskplay.data.tokenizer import load_tokenizer  # noqa: E402
from maskplay.families import build_model
from tests.conftest import SHARED  # noqa: E402
from tests.tasks.train.test_learning import real_sentences  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    tok = load_tokenizer(SHARED / "tta-vocab")
    seqs, vocab = real_sentences(tok)
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="electra", hidden_size=64, intermediate_size=128, max_position=64,
                               **{**tok.model_config_ids(), "vocab_size": vocab}))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)

    def train(steps: int, label: str) -> None:
        for step in range(steps + 1):
            rows = torch.randint(len(seqs), (16,), generator=g).tolist()
            ids, mask = pad_batch([seqs[r] for r in rows], tok.special.pad)
            out = model(**model.training_batch(ids, mask, generator=g))
            opt.zero_grad()
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step % 50 == 0:
                p = float(out.parts["replaced"])
                base = -(p * math.log(p) + (1 - p) * math.log(1 - p))
                parts = {k: float(v.detach()) for k, v in out.parts.items()}
                print(f"{label} step {step:>3}: disc BCE {parts['disc_loss']:.3f} (base rate {base:.3f}), "
                      f"accuracy {parts['disc_accuracy']:.3f}, generator MLM {parts['gen_loss']:.2f}")

    train(300, "generator samples")
    head = model.generator.head
    real = head.loss_and_sample
    head.loss_and_sample = lambda h, w, t, u: (real(h, w, t, u)[0], torch.randint(7, vocab, t.shape, generator=g))
    train(200, "uniform samples  ")


if __name__ == "__main__":
    main()

"""A few hundred steps on real text make each family's held-out loss fall well below its start."""

import pytest
import torch

from maskplay import preset
from maskplay.data.dataset import pad_batch
from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import build_model
from tests.conftest import shared_path


def real_sentences(tok, max_len=32):
    """Real Wikipedia sentences, their ids renumbered to the pieces that occur (specials keep 0-6), so that
    a few hundred steps fit the test budget."""
    lines = shared_path("wikitext-2", "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    text = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("=")]
    seqs = [ids[:max_len] for ids in tok.encode_batch(text)]
    seqs = [s for s in seqs if len(s) >= 8]
    used = sorted({i for s in seqs for i in s} - set(tok.special.all))
    remap = {old: new for new, old in enumerate([*tok.special.all, *used])}
    return [[remap[i] for i in s] for s in seqs], len(remap)


def held_out_loss(model, batches):
    model.eval()
    g = torch.Generator().manual_seed(123)  # the same BERT corruption every time
    with torch.no_grad():
        losses = [model(**model.training_batch(ids, mask, generator=g)).loss for ids, mask in batches]
    model.train()
    return torch.stack(losses).mean().item()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["tta", "bert", "gpt"])
def test_held_out_loss_falls(family):
    tok = load_tokenizer(shared_path("tta-vocab"))
    seqs, vocab_size = real_sentences(tok)
    train, valid = seqs[:-64], seqs[-64:]
    torch.manual_seed(0)
    config = preset("tiny", family=family, hidden_size=64, intermediate_size=128, max_position=64,
                    **{**tok.model_config_ids(), "vocab_size": vocab_size})
    model = build_model(config)
    valid_batches = [pad_batch(valid[i:i + 32], tok.special.pad) for i in range(0, 64, 32)]
    start = held_out_loss(model, valid_batches)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        rows = torch.randint(len(train), (16,), generator=g).tolist()
        ids, mask = pad_batch([train[r] for r in rows], tok.special.pad)
        loss = model(**model.training_batch(ids, mask, generator=g)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    end = held_out_loss(model, valid_batches)
    assert end < start - 2.0, (family, start, end)  # from ~ln(vocab) = 9, perplexity down > 7x

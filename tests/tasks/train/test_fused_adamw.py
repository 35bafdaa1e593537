"""The trainer's AdamW runs fused (one kernel over every tensor, where the device has it) and gives the for-loop
AdamW's weights: ten steps on a tiny model, the same gradients, equal to 1e-6."""

import torch

from maskplay import preset
from maskplay.families import build_model
from maskplay.tasks.train.config import OptimSection
from maskplay.tasks.train.schedule import build_optimizer, parameter_groups


def test_the_trainers_adamw_is_fused_and_equals_the_plain_loop():
    torch.manual_seed(0)
    model = build_model(preset("tiny", family="gpt"))
    twin = build_model(preset("tiny", family="gpt"))
    twin.load_state_dict(model.state_dict())
    start = [p.detach().clone() for p in model.parameters()]
    optim = OptimSection(lr=1e-2, weight_decay=0.01)
    fused = build_optimizer(model, optim)
    assert fused.defaults["fused"] is True
    plain = torch.optim.AdamW(parameter_groups(twin, 0.01), lr=1e-2, betas=tuple(optim.betas), eps=optim.eps,
                              foreach=False)
    for step in range(10):
        g = torch.Generator().manual_seed(step)
        for a, b in zip(model.parameters(), twin.parameters(), strict=True):
            a.grad = torch.randn(a.shape, generator=g)
            b.grad = a.grad.clone()
        fused.step()
        plain.step()
    for (name, a), b in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6, msg=name)
    assert all(not torch.equal(a, s) for a, s in zip(model.parameters(), start, strict=True))  # every tensor moved

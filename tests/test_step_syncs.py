"""benchmarks/probes/step_syncs.py: the count of reads back from a device that a training step would make on a GPU, made
on the CPU by marking the tensors that would live on the device. Against toy steps whose reads are known, and the
recipes' counts as regressions: a change that adds a read-back to a GPU step fails here."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "probes"))
import step_syncs  # noqa: E402


def test_reads_of_device_tensors_are_counted_and_host_reads_are_not():
    weight, host = torch.randn(4, 3), torch.tensor(5)

    def step(mode):
        y = weight @ torch.ones(3)          # computed from a device tensor: on the device
        float(y.sum())                      # read back: 1
        bool((y > 0).any())                 # read back: 2
        y[y > 0].sum()                      # boolean indexing: the count is read back: 3
        y[torch.tensor([0, 2])].sum()       # integer indexing: no read
        y.tolist()                          # the whole tensor copied to the host: 4
        int(host) + float(torch.ones(2).sum()) + sum(torch.ones(2).tolist())  # host tensors: no read

    reads = step_syncs.count_reads(step, [weight], warm=False)
    assert sum(reads.values()) == 4, reads
    assert {k.split(" at ")[0] for k in reads} == {"_local_scalar_dense", "index", "tolist"}
    assert torch.Tensor.tolist(torch.ones(1)) == [1.0]  # the watch is gone after the count


def test_marks_flow_through_in_place_updates_and_autograd():
    weight = torch.randn(3, requires_grad=True)
    grads = torch.zeros(3)

    def step(mode):
        loss = (weight * 2).sum()
        loss.backward()
        grads.add_(weight.grad)             # a host buffer updated from a device tensor lives on the device too
        int(grads.argmax())                 # read back: 1
        weight.grad = None

    assert sum(step_syncs.count_reads(step, [weight], warm=False).values()) == 1


def test_the_recipes_steps_read_back_only_where_their_losses_select_targets():
    """At 2 rows: each recipe's one read is the count of the labelled positions (nn/outputs.Targets, found once for
    the hidden states, the labels and the backward); GPT-BERT's modes' losses (with the recipe's z-loss) are means
    over tensor counts, read nowhere. Nothing else in a step (the dead-rows check and the ids' range check read on
    a CPU only)."""
    expected = {"gpt": 1, "gpt-bert": 1}
    for family, n in expected.items():
        step, seeds = step_syncs.recipe_step(family, rows=2, sets=["num_layers=2"])
        reads = step_syncs.count_reads(step, seeds)
        assert sum(reads.values()) == n, (family, reads)
        assert all("outputs.py" in k or "gpt_bert.py" in k for k in reads), reads


def stepper_step(family: str, micro_batches: int):
    """The trainer's own step (train/stepping.Stepper: every micro-batch's forward and backward, the gradient's
    scaling and clipping, LAMB) on a 2-layer recipe model, the batches marked as moved to the device where the
    trainer moves them."""
    from maskplay.tasks.train import stepping
    from maskplay.tasks.train.config import TrainConfig
    from maskplay.tasks.train.distributed import Dist
    from maskplay.tasks.train.loop import count_targets
    from maskplay.tasks.train.metrics import Window
    from maskplay.tasks.train.schedule import build_optimizer
    from maskplay.tasks.train.stepping import Stepper

    model, opt, shape = step_syncs.recipe_model(family, ["num_layers=2"])
    config = TrainConfig()
    config.optim.optimizer, config.optim.max_steps = "lamb", 10
    opt = build_optimizer(model, config.optim)
    stepper = Stepper(config, Dist(), model, model.config, opt, torch.Generator().manual_seed(0), "fp32",
                      forward=stepping_forward, count_targets=count_targets)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(7, shape.vocab, (2, shape.seq_len), generator=g),
                torch.ones(2, shape.seq_len, dtype=torch.bool)) for _ in range(micro_batches)]
    moved = stepping.to_device

    def step(mode):
        def to_device(batch, device, pin):
            out = {k: v.clone() for k, v in moved(batch, device, pin).items()}  # a copy, as on a GPU
            mode.mark(out.values())
            return out

        stepping.to_device = to_device
        try:
            stepper.step(0, lambda: batches, lambda: [0.0, 0.0], Window())
        finally:
            stepping.to_device = moved

    return step, [*model.parameters(), *model.buffers()]


def stepping_forward(model, precision, **batch):  # noqa: ANN001, ANN003, ANN201
    from maskplay.runtime.precision import forward_in

    return forward_in(model, precision, **batch)


def test_the_trainers_step_reads_the_device_once():
    """The losses of every micro-batch, the family's loss parts (GPT-BERT's causal and masked losses) and the
    gradient norm come back in one read a step (tasks/train/stepping.py). The labelled positions, which the
    recipes' bare steps above read once a micro-batch, the trainer finds on the host's copy of the labels (as the
    family's loss_labels makes them: GPT's shifted) and sends with the batch (nn/outputs.labelled_rows_known)."""
    for family in ("gpt", "gpt-bert", "bert", "tta"):
        step, seeds = stepper_step(family, micro_batches=3)
        reads = step_syncs.count_reads(step, seeds)
        trainer = {k: n for k, n in reads.items() if "stepping.py" in k}
        assert sum(trainer.values()) == 1, (family, reads)
        assert sum(reads.values()) == 1, (family, reads)


def test_labelled_positions_found_on_the_host_give_the_same_loss_and_gradients_without_a_read():
    """Targets.of_labels takes the host's rows for the very labels tensor labelled_rows_known names (no read, the
    same loss and gradients bitwise) and finds them on the device, with one read, for any other tensor, even an
    equal one: the rows are never applied to labels they were not found in."""
    from maskplay.nn.modeling import IGNORE_INDEX
    from maskplay.nn.outputs import labelled_rows_known, rows_of

    for family in ("bert", "gpt-bert", "gpt"):
        model, _, shape = step_syncs.recipe_model(family, ["num_layers=2"])
        ids = torch.randint(7, shape.vocab, (2, shape.seq_len), generator=torch.Generator().manual_seed(0))
        batch = model.training_batch(ids, torch.ones_like(ids, dtype=torch.bool),
                                     generator=torch.Generator().manual_seed(1))
        rows = rows_of(model.loss_labels(batch["labels"]) != IGNORE_INDEX)

        def run(known_for, batch=batch, rows=rows, model=model):  # noqa: ANN001, ANN202
            result = {}

            def step(mode):
                mode.mark([*batch.values(), rows])
                with labelled_rows_known(known_for(batch), rows):
                    loss = model(**batch).loss
                loss.backward()
                result["loss"] = loss.detach().clone()
                result["grads"] = [p.grad.clone() for p in model.parameters() if p.grad is not None]
                model.zero_grad(set_to_none=True)

            reads = step_syncs.count_reads(step, [*model.parameters(), *model.buffers()], warm=False)
            return sum(reads.values()), result

        found = run(lambda b: None)
        known = run(lambda b: b["labels"])
        other = run(lambda b: b["labels"].clone())
        assert (found[0], known[0], other[0]) == (1, 0, 1), family
        for result in (known[1], other[1]):
            assert torch.equal(result["loss"], found[1]["loss"])
            assert all(torch.equal(a, b) for a, b in zip(result["grads"], found[1]["grads"], strict=True))


def test_a_pass_told_its_rows_have_no_padding_does_not_read_the_mask_back():
    """GPT's flash path (masks.sdpa_kind) asks whether the padding mask is all true: a read of the device's copy
    and, under torch.compile, a graph break, unless the trainer, which checked the host's copy
    (masks.no_padding), says so (masks.rows_without_padding). Told False, it reads as before."""
    from maskplay.config import ModelConfig
    from maskplay.families import build_model
    from maskplay.nn.masks import no_padding, rows_without_padding

    model = build_model(ModelConfig(family="gpt", vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                                    intermediate_size=64, max_position=32)).train()
    ids = torch.randint(7, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    batch = model.training_batch(ids, torch.ones_like(ids, dtype=torch.bool))
    padded = model.training_batch(ids, torch.arange(16).expand(2, 16) < 12)
    assert no_padding(batch) and not no_padding(padded)

    def reads(known: bool) -> list[str]:
        def step(mode):
            mode.mark(batch.values())
            with rows_without_padding(known):
                model(**batch).loss.backward()

        return [k for k in step_syncs.count_reads(step, list(model.parameters())) if "masks.py" in k]

    assert reads(False) and not reads(True)


def test_gpt_berts_forward_told_its_rows_modes_does_not_read_them_back():
    """GPT-BERT at its default architecture picks SDPA's mask from its rows' modes (gpt_bert.batch_modes: all causal,
    all masked or mixed), a read of the device's causal_rows unless the family's known_from_host, entered by the
    trainer around the forward, read the host's copy first; the SDPA call it picks is the same either way."""
    from maskplay.config import ModelConfig
    from maskplay.families import build_model

    model = build_model(ModelConfig(family="gpt-bert", vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                                    intermediate_size=64, max_position=32, hidden_dropout=0.0,
                                    attention_dropout=0.0)).train()
    ids = torch.randint(7, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    for rows in ([True] * 4, [False] * 4, [True, False, False, False]):
        batch = model.training_batch(ids, torch.ones_like(ids, dtype=torch.bool),
                                     generator=torch.Generator().manual_seed(0))
        batch["causal_rows"] = torch.tensor(rows)
        losses = {}

        def reads(told: bool, rows=rows, batch=batch, losses=losses) -> list[str]:
            def step(mode):
                moved = {k: v.clone() for k, v in batch.items()}  # the device's copy; `batch` stays the host's
                mode.mark(moved.values())
                with model.known_from_host(batch) if told else contextlib.nullcontext():
                    loss = model(**moved).loss
                losses[told] = loss.detach()

            return [k for k in step_syncs.count_reads(step, list(model.parameters())) if "gpt_bert.py" in k]

        assert reads(False) and not reads(True), rows
        assert torch.equal(losses[False], losses[True])


def test_rows_that_are_not_the_loss_labels_are_refused_on_a_cpu():
    """On a CPU every forward given the host's rows checks them against a search (which reads nothing back there):
    GPT given the rows of its unshifted labels, not of loss_labels', refuses them instead of taking wrong targets."""
    import pytest

    from maskplay.nn.modeling import IGNORE_INDEX
    from maskplay.nn.outputs import labelled_rows_known, rows_of

    model, _, shape = step_syncs.recipe_model("gpt", ["num_layers=1"])
    ids = torch.randint(7, shape.vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    batch = model.training_batch(ids, torch.ones_like(ids, dtype=torch.bool))
    with labelled_rows_known(batch["labels"], rows_of(batch["labels"] != IGNORE_INDEX)), \
            pytest.raises(RuntimeError, match="loss_labels and its forward disagree"):
        model(**batch)
    with labelled_rows_known(batch["labels"], rows_of(model.loss_labels(batch["labels"]) != IGNORE_INDEX)):
        assert torch.isfinite(model(**batch).loss)

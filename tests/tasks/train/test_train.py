"""The trainer: config loading and errors, the schedule, batching, exact gradient accumulation, resumption
(in-process, after SIGKILL, after SIGTERM / SIGINT, from a corrupted checkpoint), the time budget, the final
export, and the loss falling on real text."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from maskplay import MaskplayModel
from maskplay.cli import main as cli_main
from maskplay.config import ModelConfig, apply_overrides, preset
from maskplay.data.dataset import TokenDataset, pad_batch, write_split
from maskplay.data.tokenizer import SPECIAL_TOKENS, Tokenizer, load_tokenizer
from maskplay.families import build_model
from maskplay.tasks.train import TrainConfig, load_train_config, train
from maskplay.tasks.train import checkpoint_files as ckpt
from maskplay.tasks.train.batches import StepBatches, epoch_batches, pack_groups, packed_lengths, sequence_lengths
from maskplay.tasks.train.config import TOKENIZER_FIELDS, ModelSection, OptimSection
from maskplay.tasks.train.loop import count_targets
from maskplay.tasks.train.schedule import learning_rate, parameter_groups
from tests.conftest import shared_path

REPO = Path(__file__).resolve().parents[3]
VOCAB = 100


# ---- fixtures -------------------------------------------------------------------------------------------------

def make_data(directory: Path, n_train: int = 160, n_valid: int = 40, seed: int = 0) -> Path:
    """A prepared directory of random sequences ([SOS] ids [EOS], 4..27 tokens) with a 100-piece tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    words = SPECIAL_TOKENS + [f"w{i}" for i in range(len(SPECIAL_TOKENS), VOCAB)]
    (directory / "vocab.txt").write_text("\n".join(words) + "\n")
    load_tokenizer(directory / "vocab.txt").save(directory)
    rng = np.random.default_rng(seed)
    seqs = [[3, *rng.integers(7, VOCAB, n - 2).tolist(), 1] for n in rng.integers(4, 28, n_train + n_valid)]
    write_split(directory / "train", seqs[:n_train], VOCAB)
    write_split(directory / "valid", seqs[n_train:], VOCAB)
    return directory


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("data"))


# The small-run settings, as --set overrides (usable both in-process and on a command line).
SMALL = ["model.preset=tiny", "optim.lr=3e-3", "optim.warmup_steps=2", "optim.max_steps=8", "data.batch_size=16",
         "data.max_length=32", "data.bucket_window=4", "run.eval_every=4", "run.eval_batches=1", "run.save_every=4",
         "run.log_every=1", "run.progress=false", "run.tensorboard=false", "run.threads=1", "run.device=cpu"]
NO_DROPOUT = ["model.hidden_dropout=0", "model.attention_dropout=0"]


def small_config(data: Path, out: Path, *overrides: str, family: str = "tta") -> TrainConfig:
    base = TrainConfig(model=ModelSection(family=family))
    return apply_overrides(base, [*SMALL, f"data.path={data}", f"run.out_dir={out}", *overrides]).validate()


def weights(run_dir: Path, which: str = "final") -> dict[str, torch.Tensor]:
    path = run_dir / which / "model.safetensors"
    return load_file(str(path))


def assert_same_weights(a: dict, b: dict, exact: bool = True) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if exact:
            assert torch.equal(a[name], b[name]), f"{name} differs (max {(a[name] - b[name]).abs().max():.3g})"
        else:
            torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def cli_command(data: Path, out: Path, *overrides: str, family: str = "tta") -> list[str]:
    args = [sys.executable, "-m", "maskplay", "pretrain", "--family", family, "--data", str(data), "--out", str(out)]
    for item in [*SMALL, *overrides]:
        args += ["--set", item]
    return args


def child_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def wait_for_step(run_dir: Path, proc: subprocess.Popen, step: int, need_checkpoint: bool, timeout: float = 60) -> int:
    """Poll metrics.jsonl until the run has logged `step` (and written a checkpoint); returns the step seen."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        path = run_dir / "metrics.jsonl"
        # The run may be part-way through writing a line: only lines that end in a newline are complete.
        complete = path.read_text().split("\n")[:-1] if path.is_file() else []
        steps = [json.loads(line)["step"] for line in complete]
        if steps and steps[-1] >= step and (not need_checkpoint or ckpt.list_checkpoints(run_dir)):
            return steps[-1]
        time.sleep(0.002)
    raise AssertionError(f"run did not reach step {step} in {timeout} s")


def train_losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if "loss" in r}


# ---- configuration --------------------------------------------------------------------------------------------

def test_toml_round_trip_and_example_configs(tmp_path):
    cfg = apply_overrides(TrainConfig(), ["optim.lr=5e-4", "model.hidden_dropout=0.05", "data.corpus=a.txt,b.txt"])
    path = tmp_path / "c.toml"
    path.write_text(cfg.to_toml())
    assert load_train_config(path) == cfg
    for family in ("tta", "bert", "gpt"):
        example = load_train_config(REPO / "configs" / f"mini-{family}.toml").validate()
        assert example.model.family == family and example.model.preset == "mini"
        assert example.data.batch_size == 32 and example.data.max_length == 128


def test_config_errors_name_the_bad_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[optim]\nlr = 1e-4\nwarmup = 10\n")
    with pytest.raises(ValueError, match=r"bad\.toml\.optim: unknown key\(s\) \['warmup'\]"):
        load_train_config(bad)
    bad.write_text("[optimizer]\nlr = 1e-4\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['optimizer'\]"):
        load_train_config(bad)
    with pytest.raises(ValueError, match=r"'optim\.lrr'.*no field 'lrr'"):
        apply_overrides(TrainConfig(), ["optim.lrr=1"])
    with pytest.raises(ValueError, match=r"optim\.max_steps='ten': expected int"):
        apply_overrides(TrainConfig(), ["optim.max_steps=ten"])
    with pytest.raises(ValueError, match=r"run\.precision must be one of"):
        apply_overrides(TrainConfig(), ["run.precision=fp16"])
    with pytest.raises(ValueError, match=r"warmup_steps=50 exceeds optim\.max_steps=10"):
        apply_overrides(TrainConfig(), ["optim.max_steps=10", "optim.warmup_steps=50"]).validate()


def test_override_none_is_a_value_of_string_fields_and_null_is_none():
    # `--set model.positions=none` once silently gave learned positions (the family default): "none" was None
    cfg = apply_overrides(TrainConfig(), ["model.positions=none"])
    assert cfg.model.positions == "none" and cfg.model.build({"vocab_size": 100}).positions == "none"
    assert apply_overrides(cfg, ["model.positions=null"]).model.positions is None
    assert apply_overrides(TrainConfig(), ["model.key_size=16", "model.key_size=none"]).model.key_size is None
    with pytest.raises(ValueError, match=r"norm must be one of"):
        apply_overrides(TrainConfig(), ["model.norm=none"]).model.build({"vocab_size": 100})


def test_cli_reports_a_bad_override_by_name(capsys):
    assert cli_main(["pretrain", "--set", "data.batchsize=8"]) == 2
    err = capsys.readouterr().err
    assert "maskplay pretrain: error:" in err and "'data.batchsize'" in err and "batch_size" in err


def test_model_section_is_model_config_field_for_field():
    """ModelSection is derived from ModelConfig (train.config.model_section_fields), not copied: every ModelConfig
    field but the tokenizer's is there, in order, a plain field as `| None = None` (the preset's value), a table
    (the families' sections, [model.long]) as it is; and each reaches the built config from a TOML file."""
    model_fields = [f for f in dataclasses.fields(ModelConfig) if f.name not in ("family", *TOKENIZER_FIELDS)]
    section = {f.name: f for f in dataclasses.fields(ModelSection)}
    assert [name for name in section if name not in ("family", "preset", "init")] == [f.name for f in model_fields]
    hints, own = typing.get_type_hints(ModelSection), typing.get_type_hints(ModelConfig)
    for f in model_fields:
        if f.default_factory is dataclasses.MISSING:
            assert section[f.name].default is None and hints[f.name] == own[f.name] | None, f.name
    built = ModelSection(family="gpt", preset="tiny", hidden_size=48, hidden_dropout=0.0).build({"vocab_size": 77})
    assert (built.family, built.hidden_size, built.hidden_dropout, built.vocab_size, built.num_layers) == \
        ("gpt", 48, 0.0, 77, 2)
    assert built.positions == "learned" and built.lm_head == "mlm"  # None: the preset's and the family's own


def test_every_model_field_is_settable_from_a_training_config(tmp_path):
    """A value away from its default, for each ModelConfig field a training config may set, reaches the built
    ModelConfig through a TOML file (the sections' fields through their [model.<section>] tables)."""
    path = tmp_path / "model.toml"
    path.write_text('[model]\nfamily = "electra"\npreset = "tiny"\nhidden_dropout = 0.25\nkey_size = 4\n'
                    'ffn = "swiglu"\n\n[model.electra]\nmask_prob = 0.3\n\n[model.xlnet]\nmem_len = 3\n\n'
                    '[model.long]\nwindow = 2\n')
    built = load_train_config(path).model.build({"vocab_size": 100})
    assert (built.hidden_dropout, built.key_size, built.ffn) == (0.25, 4, "swiglu")
    assert (built.electra.mask_prob, built.xlnet.mem_len, built.long.window) == (0.3, 3, 2)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['electric'\]"):
        path.write_text('[model]\nfamily = "electra"\n\n[model.electric]\nmask_prob = 0.3\n')
        load_train_config(path)


# ---- schedule, parameter groups, batches ----------------------------------------------------------------------

def test_learning_rate_warms_up_then_decays_to_zero():
    optim = OptimSection(lr=1.0, warmup_steps=4, max_steps=12)
    rates = [learning_rate(s, optim) for s in range(12)]
    assert rates[:4] == [0.25, 0.5, 0.75, 1.0]
    assert rates[4] == 1.0 and rates[11] == pytest.approx(1 / 8)
    assert all(a > b for a, b in zip(rates[4:], rates[5:], strict=False))
    assert learning_rate(12, optim) == 0.0
    assert learning_rate(0, OptimSection(lr=2.0, warmup_steps=0, max_steps=4)) == 2.0


def test_no_weight_decay_on_biases_and_layer_norms():
    model = build_model(ModelSection(preset="tiny").build({}))
    decay, no_decay = parameter_groups(model, 0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    decayed = {n for n, _ in decay["params"]}
    plain = {n for n, _ in no_decay["params"]}
    assert "embeddings.word.weight" in decayed and "encoder.layers.0.attn.query.weight" in decayed
    assert {"head.bias", "embeddings.norm.weight", "encoder.layers.1.ffn_norm.weight",
            "encoder.layers.0.attn.query.bias"} <= plain
    assert not any(n.endswith("bias") or "norm" in n for n in decayed)
    assert decayed | plain == {n for n, _ in model.named_parameters()}


@pytest.mark.parametrize("switches, exempt", [
    (dict(norm="rmsnorm"), "encoder.layers.0.ffn_norm.weight"),
    (dict(talking_heads=True), "logits_mix"),
    (dict(talking_heads=True), "weights_mix"),
    (dict(positions="t5"), "buckets.weight"),
    (dict(family="xlnet"), "content_bias"),
    (dict(family="xlnet"), "segment_bias"),
    (dict(family="gpt", positions="transformer-xl"), "position_bias"),
])
def test_no_weight_decay_on_rmsnorm_mixing_and_relative_biases(switches, exempt):
    # norm gains and identity-initialised or bias-like parameters stay out of weight decay under every switch
    model = build_model(preset("tiny", **switches))
    decay, no_decay = parameter_groups(model, 0.01)
    plain = [n for n, _ in no_decay["params"] if n.endswith(exempt)]
    assert plain and not any(n.endswith(exempt) for n, _ in decay["params"])
    decayed = {n for n, _ in decay["params"]}
    assert decayed and decayed | {n for n, _ in no_decay["params"]} == {n for n, _ in model.named_parameters()}


def test_epoch_batches_are_seeded_complete_and_bucketed(data):
    lengths = sequence_lengths(TokenDataset(data / "train"))
    a = epoch_batches(lengths, 16, seed=1, epoch=0, window=4)
    assert a.shape == (10, 16) and sorted(a.ravel().tolist()) == list(range(160))
    assert np.array_equal(a, epoch_batches(lengths, 16, seed=1, epoch=0, window=4))
    assert not np.array_equal(a, epoch_batches(lengths, 16, seed=1, epoch=1, window=4))
    plain = epoch_batches(lengths, 16, seed=1, epoch=0, window=1)

    def padding(batches):
        return sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in batches)

    assert padding(a) < 0.6 * padding(plain)
    with pytest.raises(ValueError, match="fewer than one batch"):
        epoch_batches(lengths[:5], 16, seed=0, epoch=0, window=1)


def test_pack_groups_joins_consecutive_sequences_greedily():
    lengths = np.array([5, 4, 3, 9, 2, 12, 1])
    bounds = pack_groups(lengths, 10)
    # rows: [5, 4] (a 3 would make 12), [3], [9], [2], [12] alone (longer than 10: truncated later), [1]
    assert bounds.tolist() == [0, 2, 3, 4, 5, 6, 7]
    assert packed_lengths(lengths, bounds, 10).tolist() == [9, 3, 9, 2, 10, 1]
    assert pack_groups(lengths, 100).tolist() == [0, 7] and pack_groups(np.array([], dtype=int), 8).tolist() == [0]
    # every sequence in exactly one row, in order, and no row over max_length unless it is one sequence
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 500)
    bounds = pack_groups(lengths, 64)
    assert bounds[0] == 0 and bounds[-1] == 500 and np.all(np.diff(bounds) >= 1)
    sums = np.add.reduceat(lengths, bounds[:-1])
    assert np.all((sums <= 64) | (np.diff(bounds) == 1))
    # greedy: the next sequence would not have fitted in the row before it
    assert np.all(sums[:-1] + lengths[bounds[1:-1]] > 64)


def test_curriculum_orders_the_same_batches_shortest_first(data):
    lengths = sequence_lengths(TokenDataset(data / "train"))
    plain = epoch_batches(lengths, 16, seed=1, epoch=0, window=1)
    ordered = epoch_batches(lengths, 16, seed=1, epoch=0, window=1, curriculum_steps=6)
    means = lengths[ordered].mean(axis=1)
    assert np.all(np.diff(means[:6]) >= 0) and np.array_equal(ordered[6:], plain[6:])
    assert sorted(map(tuple, ordered[:6])) == sorted(map(tuple, plain[:6]))  # the same batches, reordered
    assert not np.array_equal(ordered, plain)
    # later epochs are not touched
    assert np.array_equal(epoch_batches(lengths, 16, seed=1, epoch=1, window=1, curriculum_steps=6),
                          epoch_batches(lengths, 16, seed=1, epoch=1, window=1))
    with pytest.raises(ValueError, match="curriculum_steps"):
        epoch_batches(lengths, 16, seed=1, epoch=0, window=1, curriculum_steps=-1)
    with pytest.raises(ValueError, match="data.curriculum_steps must be >= 0"):
        small_config(data, data / "unused", "data.curriculum_steps=-2")


def test_packed_rows_are_the_concatenated_sequences(data):
    dataset = TokenDataset(data / "train")
    lengths = sequence_lengths(dataset)
    bounds = pack_groups(lengths, 32)
    rows_lengths = packed_lengths(lengths, bounds, 32)
    batches = epoch_batches(rows_lengths, 4, seed=0, epoch=0, window=1)
    steps = StepBatches(data / "train", batches, rank=0, world_size=1, grad_accum=2, max_length=32, pad_id=0,
                        packed=bounds)
    (ids_a, mask_a), (ids_b, mask_b) = steps[0]
    for ids, mask, rows in ((ids_a, mask_a, batches[0][:2]), (ids_b, mask_b, batches[0][2:])):
        for r, row in enumerate(rows):
            expected = np.concatenate([dataset[j] for j in range(bounds[row], bounds[row + 1])])[:32]
            assert ids[r][mask[r]].tolist() == expected.tolist()
            assert int(mask[r].sum()) == rows_lengths[row]


def test_packing_and_curriculum_train_and_resume_exactly(data, tmp_path):
    """A packed run with a curriculum trains on fewer, fuller rows and resumes bitwise (the rows and their order
    are a pure function of the split and the seed)."""
    extra = ["data.pack=true", "data.batch_size=4", "data.curriculum_steps=8"]
    whole = train(small_config(data, tmp_path / "whole", *extra, family="bert"))
    log = (whole.run_dir / "train.log").read_text()
    assert "packed into" in log and "mean" in log
    part = train(small_config(data, tmp_path / "part", *extra, "run.max_minutes=1e-9", family="bert"))
    assert part.step == 1
    rest = train(small_config(data, tmp_path / "part", *extra, family="bert"), resume=True)
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    # the tokens it counted are those of the packed rows its batches name, shortest batches first
    lengths = sequence_lengths(TokenDataset(data / "train"))
    rows = packed_lengths(lengths, pack_groups(lengths, 32), 32)
    batches = epoch_batches(rows, 4, seed=0, epoch=0, window=4, curriculum_steps=8)[:8]
    logged = [json.loads(line) for line in (whole.run_dir / "metrics.jsonl").read_text().splitlines()]
    tokens = {m["step"]: m["tokens"] for m in logged if "tokens" in m}
    assert tokens[8] == int(rows[batches].sum()) and tokens[1] == int(rows[batches[0]].sum())
    assert rows[batches].mean() > 1.3 * lengths.mean()


# ---- the loop -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["tta", "gpt"])
def test_gradient_accumulation_equals_the_big_batch(data, tmp_path, family):
    """4 micro-batches of 4 sequences give the weights of one batch of 16 (dropout off; BERT's corruption is
    drawn per micro-batch, so it is checked by the exact-normalisation test below instead)."""
    one = train(small_config(data, tmp_path / "one", *NO_DROPOUT, family=family))
    four = train(small_config(data, tmp_path / "four", *NO_DROPOUT, "optim.grad_accum=4", family=family))
    assert one.status == four.status == "finished" and one.step == four.step == 8
    assert_same_weights(weights(one.run_dir), weights(four.run_dir), exact=False)


def test_loss_is_normalised_by_the_global_target_count(data):
    """The oracle: the gradient of one big batch's mean token loss. Summing micro-batch losses and dividing by
    the global count matches it; averaging the micro-batch means (the usual mistake) does not."""
    tok = load_tokenizer(data)
    torch.manual_seed(0)
    model = build_model(ModelSection(family="bert", preset="tiny", hidden_dropout=0.0, attention_dropout=0.0)
                        .build(tok.model_config_ids()))
    dataset = TokenDataset(data / "train")
    seqs = sorted((dataset[i] for i in range(16)), key=len)
    ids, mask = pad_batch(seqs, tok.special.pad)
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))

    def grads(loss_fn):
        model.zero_grad()
        loss_fn().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    oracle = grads(lambda: model(**batch).loss)
    parts = [slice(i, i + 4) for i in range(0, 16, 4)]

    def micro(part):  # each micro-batch padded to its own length, as the trainer does
        keep = batch["attention_mask"][part].any(0)
        return {k: v[part][:, keep] for k, v in batch.items()}

    n_total = sum(int((micro(p)["labels"] != -100).sum()) for p in parts)
    assert n_total == sum(count_targets(model, micro(p)) for p in parts)
    exact = grads(lambda: sum(model(**micro(p)).loss * count_targets(model, micro(p)) for p in parts) / n_total)
    naive = grads(lambda: sum(model(**micro(p)).loss for p in parts) / len(parts))
    torch.testing.assert_close(exact, oracle, rtol=1e-4, atol=1e-7)
    assert not torch.allclose(naive, oracle, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("family", ["tta", "bert", "gpt", "xlnet"])
def test_target_count_is_the_number_of_scored_positions(tiny_model, family):
    from tests.conftest import padded_batch

    model = tiny_model(family)
    ids, mask = padded_batch([7, 2, 5, 1])
    batch = model.training_batch(ids, mask, generator=torch.Generator().manual_seed(0))
    assert count_targets(model, batch) == model(**batch).logits.shape[0]


def test_resume_in_process_and_final_export(data, tmp_path):
    """Stopping by the time budget, then resuming with more steps, ends where one run ends; the export loads."""
    whole = train(small_config(data, tmp_path / "whole", family="bert"))
    part = train(small_config(data, tmp_path / "part", "run.max_minutes=1e-9", family="bert"))
    assert part.status == "budget" and part.step == 1 and part.final_dir is not None
    rest = train(small_config(data, tmp_path / "part", family="bert"), resume=True)
    assert rest.status == "finished" and rest.step == 8
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    assert train_losses(whole.run_dir) == train_losses(rest.run_dir)
    model = MaskplayModel.from_pretrained(rest.final_dir)
    assert model.family == "bert" and isinstance(load_tokenizer(rest.final_dir), Tokenizer)
    assert_same_weights(weights(rest.run_dir, "ckpt-000008"), {k: v for k, v in model.state_dict().items()})
    # a finished run resumed again only re-exports
    again = train(small_config(data, tmp_path / "part", family="bert"), resume=True)
    assert again.step == 8 and again.status == "finished"


def test_a_run_directory_with_checkpoints_needs_resume(data, tmp_path):
    train(small_config(data, tmp_path / "r", "optim.max_steps=2", "optim.warmup_steps=1"))
    with pytest.raises(ValueError, match=r"already has checkpoints.*--resume"):
        train(small_config(data, tmp_path / "r", "optim.max_steps=2", "optim.warmup_steps=1"))
    with pytest.raises(ValueError, match=r"differ.*\['optim\.lr'\]"):
        train(small_config(data, tmp_path / "r", "optim.max_steps=2", "optim.warmup_steps=1", "optim.lr=1e-2"),
              resume=True)


def test_corrupted_checkpoint_falls_back_to_the_previous_one(data, tmp_path, capsys):
    whole = train(small_config(data, tmp_path / "a", "run.save_every=2", "run.keep_last=4", family="gpt"))
    expected = weights(whole.run_dir)
    # lose the end of the run and corrupt the newest remaining checkpoint
    import shutil

    shutil.rmtree(whole.run_dir / "ckpt-000008")
    shutil.rmtree(whole.run_dir / "final")
    target = whole.run_dir / "ckpt-000006" / "optimizer.safetensors"
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    target.write_bytes(bytes(raw))
    capsys.readouterr()
    rest = train(small_config(data, tmp_path / "a", "run.save_every=2", "run.keep_last=4", family="gpt"),
                 resume=True)
    out, err = capsys.readouterr()  # warnings go to stderr (and train.log), never to stdout
    assert "WARNING: skipping checkpoint ckpt-000006" in err and "optimizer.safetensors does not match" in err
    assert "WARNING" not in out and "WARNING: skipping" in (whole.run_dir / "train.log").read_text()
    assert "resumed from" in out and "ckpt-000004 at step 4" in out
    assert rest.step == 8
    assert_same_weights(expected, weights(rest.run_dir))


def test_data_loader_workers_draw_the_same_batches(data, tmp_path):
    a = train(small_config(data, tmp_path / "a", "optim.max_steps=3", "data.num_workers=0"))
    b = train(small_config(data, tmp_path / "b", "optim.max_steps=3", "data.num_workers=1"))
    assert_same_weights(weights(a.run_dir), weights(b.run_dir))


def test_metrics_plot_and_resolved_config(data, tmp_path):
    result = train(small_config(data, tmp_path / "m", family="gpt"))
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if "loss" in r]
    assert [r["step"] for r in train_records] == list(range(1, 9))
    assert {"loss", "lr", "tokens_per_s", "elapsed_s", "grad_norm", "tokens"} <= set(train_records[0])
    assert [r["step"] for r in records if "eval_loss" in r] == [0, 4, 8]
    assert (result.run_dir / "loss.png").stat().st_size > 1000
    assert load_train_config(result.run_dir / "config.toml") == small_config(data, tmp_path / "m", family="gpt")
    assert "TensorBoard is off" in (result.run_dir / "train.log").read_text()


def test_corpus_is_prepared_into_the_run_directory(data, tmp_path, capsys):
    rng = np.random.default_rng(1)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(f"w{i}" for i in rng.integers(7, VOCAB, rng.integers(3, 20))) + ".\n"
                              for _ in range(400)))
    run_dir = tmp_path / "run"
    args = ["pretrain", "--corpus", str(corpus), "--tokenizer", str(data / "vocab.txt"), "--out", str(run_dir)]
    for item in [*SMALL, "optim.max_steps=2", "optim.warmup_steps=1"]:
        args += ["--set", item]
    assert cli_main(args) == 0
    assert f"final model: {(run_dir / 'final').resolve()}" in capsys.readouterr().out
    assert len(TokenDataset(run_dir / "data" / "train")) > 300
    assert load_tokenizer(run_dir / "data").vocab_size == VOCAB
    assert MaskplayModel.from_pretrained(run_dir / "final").config.vocab_size == VOCAB


# ---- kill, signals --------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.heavy
def test_sigkill_at_a_random_step_then_resume_is_bitwise_exact(data, tmp_path):
    """BERT with dropout: the corruption generator, dropout RNG, data position and AdamW state all matter."""
    overrides = ["optim.max_steps=40", "optim.warmup_steps=5", "run.save_every=5", "run.eval_every=20"]
    ref = subprocess.Popen(cli_command(data, tmp_path / "ref", *overrides, family="bert"), env=child_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    victim_dir = tmp_path / "victim"
    victim = subprocess.Popen(cli_command(data, victim_dir, *overrides, family="bert"), env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    kill_at = random.Random().randint(6, 30)
    seen = wait_for_step(victim_dir, victim, kill_at, need_checkpoint=True)
    victim.kill()
    victim.wait()
    assert not (victim_dir / "final").exists(), "the run finished before it was killed"
    resumed = subprocess.run([sys.executable, "-m", "maskplay", "pretrain", "--out", str(victim_dir), "--resume"],
                             env=child_env(), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed from" in resumed.stdout
    out, _ = ref.communicate(timeout=120)
    assert ref.returncode == 0, out
    context = f"killed at step {seen} (target {kill_at}); {resumed.stdout}"
    a, b = weights(tmp_path / "ref"), weights(victim_dir)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs after a kill at step {seen}: {context}"
    assert train_losses(tmp_path / "ref") == train_losses(victim_dir)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signal_writes_a_checkpoint_and_exits_cleanly(data, tmp_path, sig, code):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(cli_command(data, run_dir, "optim.max_steps=100000", "optim.warmup_steps=2",
                                        "run.save_every=0", "run.eval_every=0"),
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_step(run_dir, proc, 3, need_checkpoint=False)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, out + err
    assert f"stopped by {sig.name}" in out and "--resume" in out
    (step, path), = ckpt.list_checkpoints(run_dir)
    assert step >= 3
    ckpt.verify_checkpoint(path)
    assert json.loads((path / "state.json").read_text())["step"] == step
    assert not (run_dir / "final").exists()
    assert not list(run_dir.glob(".tmp-*"))


# ---- learning on real text ------------------------------------------------------------------------------------

def wordpiece_data(directory: Path, vocab_size: int = 2000) -> Path:
    """WikiText-2 valid sentences with a small WordPiece vocabulary trained on them (a fast head)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

    lines = shared_path("wikitext-2", "wiki.valid.tokens").read_text(encoding="utf-8").splitlines()
    text = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("=")]
    backend = HFTokenizer(models.WordPiece(unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    backend.train_from_iterator(text, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS))
    tok = Tokenizer(backend)
    seqs = [ids[i:i + 48] for ids in tok.encode_batch(text) for i in range(0, len(ids), 48)]
    seqs = [s for s in seqs if len(s) >= 8]
    write_split(directory / "train", seqs[:-128], tok.vocab_size)
    write_split(directory / "valid", seqs[-128:], tok.vocab_size)
    tok.save(directory)
    return directory


def unigram_loss(data: Path) -> float:
    """The held-out loss of the unigram distribution of the training split (add-one smoothed): what a model
    learns from token frequencies alone."""
    train_tokens = np.asarray(TokenDataset(data / "train").tokens, dtype=np.int64)
    valid_tokens = np.asarray(TokenDataset(data / "valid").tokens, dtype=np.int64)
    counts = np.bincount(train_tokens, minlength=load_tokenizer(data).vocab_size) + 1
    return float(-np.log(counts[valid_tokens] / counts.sum()).mean())


@pytest.mark.slow
def test_held_out_loss_falls_on_real_text(tmp_path):
    """GPT, 200 steps: from log(V) at the start to well below the unigram loss, so it uses the context."""
    data = wordpiece_data(tmp_path / "data")
    cfg = small_config(data, tmp_path / "run", "model.hidden_size=64", "model.intermediate_size=128",
                       "data.max_length=48", "data.batch_size=32", "optim.max_steps=200", "optim.warmup_steps=20",
                       "run.eval_every=0", "run.eval_batches=4", "run.save_every=0", "run.log_every=50", family="gpt")
    result = train(cfg)
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    start, end = (r["eval_loss"] for r in records if "eval_loss" in r)
    assert start == pytest.approx(np.log(2000), abs=0.1)
    assert end < unigram_loss(data) - 0.5, (start, end, unigram_loss(data))


def test_xlnet_pretrains_resumes_and_scores(data, tmp_path):
    """XLNet through the same loop: a budget-stopped run resumed ends where one run ends, and its export scores."""
    from maskplay.cli import main

    whole = train(small_config(data, tmp_path / "whole", family="xlnet"))
    part = train(small_config(data, tmp_path / "part", "run.max_minutes=1e-9", family="xlnet"))
    rest = train(small_config(data, tmp_path / "part", family="xlnet"), resume=True)
    assert part.step == 1 and rest.step == whole.step == 8
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    sentences = tmp_path / "s.txt"
    sentences.write_text("the cat sat on the mat .\nthe mat sat .\n")
    for method in ("causal", "pll"):
        out = tmp_path / f"{method}.jsonl"
        assert main(["score", str(rest.final_dir), "--file", str(sentences), "--format", "jsonl", "--out", str(out),
                     "--method", method]) == 0
        assert len(out.read_text().splitlines()) == 2


def test_stop_at_step_ends_the_run_without_changing_the_schedule(data, tmp_path):
    """Stopped at step 3 of an 8-step schedule, then resumed without the stop: the weights of one whole run."""
    whole = train(small_config(data, tmp_path / "whole", family="bert"))
    part = train(small_config(data, tmp_path / "part", "run.stop_at_step=3", family="bert"))
    assert part.status == "budget" and part.step == 3 and part.final_dir is not None
    rest = train(small_config(data, tmp_path / "part", family="bert"), resume=True)
    assert rest.step == 8
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    with pytest.raises(ValueError, match="stop_at_step"):
        small_config(data, tmp_path / "bad", "run.stop_at_step=0")

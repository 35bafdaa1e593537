"""maskplay.tasks.distill: a T-TA trained on a masked LM's PLL distributions. The loss against a naive per-position KL;
the teacher's targets against the PLL scorer and a naive masked-copy loop for every teacher family; stored targets
against on-the-fly ones; a bitwise resume; the warm start; and a student that, distilled from a tiny teacher,
agrees with the teacher's PLL ranking of held-out sentence pairs far better than before training."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from maskplay import MaskplayModel
from maskplay.cli import main as cli_main
from maskplay.config import preset
from maskplay.data.dataset import TokenDataset, pad_batch
from maskplay.data.tokenizer import load_tokenizer
from maskplay.families import build_model
from maskplay.tasks.distill import (
    DistillConfig,
    StoredTargets,
    TeacherPass,
    distill,
    distill_loss,
    load_teacher,
    prepare_targets,
    student_config,
    warm_start,
)
from maskplay.tasks.distill.fused import fused_distill_loss
from maskplay.tasks.distill.store import teacher_identity
from maskplay.tasks.score.passes import Segment
from maskplay.tasks.score.scorer import Scorer
from tests.tasks.train.test_train import assert_same_weights, make_data, small_config, weights

TEACHERS = ["bert", "electra", "unilm", "gpt-bert", "xlnet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_data(tmp_path_factory.mktemp("distill-data"), n_train=96, n_valid=24)


def save_teacher(directory: Path, data: Path, family: str = "bert", seed: int = 0, std: float = 0.5,
                 **overrides) -> Path:
    """A random tiny teacher whose embedding tables are drawn with a large `std`: distributions far from uniform
    that depend on the position and the context (its config keeps the usual initializer_range, which a student of
    its shape takes)."""
    tok = load_tokenizer(data)
    torch.manual_seed(seed)
    model = build_model(preset("tiny", family=family, **{**tok.model_config_ids(), **overrides}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and name.startswith("embeddings."):
                p.normal_(0, std)
    model.save_pretrained(directory)
    tok.save(directory)
    return directory


# ---- the loss -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("temperature, ce_weight", [(1.0, 0.0), (2.0, 0.3), (0.5, 1.0)])
def test_loss_equals_a_naive_per_position_kl(temperature, ce_weight):
    g = torch.Generator().manual_seed(0)
    n, vocab, k = 7, 30, 5
    logits = torch.randn(n, vocab, generator=g) * 3
    teacher = torch.log_softmax(torch.randn(n, vocab, generator=g) * 2, -1)
    top = teacher.topk(k, -1)
    real = torch.randint(vocab, (n,), generator=g)
    loss, parts = distill_loss(logits, top.indices.int(), top.values, real, temperature, ce_weight)
    total_kl = total_ce = 0.0
    for i in range(n):
        kept = [math.exp(float(v) / temperature) for v in top.values[i]]
        p = [x / sum(kept) for x in kept]  # the kept ids, renormalised at T
        z = [float(v) / temperature for v in logits[i]]
        log_norm = math.log(sum(math.exp(x) for x in z))
        total_kl += sum(p[j] * (math.log(p[j]) - (z[int(top.indices[i, j])] - log_norm)) for j in range(k))
        raw = [float(v) for v in logits[i]]
        total_ce += math.log(sum(math.exp(x) for x in raw)) - raw[int(real[i])]
    kl, ce = total_kl / n, total_ce / n
    assert float(parts["kl"]) == pytest.approx(kl, rel=1e-5)
    assert float(parts["ce"]) == pytest.approx(ce, rel=1e-5)
    assert float(loss) == pytest.approx((1 - ce_weight) * temperature ** 2 * kl + ce_weight * ce, rel=1e-5)


@pytest.mark.parametrize("temperature, ce_weight", [(1.0, 0.0), (1.0, 0.4), (2.0, 0.3), (0.5, 1.0), (3.0, 0.0)])
def test_the_fused_loss_equals_the_plain_one_with_its_gradients(temperature, ce_weight):
    """The fused loss (chunks of rows, the gradient taken in the forward pass) against distill_loss on the logits
    of the same projection, autograd's gradients: over 150 rows, more than two chunks."""
    g = torch.Generator().manual_seed(1)
    n, width, vocab, k = 150, 16, 40, 6
    x = torch.randn(n, width, generator=g, requires_grad=True)
    weight = torch.randn(vocab, width, generator=g, requires_grad=True)
    bias = torch.randn(vocab, generator=g, requires_grad=True)
    top = torch.log_softmax(torch.randn(n, vocab, generator=g) * 2, -1).topk(k, -1)
    real = torch.randint(vocab, (n,), generator=g)
    fused, parts = fused_distill_loss(x, weight, bias, top.indices.int(), top.values, real, temperature, ce_weight)
    want, want_parts = distill_loss(x @ weight.t() + bias, top.indices.int(), top.values, real, temperature, ce_weight)
    torch.testing.assert_close(fused, want)
    torch.testing.assert_close(parts["kl"], want_parts["kl"].detach())
    torch.testing.assert_close(parts["ce"], want_parts["ce"].detach())
    got = torch.autograd.grad(fused * 3, (x, weight, bias))
    for a, b in zip(got, torch.autograd.grad(want * 3, (x, weight, bias)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_the_loss_is_zero_when_the_student_is_the_full_teacher():
    logits = torch.randn(4, 12)
    full = torch.log_softmax(logits, -1).topk(12, -1)
    loss, _ = distill_loss(logits, full.indices.int(), full.values, torch.zeros(4, dtype=torch.long))
    assert float(loss) == pytest.approx(0.0, abs=1e-6)


# ---- the teacher's targets ------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", TEACHERS)
def test_teacher_targets_are_the_plls_distributions(data, tmp_path, family):
    """With k = the vocabulary, the log-probability of the true piece is the PLL scorer's, for every teacher family;
    the distribution sums to 1."""
    path = save_teacher(tmp_path / "t", data, family)
    tok = load_tokenizer(path)
    teacher = load_teacher(path)
    seq = torch.as_tensor(TokenDataset(data / "valid")[0])
    top_ids, top_logp = TeacherPass(teacher, top_k=100, rows=4)(seq)
    n = len(seq) - 2
    assert top_ids.shape == (n, 100)
    torch.testing.assert_close(top_logp.exp().sum(-1), torch.ones(n))
    true = torch.stack([top_logp[j][top_ids[j] == seq[j + 1]][0] for j in range(n)])
    scorer = Scorer(MaskplayModel.from_pretrained(path), tok, method="pll")
    want = dict(scorer.segment_log_probs([Segment(0, seq.tolist(), 0, list(range(n)), list(range(n)))]))
    torch.testing.assert_close(true, torch.tensor([want[(0, j)] for j in range(n)]), rtol=1e-4, atol=1e-5)


def test_teacher_pass_equals_a_naive_loop_of_masked_copies(data, tmp_path):
    """BERT: the top-k of a full forward pass over each masked copy, one copy at a time."""
    teacher = load_teacher(save_teacher(tmp_path / "t", data, "bert"))
    seq = torch.as_tensor(TokenDataset(data / "valid")[1])
    top_ids, top_logp = TeacherPass(teacher, top_k=8)(seq)
    for j in range(1, len(seq) - 1):
        masked = seq.clone()
        masked[j] = teacher.config.mask_token_id
        with torch.no_grad():
            logits = teacher(masked[None]).logits[0, j]
        want = torch.log_softmax(logits, -1).topk(8)
        assert torch.equal(top_ids[j - 1].long(), want.indices)
        torch.testing.assert_close(top_logp[j - 1], want.values, rtol=1e-5, atol=1e-5)


def test_a_teacher_without_a_pll_is_refused(data, tmp_path):
    path = save_teacher(tmp_path / "gpt", data, "gpt")
    with pytest.raises(ValueError, match="has no masked-LM reading"):
        load_teacher(path)


# ---- stored targets -------------------------------------------------------------------------------------------

def test_stored_targets_equal_on_the_fly_ones_and_prepare_resumes(data, tmp_path):
    teacher_dir = save_teacher(tmp_path / "t", data)
    out = tmp_path / "targets"
    first = prepare_targets(teacher_dir, data, out, top_k=6, max_length=20, shard_sequences=40)
    assert first.computed == 96 + 24 and first.passes == 96 + 24  # one pass per sequence (rows 256)
    stored = StoredTargets(out, top_k=6, max_length=20)
    on_the_fly = TeacherPass(load_teacher(teacher_dir), top_k=6)
    train = TokenDataset(data / "train")
    ids, mask = pad_batch([train[i][:20] for i in (5, 0, 77, 31)], 0)  # another batch than any shard's
    a, b = stored.batch(ids, mask), on_the_fly.batch(ids, mask)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    # a lost shard is computed again, identically; the rest is not recomputed
    shard = out / "train-00001.safetensors"
    before = {k: v.tolist() for k, v in load_file(shard).items()}
    shard.unlink()
    again = prepare_targets(teacher_dir, data, out, top_k=6, max_length=20, shard_sequences=40)
    assert again.computed == 40 and {k: v.tolist() for k, v in load_file(shard).items()} == before
    with pytest.raises(ValueError, match="other settings"):
        prepare_targets(teacher_dir, data, out, top_k=7, max_length=20, shard_sequences=40)
    with pytest.raises(ValueError, match="max_length=20"):
        StoredTargets(out, top_k=6, max_length=32)
    with pytest.raises(ValueError, match="top 6 teacher ids"):
        StoredTargets(out, top_k=8, max_length=20)
    # the teacher's identity is its weights', not its file's
    same, other = (load_teacher(save_teacher(tmp_path / name, data, seed=seed)) for name, seed in (("a", 0), ("b", 1)))
    StoredTargets(out, top_k=6, max_length=20, teacher_sha256=teacher_identity(same))
    with pytest.raises(ValueError, match="prepared by another teacher"):
        StoredTargets(out, top_k=6, max_length=20, teacher_sha256=teacher_identity(other))


def test_a_bf16_teacher_is_close_to_fp32_and_stored_as_computed(data, tmp_path):
    teacher_dir = save_teacher(tmp_path / "t", data)
    teacher = load_teacher(teacher_dir)
    seq = torch.as_tensor(TokenDataset(data / "valid")[2])
    ids32, logp32 = TeacherPass(teacher, top_k=100)(seq)
    ids16, logp16 = TeacherPass(teacher, top_k=100, precision="bf16")(seq)
    full32 = torch.empty_like(logp32).scatter_(1, ids32.long(), logp32)
    full16 = torch.empty_like(logp16).scatter_(1, ids16.long(), logp16)
    assert 0 < (full16 - full32).abs().max() < 0.1  # bf16's rounding, not another distribution
    prepare_targets(teacher_dir, data, tmp_path / "targets", top_k=6, max_length=32, precision="bf16")
    stored = StoredTargets(tmp_path / "targets", top_k=6, max_length=32, precision="bf16")
    ids, mask = pad_batch([seq.numpy()], 0)
    a, b = stored.batch(ids, mask), TeacherPass(teacher, top_k=6, precision="bf16").batch(ids, mask)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="computed by the teacher in bf16"):
        StoredTargets(tmp_path / "targets", top_k=6, max_length=32, precision="fp32")


# ---- training -------------------------------------------------------------------------------------------------

def test_a_resume_is_bitwise_and_stored_targets_train_as_on_the_fly_ones(data, tmp_path):
    teacher_dir = save_teacher(tmp_path / "t", data)
    # the run's threads (run.threads = 1): a CPU matmul's rounding depends on them
    prepare_targets(teacher_dir, data, tmp_path / "targets", top_k=8, max_length=32, threads=1)
    cfg = DistillConfig(teacher=str(teacher_dir), top_k=8, temperature=2.0, ce_weight=0.25)
    whole = distill(small_config(data, tmp_path / "whole"), cfg)
    stored = DistillConfig(**{**cfg.to_dict(), "targets": str(tmp_path / "targets")})
    part = distill(small_config(data, tmp_path / "part", "run.max_minutes=1e-9"), stored)
    assert part.status == "budget" and part.step == 1
    rest = distill(small_config(data, tmp_path / "part"), cfg, resume=True)  # on the fly from here
    assert rest.status == "finished" and rest.step == 8
    assert_same_weights(weights(whole.run_dir), weights(rest.run_dir))
    records = [json.loads(line) for line in (whole.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"kl", "ce", "eval_kl", "eval_ce"} <= {k for r in records for k in r}
    model = MaskplayModel.from_pretrained(whole.final_dir)
    assert model.config.family == "tta"
    with pytest.raises(ValueError, match="changed: temperature"):
        distill(small_config(data, tmp_path / "part"), DistillConfig(teacher=str(teacher_dir), top_k=8), resume=True)


def test_warm_start_copies_every_weight_of_a_bert_of_the_same_shape(data, tmp_path):
    teacher = load_teacher(save_teacher(tmp_path / "t", data))
    student = build_model(student_config(teacher, load_tokenizer(data).model_config_ids()))
    report = warm_start(student, teacher)
    assert report["kept"] == [] and len(report["copied"]) == len(student.state_dict())
    assert_same_weights(student.state_dict(), teacher.state_dict())
    # ELECTRA's teacher is its generator: a T-TA of the generator's shape takes all of it
    electra = load_teacher(save_teacher(tmp_path / "e", data, "electra"))
    student = build_model(student_config(electra, load_tokenizer(data).model_config_ids()))
    assert warm_start(student, electra)["kept"] == []
    # a student of another width keeps its own initialisation where the shapes differ
    wide = build_model(preset("tiny", family="tta", hidden_size=48, **load_tokenizer(data).model_config_ids()))
    report = warm_start(wide, teacher)
    assert "embeddings.word.weight" in report["kept"] and "head.bias" in report["copied"]


def test_a_student_of_the_configs_shape_takes_what_fits(data, tmp_path):
    """shape = config: the [model] section's architecture; the warm start copies the weights whose shapes agree."""
    teacher_dir = save_teacher(tmp_path / "t", data)
    result = distill(small_config(data, tmp_path / "run", "model.hidden_size=48", "optim.max_steps=2",
                                  "run.save_every=0"),
                     DistillConfig(teacher=str(teacher_dir), shape="config", top_k=8))
    model = MaskplayModel.from_pretrained(result.final_dir)
    assert model.config.hidden_size == 48 and model.config.family == "tta"
    log = (result.run_dir / "train.log").read_text()
    assert "warm start from the teacher: " in log and "kept at their initialisation: embeddings.word.weight" in log


@pytest.mark.parametrize("family", TEACHERS)
def test_a_student_of_each_teachers_shape_runs_and_warm_starts(data, tmp_path, family):
    teacher = load_teacher(save_teacher(tmp_path / "t", data, family))
    student = build_model(student_config(teacher, load_tokenizer(data).model_config_ids()))
    report = warm_start(student, teacher)
    assert student.config.family == "tta" and report["copied"]
    # XLNet's relative positions and bias-free attention are its own: the T-TA keeps its learned positions
    assert report["kept"] == [] or type(teacher).two_streams
    out = student(torch.tensor([[3, 10, 11, 12, 1]]))
    assert out.last_hidden_state.shape[:2] == (1, 5)


def order_pairs(data: Path, n_per: int = 5) -> list[tuple[list[int], list[int]]]:
    """Held-out word-order minimal pairs: a valid sentence and a copy with two neighbouring pieces swapped (the same
    pieces, so a student that has not learnt the teacher's use of context cannot tell them apart, and one trained on
    targets shifted by a position learns the wrong preferences)."""
    valid, rng = TokenDataset(data / "valid"), np.random.default_rng(1)
    pairs = []
    for i in range(len(valid)):
        s = valid[i].tolist()
        for _ in range(n_per):
            t, j = list(s), int(rng.integers(1, len(s) - 2))
            t[j], t[j + 1] = t[j + 1], t[j]
            pairs.append((s, t))
    return pairs


def pair_scores(model: MaskplayModel, tok, method: str, pairs) -> np.ndarray:
    sequences = [x for pair in pairs for x in pair]
    segments = [Segment(k, s, 0, list(range(len(s) - 2)), list(range(len(s) - 2))) for k, s in enumerate(sequences)]
    out = np.zeros(len(sequences))
    for (k, _), value in Scorer(model, tok, method=method, batch_size=64).segment_log_probs(segments):
        out[k] += value
    return out.reshape(-1, 2)


def test_the_students_one_pass_learns_the_teachers_pll_ranking(tmp_path):
    """A T-TA from scratch, distilled for 100 steps from a tiny BERT, prefers the teacher's member of held-out
    word-order pairs (its one pass against the teacher's PLL) far more often than at its initialisation (here 0.49
    -> 0.72; with the teacher's targets shifted by one position, 0.42)."""
    data = make_data(tmp_path / "data", n_train=320)
    tok = load_tokenizer(data)
    teacher_dir = save_teacher(tmp_path / "t", data)
    teacher = load_teacher(teacher_dir)
    pairs = order_pairs(data)
    want = np.sign(np.diff(pair_scores(teacher, tok, "pll", pairs), axis=1))

    def agreement(student: MaskplayModel) -> float:
        return float(np.mean(np.sign(np.diff(pair_scores(student, tok, "one-pass", pairs), axis=1)) == want))

    torch.manual_seed(0)  # the run's initial weights (data.seed 0)
    before = agreement(build_model(student_config(teacher, tok.model_config_ids())))
    prepare_targets(teacher_dir, data, tmp_path / "targets", top_k=16, max_length=32)
    cfg = small_config(data, tmp_path / "run", "optim.max_steps=100", "optim.lr=1e-2", "optim.warmup_steps=10",
                       "run.eval_every=0", "run.save_every=0", "run.log_every=50", "model.hidden_dropout=0",
                       "model.attention_dropout=0")
    result = distill(cfg, DistillConfig(teacher=str(teacher_dir), targets=str(tmp_path / "targets"), top_k=16,
                                        init="scratch"))
    after = agreement(MaskplayModel.from_pretrained(result.final_dir))
    assert before < 0.65 and after > before + 0.15, (before, after)


# ---- the command line -----------------------------------------------------------------------------------------

def test_cli_distils_a_huggingface_bert_through_stored_targets(data, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)
    hf = transformers.BertForMaskedLM(cfg).eval()
    hf.save_pretrained(tmp_path / "hf", safe_serialization=True)
    load_tokenizer(data).save(tmp_path / "hf")
    targets, run = tmp_path / "targets", tmp_path / "run"
    assert cli_main(["distill", "prepare", str(tmp_path / "hf"), "--data", str(data), "--out", str(targets),
                     "--top-k", "8", "--max-length", "32"]) == 0
    assert "wrote" in capsys.readouterr().out and (targets / "teacher" / "model.safetensors").is_file()
    small = ["--set", "model.preset=tiny", "--set", "data.max_length=32", "--set", "run.progress=false",
             "--set", "run.tensorboard=false", "--set", "optim.warmup_steps=1", "--set", "run.eval_batches=1"]
    args = ["distill", str(targets / "teacher"), "--student", "tta", "--data", str(data), "--targets", str(targets),
            "--out", str(run), "--top-k", "8", "--max-steps", "2", "--batch-size", "16", "--device", "cpu", *small]
    assert cli_main(args) == 0
    assert "final model" in capsys.readouterr().out
    assert MaskplayModel.from_pretrained(run / "final").config.family == "tta"
    # --resume takes the run's saved switches (its top-k, its stored targets) unless given again
    assert cli_main(["distill", str(targets / "teacher"), "--out", str(run), "--resume", "--max-steps", "3"]) == 0
    assert json.loads((run / "distill.json").read_text())["top_k"] == 8
    assert (run / "ckpt-000003").is_dir()
    bad = ["distill", str(targets / "teacher"), "--data", str(data), "--out", str(tmp_path / "bad"), "--ce-weight", "2"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli_main(bad)
    assert exit_.value.code == 2 and "argument --ce-weight: 2 is not in [0, 1)" in capsys.readouterr().err


def test_cli_refuses_data_of_another_tokenizer(data, tmp_path, capsys):
    teacher = save_teacher(tmp_path / "t", data, vocab_size=120)
    assert cli_main(["distill", "prepare", str(teacher), "--data", str(data), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "the teacher and the data's tokenizer differ" in err and len(err.strip().splitlines()) == 1

"""The cost of distillation (maskplay.tasks.distill) against plain T-TA training, in one run: an optimizer step of a T-TA
on its own cross-entropy, the same step on a teacher's stored targets (`maskplay distill prepare`), and on targets
the teacher computes at the step (on the fly); then `distill prepare`'s throughput (sequences per second, teacher
passes and masked copies per sequence; the teacher in fp32, then in bf16).
Teacher: a random BERT of the preset's size; student: a T-TA of its shape
(the default --shape teacher). Steps run as the training loop runs them (DistillForward / forward_in, backward,
AdamW), cases interleaved round by round, the median reported.

    python benchmarks/distill_step.py --preset tiny
    python benchmarks/distill_step.py --preset mini --batch 32 --rounds 5 --json distill-mini.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved, machine  # noqa: E402

from maskplay import preset  # noqa: E402
from maskplay.data.dataset import pad_batch, write_split  # noqa: E402
from maskplay.data.tokenizer import SPECIAL_TOKENS, load_tokenizer  # noqa: E402
from maskplay.families import build_model  # noqa: E402
from maskplay.runtime.precision import forward_in  # noqa: E402
from maskplay.tasks.distill import (
    DistillObjective,
    StoredTargets,
    TeacherPass,
    load_teacher,
    prepare_targets,
    student_config,
)
from maskplay.tasks.distill.loss import DistillForward  # noqa: E402
from maskplay.tasks.train.config import OptimSection  # noqa: E402
from maskplay.tasks.train.schedule import build_optimizer  # noqa: E402


def make_data(root: Path, vocab: int, n: int, seed: int = 0) -> tuple[Path, list[np.ndarray]]:
    """Random sentences of 8..48 pieces (mean ~28, as WikiText's) with [SOS] / [EOS], and a vocabulary of `vocab`."""
    root.mkdir(parents=True, exist_ok=True)
    words = SPECIAL_TOKENS + [f"w{i}" for i in range(len(SPECIAL_TOKENS), vocab)]
    (root / "vocab.txt").write_text("\n".join(words) + "\n")
    load_tokenizer(root / "vocab.txt").save(root)
    rng = np.random.default_rng(seed)
    seqs = [np.array([3, *rng.integers(7, vocab, k).tolist(), 1]) for k in rng.integers(8, 49, n)]
    write_split(root / "train", seqs, vocab)
    return root, seqs


def step_case(model, optimizer, forward, batch):
    def run() -> None:
        optimizer.zero_grad(set_to_none=True)
        out = forward(model, "fp32", **batch)
        out.loss.backward()
        optimizer.step()

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--top-k", type=int, default=64)
    p.add_argument("--prepare-sequences", type=int, default=64)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        vocab = preset(args.preset).vocab_size
        data, seqs = make_data(root / "data", vocab, max(args.batch, args.prepare_sequences))
        tok = load_tokenizer(data)
        torch.manual_seed(0)
        build_model(preset(args.preset, family="bert", **tok.model_config_ids())).save_pretrained(root / "teacher")
        tok.save(root / "teacher")
        teacher = load_teacher(root / "teacher")
        ids, mask = pad_batch(seqs[:args.batch], 0)

        started = time.perf_counter()
        summary = prepare_targets(root / "teacher", data, root / "targets", top_k=args.top_k,
                                  max_length=preset(args.preset).max_position, splits=("train",))
        prepare_s = time.perf_counter() - started
        started = time.perf_counter()  # the same with the teacher in bf16 (--teacher-precision bf16)
        prepare_targets(root / "teacher", data, root / "targets-bf16", top_k=args.top_k,
                        max_length=preset(args.preset).max_position, splits=("train",), precision="bf16")
        prepare_bf16_s = time.perf_counter() - started
        stored = StoredTargets(root / "targets", args.top_k, preset(args.preset).max_position)

        cases = {}
        for name in ("tta", "distill stored", "distill on the fly"):
            torch.manual_seed(0)
            student = build_model(student_config(teacher, tok.model_config_ids())).train()
            optimizer = build_optimizer(student, OptimSection())
            if name == "tta":
                forward, batch = forward_in, student.training_batch(ids, mask)
            else:
                source = stored.batch if name == "distill stored" else TeacherPass(teacher, args.top_k).batch
                forward = DistillForward(DistillObjective(student, 1.0, 0.0), source)
                batch = {"input_ids": ids, "attention_mask": mask}
            cases[name] = step_case(student, optimizer, forward, batch)
        times = interleaved(cases, args.rounds)

    n_seq = len(seqs)
    pieces = sum(len(s) - 2 for s in seqs)
    rows = [{"case": k, "step_s": v, "ratio_to_tta": v / times["tta"]} for k, v in times.items()]
    prep = {"sequences": n_seq, "seconds": prepare_s, "sequences_per_s": n_seq / prepare_s,
            "teacher_passes_per_sequence": summary.passes / n_seq, "masked_copies_per_sequence": pieces / n_seq,
            "prepare_s_per_sequence_over_tta_step_s_per_sequence": (prepare_s / n_seq) / (times["tta"] / args.batch),
            "bf16_teacher_sequences_per_s": n_seq / prepare_bf16_s, "bf16_teacher_speedup": prepare_s / prepare_bf16_s}
    print(f"preset {args.preset}, batch {args.batch} sentences (mean {pieces / n_seq + 2:.1f} tokens), top-k {args.top_k}, "
          f"fp32, median of {args.rounds} interleaved rounds")
    for r in rows:
        print(f"  {r['case']:<20} {r['step_s'] * 1e3:9.1f} ms/step   x{r['ratio_to_tta']:.2f} of a T-TA step")
    print(f"  distill prepare: {prep['sequences_per_s']:.1f} sequences/s, {prep['teacher_passes_per_sequence']:.2f} "
          f"teacher passes and {prep['masked_copies_per_sequence']:.1f} masked copies per sequence; one sequence's "
          f"targets cost x{prep['prepare_s_per_sequence_over_tta_step_s_per_sequence']:.2f} its share of a T-TA step; "
          f"with the teacher in bf16 {prep['bf16_teacher_sequences_per_s']:.1f} sequences/s "
          f"(x{prep['bf16_teacher_speedup']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "preset": args.preset, "batch": args.batch,
                                               "rows": rows, "prepare": prep}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""A distilled T-TA against its teacher and a from-scratch T-TA at equal student compute (the
same optimizer steps, batch, data and optimizer), measured on this machine. Two subcommands:

train: one student run through maskplay.tasks.distill's training loop.
  warm-kl     distilled (KL to the stored teacher targets), warm start from the teacher (the default)
  scratch-kl  distilled, random initialisation (separates the warm start from the KL)
  scratch-ce  from scratch on T-TA's own objective: the same loop, positions, data, steps and optimizer with
              ce_weight = 1 (cross-entropy on the real piece at every piece); the teacher's targets are not
              read (a constant placeholder stands in for them; its KL has weight 0 and is not trained)

eval: teacher (PLL) and students (one pass), each scored in this one process, one thread:
  BLiMP-dev (first --blimp-limit pairs of each of the 36 paradigms; macro accuracy, as `maskplay eval blimp`),
  the share of those pairs where each model's decision (good strictly above bad) equals the teacher's,
  Spearman of sentence log-probabilities against the teacher's PLL on --heldout Wikipedia sentences from a file
  the students never trained on, and scoring speed (sentences/s) on those sentences, the teacher's PLL and each
  student's one pass timed in the same run (ratios are within the run; the machine is shared).

    python benchmarks/distill_measure.py train warm-kl --teacher unilm-titles-mini --data DATA --targets TARGETS \
        --out RUN --steps 450
    python benchmarks/distill_measure.py eval --teacher unilm-titles-mini --student warm-kl=RUN/final \
        --student scratch-ce=RUN2/final --heldout 2000 --blimp-limit 100 --json results/distill/eval.json
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved, machine  # noqa: E402

from maskplay.data.sentences import split_sentences  # noqa: E402
from maskplay.tasks.distill import DistillConfig  # noqa: E402
from maskplay.tasks.distill.loop import DistillTrainer  # noqa: E402
from maskplay.tasks.distill.teacher import target_mask  # noqa: E402
from maskplay.tasks.score.scorer import Scorer  # noqa: E402
from maskplay.tasks.train.config import TrainConfig  # noqa: E402
from maskplay.tasks.train.loop import train  # noqa: E402

VARIANTS = {"warm-kl": ("warm", 0.0), "scratch-kl": ("scratch", 0.0), "scratch-ce": ("scratch", 1.0)}


class CrossEntropyTrainer(DistillTrainer):
    """T-TA's own objective through the distillation loop: ce_weight 1, a placeholder in place of the teacher's
    targets (one id, log-probability 0, at every target position), so nothing is read from the teacher."""

    def _target_source(self):  # type: ignore[no-untyped-def]
        special = list(self.teacher.config.special_token_ids)

        def source(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            n = int(target_mask(input_ids, attention_mask, special).sum())
            return torch.zeros(n, 1, dtype=torch.int32), torch.zeros(n, 1)

        self.log("teacher targets: none (ce_weight 1: T-TA's own cross-entropy on the real pieces)")
        return source


def train_config(args: argparse.Namespace) -> TrainConfig:
    config = TrainConfig()
    config.model.family = "tta"
    config.data.path, config.data.batch_size, config.data.max_length = args.data, args.batch_size, 128
    opt = config.optim
    opt.lr, opt.warmup_steps, opt.max_steps, opt.betas = args.lr, args.warmup, args.steps, [0.9, 0.98]
    run = config.run
    run.out_dir, run.threads, run.eval_every, run.save_every = args.out, 1, 0, args.save_every
    run.log_every, run.precision, run.progress, run.tensorboard = 10, args.precision, False, False
    return config


def cmd_train(args: argparse.Namespace) -> None:
    init, ce_weight = VARIANTS[args.variant]
    targets = "" if ce_weight == 1 else args.targets
    dc = DistillConfig(teacher=args.teacher, targets=targets, init=init, ce_weight=ce_weight,
                       teacher_precision=args.teacher_precision)
    kind = CrossEntropyTrainer if ce_weight == 1 else DistillTrainer
    result = train(train_config(args), resume=args.resume, trainer_class=functools.partial(kind, distill=dc))
    print(result)


def heldout_sentences(path: str, n: int, min_words: int = 4, max_words: int = 40) -> list[str]:
    """The first n sentences of 4-40 words of a WikiExtractor file's article bodies (titles and markup skipped)."""
    out: list[str] = []
    title_next = False
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("<doc"):
                title_next = True
                continue
            if not line or line.startswith("</doc") or title_next:
                title_next = False
                continue
            for s in split_sentences(line):
                if min_words <= len(s.split()) <= max_words:
                    out.append(s)
                    if len(out) == n:
                        return out
    return out


def blimp_pairs(folder: str, limit: int) -> list[tuple[str, str, str]]:
    """(paradigm, good, bad): the first `limit` pairs of each paradigm file, files in name order."""
    pairs = []
    for path in sorted(Path(folder).glob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()][:limit]
        pairs += [(r.get("UID", path.name.split(".")[0]), r["sentence_good"], r["sentence_bad"]) for r in rows]
    return pairs


def timed_scores(scorer: Scorer, sentences: list[str]) -> tuple[list[float], float, float]:
    """(scores, wall seconds, CPU seconds of this process: on a shared machine the CPU time is the steadier)."""
    scorer.score(sentences[:8])  # warm-up: the first call's one-off costs (bf16 copy, allocator) are not timed
    wall, cpu = time.perf_counter(), time.process_time()
    scores = [s.log_prob for s in scorer.score(sentences)]
    return scores, time.perf_counter() - wall, time.process_time() - cpu


def macro_accuracy(pairs: list[tuple[str, str, str]], right: list[bool]) -> float:
    per: dict[str, list[bool]] = {}
    for (paradigm, _, _), ok in zip(pairs, right, strict=True):
        per.setdefault(paradigm, []).append(ok)
    return 100 * sum(sum(v) / len(v) for v in per.values()) / len(per)


def evaluate(name: str, scorer: Scorer, pairs: list[tuple[str, str, str]], heldout: list[str],
             teacher: dict[str, Any] | None) -> dict[str, Any]:
    flat = [s for _, good, bad in pairs for s in (good, bad)]
    blimp, blimp_s, _ = timed_scores(scorer, flat)
    right = [blimp[2 * i] > blimp[2 * i + 1] for i in range(len(pairs))]
    held, held_s, held_cpu = timed_scores(scorer, heldout)
    row: dict[str, Any] = {
        "model": name, "method": scorer.method.value, "blimp_macro": round(macro_accuracy(pairs, right), 2),
        "heldout_sentences_per_s": round(len(heldout) / held_s, 2),
        "heldout_sentences_per_cpu_s": round(len(heldout) / held_cpu, 2),
        "blimp_sentences_per_s": round(len(flat) / blimp_s, 2), "_right": right, "_held": held}
    if teacher is not None:
        row["blimp_agreement"] = round(100 * sum(a == b for a, b in zip(right, teacher["_right"], strict=True))
                                       / len(right), 2)
        row["spearman_vs_teacher"] = round(float(spearmanr(held, teacher["_held"]).statistic), 4)
        mean = [h / max(1, len(s.split())) for h, s in zip(held, heldout, strict=True)]
        tmean = [h / max(1, len(s.split())) for h, s in zip(teacher["_held"], heldout, strict=True)]
        row["spearman_vs_teacher_per_word"] = round(float(spearmanr(mean, tmean).statistic), 4)
        row["speed_vs_teacher"] = round(row["heldout_sentences_per_s"] / teacher["heldout_sentences_per_s"], 1)
        row["speed_vs_teacher_cpu"] = round(row["heldout_sentences_per_cpu_s"]
                                            / teacher["heldout_sentences_per_cpu_s"], 1)
    print(json.dumps({k: v for k, v in row.items() if not k.startswith("_")}), flush=True)
    return row


def cmd_eval(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    pairs = blimp_pairs(args.blimp, args.blimp_limit)
    heldout = heldout_sentences(args.heldout_file, args.heldout)
    kw = {"batch_size": args.batch_size, "precision": args.precision}
    cache = Path(args.teacher_cache) if args.teacher_cache else None
    if cache is not None and cache.is_file():  # the teacher's scores from an earlier run of the same arguments
        teacher = json.loads(cache.read_text())
        print(f"teacher's scores read from {cache} (its speed is that run's)", flush=True)
    else:
        teacher = evaluate(f"teacher {args.teacher}", Scorer.from_pretrained(args.teacher, method="pll", **kw), pairs,
                           heldout, None)
        if cache is not None:
            cache.write_text(json.dumps(teacher))
    rows = [teacher]
    for spec in args.student:
        name, _, directory = spec.partition("=")
        rows.append(evaluate(name, Scorer.from_pretrained(directory, method=args.student_method, **kw), pairs,
                             heldout, teacher))
    out = {"machine": machine(), "threads": 1, "precision": args.precision, "batch_size": args.batch_size,
           "blimp": {"data": Path(args.blimp).name, "pairs_per_paradigm": args.blimp_limit, "pairs": len(pairs)},
           "heldout": {"file": "/".join(Path(args.heldout_file).parts[-2:]), "sentences": len(heldout),
                       "mean_words": round(sum(len(s.split()) for s in heldout) / len(heldout), 1)},
           "rows": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    if math.isnan(teacher["blimp_macro"]):
        raise SystemExit("no BLiMP pairs read")


def cmd_speed(args: argparse.Namespace) -> None:
    """Scoring speed alone: the teacher's PLL and each student's one pass on the same held-out sentences, timed
    interleaved round by round (a change in the machine's load hits every case alike), the median kept."""
    torch.set_num_threads(1)
    heldout = heldout_sentences(args.heldout_file, args.heldout)
    kw = {"batch_size": args.batch_size, "precision": args.precision}
    scorers = {"teacher": Scorer.from_pretrained(args.teacher, method="pll", **kw)}
    for spec in args.student:
        name, _, directory = spec.partition("=")
        scorers[name] = Scorer.from_pretrained(directory, method=args.student_method, **kw)
    seconds = interleaved({name: functools.partial(sc.score, heldout) for name, sc in scorers.items()}, args.rounds)
    rows = [{"model": name, "sentences_per_s": round(len(heldout) / t, 1),
             "speed_vs_teacher": round(seconds["teacher"] / t, 1)} for name, t in seconds.items()]
    out = {"machine": machine(), "threads": 1, "precision": args.precision, "batch_size": args.batch_size,
           "rounds": args.rounds, "teacher": args.teacher,
           "heldout": {"file": "/".join(Path(args.heldout_file).parts[-2:]), "sentences": len(heldout)}, "rows": rows}
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("variant", choices=sorted(VARIANTS))
    t.add_argument("--teacher", required=True)
    t.add_argument("--data", required=True)
    t.add_argument("--targets", default="")
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=450)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--warmup", type=int, default=45)
    t.add_argument("--save-every", type=int, default=100)
    t.add_argument("--precision", default="auto")
    t.add_argument("--teacher-precision", default="bf16")
    t.add_argument("--resume", action="store_true")
    e = sub.add_parser("eval")
    e.add_argument("--teacher", required=True)
    e.add_argument("--student", action="append", default=[], help="NAME=MODEL_DIR (repeatable)")
    e.add_argument("--student-method", default="one-pass")
    e.add_argument("--blimp", default="../shared/data/blimp-dev")
    e.add_argument("--blimp-limit", type=int, default=100)
    e.add_argument("--heldout-file", default="../shared/data/enwiki-wikiextractor/wiki_63.gz")
    e.add_argument("--heldout", type=int, default=2000)
    e.add_argument("--batch-size", type=int, default=64)
    e.add_argument("--precision", default="auto")
    e.add_argument("--json", default="")
    e.add_argument("--teacher-cache", default="", help="keep the teacher's scores in this file and reuse them")
    sp = sub.add_parser("speed")
    sp.add_argument("--teacher", required=True)
    sp.add_argument("--student", action="append", default=[], help="NAME=MODEL_DIR (repeatable)")
    sp.add_argument("--student-method", default="one-pass")
    sp.add_argument("--heldout-file", default="../shared/data/enwiki-wikiextractor/wiki_63.gz")
    sp.add_argument("--heldout", type=int, default=300)
    sp.add_argument("--rounds", type=int, default=5)
    sp.add_argument("--batch-size", type=int, default=64)
    sp.add_argument("--precision", default="auto")
    sp.add_argument("--json", default="")
    args = p.parse_args()
    {"train": cmd_train, "eval": cmd_eval, "speed": cmd_speed}[args.cmd](args)


if __name__ == "__main__":
    main()

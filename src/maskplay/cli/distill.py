"""`maskplay distill TEACHER --student tta`: a T-TA whose one pass matches the teacher's PLL distributions, and
`maskplay distill prepare TEACHER`: the teacher's targets computed once and stored (docs/guides/distillation.md)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..config import PRESETS
from ..families import families
from ..tasks.train.config import PRECISIONS
from .common import OneLineParser, fraction, positive_float, positive_int, seed_int
from .summaries import summary


def teacher_families() -> list[str]:
    return [cls.family for cls in families() if "pll" in cls.score_methods]


TEACHER_HELP = ("a maskplay model directory or bundled name of a family with a PLL ({}), or a HuggingFace masked-LM "
                "directory that `maskplay convert` reads (converted into {} first)")

EPILOG = """\
examples:
  maskplay distill prepare runs/bert/final --data prepared/wiki --out targets/bert --top-k 64
  maskplay distill runs/bert/final --student tta --data prepared/wiki --targets targets/bert --out runs/tta-from-bert \\
      --max-minutes 30
  maskplay distill runs/bert/final --student tta --data prepared/wiki --out runs/small --init scratch --max-steps 500
  maskplay distill runs/bert/final --student tta --data prepared/wiki --out runs/tta-from-bert --resume

The data must be prepared (`maskplay prepare`) with the teacher's tokenizer.json. The training options are
`maskplay pretrain`'s (--config, --set KEY=VALUE, ...); RUN_DIR/final is a plain T-TA model. `maskplay distill
prepare --help` for the stored targets."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distill", help=summary("distill"),
                       description=__doc__.strip(), epilog=EPILOG + " `maskplay distill prepare --help` lists its options.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    # `prepare ...` or `TEACHER ...`: what follows the first word is parsed again by that form's own parser
    p.add_argument("arguments", nargs=argparse.REMAINDER, metavar="TEACHER | prepare TEACHER",
                   help=TEACHER_HELP.format(", ".join(teacher_families()), "RUN_DIR/teacher") + "; `prepare TEACHER "
                   "--data DIR --out TARGETS`: the teacher's targets, stored")
    add_train_options(p)
    p.set_defaults(func=run)


def train_parser() -> OneLineParser:
    p = OneLineParser(prog="maskplay distill", description=__doc__.strip(), epilog=EPILOG,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("teacher", metavar="TEACHER", help=TEACHER_HELP.format(", ".join(teacher_families()), "RUN_DIR/teacher"))
    add_train_options(p)
    return p


def add_train_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--student", choices=["tta"], default="tta", help="the student's family: T-TA (one pass)")
    p.add_argument("--data", metavar="DIR", help="data.path: prepared with the teacher's tokenizer")
    p.add_argument("--out", metavar="RUN_DIR", help="run.out_dir")
    p.add_argument("--targets", metavar="DIR",
                   help="targets stored by `maskplay distill prepare` (default: computed at every step)")
    p.add_argument("--init", dest="student_init", choices=["warm", "scratch"],
                   help="warm (default): the teacher's weights wherever name and shape agree; scratch: random")
    p.add_argument("--shape", choices=["teacher", "config"],
                   help="the student's architecture: the teacher's (default) or the config's [model] section")
    p.add_argument("--temperature", type=positive_float, help="of the KL (default 1)")
    p.add_argument("--ce-weight", type=fraction,
                   help="weight w of the T-TA cross-entropy on the real token: (1 - w) T^2 KL + w CE (default 0)")
    p.add_argument("--top-k", type=positive_int, help="teacher ids kept per position (default 64)")
    p.add_argument("--teacher-rows", type=positive_int, help="masked copies per teacher pass (default 256)")
    p.add_argument("--teacher-precision", choices=["fp32", "bf16"],
                   help="the teacher's passes (default fp32; bf16: faster where the CPU has bf16 matmuls)")
    p.add_argument("--config", metavar="TOML", help="training config (as `maskplay pretrain --config`)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a training config field (repeatable)")
    p.add_argument("--preset", choices=sorted(PRESETS), help="model.preset (with --shape config)")
    p.add_argument("--max-steps", type=positive_int, help="optim.max_steps")
    p.add_argument("--max-minutes", type=positive_float, help="run.max_minutes")
    p.add_argument("--batch-size", type=positive_int, help="data.batch_size")
    p.add_argument("--lr", type=positive_float, help="optim.lr")
    p.add_argument("--precision", choices=PRECISIONS, help="run.precision")
    p.add_argument("--device", help="run.device")
    p.add_argument("--seed", type=seed_int, help="data.seed")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    p.add_argument("--resume-from", metavar="CKPT_DIR", help="continue from this checkpoint directory")


def prepare_parser() -> OneLineParser:
    p = OneLineParser(prog="maskplay distill prepare",
                      description="Compute the teacher's top-k PLL distributions at every piece of a prepared data "
                                  "directory once and store them (sharded safetensors with the token ids they belong "
                                  "to); run again with the same arguments to resume.")
    p.add_argument("teacher", metavar="TEACHER", help=TEACHER_HELP.format(", ".join(teacher_families()), "OUT/teacher"))
    p.add_argument("--data", required=True, metavar="DIR", help="a directory prepared with the teacher's tokenizer")
    p.add_argument("--out", required=True, metavar="TARGETS", help="the targets directory (resumed if it exists)")
    p.add_argument("--top-k", type=positive_int, default=64, help="teacher ids kept per position (default 64)")
    p.add_argument("--max-length", type=positive_int, default=128,
                   help="truncate sequences as the run will (its data.max_length; default 128)")
    p.add_argument("--shard-sequences", type=positive_int, default=1000, help="sequences per shard")
    p.add_argument("--splits", nargs="+", default=["train", "valid"], help="splits to cover (default train valid)")
    p.add_argument("--teacher-rows", type=positive_int, default=256, help="masked copies per teacher pass")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    p.add_argument("--teacher-precision", choices=["fp32", "bf16"], default="fp32",
                   help="the teacher's passes (bf16: faster where the CPU has bf16 matmuls; the run must use the same)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads (the run's run.threads gives on-the-fly targets equal to these bit for bit)")
    return p


def run(args: argparse.Namespace) -> int:
    rest = list(args.arguments)
    if rest[:1] == ["prepare"]:
        return run_prepare(prepare_parser().parse_args(rest[1:]))
    # options given before TEACHER were parsed already: they stay unless given again after it
    before = {k: v for k, v in vars(args).items() if k not in ("arguments", "func", "command")}
    return run_train(train_parser().parse_args(rest, namespace=argparse.Namespace(**before)))


def maskplay_teacher(teacher: str, converted: Path, in_use: Callable[[], bool]) -> str:
    """A HuggingFace directory converted through `maskplay convert`'s entry point into `converted` (reused while it
    is this teacher's: tasks/distill/converted.py); a maskplay model directory (or bundled name) as it is.
    `in_use()`: targets or checkpoints were made with the conversion in `converted`."""
    from ..runtime.files import model_file
    from ..runtime.json_files import read_json_file

    try:
        data = read_json_file(model_file(teacher, "config.json"))  # size-capped, and not a link out of the directory
    except (OSError, ValueError):
        return teacher  # the model loader names the damage (or the missing file, or a bundled name)
    if not isinstance(data, dict) or "family" in data or "architectures" not in data:
        return teacher
    from ..tasks.distill.converted import converted_teacher
    from .convert import convert_from_hf

    def convert(source: Path, out: Path) -> None:
        for line in convert_from_hf(source, out):
            print(line)

    return str(converted_teacher(Path(teacher), converted, convert, in_use))


def run_prepare(args: argparse.Namespace) -> int:
    from ..tasks.distill import prepare_targets
    from ..tasks.distill.store import META, check_prepare

    out = Path(args.out)
    # what needs no teacher is refused before a HuggingFace one is converted into the store
    check_prepare(args.data, out, tuple(args.splits))
    teacher = maskplay_teacher(args.teacher, out / "teacher", lambda: (out / META).is_file())
    summary = prepare_targets(teacher, args.data, args.out, top_k=args.top_k, max_length=args.max_length,
                              shard_sequences=args.shard_sequences, splits=tuple(args.splits), rows=args.teacher_rows,
                              device=args.device, progress=True, threads=args.threads,
                              precision=args.teacher_precision)
    print(f"{summary.out}: targets of {summary.sequences:,} sequences ({summary.computed:,} computed now: "
          f"{summary.positions:,} positions, {summary.passes:,} teacher passes, {summary.seconds:.0f} s)")
    return 0


def run_train(args: argparse.Namespace) -> int:
    from ..tasks.distill import DistillConfig, distill
    from ..tasks.distill.config import load_distill_config
    from ..tasks.distill.loop import check_settings
    from .pretrain import resolve_config

    for name in ("family", "init", "corpus", "tokenizer", "grad_accum"):
        setattr(args, name, None)  # pretrain's options that a distillation does not take
    config = resolve_config(args)
    from ..tasks.train.checkpoint_files import list_checkpoints

    run_dir = Path(config.run.out_dir)
    check_settings(config, DistillConfig(targets=args.targets or ""))  # before a HuggingFace teacher is converted
    teacher = maskplay_teacher(args.teacher, run_dir / "teacher", lambda: bool(list_checkpoints(run_dir)))
    # a resumed run distils as it started: its saved switches, unless given again
    saved = load_distill_config(config.run.out_dir) if args.resume or args.resume_from else None
    given = {"teacher": teacher, "targets": args.targets, "init": args.student_init, "shape": args.shape,
             "temperature": args.temperature, "ce_weight": args.ce_weight, "top_k": args.top_k,
             "teacher_rows": args.teacher_rows, "teacher_precision": args.teacher_precision}
    cfg = dataclasses.replace(saved or DistillConfig(), **{k: v for k, v in given.items() if v is not None})
    result = distill(config, cfg, resume=args.resume, resume_from=args.resume_from)
    if result.final_dir is not None:
        print(f"final model: {Path(result.final_dir).resolve()} (a T-TA: maskplay score, "
              "maskplay.MaskplayModel.from_pretrained)")
    else:
        print(f"interrupted at step {result.step}; checkpoint {result.checkpoint}; continue with "
              f"`maskplay distill {args.teacher} --out {result.run_dir} --resume`")
    return result.exit_code

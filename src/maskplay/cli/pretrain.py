"""`maskplay pretrain`: train a model of any registered family on a prepared corpus (also under torchrun)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import NamedTuple

from ..config import PRESETS, apply_overrides
from ..families import family_class
from ..registry import family_names
from ..tasks.train.config import PRECISIONS, TrainConfig, load_train_config
from .common import positive_float, positive_int, seed_int
from .summaries import summary

EPILOG = """\
examples:
  maskplay pretrain --config configs/mini-tta.toml --data prepared/wiki --out runs/tta
  maskplay pretrain --family gpt --data prepared/wiki --out runs/gpt --max-minutes 15 --set optim.warmup_steps=200
  maskplay pretrain --out runs/tta --resume            # continue from the newest good checkpoint
  torchrun --nproc_per_node 2 -m maskplay pretrain --config configs/mini-bert.toml --data prepared/wiki

Order of precedence: --config TOML (or, with --resume and no --config, the run's saved config.toml), then the
convenience flags, then every --set KEY=VALUE in order. SIGTERM checkpoints and exits 0; SIGINT (Ctrl-C)
checkpoints and exits 130; a second Ctrl-C stops at once. See docs/guides/training.md."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    families = ", ".join(family_names())  # every registered family (maskplay.registry)
    p = sub.add_parser("pretrain", help=summary("pretrain"),
                       description=f"{__doc__.strip()}\nFamilies: {families}.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="TOML", help="training config: a TOML file, or a shipped recipe by name "
                   "(mini-tta, ttq/hour-tta: the files under configs/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config field, e.g. --set optim.lr=5e-4 --set model.hidden_dropout=0 "
                        "(repeatable)")
    p.add_argument("--family", choices=family_names(), help=f"model.family: {families}")
    p.add_argument("--preset", choices=sorted(PRESETS), help="model.preset")
    p.add_argument("--data", metavar="DIR", help="data.path: a directory prepared by `maskplay prepare`")
    p.add_argument("--corpus", nargs="+", metavar="FILE",
                   help="data.corpus: text files to prepare into RUN_DIR/data first (needs --tokenizer)")
    p.add_argument("--tokenizer", metavar="PATH", help="data.tokenizer, for --corpus")
    p.add_argument("--out", metavar="RUN_DIR", help="run.out_dir: checkpoints, metrics, the final model")
    p.add_argument("--max-steps", type=positive_int,
                   help="optim.max_steps (a warmup that does not fit them is scaled with them, in one line)")
    p.add_argument("--max-minutes", type=positive_float, help="run.max_minutes: wall-clock budget of the training loop")
    p.add_argument("--batch-size", type=positive_int, help="data.batch_size (global: sequences per optimizer step)")
    p.add_argument("--lr", type=positive_float, help="optim.lr (peak learning rate)")
    p.add_argument("--grad-accum", type=positive_int, help="optim.grad_accum")
    p.add_argument("--precision", choices=PRECISIONS, help="run.precision")
    p.add_argument("--device", help="run.device: auto, cpu, cuda, cuda:N or mps")
    p.add_argument("--seed", type=seed_int, help="data.seed (initial weights, data order, dropout)")
    p.add_argument("--init", metavar="MODEL_DIR",
                   help="model.init: start from this model's weights and architecture (e.g. a BERT for UniLM)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its newest checkpoint that verifies")
    p.add_argument("--resume-from", metavar="CKPT_DIR", help="continue from this checkpoint directory")
    p.add_argument("--export", choices=("discriminator", "generator"), metavar="PART",
                   help="ELECTRA: also write one tower as a standalone model, RUN_DIR/final-PART "
                        "(discriminator|generator; see `maskplay export`)")
    p.set_defaults(func=run)


def _replace(config: TrainConfig, section: str, **values: object) -> TrainConfig:
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return config
    return dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **values)})


def resolve_config(args: argparse.Namespace) -> TrainConfig:
    """The run's config from the command line (see EPILOG for the order)."""
    if args.config:
        config = load_train_config(args.config)
    elif args.resume:
        from ..tasks.train.loop import saved_run_config

        out = args.out or TrainConfig().run.out_dir
        config = saved_run_config(out)
        if config is None:
            if args.data is None and args.corpus is None:
                raise ValueError(f"--resume: {out}/config.toml not found, so there is no run to continue there; "
                                 "start it with --config or --data (or check --out)")
            config = TrainConfig()
    else:
        config = TrainConfig()
    config = _replace(config, "model", family=args.family, preset=args.preset, init=args.init)
    if args.data is not None:
        config = _replace(config, "data", path=args.data, corpus=[])
    if args.corpus is not None:
        config = _replace(config, "data", corpus=list(args.corpus), path="")
    config = _replace(config, "data", tokenizer=args.tokenizer, batch_size=args.batch_size, seed=args.seed)
    base_optim = config.optim  # the config's schedule, before the steps the user gives
    config = _replace(config, "optim", max_steps=args.max_steps, lr=args.lr, grad_accum=args.grad_accum)
    config = _replace(config, "run", out_dir=args.out, max_minutes=args.max_minutes, precision=args.precision,
                      device=args.device)
    config = apply_overrides(config, args.overrides)
    return follow_budget(config, base_optim, set_by_user(args), getattr(args, "command", "pretrain")).validate()


class Chosen(NamedTuple):
    """The dotted fields the user chose: on the command line (a flag or a --set) and in the --config file. A
    resumed run (the run's saved config.toml) chose every field, "*"."""

    command_line: frozenset[str]
    config_file: frozenset[str]

    @property
    def anywhere(self) -> frozenset[str]:
        return self.command_line | self.config_file


def set_by_user(args: argparse.Namespace) -> Chosen:
    """What the user chose on the command line and in the --config file (Chosen); with --resume (the run's saved
    config.toml) every field is the run's own."""
    if args.resume or args.resume_from:
        return Chosen(frozenset({"*"}), frozenset({"*"}))
    command_line = {key.split("=", 1)[0].strip() for key in args.overrides}
    command_line |= {field for field, flag in (("optim.max_steps", args.max_steps),
                                               ("run.max_minutes", args.max_minutes)) if flag is not None}
    config_file: set[str] = set()
    if args.config:
        raw = _raw_config(args.config)
        config_file = {f"{section}.{key}" for section, table in raw.items() if isinstance(table, dict) for key in table}
    return Chosen(frozenset(command_line), frozenset(config_file))


def _raw_config(path: str | Path) -> dict:
    """The --config file as written (its tables and keys), {} where it cannot be read (load_train_config says why)."""
    import json

    import tomllib

    from ..tasks.train.recipes import resolve_recipe

    path = resolve_recipe(path)  # a shipped recipe's name reads as its file does in load_train_config
    try:
        with open(path, "rb") as f:
            return json.load(f) if str(path).endswith(".json") else tomllib.load(f)
    except (OSError, ValueError):
        return {}


def follow_budget(config: TrainConfig, base_optim, chosen: Chosen,  # type: ignore[no-untyped-def]
                  command: str = "pretrain") -> TrainConfig:
    """Defaults that follow what the user chose: a warmup (and cooldown) that does not fit the steps given on the
    command line is scaled with them, one line says so, unless the command line chose the warmup or the cooldown
    as well (validate refuses it then; so does a --config file whose own max_steps its warmup does not fit); and
    data.max_length, unless set on the command line or in the file, is at most the model's max_position
    (`--preset tiny`)."""
    if "*" in chosen.anywhere:
        return config
    optim = config.optim
    if "optim.max_steps" in chosen.command_line and \
            not {"optim.warmup_steps", "optim.cooldown_steps"} & chosen.command_line and \
            optim.warmup_steps + optim.cooldown_steps > optim.max_steps:
        from ..tasks.train.budget import fit_steps

        fitted = fit_steps(dataclasses.replace(optim, max_steps=base_optim.max_steps), optim.max_steps)
        say(f"optim.warmup_steps={optim.warmup_steps} does not fit optim.max_steps={optim.max_steps}: scaled with "
            f"the steps to {fitted.warmup_steps}" + (f" (optim.cooldown_steps {fitted.cooldown_steps})"
                                                     if optim.cooldown_steps else "")
            + "; set optim.warmup_steps to choose", command)
        config = dataclasses.replace(config, optim=fitted)
    if "data.max_length" not in chosen.anywhere and not config.model.init:
        max_position = config.model.max_position or PRESETS[config.model.preset].get("max_position")
        if max_position and config.data.max_length > max_position:
            config = _replace(config, "data", max_length=max_position)
    return config


def plans_for_minutes(config: TrainConfig, chosen: Chosen) -> bool:
    """--max-minutes without steps chosen (on the command line or in the --config file): the schedule is planned
    for the steps that fit (plan.plan_for_minutes). A words budget plans its steps from the words
    (docs/guides/training.md)."""
    return (config.run.max_minutes is not None and "*" not in chosen.anywhere
            and "optim.max_steps" not in chosen.anywhere and config.run.max_words is None)


def say(line: str, command: str = "pretrain") -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"maskplay {command}: {line}", file=sys.stderr, flush=True)


def plan_schedule(config: TrainConfig, keep_warmup: bool = False) -> TrainConfig:
    """The steps that fit run.max_minutes, timed on a trial run (one process, a prepared data.path)."""
    from ..tasks.train.plan import plan_for_minutes

    if config.data.corpus or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        say(f"the schedule is not fitted to run.max_minutes (optim.max_steps={config.optim.max_steps}): it is timed "
            "on a prepared corpus (--data) in one process; set optim.max_steps for a schedule that ends in time")
        return config
    planned, line = plan_for_minutes(config, keep_warmup=keep_warmup)
    say(line)
    return planned.validate()


def run(args: argparse.Namespace) -> int:
    from ..tasks.train.loop import train

    config = resolve_config(args)
    if args.export and not family_class(config.model.family).parts:
        raise ValueError(f"--export {args.export}: only ELECTRA models have towers to export; this run is "
                         f"model.family = {config.model.family!r}")
    chosen = set_by_user(args)
    if plans_for_minutes(config, chosen):
        warmup_chosen = bool({"optim.warmup_steps", "optim.cooldown_steps"} & chosen.anywhere)
        config = plan_schedule(config, keep_warmup=warmup_chosen)
    result = train(config, resume=args.resume, resume_from=args.resume_from)
    if int(os.environ.get("RANK", "0")) == 0:
        if result.final_dir is not None:
            print(f"final model: {Path(result.final_dir).resolve()} "
                  "(load with maskplay.MaskplayModel.from_pretrained)")
            if args.export:
                import shutil

                from .export import export_part

                target = Path(result.run_dir) / f"final-{args.export}"
                shutil.rmtree(target, ignore_errors=True)  # the previous export of a resumed run
                print(f"{args.export}: {export_part(result.final_dir, args.export, target).resolve()}")
        else:
            print(f"interrupted at step {result.step}; checkpoint {result.checkpoint}; continue with "
                  f"`maskplay pretrain --out {result.run_dir} --resume`")
    return result.exit_code

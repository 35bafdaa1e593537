"""`maskplay export`: one tower of a two-tower model (ELECTRA's discriminator or generator) as a standalone model
directory that score, embed and eval load like any other."""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

EXPORT_PARTS = ("discriminator", "generator")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write ELECTRA's discriminator or generator as a model directory of its own",
                       description=__doc__)
    p.add_argument("model_dir", metavar="MODEL_DIR", help="an ELECTRA model directory (RUN_DIR/final)")
    p.add_argument("--export", dest="part", choices=EXPORT_PARTS, required=True, help="which tower")
    p.add_argument("--out", required=True, metavar="DIR", help="the new model directory (must not exist)")
    p.set_defaults(func=run)


def export_part(model_dir: str | Path, part: str, out: str | Path) -> Path:
    """Write `part` of the ELECTRA model in `model_dir` to `out` (config.json, model.safetensors and the
    tokenizer.json found next to the model), whole or not at all."""
    from ..families import MaskplayModel
    from ..model_dir import resolve_model_dir

    source = resolve_model_dir(model_dir)
    out = Path(out)
    if out.exists():
        raise ValueError(f"--out {out} already exists; choose a new directory")
    model = MaskplayModel.from_pretrained(source)
    if part not in model.parts:
        raise ValueError(f"{source} holds a {model.config.family!r} model; only ELECTRA models have towers to export")
    tower = model.standalone(part)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tower.save_pretrained(tmp)
        if (source / "tokenizer.json").is_file():
            shutil.copy2(source / "tokenizer.json", tmp / "tokenizer.json")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run(args: argparse.Namespace) -> int:
    out = export_part(args.model_dir, args.part, args.out)
    kind = "family electra, no generator" if args.part == "discriminator" else "family bert"
    print(f"wrote {out}: the {args.part} ({kind})")
    return 0

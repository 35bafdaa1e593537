"""`maskplay export`: a maskplay model out of maskplay.

- `--to-hf MODEL --out DIR`: a HuggingFace directory: the twin architecture (families/hf) where it can express the
  model, else HuggingFace custom code (AutoModel* with trust_remote_code=True; `--custom-code` for every model), with
  a complete tokenizer and a model card (docs/guides/huggingface.md).
  An ELECTRA model: its discriminator to DIR, its generator (a BERT-style masked LM) to --generator-out or DIR/generator.
- `--to-hf RUN_DIR --revisions --out DIR`: a run's models by words seen (run.checkpoint_at_words) and its final
  model as one HuggingFace repository, a git branch per checkpoint as BabyLM names them (chck_1M, ...), main the
  final model (docs/guides/babylm.md).
- `--to-sentence-transformers MODEL --out DIR [--pooling mean|first|last]`: a sentence-transformers directory giving
  `maskplay embed`'s vectors.
- `MODEL_DIR --export discriminator|generator --out DIR`: one tower of an ELECTRA model as a standalone model
  directory that score, embed and eval load like any other."""

from __future__ import annotations

import argparse
from pathlib import Path

from .summaries import summary

EXPORT_PARTS = ("discriminator", "generator")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help=summary("export"),
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", metavar="MODEL_DIR", nargs="?", default=None,
                   help="with --export: an ELECTRA model directory (RUN_DIR/final)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--export", dest="part", choices=EXPORT_PARTS, help="which ELECTRA tower")
    what.add_argument("--to-hf", metavar="MODEL", help="a model directory or bundled model name -> HuggingFace")
    what.add_argument("--to-sentence-transformers", metavar="MODEL",
                      help="a model directory or bundled model name -> sentence-transformers")
    p.add_argument("--out", required=True, metavar="DIR", help="the new directory (must not exist)")
    p.add_argument("--custom-code", action="store_true",
                   help="with --to-hf: custom code even where a HuggingFace twin could hold the model")
    p.add_argument("--generator-out", metavar="DIR2", default=None,
                   help="with --to-hf on an ELECTRA model: the generator's directory (default: OUT/generator)")
    p.add_argument("--revisions", action="store_true",
                   help="with --to-hf RUN_DIR: RUN_DIR/final and RUN_DIR/words/<N> as one git repository, a branch "
                        "chck_<N> per checkpoint by words seen, main the final model")
    p.add_argument("--pooling", choices=("mean", "first", "last"), default=None,
                   help="with --to-sentence-transformers: as maskplay embed's --pooling (default: the family's)")
    p.add_argument("--license", default="other", help="the model card's license field (default: other)")
    p.add_argument("--dataset", action="append", default=[], metavar="NAME",
                   help="a dataset the model card lists (repeat for several)")
    p.set_defaults(func=run)


def export_part(model_dir: str | Path, part: str, out: str | Path) -> Path:
    """Write `part` of the ELECTRA model in `model_dir` to `out` (config.json, model.safetensors and the
    tokenizer.json found next to the model), whole or not at all."""
    from ..families import MaskplayModel
    from ..runtime.files import prepare_new_dir
    from ..runtime.model_dir import resolve_model_dir, write_model_dir

    out = Path(out)
    prepare_new_dir(out, "--out")
    source = resolve_model_dir(model_dir)
    model = MaskplayModel.from_pretrained(source)
    if part not in model.parts:
        raise ValueError(f"{source} holds a {model.config.family!r} model; only ELECTRA models have towers to export")
    write_model_dir(model.standalone(part), out, tokenizer_from=source)
    return out


def run(args: argparse.Namespace) -> int:
    if args.part is None:
        return _run_hf(args)
    if args.model_dir is None:
        raise ValueError("--export needs the ELECTRA model directory: maskplay export MODEL_DIR --export PART --out DIR")
    out = export_part(args.model_dir, args.part, args.out)
    kind = "family electra, no generator" if args.part == "discriminator" else "family bert"
    print(f"wrote {out}: the {args.part} ({kind})")
    return 0


def _run_hf(args: argparse.Namespace) -> int:
    from ..tasks.export import export_revisions, export_sentence_transformers, export_to_hf
    from .common import check_text_arguments

    if args.model_dir is not None:
        raise ValueError(f"{args.model_dir}: give the model after --to-hf / --to-sentence-transformers, not before")
    check_text_arguments([args.license], "--license")
    check_text_arguments(args.dataset, "--dataset")
    card = {"license": args.license, "datasets": args.dataset}
    if args.to_hf is not None:
        if args.pooling is not None:
            raise ValueError("--pooling goes with --to-sentence-transformers")
        if args.revisions:
            if args.generator_out is not None:
                raise ValueError("--generator-out goes with --to-hf MODEL, not --revisions")
            lines = export_revisions(args.to_hf, args.out, custom_code=args.custom_code, **card)
        else:
            lines = export_to_hf(args.to_hf, args.out, custom_code=args.custom_code, generator_out=args.generator_out,
                                 **card)
    else:
        if args.revisions or args.generator_out is not None:
            raise ValueError("--revisions and --generator-out go with --to-hf")
        if args.custom_code:
            raise ValueError("--custom-code goes with --to-hf (a sentence-transformers export is always custom code)")
        lines = export_sentence_transformers(args.to_sentence_transformers, args.out, args.pooling, **card)
    for line in lines:
        print(line)
    return 0

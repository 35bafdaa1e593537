"""`maskplay convert`: HuggingFace checkpoints (the architectures families/hf converts, docs/guides/huggingface.md) to
maskplay model directories and back. Weights are read from safetensors, or from pytorch_model.bin with
torch.load(weights_only=True): tensors only, nothing else is unpickled (families/hf/directory.py)."""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from torch import Tensor

from ..families.hf import ARCHITECTURES, converted_families, describe_conversion
from ..families.hf.directory import TOKENIZER, read_hf_dir, special_ids
from ..runtime.files import model_file
from .summaries import summary

__all__ = ["add_parser", "convert_from_hf", "convert_to_hf", "run"]

TOKENIZER_CONFIG = "tokenizer_config.json"


def add_parser(sub: argparse._SubParsersAction) -> None:
    families = ", ".join(converted_families())  # the families with a HuggingFace twin (families/hf)
    p = sub.add_parser("convert", help=summary("convert"),
                       description="--from-hf: a HuggingFace directory (config.json + model.safetensors) -> a "
                                   "maskplay model directory. --to-hf: a maskplay model directory -> HuggingFace "
                                   "directories that transformers' from_pretrained loads. Families with a "
                                   f"HuggingFace twin: {families}.")
    direction = p.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from-hf", metavar="HF_DIR", help=f"one of {', '.join(ARCHITECTURES)} "
                           "(ElectraForPreTraining: the discriminator; ElectraForMaskedLM: a generator alone; "
                           "BertLMHeadModel with is_decoder=True becomes a gpt)")
    direction.add_argument("--to-hf", metavar="MASKPLAY_DIR", help=f"a model directory or bundled model name of family "
                           f"{families} (a gpt becomes a BertLMHeadModel); every family, any switch: maskplay export "
                           "--to-hf")
    p.add_argument("--generator", metavar="HF_GEN_DIR", default=None,
                   help="with --from-hf: the ElectraForMaskedLM generator that goes with the discriminator in HF_DIR; "
                        "together they become one maskplay ELECTRA model")
    p.add_argument("--out", required=True, metavar="DIR", help="the directory to write (must not exist)")
    p.add_argument("--generator-out", metavar="DIR", default=None,
                   help="with --to-hf of an ELECTRA model with a generator: where the generator goes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.from_hf is not None:
        if args.generator_out is not None:
            raise ValueError("--generator-out goes with --to-hf; with --from-hf the generator is read from --generator")
        for line in convert_from_hf(args.from_hf, args.out, args.generator):
            print(line)
    else:
        if args.generator is not None:
            raise ValueError("--generator goes with --from-hf; with --to-hf the generator is written to --generator-out")
        for line in convert_to_hf(args.to_hf, args.out, args.generator_out):
            print(line)
    return 0


# ---- HuggingFace -> maskplay ------------------------------------------------------------------------------


def convert_from_hf(hf_dir: str | Path, out: str | Path, generator_dir: str | Path | None = None) -> list[str]:
    """Write the maskplay model of the HuggingFace directory `hf_dir` (with `generator_dir`: an ELECTRA pair)
    to `out`, whole or not at all; returns what to tell the user."""
    from ..families.hf import from_hf

    hf_dir, out = Path(hf_dir), Path(out)
    _check_new(out, [hf_dir] + ([Path(generator_dir)] if generator_dir is not None else []))
    architecture, hf_config, state = read_hf_dir(hf_dir)
    generator = None
    if generator_dir is not None:
        if architecture != "ElectraForPreTraining":
            raise ValueError(f"--generator goes with an ElectraForPreTraining discriminator; {hf_dir} holds a "
                             f"{architecture}")
        gen_architecture, gen_config, gen_state = read_hf_dir(generator_dir)
        if gen_architecture != "ElectraForMaskedLM":
            raise ValueError(f"--generator {generator_dir} holds a {gen_architecture}, not an ElectraForMaskedLM")
        generator = (gen_config, gen_state)
    ids, note = special_ids(hf_dir, hf_config.vocab_size)
    model = from_hf(architecture, (hf_config, state), generator, special_ids=ids)
    notes = [note] if note else []
    # copied as they are: each one of the directory's own (a symbolic link out of it is refused, not read)
    tokenizer, tokenizer_config = model_file(hf_dir, TOKENIZER), model_file(hf_dir, TOKENIZER_CONFIG)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        if tokenizer.is_file():
            shutil.copy2(tokenizer, tmp / TOKENIZER)
            if tokenizer_config.is_file():  # a causal LM's roles (bos, ...: maskplay.data.tokenizer.hf_roles)
                shutil.copy2(tokenizer_config, tmp / TOKENIZER_CONFIG)

    _write_dirs([(out, write)])
    what = describe_conversion(architecture, model, paired=generator is not None)
    lines = [f"wrote {out}: {what}, {model.num_parameters():,} parameters"]
    if tokenizer.is_file():
        copied = [TOKENIZER] + ([TOKENIZER_CONFIG] if tokenizer_config.is_file() else [])
        lines.append(f"copied {', '.join(copied)}")
    else:
        lines.append(f"{hf_dir} has no {TOKENIZER}: add one to {out} before scoring with it (maskplay tokenizer "
                     "builds one from a vocab.txt)")
    return lines + notes


# ---- maskplay -> HuggingFace ------------------------------------------------------------------------------


def convert_to_hf(model_dir: str | Path, out: str | Path, generator_out: str | Path | None = None) -> list[str]:
    """Write the HuggingFace model(s) of the maskplay directory (or bundled model name) `model_dir`: one to `out`, an
    ELECTRA generator to `generator_out`; all or nothing. Each gets the complete tokenizer and a model card
    (maskplay.tasks.export). Returns what to tell the user."""
    from ..data.tokenizer import check_covers, load_tokenizer
    from ..families import MaskplayModel
    from ..families.hf import to_hf
    from ..runtime.model_dir import local_model_dir
    from ..tasks.export.hf import export_files

    out = Path(out)
    targets = [out] + ([Path(generator_out)] if generator_out is not None else [])
    if generator_out is not None and Path(generator_out).resolve() == out.resolve():
        raise ValueError("--out and --generator-out must be different directories")
    for target in targets:
        _check_new(target, [Path(model_dir)])
    model_dir = local_model_dir(model_dir)  # a local conversion: never a hub download
    model = MaskplayModel.from_pretrained(model_dir)
    exports = to_hf(model)
    if len(exports) == 2 and generator_out is None:
        raise ValueError(f"{model_dir} is an ELECTRA model with a generator: give --generator-out DIR for it")
    if len(exports) == 1 and generator_out is not None:
        raise ValueError(f"{model_dir} has no generator to write to --generator-out")
    tokenizer = load_tokenizer(model_dir) if model_file(model_dir, TOKENIZER).is_file() else None
    if tokenizer is not None:  # the export would ship another model's tokenizer with these weights
        check_covers(tokenizer, model.config.vocab_size, str(model_dir))
    _write_dirs([(target, _hf_writer(export_files(model_dir, model, tokenizer, config, False, target.name, {}), state))
                 for target, (config, state) in zip(targets, exports, strict=True)])
    lines = [f"wrote {target}: {config['architectures'][0]}" for target, (config, _) in zip(targets, exports, strict=True)]
    if tokenizer is not None:
        lines.append(f"wrote the tokenizer ({TOKENIZER} framing sentences as maskplay does, tokenizer_config.json)")
    return lines


def _hf_writer(files: dict[str, str], state: dict[str, Tensor]) -> Callable[[Path], None]:
    """A writer for _write_dirs: `files` and the weights, every file readable (export.hf.write_into)."""
    from ..tasks.export.hf import write_into

    return lambda tmp: write_into(tmp, files, state)


# ---- writing ----------------------------------------------------------------------------------------------


def _check_new(out: Path, sources: list[Path]) -> None:
    if out.exists():
        raise ValueError(f"--out {out} already exists; choose a new directory")
    if any(out.resolve() == source.resolve() for source in sources):
        raise ValueError(f"--out {out} is an input directory")


def _write_dirs(jobs: list[tuple[Path, Callable[[Path], None]]]) -> None:
    """Fill each directory in a temporary sibling, then rename them into place: an error leaves none of them."""
    temps: list[Path] = []
    done: list[Path] = []
    try:
        for target, write in jobs:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.parent / f".tmp-{target.name}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            temps.append(tmp)
            write(tmp)
        for (target, _), tmp in zip(jobs, temps, strict=True):
            os.rename(tmp, target)  # fails, rather than merges, if the target appeared meanwhile
            done.append(target)
    except BaseException:
        for target in done:
            shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        for tmp in temps:
            shutil.rmtree(tmp, ignore_errors=True)

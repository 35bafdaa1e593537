"""`maskplay finetune-convert`: a fine-tuned model to HuggingFace Bert/ElectraForSequenceClassification and
back (the converters of maskplay.tasks.finetune.convert; the directory handling of `maskplay convert`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .summaries import summary


def add_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("finetune-convert", help=summary("finetune-convert"),
                       description="--to-hf: a `maskplay finetune` directory (bert or unilm with --head bert, electra "
                                   "with --head electra; --pooling first) -> a HuggingFace directory; --from-hf: a "
                                   "BertForSequenceClassification / ElectraForSequenceClassification directory "
                                   "(safetensors) -> a fine-tuned maskplay directory. Logits agree to 1e-5.")
    direction = c.add_mutually_exclusive_group(required=True)
    direction.add_argument("--to-hf", metavar="FINETUNED_DIR")
    direction.add_argument("--from-hf", metavar="HF_DIR")
    c.add_argument("--out", required=True, metavar="DIR", help="the directory to write (must not exist)")
    c.set_defaults(func=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    out = Path(args.out)
    return _to_hf(Path(args.to_hf), out) if args.to_hf is not None else _from_hf(Path(args.from_hf), out)


def _to_hf(source: Path, out: Path) -> int:
    from ..families.hf.directory import CONFIG, TOKENIZER
    from ..runtime.files import model_file
    from ..tasks.finetune import FineTuned
    from ..tasks.finetune.convert import finetuned_to_hf_sequence_classification
    from . import convert as cc

    cc._check_new(out, [source])
    if not source.is_dir():
        raise FileNotFoundError(f"fine-tuned model directory {source} not found")
    config, state = finetuned_to_hf_sequence_classification(FineTuned.from_pretrained(source))
    files = {CONFIG: json.dumps(config, indent=2, sort_keys=True) + "\n"}
    if model_file(source, TOKENIZER).is_file():
        files[TOKENIZER] = (source / TOKENIZER).read_text(encoding="utf-8")
    cc._write_dirs([(out, cc._hf_writer(files, state))])
    print(f"wrote {out}: {config['architectures'][0]}")
    return 0


def _from_hf(source: Path, out: Path) -> int:
    from ..families.hf import SEQUENCE_ARCHITECTURES, hf_config
    from ..families.hf.directory import CONFIG, TOKENIZER, read_weights, special_ids
    from ..families.hf.validate import check_hf_config
    from ..runtime.files import model_file
    from ..runtime.json_files import read_json_dict
    from ..tasks.finetune.convert import finetuned_from_hf_sequence_classification
    from . import convert as cc

    cc._check_new(out, [source])
    if not model_file(source, CONFIG).exists():  # a symbolic link out of the directory is refused, not followed
        raise FileNotFoundError(f"{source / CONFIG} not found: a HuggingFace model directory needs config.json")
    data = read_json_dict(source / CONFIG)  # size-capped
    check_hf_config(data, str(source / CONFIG))  # every field, `architectures` first
    named = [a for a in data.get("architectures") or [] if a in SEQUENCE_ARCHITECTURES]
    if not named:
        raise ValueError(f"{source / CONFIG}: architectures {data.get('architectures')} names none of "
                         f"{list(SEQUENCE_ARCHITECTURES)}")
    config = hf_config(named[0], data, str(source / CONFIG))
    ids, note = special_ids(source, config.vocab_size)
    model = finetuned_from_hf_sequence_classification(named[0], config, read_weights(source), special_ids=ids,
                                                      source=str(source / CONFIG))
    tokenizer = model_file(source, TOKENIZER)

    def write(tmp: Path) -> None:
        import shutil

        model.save_pretrained(tmp)
        if tokenizer.is_file():
            shutil.copy2(tokenizer, tmp / TOKENIZER)

    cc._write_dirs([(out, write)])
    print(f"wrote {out}: a fine-tuned {model.config.family} ({model.head_config.objective}, "
          f"{model.head_config.num_outputs} outputs)" + ("" if tokenizer.is_file() else f"; {source} has no tokenizer.json: "
                                                         "add one before `maskplay predict`"))
    if note:
        print(note)
    return 0

"""`maskplay export --to-hf` and `--to-sentence-transformers`: a maskplay model directory as a HuggingFace one. A
model its HuggingFace twin can express (families/hf) becomes the twin; anything else (T-TA, UniLM, GPT-BERT, a switch
the twin lacks; every model with custom_code=True) becomes HuggingFace custom code (custom.py, hf_code/). Either way
the directory gets a complete tokenizer (tokenizer_files.py), the special-token ids in config.json, a model card
(card.py), and every file the permissions of any file the user creates (safetensors writes 0600)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import Tensor

from ...runtime.files import model_file, prepare_new_dir, replace_directory
from ...runtime.model_dir import local_model_dir
from .card import loading_example, model_card
from .custom import backbone_state, code_files, custom_config, custom_state
from .tokenizer_files import special_ids, tokenizer_files

if TYPE_CHECKING:
    from ...data.tokenizer import Tokenizer
    from ...families import MaskplayModel

POOLINGS = {"mean": "mean", "first": "cls", "last": "lasttoken"}  # maskplay embed's -> sentence-transformers'


def _load(model_dir: str | Path) -> tuple[Path, MaskplayModel, Tokenizer | None]:
    from ...data.tokenizer import check_covers, load_tokenizer
    from ...families import MaskplayModel

    source = local_model_dir(model_dir)
    model = MaskplayModel.from_pretrained(source).eval()
    tokenizer = load_tokenizer(source) if model_file(source, "tokenizer.json").is_file() else None
    if tokenizer is not None:  # the export would ship another model's tokenizer with these weights
        check_covers(tokenizer, model.config.vocab_size, str(source))
    return source, model, tokenizer


def twin_or_custom(model: MaskplayModel, custom_code: bool) -> tuple[dict[str, Any], dict[str, Tensor], str | None]:
    """(config.json, weights, why not the twin): the twin's when it can express the model and custom code is not
    asked for; else custom code's (why: the twin's refusal)."""
    from ...families.hf import to_hf

    why = "custom code asked for (--custom-code)" if custom_code else None
    if not custom_code:
        try:
            exports = to_hf(model)
        except ValueError as err:
            why = str(err)
        else:
            if len(exports) > 1:  # export_to_hf splits an ELECTRA model into its towers before this
                raise ValueError("an ELECTRA model with a generator becomes two HuggingFace directories: use "
                                 "`maskplay export --to-hf MODEL --out DIR [--generator-out DIR2]`")
            return exports[0][0], exports[0][1], None
    return custom_config(model, {}), custom_state(model), why


def export_files(source: Path, model: MaskplayModel, tokenizer: Tokenizer | None, config: dict[str, Any],
                 custom: bool, name: str, card: dict[str, Any]) -> dict[str, str]:
    """The text files of an export besides its weights: config.json with the special ids, the tokenizer files, the
    custom code, README.md."""
    files: dict[str, str] = {}
    if tokenizer is not None:
        config = {**config, **special_ids(tokenizer)}
        token_types = model.config.type_vocab_size > 0 and config.get("segments", "given") == "given"
        files.update(tokenizer_files(tokenizer, model.config.max_position, token_types))
    if custom:
        files.update(code_files())
    files["config.json"] = json.dumps(config, indent=2, sort_keys=True) + "\n"
    kind = _auto_class(config)
    frame = None
    if model.can_generate and tokenizer is not None:
        prefix, suffix = model.generation_frame(tokenizer)
        names = tokenizer.backend.id_to_token
        frame = (" ".join(names(i) for i in prefix), " ".join(names(i) for i in suffix))
    how = loading_example(name, kind, custom, frame if kind == "AutoModelForCausalLM" else None)
    files["README.md"] = model_card(source, name, model.config.family, kind, how, custom=custom, **card)
    return files


def _auto_class(config: dict[str, Any]) -> str:
    architecture = config["architectures"][0]
    if "CausalLM" in architecture or "LMHead" in architecture:
        return "AutoModelForCausalLM"
    return "AutoModelForMaskedLM" if "MaskedLM" in architecture or "PreTraining" in architecture else "AutoModel"


def write_export(out: Path, files: dict[str, str], weights: dict[str, Tensor]) -> None:
    """`files` and model.safetensors into the new directory `out`, whole or not at all, every file 0666 less the
    umask (safetensors' save_file makes its file 0600)."""
    def write(tmp: Path) -> None:
        tmp.mkdir(parents=True)
        write_into(tmp, files, weights)

    replace_directory(out, write)


def write_into(directory: Path, files: dict[str, str], weights: dict[str, Tensor]) -> None:
    """`files` and model.safetensors into the existing `directory`, every file readable as write_export's."""
    from safetensors.torch import save_file

    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text, encoding="utf-8")
    save_file(unshared(weights), str(directory / "model.safetensors"), metadata={"format": "pt"})
    readable(directory)


def readable(directory: Path) -> None:
    """Every file under `directory` 0666 less the umask, every directory 0777 less it."""
    mask = os.umask(0o022)
    os.umask(mask)
    for path in [directory, *directory.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)


def unshared(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """safetensors refuses two names for one storage (a tied decoder and its word embeddings): clone repeats."""
    seen: set[int] = set()
    out = {}
    for key, value in state.items():
        value = value.detach().cpu()
        pointer = value.untyped_storage().data_ptr()
        out[key] = value.clone().contiguous() if pointer in seen else value.contiguous()
        seen.add(pointer)
    return out


def _check_out(out: Path, what: str = "--out") -> None:
    prepare_new_dir(out, what)


def model_export(source: Path, model: MaskplayModel, tokenizer: Tokenizer | None, name: str, custom_code: bool,
                 card: dict[str, Any]) -> tuple[dict[str, str], dict[str, Tensor], list[str]]:
    """(text files, weights, notes) of the export of `model` (read from `source`) named `name`; notes[0] says what
    it holds."""
    config, weights, why = twin_or_custom(model, custom_code)
    custom = why is not None
    files = export_files(source, model, tokenizer, config, custom, name, card)
    notes = [f"{config['architectures'][0]}" + (" (custom code: load with trust_remote_code=True)" if custom else "")]
    if custom and not custom_code:
        notes.append(f"no HuggingFace twin: {why}")
    if tokenizer is None:
        notes.append(f"{source} has no tokenizer.json: the export has none either")
    return files, weights, notes


def export_sentence_transformers(model_dir: str | Path, out: str | Path, pooling: str | None = None,
                                 license: str = "other", datasets: list[str] | None = None) -> list[str]:
    """A sentence-transformers directory (custom code + modules.json + 1_Pooling/) whose encode() gives `maskplay
    embed`'s vectors with `pooling` (mean / first / last; default the family's)."""
    out = Path(out)
    _check_out(out)
    source, model, tokenizer = _load(model_dir)
    if tokenizer is None:
        raise FileNotFoundError(f"{source} has no tokenizer.json: sentence-transformers needs one")
    pooling = pooling or type(model).default_pooling
    if pooling not in POOLINGS:
        raise ValueError(f"--pooling {pooling!r}: sentence-transformers gives maskplay's {sorted(POOLINGS)} "
                         "(sif needs corpus counts it has no module for)")
    config = custom_config(model, {})
    # the backbone alone (no LM head weights): AutoModel only
    auto = {name: config["auto_map"][name] for name in ("AutoConfig", "AutoModel")}
    config = {**config, "pool_frame_as_mean": pooling == "mean", "architectures": ["MaskplayModel"], "auto_map": auto}
    files = export_files(source, model, tokenizer, config, True, out.name,
                         {"license": license, "datasets": datasets, "library": "sentence-transformers"})
    files.update(sentence_transformers_files(model.config.max_position, model.config.hidden_size, POOLINGS[pooling]))
    weights = backbone_state(model)
    write_export(out, files, weights)
    return [f"wrote {out}: sentence-transformers, {pooling} pooling (SentenceTransformer(DIR, trust_remote_code=True))"]


def sentence_transformers_files(max_length: int, width: int, mode: str) -> dict[str, str]:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    pooling = {"word_embedding_dimension": width, "pooling_mode_cls_token": mode == "cls",
               "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
               "pooling_mode_lasttoken": mode == "lasttoken", "include_prompt": True}
    return {"modules.json": json.dumps(modules, indent=2) + "\n",
            "sentence_bert_config.json": json.dumps({"max_seq_length": max_length, "do_lower_case": False}) + "\n",
            "1_Pooling/config.json": json.dumps(pooling, indent=2) + "\n"}

"""sentence-transformers' modules.json and its Pooling module's config.json, as a headless encoder's directory
ships them (directory.py reads the encoder): the pooling and whether the embeddings are normalized. Both files come
from anywhere, so they are read with a size cap, checked field by field (one line naming the file and field), and
a module's path must stay inside the model directory (not absolute, no `..`, no symbolic link leading out:
runtime.files.file_inside), checked before anything there is opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runtime.files import file_inside, model_file
from ...runtime.json_files import read_json_dict, read_json_file

MODULES = "modules.json"
# sentence-transformers' pooling modes -> maskplay's Pooling values (score/embed.py); its mean is over every
# token, [CLS] and [SEP] included ("mean-tokens"). Version 6 writes "pooling_mode": "mean"; earlier ones one
# boolean per mode
ST_POOLINGS = {"mean": "mean-tokens", "cls": "first", "lasttoken": "last"}


def read_modules(directory: Path) -> list[dict[str, Any]]:
    """modules.json's modules (none without the file): a list of objects, each `type` and `path` a string."""
    path = model_file(directory, MODULES)
    if not path.exists():
        return []
    modules = read_json_file(path)
    if not isinstance(modules, list):
        raise ValueError(f"{path} is damaged: a list of modules was expected, not {type(modules).__name__}")
    for i, module in enumerate(modules):
        if not isinstance(module, dict):
            raise ValueError(f"{path}: module {i} is {module!r}, not an object")
        for key in ("type", "path"):
            if not isinstance(module.get(key, ""), str):
                raise ValueError(f"{path}: module {i}: \"{key}\": {module[key]!r} is not a string")
    return modules


def sentence_normalize(directory: Path) -> bool:
    """Whether sentence-transformers' modules.json ends with a Normalize module (unit-length embeddings)."""
    modules = read_modules(directory)
    return bool(modules) and modules[-1].get("type", "").endswith("Normalize")


def sentence_pooling(directory: Path) -> tuple[str | None, str | None]:
    """(maskplay pooling, why none) of sentence-transformers' modules.json and its Pooling config, if any."""
    found = [m for m in read_modules(directory) if m.get("type", "").endswith("Pooling")]
    if not found:
        return None, None
    where = found[0].get("path", "")
    if where:
        file_inside(directory, where, directory / MODULES)  # the module's folder: named in modules.json's terms
    config = model_file(directory, str(Path(where) / "config.json") if where else "config.json")
    if not config.exists():
        raise FileNotFoundError(f"{directory / MODULES} names a Pooling module in {where or '.'}, which has no "
                                "config.json")
    pooling = read_json_dict(config)
    mode = pooling.get("pooling_mode")
    if mode is not None and not isinstance(mode, str):
        raise ValueError(f"{config}: \"pooling_mode\": {mode!r} is not a string")
    flags = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{config}: \"{key}\": {value!r} is not true or false")
    modes = [mode] if mode is not None else [
        k.removeprefix("pooling_mode_").removesuffix("_token").removesuffix("_tokens") for k, v in flags.items() if v]
    if len(modes) == 1 and modes[0] in ST_POOLINGS:
        return ST_POOLINGS[modes[0]], None
    return None, f"sentence-transformers' pooling {'+'.join(modes) or '(none)'} is not maskplay's: give --pooling"

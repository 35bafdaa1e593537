"""JSON files that come with a model from anywhere (config.json, tokenizer_config.json, a sharded index,
sentence-transformers' modules.json): read with a size cap, so that a config.json that never ends (/dev/zero, a
FIFO, a file of gigabytes) is one line naming it, not a MemoryError or a hang, and parsed so that nesting deep
enough to exhaust Python's recursion is named too."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

# The largest model JSON file read: HuggingFace configs are kilobytes (a config with ImageNet's 1,000 labels,
# about 50 KB); a sharded index of a 400B-parameter model lists tens of thousands of tensors in a few MB.
JSON_LIMIT = 32 << 20


def read_json_file(path: str | Path, limit: int = JSON_LIMIT) -> Any:
    """The JSON value in `path`, a regular file of at most `limit` bytes; anything else (a device, a FIFO, a
    directory, a larger file, text that is not UTF-8 JSON) is one ValueError naming the file. A missing file is a
    FileNotFoundError naming it."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} not found") from None
    except OSError as err:
        raise ValueError(f"{path} cannot be read ({err.strerror or type(err).__name__})") from None
    if not stat.S_ISREG(info.st_mode):  # opening a FIFO would wait forever; /dev/zero never ends
        raise ValueError(f"{path} is not a regular file")
    if info.st_size > limit:
        raise ValueError(f"{path} is {info.st_size:,} bytes, over the {limit:,} a model's JSON file may have")
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)  # the size above can change between stat and read
    except OSError as err:
        raise ValueError(f"{path} cannot be read ({err.strerror or type(err).__name__})") from None
    if len(raw) > limit:
        raise ValueError(f"{path} is over the {limit:,} bytes a model's JSON file may have")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is damaged: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is damaged: not readable JSON ({err})") from None
    except RecursionError:
        raise ValueError(f"{path} is damaged: JSON nested too deeply to read") from None


def read_json_dict(path: str | Path, limit: int = JSON_LIMIT) -> dict[str, Any]:
    """read_json_file for a file that must hold an object."""
    data = read_json_file(path, limit)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is damaged: a JSON object was expected, not {type(data).__name__}")
    return data

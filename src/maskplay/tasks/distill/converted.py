"""A HuggingFace teacher converted once into maskplay's format (STORE/teacher, RUN_DIR/teacher) and reused only for
that same teacher: the conversion records its source's identity (source.json), a conversion of another source is
replaced (or refused where targets or checkpoints were made with it), and a teacher that cannot teach (no masked
LM) leaves no conversion behind to be picked up by the next try."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ...runtime.files import stays_inside
from .teacher import load_teacher

SOURCE = "source.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".txt")
HEAD_BYTES = 1 << 20  # of each weights file: its header (safetensors: names, shapes, offsets) and first weights


def source_identity(directory: Path) -> str:
    """A sha256 of what makes a HuggingFace directory's model: each file's name and size, and the first MiB of it
    (config.json, the tokenizer and a safetensors header whole), read in a bounded time whatever the size. A
    symbolic link out of the directory is left out, not looked at (the conversion refuses the files it reads so)."""
    h = hashlib.sha256()
    names = sorted(p.name for p in directory.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    inside = [directory / name for name in names if stays_inside(directory, name)]
    for path in (p for p in inside if p.is_file()):
        h.update(f"{path.name}:{path.stat().st_size}:".encode())
        with open(path, "rb") as f:
            h.update(f.read(HEAD_BYTES))
    return h.hexdigest()


def recorded_identity(converted: Path) -> str | None:
    try:
        data = json.loads((converted / SOURCE).read_text())
    except (OSError, ValueError):
        return None
    return data.get("identity") if isinstance(data, dict) else None


def converted_teacher(hf_dir: Path, converted: Path, convert: Callable[[Path, Path], None],
                      in_use: Callable[[], bool]) -> Path:
    """`converted` holding the maskplay form of the HuggingFace teacher `hf_dir`: the conversion there if it was made
    from this very directory's model, else a new one (`convert(hf_dir, tmp)`), checked to be a masked LM before it
    takes the place of the old. With `in_use()` (targets or checkpoints were made with the old conversion), another
    teacher is refused in one line instead."""
    identity = source_identity(hf_dir)
    if (converted / "config.json").is_file() and recorded_identity(converted) == identity:
        return converted
    created = not converted.parent.exists()
    tmp = converted.parent / f".tmp-{converted.name}-convert-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        convert(hf_dir, tmp)
        try:  # a model without a masked LM is refused here, before it replaces anything
            new = load_teacher(tmp)
        except ValueError as err:
            raise ValueError(str(err).replace(str(tmp), str(hf_dir))) from None
        if converted.exists():
            if in_use() and not _same_teacher(converted, new):
                raise ValueError(f"{converted} is the teacher the targets or checkpoints in {converted.parent} were "
                                 f"made with, converted from another model than {hf_dir}; give a new --out for "
                                 "this teacher")
            shutil.rmtree(converted)
        (tmp / SOURCE).write_text(json.dumps({"source": str(hf_dir.resolve()), "identity": identity}) + "\n")
        os.replace(tmp, converted)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                converted.parent.rmdir()  # only if nothing else is in it
    return converted


def _same_teacher(converted: Path, new: object) -> bool:
    """The old conversion's weights are the new one's (a conversion from before source.json existed)."""
    from .store import teacher_identity

    try:
        old = load_teacher(converted)
    except (ValueError, FileNotFoundError):
        return False
    return teacher_identity(old) == teacher_identity(new)  # type: ignore[arg-type]

"""`maskplay embed`: sentence embeddings to .npy (with an X.mask.npy sidecar for empty lines) or .jsonl."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..runtime.devices import resolve_device
from ..runtime.files import OutputLock, atomic_path, prepare_output_file
from ..runtime.precision_probe import resolve_cli
from ..tasks.score.scorer import Overflow
from .common import (
    MAX_LENGTH_HELP,
    add_model_arguments,
    add_sif_arguments,
    name_input,
    positive_int,
    read_input,
    report_empty,
)
from .summaries import summary

if TYPE_CHECKING:
    import torch


def add_parser(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("embed", help=summary("embed"))
    add_model_arguments(e)
    e.add_argument("--out", required=True, help="X.npy (float32 matrix, one row per line) or X.jsonl")
    from ..tasks.score.embed import Pooling

    e.add_argument("--pooling", choices=[p.value for p in Pooling], default=None,
                   help="default: mean, or a sentence-transformers directory's own pooling")
    e.add_argument("--layer", type=int, default=-1,
                   help="hidden state: 0 = the embedding output (the input of block 1), 1..N = the output of "
                        "block N, -1 = last")
    e.add_argument("--diagonal-mask", action=argparse.BooleanOptionalAction, default=True,
                   help="T-TA only: --no-diagonal-mask lets each position see its own token")
    e.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                   help="unit-length rows (default: no, or as a sentence-transformers directory's Normalize says)")
    add_sif_arguments(e)
    e.add_argument("--overflow", choices=[Overflow.ERROR.value, Overflow.TRUNCATE.value, Overflow.WINDOW.value],
                   default=Overflow.ERROR.value,
                   help="a sentence longer than the model: error; truncate = embed its first pieces; window = mean "
                        "pooling over overlapping windows, each piece taken once (--pooling mean only)")
    e.add_argument("--max-length", type=positive_int, default=None, metavar="N", help=MAX_LENGTH_HELP)
    e.set_defaults(func=run_embed, sentences=None)


def run_embed(args: argparse.Namespace) -> int:
    from ..tasks.score.text import is_empty

    out = Path(args.out)
    if out.suffix not in (".npy", ".jsonl"):
        raise ValueError(f"--out {out}: the name must end in .npy or .jsonl")
    prepare_output_file(out)  # before the model is loaded and the text embedded: fail in a second, not an hour
    device = resolve_device(args.device)
    rows = read_input(args)
    with OutputLock(out):
        positions = [k for k, (_, text) in enumerate(rows) if not is_empty(text)]
        vectors = _embed(args, device, rows, positions)
        # An empty line keeps its row: zeros in the matrix, flagged False in the X.mask.npy sidecar (written only
        # when there are empty lines), so that row k is always input line k.
        matrix = np.zeros((len(rows), vectors.shape[1]), dtype=np.float32)
        matrix[positions] = vectors
        mask_path = _write(out, matrix, rows, positions)
    report_empty(rows, args)
    extra = f"; empty rows are zeros, flagged False in {mask_path}" if mask_path is not None else ""
    print(f"wrote {out}: {matrix.shape[0]} x {matrix.shape[1]} ({args.pooling} pooling, layer {args.layer}){extra}")
    return 0


def _embed(args: argparse.Namespace, device: torch.device, rows: list[tuple[int, str]], positions: list[int]) -> np.ndarray:
    """The vectors of rows[positions]; an error or a non-finite vector names the input line."""
    from ..tasks.score.embed import Embedder, Pooling

    precision = resolve_cli(args.precision, device, model_dir=args.model_dir, rows=args.batch_size * 32, command="embed")
    embedder = Embedder.from_pretrained(args.model_dir, device=device, precision=precision,
                                        frequencies=args.frequencies)
    args.pooling = args.pooling or embedder.default_pooling.value
    try:
        vectors = embedder.encode([rows[k][1] for k in positions], pooling=Pooling(args.pooling), layer=args.layer,
                                  diagonal_mask=args.diagonal_mask, normalize=args.normalize,
                                  batch_size=args.batch_size, overflow=Overflow(args.overflow),
                                  progress=True, max_length=args.max_length, static=args.static,
                                  sif_a=args.sif_a, remove_components=args.remove_components)
    except ValueError as err:
        message = re.sub(r"^sentence (\d+) ", lambda m: f"sentence {positions[int(m.group(1))]} ", str(err))
        raise ValueError(name_input(message, rows, args)) from None
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise ValueError(name_input(f"sentence {positions[int(bad[0])]} has a non-finite embedding ({len(bad)} "
                                    f"of {len(rows)} rows): the model's weights are damaged or diverged; nothing "
                                    "written", rows, args))
    return vectors


def _write(out: Path, matrix: np.ndarray, rows: list[tuple[int, str]], positions: list[int]) -> Path | None:
    """`matrix` to `out` (.npy or .jsonl); for .npy with empty lines, their mask beside it (returned)."""
    mask_path = out.with_name(out.stem + ".mask.npy")
    with atomic_path(out) as tmp:
        if out.suffix == ".npy":
            with open(tmp, "wb") as f:
                np.save(f, matrix, allow_pickle=False)
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                real = set(positions)
                for k, (index, text) in enumerate(rows):
                    record = {"index": index, "text": text, "embedding": matrix[k].tolist()} if k in real else \
                        {"index": index, "text": text, "empty": True, "embedding": None}
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
    has_empty = len(positions) < len(rows)
    if out.suffix == ".npy" and has_empty:
        with atomic_path(mask_path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.isin(np.arange(len(rows)), positions), allow_pickle=False)
        return mask_path
    if out.suffix == ".npy" and mask_path.is_file():
        mask_path.unlink()  # a previous run's mask no longer describes this matrix
    return None

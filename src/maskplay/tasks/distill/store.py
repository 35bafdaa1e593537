"""Teacher targets computed once and stored (`maskplay distill prepare`), so that the teacher's passes are paid
once and a distillation can be repeated, resumed and compared.

A targets directory holds meta.json (the teacher's identity, top_k, max_length, the data's splits) and, per
split, shards SPLIT-NNNNN.safetensors of `shard_sequences` consecutive sequences each:

    lengths        (S,)     int64   tokens of each sequence (after truncation to max_length)
    input_ids      (T,)     int32   the token ids the targets belong to, the sequences back to back
    target_counts  (S,)     int64   target positions of each sequence (its pieces: not [SOS] / [EOS])
    top_ids        (P, k)   int32   the teacher's k most likely ids at each target position, in order
    top_logprobs   (P, k)   fp32    their log-probabilities (full softmax, temperature 1), largest first

Each shard's safetensors metadata names what it belongs to (the teacher's sha256, top_k, max_length, its split
and first sequence), so a shard copied in from another store is refused, not trained on. A shard is written whole
or not at all (files.atomic_path), so a killed `prepare` resumes at its first missing shard. Training finds a
sequence's targets by its token ids (a sequence that occurs twice has one teacher answer), reading only those rows
from the memory-mapped shard."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from ...data.dataset import TokenDataset
from ...data.tokenizer import load_tokenizer
from ...families import MaskplayModel
from ...runtime.files import atomic_path, prepare_output_dir, read_json_object
from .teacher import TeacherPass, check_teacher_tokenizer, check_top_k, describe, load_teacher

META = "meta.json"
FORMAT = 2  # 2: every shard names its teacher (format 1's shards do not; such stores are still read)
READABLE = (1, 2)


def teacher_identity(teacher: MaskplayModel) -> str:
    """A sha256 of the teacher's weights (names, dtypes, shapes, values; not of a file, whose header a second
    conversion of the same HuggingFace model may order differently): targets are only read back for the teacher
    that made them."""
    h = hashlib.sha256()
    for name, tensor in sorted(teacher.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def shard_name(split: str, index: int) -> str:
    return f"{split}-{index:05d}.safetensors"


@dataclass
class PrepareSummary:
    out: Path
    sequences: int  # sequences covered, every split
    computed: int  # of which computed by this call (the rest were in shards written before)
    passes: int  # teacher forward passes run by this call
    positions: int  # target positions computed by this call
    seconds: float


def prepare_targets(teacher: str | Path, data: str | Path, out: str | Path, top_k: int = 64, max_length: int = 128,
                    shard_sequences: int = 1000, splits: tuple[str, ...] = ("train", "valid"), rows: int = 256,
                    device: str = "cpu", progress: bool = False, threads: int | None = None,
                    precision: str = "fp32") -> PrepareSummary:
    """Compute and store the teacher's top-k PLL distributions at every piece of every sequence of `splits` of the
    prepared data directory `data` (missing splits are skipped, not `train`). Resumes a directory written before with
    the same settings; a directory written with other settings is an error. `threads`: torch's threads meanwhile
    (a CPU matmul's rounding depends on them: targets equal the ones a run computes on the fly bit for bit when
    both use the same number, run.threads). `precision`: the teacher's, fp32 or bf16 (TeacherPass)."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _prepare(teacher, Path(data), Path(out), top_k, max_length, shard_sequences, splits, rows, device,
                        progress, precision)
    finally:
        torch.set_num_threads(before)


def check_prepare(data: str | Path, out: str | Path, splits: tuple[str, ...], **sizes: int) -> dict[str, TokenDataset]:
    """What refuses a `distill prepare` without the teacher (so before a HuggingFace one is converted): the targets
    directory, the settings (`sizes`: option name -> value, each a whole number >= 1) and the prepared data's
    splits. Returns the splits' datasets."""
    data = Path(data)
    check_store_dir(Path(out))
    if not (data / "train").is_dir():
        raise FileNotFoundError(f"{data / 'train'} not found: --data must be a directory prepared by `maskplay prepare`")
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    bad = [split for split in splits if not re.fullmatch(r"[A-Za-z0-9_-]+", split)]
    if bad:
        raise ValueError(f"--splits {bad[0]!r}: a split is a subdirectory's name (train, valid, ...)")
    datasets = {s: TokenDataset(data / s) for s in splits if (data / s).is_dir()}
    if not datasets:
        raise ValueError(f"--splits {' '.join(splits)}: {data} has none of them")
    if "train" in datasets and not len(datasets["train"]):
        raise ValueError(f"{data / 'train'} holds no sequences: there is nothing to compute targets for")
    return datasets


def _prepare(teacher: str | Path, data: Path, out: Path, top_k: int, max_length: int, shard_sequences: int,
             splits: tuple[str, ...], rows: int, device: str, progress: bool, precision: str) -> PrepareSummary:
    datasets = check_prepare(data, out, splits, **{"--top-k": top_k, "--max-length": max_length,
                                                   "--shard-sequences": shard_sequences, "--teacher-rows": rows})
    model = load_teacher(teacher, device)
    check_top_k(top_k, model)
    check_teacher_tokenizer(model, load_tokenizer(data), f"--data {data}")
    identity = teacher_identity(model)
    meta = {"format": FORMAT, "teacher": {**describe(model), "weights_sha256": identity},
            "top_k": top_k, "max_length": max_length, "shard_sequences": shard_sequences,
            "teacher_precision": precision,
            "splits": {s: {"sequences": len(d), "tokens": d.num_tokens} for s, d in datasets.items()}}
    _write_or_check_meta(out, meta)
    teacher_pass = TeacherPass(model, top_k, rows, precision)
    started, computed, positions = time.monotonic(), 0, 0
    jobs = [(s, k) for s, d in datasets.items() for k in range(-(-len(d) // shard_sequences))]
    jobs = [(s, k) for s, k in jobs if not (out / shard_name(s, k)).is_file()]
    from ...runtime.progress import track

    for split, k in track(jobs, desc="teacher targets", unit="shard", enabled=progress):
        dataset = datasets[split]
        first = k * shard_sequences
        sequences = [dataset[i][:max_length] for i in range(first, min(first + shard_sequences, len(dataset)))]
        tensors = shard_tensors(teacher_pass, sequences)
        with atomic_path(out / shard_name(split, k)) as tmp:
            save_file(tensors, str(tmp), metadata=shard_metadata(meta, split, first))
        computed += len(sequences)
        positions += int(tensors["target_counts"].sum())
    return PrepareSummary(out=out, sequences=sum(len(d) for d in datasets.values()), computed=computed,
                          passes=teacher_pass.passes, positions=positions, seconds=time.monotonic() - started)


def shard_metadata(meta: dict[str, Any], split: str, first: int) -> dict[str, str]:
    """What a shard says it is: of which teacher, settings, split and sequences (StoredTargets checks it)."""
    return {"format": str(meta["format"]), "teacher_sha256": meta["teacher"]["weights_sha256"],
            "top_k": str(meta["top_k"]), "max_length": str(meta["max_length"]),
            "teacher_precision": meta["teacher_precision"], "split": split, "first_sequence": str(first)}


def check_store_dir(out: Path) -> None:
    """--out of `prepare`: new, empty, or a targets directory to resume (meta.json; teacher/ is the converted
    HuggingFace teacher): never a directory of other files the shards would be mixed into."""
    prepare_output_dir(out, "--out")
    if out.is_dir() and not (out / META).is_file():
        # hidden: a write or a conversion interrupted before its rename
        other = sorted(p.name for p in out.iterdir() if p.name != "teacher" and not p.name.startswith("."))
        if other:
            raise ValueError(f"--out {out} holds other files ({', '.join(other[:3])}) and no {META}: it is not a "
                             "targets directory; give a new or empty directory")


def shard_tensors(teacher_pass: TeacherPass, sequences: list[np.ndarray]) -> dict[str, Tensor]:
    ids, logps, counts = [], [], []
    for seq in sequences:
        top_ids, top_logp = teacher_pass(torch.as_tensor(seq, dtype=torch.long))
        ids.append(top_ids.cpu())
        logps.append(top_logp.cpu())
        counts.append(len(top_ids))
    k = teacher_pass.top_k
    return {"lengths": torch.tensor([len(s) for s in sequences], dtype=torch.int64),
            "input_ids": torch.as_tensor(np.concatenate(sequences) if sequences else np.zeros(0), dtype=torch.int32),
            "target_counts": torch.tensor(counts, dtype=torch.int64),
            "top_ids": torch.cat(ids) if ids else torch.zeros(0, k, dtype=torch.int32),
            "top_logprobs": torch.cat(logps) if logps else torch.zeros(0, k)}


def check_meta(meta: dict[str, Any], path: Path) -> None:
    """meta.json's fields, each of the type and range prepare writes, or one error naming the file and field."""
    def bad(field: str, want: str) -> ValueError:
        return ValueError(f"{path} is damaged: {field} must be {want}, not {_get(meta, field)!r}")

    if meta.get("format") not in READABLE:
        raise ValueError(f"{path}: format {meta.get('format')!r}, this maskplay reads {' or '.join(map(str, READABLE))}")
    for field in ("top_k", "max_length", "shard_sequences"):
        if type(meta.get(field)) is not int or meta[field] < 1:
            raise bad(field, "a whole number >= 1")
    if meta.get("teacher_precision", "fp32") not in ("fp32", "bf16"):
        raise bad("teacher_precision", "fp32 or bf16")
    teacher = meta.get("teacher")
    if not isinstance(teacher, dict) or not isinstance(teacher.get("weights_sha256"), str):
        raise bad("teacher.weights_sha256", "the teacher's sha256")
    splits = meta.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise bad("splits", "an object of the splits prepared")
    for split, info in splits.items():
        if not re.fullmatch(r"[A-Za-z0-9_-]+", split) or not isinstance(info, dict):
            raise bad("splits", "split names, each with its sequences")
        if type(info.get("sequences")) is not int or info["sequences"] < 0:
            raise bad(f"splits.{split}.sequences", "a whole number >= 0")
    if not splits.get("train", {"sequences": 1})["sequences"]:
        raise ValueError(f"{path}: the targets hold no training sequence (splits.train.sequences is 0): prepare "
                         "them from data with some")


def _get(meta: dict[str, Any], field: str) -> Any:
    value: Any = meta
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _write_or_check_meta(out: Path, meta: dict[str, Any]) -> None:
    path = out / META
    if path.is_file():
        old = read_json_object(path)
        if old != meta:
            differ = sorted(k for k in set(old) | set(meta) if old.get(k) != meta.get(k))
            raise ValueError(f"{path}: these targets were prepared with other settings ({', '.join(differ)} differ); "
                             "give a new --out, or the settings they were prepared with to resume them")
        return
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(meta, indent=2) + "\n")


class StoredTargets:
    """targets(input_ids, attention_mask) -> (top ids (N, k) long, top log-probabilities (N, k)) for the target
    positions of a padded batch, in row-major order, read from a prepared directory. Every check runs here, before
    a step: meta.json's fields, the teacher, the settings, and each shard's header (its teacher, settings and
    tensors' shapes), so a damaged, incomplete or mixed directory is one error naming the file."""

    def __init__(self, directory: str | Path, top_k: int, max_length: int, teacher_sha256: str | None = None,
                 precision: str | None = None) -> None:
        self.directory = Path(directory)
        path = self.directory / META
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: is {self.directory} a directory written by "
                                    "`maskplay distill prepare`?")
        self.meta = read_json_object(path)
        check_meta(self.meta, path)
        self._check(top_k, max_length, teacher_sha256)
        stored = self.meta.get("teacher_precision", "fp32")
        if precision is not None and stored != precision:
            raise ValueError(f"targets {self.directory} were computed by the teacher in {stored}, the run's "
                             f"teacher_precision is {precision}: the targets on the fly would differ")
        self.top_k = top_k
        self.files: list[Any] = []
        self.index: dict[bytes, tuple[int, int, int]] = {}  # token ids -> (file, first row, rows)
        per = self.meta["shard_sequences"]
        for split, info in self.meta["splits"].items():
            n = info["sequences"]
            for k in range(-(-n // per)):
                self._open(self.directory / shard_name(split, k), split, k * per, min(per, n - k * per))

    def _check(self, top_k: int, max_length: int, teacher_sha256: str | None) -> None:
        where = f"targets {self.directory}"
        if top_k > self.meta["top_k"]:
            raise ValueError(f"{where} keep the top {self.meta['top_k']} teacher ids; distill top_k={top_k} needs "
                             "at least that many (prepare them again, or lower top_k)")
        if self.meta["max_length"] != max_length:
            raise ValueError(f"{where} were prepared at max_length={self.meta['max_length']}, the run truncates at "
                             f"data.max_length={max_length}: the sequences would not match")
        if teacher_sha256 is not None and self.meta["teacher"]["weights_sha256"] != teacher_sha256:
            raise ValueError(f"{where} were prepared by another teacher (its weights' sha256 differs)")

    def check_data(self, data: Path) -> None:
        """The run's training and held-out splits must be the ones the targets were prepared from (else the
        first batch or evaluation would find no targets for its sequences)."""
        for split in ("train", "valid"):
            if not (data / split).is_dir():
                continue
            found, info = TokenDataset(data / split), self.meta["splits"].get(split)
            if info is None:
                raise ValueError(f"targets {self.directory} hold no {split} split, which the run reads from "
                                 f"{data / split}: prepare them with --splits train valid")
            if (info["sequences"], info.get("tokens", found.num_tokens)) != (len(found), found.num_tokens):
                raise ValueError(f"targets {self.directory} were prepared from {info['sequences']:,} {split} "
                                 f"sequences, the run's {found.directory} has {len(found):,} ({found.num_tokens:,} "
                                 "tokens): prepare them from the run's --data")

    def _open(self, path: Path, split: str, first: int, sequences: int) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: `maskplay distill prepare` did not finish; run it again with "
                                    "the same arguments to complete it")
        try:
            handle = safe_open(str(path), framework="pt")
            lengths, counts = handle.get_tensor("lengths"), handle.get_tensor("target_counts")
            ids = handle.get_tensor("input_ids").numpy()
            shapes = {name: (handle.get_slice(name).get_shape(), handle.get_slice(name).get_dtype())
                      for name in ("top_ids", "top_logprobs")}
            found = handle.metadata() or {}
        except Exception as err:  # noqa: BLE001 - safetensors' errors have no common base: any is damage
            raise ValueError(f"{path} is damaged: not a readable targets shard ({str(err).splitlines()[0]}); "
                             "delete it and run `maskplay distill prepare` again to compute it") from None
        self._check_shard(path, found, split, first)
        rows = int(counts.sum()) if len(counts) else 0
        k = self.meta["top_k"]
        if (tuple(lengths.shape) != (sequences,) or tuple(counts.shape) != (sequences,) or len(ids) !=
                int(lengths.sum()) or shapes["top_ids"] != ([rows, k], "I32") or shapes["top_logprobs"] !=
                ([rows, k], "F32") or bool((lengths < 0).any()) or bool((counts < 0).any())):
            raise ValueError(f"{path} is damaged: its tensors do not hold the {sequences} sequences of top "
                             f"{k} targets meta.json promises; delete it and run `maskplay distill prepare` again")
        starts = np.concatenate([[0], np.cumsum(lengths.numpy())])
        rows_at = np.concatenate([[0], np.cumsum(counts.numpy())])
        file = len(self.files)
        self.files.append(handle)
        for s in range(len(lengths)):
            self.index.setdefault(ids[starts[s]:starts[s + 1]].tobytes(), (file, int(rows_at[s]), int(counts[s])))

    def _check_shard(self, path: Path, found: dict[str, str], split: str, first: int) -> None:
        """A shard of this store: its teacher and settings (format 1 shards name none, and are taken on trust)."""
        if self.meta["format"] == 1 and "teacher_sha256" not in found:
            return
        want = shard_metadata(self.meta, split, first)
        differ = sorted(key for key in want if found.get(key) != want[key])
        if differ:
            what = "another teacher" if "teacher_sha256" in differ else "other settings"
            raise ValueError(f"{path} is not a shard of {self.directory}: it was written for {what} "
                             f"({', '.join(differ)} differ); delete it and run `maskplay distill prepare` again")

    def sequence(self, sequence: Tensor) -> tuple[Tensor, Tensor]:
        key = sequence.detach().to("cpu", torch.int32).numpy().tobytes()
        found = self.index.get(key)
        if found is None:
            raise ValueError(f"targets {self.directory} hold no sequence of these {len(sequence)} token ids: were "
                             "they prepared from the run's data (--data) and its max_length?")
        file, first, n = found
        handle = self.files[file]
        return (handle.get_slice("top_ids")[first:first + n][:, :self.top_k],
                handle.get_slice("top_logprobs")[first:first + n][:, :self.top_k])

    def batch(self, input_ids: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        lengths = attention_mask.sum(1).tolist()
        parts = [self.sequence(input_ids[b, :n]) for b, n in enumerate(lengths)]
        device = input_ids.device
        return torch.cat([p[0] for p in parts]).to(device), torch.cat([p[1] for p in parts]).to(device)

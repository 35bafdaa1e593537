"""Training checkpoints that lose nothing and are never unpickled.

One directory per checkpoint, RUN_DIR/ckpt-000123/:

    model.safetensors      the weights
    optimizer.safetensors  AdamW state flattened by parameter name: state/<param name>/<exp_avg|exp_avg_sq|step>
    rng.safetensors        every process's RNG states: rank<r>/<torch_cpu|generator|cuda|python_*|numpy_*>
    ema.safetensors        with optim.ema only: the weights' moving average by parameter name
    state.json             step, data position, schedule, optimizer hyper-parameters, elapsed time, versions
    config.json            the resolved TrainConfig; model_config.json the ModelConfig
    manifest.json          sha256 and size of every file above, written last

Everything is written into a hidden temporary directory, each file fsynced, the manifest last, and the directory
renamed into place in one step: a checkpoint either exists whole or not at all. A checkpoint whose manifest is
missing or whose files do not match it is reported by file name and skipped for the previous one."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from ...runtime.files import file_inside, fsync_dir, sha256

MANIFEST = "manifest.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
STATE_FILE = "state.json"
CONFIG_FILE = "config.json"
MODEL_CONFIG_FILE = "model_config.json"
REQUIRED = (MODEL_FILE, OPTIMIZER_FILE, RNG_FILE, STATE_FILE, CONFIG_FILE, MODEL_CONFIG_FILE)
FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file at fault."""


def checkpoint_name(step: int) -> str:
    return f"ckpt-{step:06d}"


# ---- writing ------------------------------------------------------------------------------------------------

def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_checkpoint(run_dir: str | Path, step: int, tensors: dict[str, dict[str, Tensor]],
                     documents: dict[str, Any]) -> Path:
    """Write `tensors` (file name -> named tensors, as safetensors) and `documents` (file name -> JSON value)
    as checkpoint `step` of run_dir, atomically. An existing checkpoint of the same step is replaced."""
    run_dir = Path(run_dir)
    final = run_dir / checkpoint_name(step)
    tmp = run_dir / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        written: list[str] = []
        for name, named in tensors.items():
            save_file({k: v.detach().contiguous().cpu() for k, v in named.items()}, str(tmp / name),
                      metadata={"format": "pt"})
            written.append(name)
        for name, value in documents.items():
            (tmp / name).write_text(json.dumps(value, indent=2) + "\n")
            written.append(name)
        manifest = {"format": FORMAT_VERSION, "step": step,
                    "files": {name: {"sha256": sha256(tmp / name), "bytes": (tmp / name).stat().st_size}
                              for name in sorted(written)}}
        for name in written:
            _fsync_file(tmp / name)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _fsync_file(tmp / MANIFEST)
        fsync_dir(tmp)
        old = None
        if final.exists():  # the same step written again (e.g. a signal right after a periodic save)
            old = run_dir / f".old-{final.name}-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        fsync_dir(run_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint directory in run_dir, oldest first (valid or not)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := _NAME.match(p.name))]
    return sorted(found)


def prune_checkpoints(run_dir: str | Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` checkpoints; returns the deleted paths."""
    doomed = [p for _, p in list_checkpoints(run_dir)[:-keep]] if keep > 0 else []
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def remove_partial_writes(run_dir: str | Path) -> list[Path]:
    """Temporary directories left by a process killed while writing a checkpoint."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    for old in run_dir.glob(".old-ckpt-*"):
        # killed between moving a checkpoint aside and moving its replacement in: put the old one back
        name = old.name[len(".old-"):].rsplit("-", 1)[0]
        if not (run_dir / name).exists():
            os.replace(old, run_dir / name)
    stale = [*run_dir.glob(".tmp-ckpt-*"), *run_dir.glob(".old-ckpt-*")]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


# ---- reading ------------------------------------------------------------------------------------------------

def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check a checkpoint against its manifest; returns the manifest or raises CheckpointError naming the file."""
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{manifest_path} is missing: the checkpoint was not completely written")
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{manifest_path} is unreadable: {err}") from err
    if manifest.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{manifest_path}: checkpoint format {manifest.get('format')!r} is not "
                              f"{FORMAT_VERSION}, the one this version of maskplay reads")
    for name in REQUIRED:
        if name not in files:
            raise CheckpointError(f"{manifest_path} does not list {name}")
    for name, entry in files.items():
        try:
            file = file_inside(path, name, manifest_path)
        except ValueError as err:
            raise CheckpointError(str(err)) from None
        if not file.is_file():
            raise CheckpointError(f"{file} is missing")
        size = file.stat().st_size
        if size != entry["bytes"]:
            raise CheckpointError(f"{file} has {size} bytes, the manifest says {entry['bytes']} (truncated?)")
        if sha256(file) != entry["sha256"]:
            raise CheckpointError(f"{file} does not match its sha256 in the manifest (corrupted)")
    return manifest


def latest_valid_checkpoint(run_dir: str | Path, warn: Callable[[str], None] | None = None) -> Path | None:
    """The newest checkpoint of run_dir that verifies; each newer broken one is reported through `warn`."""
    warn = warn or (lambda msg: warnings.warn(msg, stacklevel=2))
    problems = []
    for _, path in reversed(list_checkpoints(run_dir)):
        try:
            verify_checkpoint(path)
        except CheckpointError as err:
            problems.append(str(err))
            warn(f"skipping checkpoint {path.name}: {err}; trying the previous one")
            continue
        return path
    if problems:
        raise CheckpointError(f"no usable checkpoint in {run_dir}: " + "; ".join(problems))
    return None


def read_tensors(path: Path) -> dict[str, Tensor]:
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path} is not a readable safetensors file: {err}") from err


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, OSError) as err:
        raise CheckpointError(f"{path} is not readable JSON: {err}") from err


# ---- optimizer state ----------------------------------------------------------------------------------------

def optimizer_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """Flatten the state into named tensors (state/<param name>/<key>) plus JSON hyper-parameters per group.
    Needs param groups built with names (torch's `param_names`)."""
    sd = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    groups = []
    for group in sd["param_groups"]:
        if "param_names" not in group:
            raise ValueError("the optimizer's parameter groups carry no param_names; build it with (name, param) "
                             "pairs")
        for index, name in zip(group["params"], group["param_names"], strict=True):
            for key, value in sd["state"].get(index, {}).items():
                if not isinstance(value, Tensor):
                    value = torch.tensor(value)  # e.g. a plain-number step in another optimizer
                tensors[f"state/{name}/{key}"] = value
        groups.append({k: v for k, v in group.items() if k != "params"})
    return tensors, groups


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor],
                           groups: list[dict[str, Any]], source: str = "optimizer state") -> None:
    current = optimizer.state_dict()
    if len(groups) != len(current["param_groups"]):
        raise CheckpointError(f"{source}: {len(groups)} parameter groups saved, the optimizer has "
                              f"{len(current['param_groups'])}")
    by_name: dict[str, dict[str, Tensor]] = {}
    for key, value in tensors.items():
        _, name, item = key.split("/")
        by_name.setdefault(name, {})[item] = value
    state: dict[int, dict[str, Tensor]] = {}
    new_groups = []
    for saved, group in zip(groups, current["param_groups"], strict=True):
        if saved.get("param_names") != group["param_names"]:
            missing = sorted(set(group["param_names"]) - set(saved.get("param_names", [])))
            extra = sorted(set(saved.get("param_names", [])) - set(group["param_names"]))
            raise CheckpointError(f"{source}: parameters differ from the model's: missing {missing}, unexpected {extra}")
        for index, name in zip(group["params"], group["param_names"], strict=True):
            if name in by_name:
                state[index] = by_name.pop(name)
        new_groups.append({**saved, "params": group["params"]})
    if by_name:
        raise CheckpointError(f"{source}: state for unknown parameters {sorted(by_name)}")
    optimizer.load_state_dict({"state": state, "param_groups": new_groups})


# ---- RNG state ----------------------------------------------------------------------------------------------

def rng_to_tensors(generator: torch.Generator, device: torch.device) -> dict[str, Tensor]:
    """This process's RNG states as tensors of fixed shapes (so processes can all-gather them)."""
    version, mt, gauss = random.getstate()
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    out = {
        "torch_cpu": torch.get_rng_state(),
        "generator": generator.get_state(),
        "python_mt": torch.tensor(mt, dtype=torch.int64),
        "python_extra": torch.tensor([version, gauss is not None, gauss or 0.0], dtype=torch.float64),
        "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "numpy_extra": torch.tensor([pos, has_gauss, cached], dtype=torch.float64),
    }
    if device.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(device)
    return out


def rng_from_tensors(states: dict[str, Tensor], generator: torch.Generator, device: torch.device) -> None:
    torch.set_rng_state(states["torch_cpu"])
    generator.set_state(states["generator"])
    version, has_gauss, gauss = states["python_extra"].tolist()
    random.setstate((int(version), tuple(int(x) for x in states["python_mt"].tolist()),
                     gauss if has_gauss else None))
    pos, np_has_gauss, cached = states["numpy_extra"].tolist()
    np.random.set_state(("MT19937", states["numpy_keys"].numpy().astype(np.uint32), int(pos), int(np_has_gauss),
                         float(cached)))
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)

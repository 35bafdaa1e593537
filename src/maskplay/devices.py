"""One parser for `--device` / `run.device`, shared by every command, so that a bad device is the same one-line
error everywhere instead of whatever torch happens to raise deep inside `.to(device)`."""

from __future__ import annotations

import re

import torch

DEVICE_NAMES = "auto, cpu, cuda or cuda:N"
_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def check_device_name(name: str, what: str = "--device") -> str:
    """Syntax only (a config may be written on one machine and run on another): auto, cpu, cuda, cuda:N."""
    if not isinstance(name, str):
        raise ValueError(f"{what}: expected a device name ({DEVICE_NAMES}), got {name!r}")
    if name in ("auto", "cpu") or _CUDA.match(name):
        return name
    raise ValueError(f"{what}={name!r}: unknown device; use {DEVICE_NAMES}")


def resolve_device(name: str | None, what: str = "--device", default: str = "cpu", local_rank: int = 0) -> torch.device:
    """The torch.device `name` stands for on this machine. None means `default`; auto = CUDA when available,
    else the CPU; plain cuda = this process's GPU (local_rank under torchrun). A device this machine lacks is a
    ValueError naming the argument."""
    name = check_device_name(default if name is None else name, what)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise ValueError(f"{what}={name!r}: CUDA is not available on this machine ({why}); use cpu or auto")
    count = torch.cuda.device_count()
    index = _CUDA.match(name).group(1)  # type: ignore[union-attr]  # checked above
    if index is None:
        return torch.device("cuda", local_rank % count)
    if int(index) >= count:
        raise ValueError(f"{what}={name!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    return torch.device("cuda", int(index))

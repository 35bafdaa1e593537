"""One resolver for `--device` / `run.device`, shared by every command, so that a bad device is the same one-line
error everywhere instead of whatever torch happens to raise deep inside `.to(device)`: auto, cpu, cuda, cuda:N,
mps; a device this torch build or this machine lacks is refused saying what it has."""

from __future__ import annotations

import re

import torch

DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"
_CUDA = re.compile(r"^cuda(?::(\d+))?$")


def check_device_name(name: str, what: str = "--device") -> str:
    """Syntax only (a config may be written on one machine and run on another): auto, cpu, cuda, cuda:N, mps."""
    if not isinstance(name, str):
        raise ValueError(f"{what}: expected a device name ({DEVICE_NAMES}), got {name!r}")
    if name in ("auto", "cpu", "mps") or _CUDA.match(name):
        return name
    raise ValueError(f"{what}={name!r}: unknown device; use {DEVICE_NAMES} (this machine has: {available()})")


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def available() -> str:
    """What this torch build and machine can run on, for messages: 'cpu', 'cpu, cuda:0, cuda:1', 'cpu, mps'."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{k}" for k in range(torch.cuda.device_count())]
    if _mps_available():
        names.append("mps")
    return ", ".join(names)


def resolve_device(name: str | None, what: str = "--device", default: str = "cpu", local_rank: int = 0) -> torch.device:
    """The torch.device `name` stands for on this machine. None means `default`; auto = CUDA when available,
    else MPS when available, else the CPU; plain cuda = this process's GPU (local_rank under torchrun). A device
    this machine lacks is a ValueError naming the argument and saying what the machine has."""
    name = check_device_name(default if name is None else name, what)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not _mps_available():
            raise ValueError(f"{what}={name!r}: MPS (Apple GPU) is not available on this machine; "
                             f"it has: {available()}")
        return torch.device("mps")
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

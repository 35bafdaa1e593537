"""Process-group setup for `torchrun` and the few collectives the trainer needs.

One process (no WORLD_SIZE in the environment, or WORLD_SIZE=1) runs without a process group at all, so
the collectives below are then plain local operations.

A process that dies breaks its peers' next collective at once (gloo sees the connection close); one that hangs
(stopped, deadlocked, its machine gone) is noticed after the process group's timeout, run.dist_timeout_s. Either
way the survivors raise PeerLost, one line naming the step and the checkpoint to resume from, instead of waiting
(torch's own default is 30 minutes)."""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """auto: this process's GPU when CUDA is available, else the CPU (maskplay.runtime.devices, shared by every command)."""
    from ...runtime.devices import resolve_device as resolve

    return resolve(name, what="run.device", default="auto", local_rank=local_rank)


class PeerLost(ValueError):
    """Another process of the run died or stopped answering (a ValueError, so the command line reports it in one
    line)."""


# what gloo and NCCL say when a peer is gone: "Connection reset by peer", "Connection closed by peer",
# "Timed out waiting 600000ms for recv operation to complete", NCCL's watchdog timeouts
_PEER_ERROR = re.compile(r"gloo|nccl|connection (reset|closed|refused)|timed out waiting|broken pipe", re.IGNORECASE)


def peer_failure(d: Dist, err: BaseException) -> bool:
    """Whether `err`, raised in a run of several processes, is a collective failing because a peer is gone."""
    distributed_error = getattr(dist, "DistError", ())
    return d.enabled and (isinstance(err, distributed_error)
                          or (isinstance(err, RuntimeError) and bool(_PEER_ERROR.search(str(err)))))


def describe_peer_failure(err: BaseException) -> str:
    """gloo's message without its source path and its advice: "Read error [127.0.0.1]:4518: Connection reset by
    peer"."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h|py):\d+\]\s*", "", text)
    return text.split(". This is typically")[0].rstrip(".")


def lost_peer_message(d: Dist, err: BaseException, timeout_s: float, step: int | None = None,
                      checkpoint: Path | None = None) -> str:
    """The one line a surviving process stops with: which process, at which step, why, what to resume from."""
    during = f" during step {step}" if step is not None else ""
    where = ("" if step is None else f"; the newest checkpoint is {checkpoint}: resume with --resume"
             if checkpoint is not None else "; no checkpoint was written yet")
    return (f"process {d.rank} of {d.world_size} lost contact with another process{during} "
            f"({describe_peer_failure(err)}): a process died, or stopped answering for run.dist_timeout_s="
            f"{timeout_s:g} s{where}")


def setup(device_name: str, timeout_s: float = 600.0) -> Dist:
    """Join the process group torchrun describes in the environment (gloo on CPU, NCCL on GPU); a collective
    that waits longer than timeout_s for a peer fails (PeerLost)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=timeout_s))
    return Dist(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def teardown(d: Dist, synchronize: bool = True) -> None:
    """Leave the process group. After a normal end every process first waits for the others, so that none
    tears its connections down while a peer still uses them; after an error nobody waits (the peers may never
    come, and torchrun stops them anyway)."""
    if d.enabled and dist.is_initialized():
        if synchronize:
            dist.barrier()
        dist.destroy_process_group()


def _comm_device(d: Dist) -> torch.device:
    # NCCL moves only GPU tensors; gloo only CPU ones
    return d.device if d.device.type == "cuda" else torch.device("cpu")


def all_reduce_sum(d: Dist, values: Tensor) -> Tensor:
    """The element-wise sum over processes (float64 on the way, so counts stay exact)."""
    if not d.enabled:
        return values
    t = values.to(_comm_device(d), torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu()


def broadcast_int(d: Dist, value: int) -> int:
    """Rank 0's value, on every rank."""
    if not d.enabled:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=_comm_device(d))
    dist.broadcast(t, src=0)
    return int(t.item())


def all_gather(d: Dist, tensor: Tensor) -> list[Tensor]:
    """Every rank's copy of a tensor of the same shape and dtype on all ranks, as CPU tensors."""
    if not d.enabled:
        return [tensor.cpu()]
    t = tensor.to(_comm_device(d)).contiguous()
    out = [torch.empty_like(t) for _ in range(d.world_size)]
    dist.all_gather(out, t)
    return [o.cpu() for o in out]


def barrier(d: Dist, timeout_s: float | None = None) -> None:
    """Wait for every process. timeout_s: a longer wait than the process group's (rank 0 preparing a corpus while
    the others wait), through a gloo group made for it; a peer that dies is still noticed at once."""
    if not d.enabled:
        return
    if timeout_s is None:
        dist.barrier()
        return
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    try:
        dist.barrier(group=group)
    finally:
        dist.destroy_process_group(group)

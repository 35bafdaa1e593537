"""Dynamic batching: requests that arrive within a few milliseconds of each other go through one model call.

Each request is a job: a batch key (what must be equal for two jobs to share a call: the endpoint and the options
that change the computation), its items (sentences, prompts) and the function that runs a list of items. The
loop takes the oldest job; under concurrent load (the last call served several jobs, or more were waiting) it waits
until that job is `max_wait_ms` old or `max_batch_size` items of its key are waiting (a lone client's request
does not wait: it runs at once, and requests that arrive while the model is busy batch into the next call); then
it runs the items of every waiting job with that key (oldest first, up to max_batch_size items; the first job
always goes whole) in one call on the model's thread, and hands each job back its own slice of the results.

A job of more than max_batch_size items (a request of many sentences or prompts) is split: each call runs its next
max_batch_size items, and the job goes back to the end of the queue in between, so that other clients' requests
interleave with it instead of waiting for all of it (a seeded sample is never split: its rows draw from one seed).

Results never mix: a call returns one result per item, in order, and a job gets exactly the slice of its items.
A call that fails with more than one job in it is run again job by job, so that an error reaches the request that
caused it and the others still get their results. The queue is bounded (`max_queue` jobs): one more is refused
with QueueFull at once (the server answers 503 with Retry-After). Batching off (`enabled=False`) runs each job
alone, as it arrives, through the same queue and the same thread: the baseline of benchmarks/serve_load.py."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

Run = Callable[[list[Any]], list[Any]]


class QueueFull(Exception):
    """The bounded queue holds max_queue jobs already."""


class ShuttingDown(QueueFull):
    """The server is stopping: waiting jobs are answered with this (503) instead of being cancelled mid-wait."""


@dataclass
class _Job:
    key: Hashable
    items: list[Any]
    run: Run
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)
    split: bool = True  # may run in several calls (max_batch_size items each)
    done: list[Any] = field(default_factory=list)  # the results of the items run so far, in order

    @property
    def left(self) -> list[Any]:
        return self.items[len(self.done):]


@dataclass
class BatchStats:
    """Counters read by GET /health (and the tests): jobs and items taken, model calls made."""

    jobs: int = 0
    items: int = 0
    calls: int = 0
    largest: int = 0  # the most jobs one call served
    refused: int = 0


class Batcher:
    def __init__(self, max_batch_size: int = 32, max_wait_ms: float = 5.0, max_queue: int = 256,
                 enabled: bool = True) -> None:
        if max_batch_size < 1:
            raise ValueError(f"--max-batch-size must be at least 1, got {max_batch_size}")
        if max_wait_ms < 0:
            raise ValueError(f"--max-wait-ms must be >= 0, got {max_wait_ms}")
        if max_queue < 1:
            raise ValueError(f"--max-queue must be at least 1, got {max_queue}")
        self.max_batch_size, self.max_wait, self.max_queue = max_batch_size, max_wait_ms / 1000, max_queue
        self.enabled = enabled
        self.pending: deque[_Job] = deque()
        self.stats = BatchStats()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self.running = False  # a model call is in flight
        self._busy = False  # the last call served several jobs: clients are concurrent, so wait for the others
        self._free_at = 0.0  # when the last model call ended (time.monotonic)
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="maskplay-model")  # the model runs here only
        self.closing = False
        self._inflight: list[_Job] = []  # the jobs of the call on the model's thread

    def start(self) -> None:
        """Start the loop on the running event loop (the app's startup)."""
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def close(self) -> None:
        """Answer every waiting job, and the jobs of the call in flight, with ShuttingDown, and refuse new ones:
        the server's shutdown then ends the requests in its grace period instead of cancelling them (whose
        CancelledError tracebacks filled the log). The call in flight runs to its end; its results are dropped."""
        self.closing = True
        for job in [*self.pending, *self._inflight]:
            _settle(job, error=ShuttingDown("the server is shutting down; retry on its next start"))
        self.pending.clear()

    async def stop(self) -> None:
        self.close()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=False, cancel_futures=True)

    def check_room(self) -> None:
        """QueueFull when max_queue jobs wait already (ShuttingDown once close() was called)."""
        if self.closing:
            raise ShuttingDown("the server is shutting down; retry on its next start")
        if len(self.pending) >= self.max_queue:
            self.stats.refused += 1
            raise QueueFull(f"the server's queue holds {self.max_queue} requests (--max-queue); retry shortly")

    async def submit(self, key: Hashable, items: list[Any], run: Run, split: bool = True) -> list[Any]:
        """run(items + other jobs' items)[this job's slice]; QueueFull at once when max_queue jobs wait. A job of
        more than max_batch_size items runs max_batch_size at a time, other jobs between (unless split=False)."""
        self.check_room()
        job = _Job(key, list(items), run, asyncio.get_running_loop().create_future(), split=split)
        self.pending.append(job)
        self._wakeup.set()
        return await job.future

    async def _loop(self) -> None:
        while True:
            if not self.pending:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            first = self.pending[0]
            if self.enabled and self._busy:
                await self._gather(first)
            batch = self._take(first)
            await self._call(batch)

    async def _gather(self, first: _Job) -> None:
        """Wait until max_wait has passed since the oldest job arrived or, if it arrived while the model was busy,
        since the model became free; or until its key has max_batch_size items waiting. Counting from the end of
        the last call keeps concurrent clients in one batch: the requests that wait through a call would otherwise
        go at once, in a small call, while the clients the call answered send their next requests (each call then
        contends for the interpreter with the event loop's work for the other group)."""
        began = max(first.arrived, self._free_at)
        while True:
            waiting = sum(len(j.items) for j in self.pending if j.key == first.key)
            left = began + self.max_wait - time.monotonic()
            if waiting >= self.max_batch_size or left <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=left)
            except asyncio.TimeoutError:
                return

    def _take(self, first: _Job) -> list[tuple[_Job, int]]:
        """(job, how many of its items) for the next call: the oldest job's next max_batch_size items when it has
        more (a long job alone; the rest of it goes back to the end of the queue), else all of it and, batching
        on, the following jobs of its key while they fit max_batch_size items."""
        self.pending.popleft()
        if first.future.cancelled():  # a client that went away is not served
            return []
        if first.split and len(first.left) > self.max_batch_size:
            return [(first, self.max_batch_size)]
        batch, size = [(first, len(first.left))], len(first.left)
        if self.enabled:
            for job in list(self.pending):
                if job.key == first.key and size + len(job.left) <= self.max_batch_size and not job.future.cancelled():
                    batch.append((job, len(job.left)))
                    size += len(job.left)
                    self.pending.remove(job)
        return batch

    async def _call(self, taken: list[tuple[_Job, int]]) -> None:
        if not taken:
            return
        loop = asyncio.get_running_loop()
        batch = [job for job, _ in taken]
        items = [item for job, n in taken for item in job.left[:n]]
        self._busy = len(batch) > 1 or bool(self.pending)
        self.stats.jobs += sum(not job.done for job in batch)
        self.stats.items += len(items)
        self.stats.calls += 1
        self.stats.largest = max(self.stats.largest, len(batch))
        self.running, self._inflight = True, batch
        try:
            results = await loop.run_in_executor(self.executor, batch[0].run, items)
            if len(results) != len(items):
                raise RuntimeError(f"a batch of {len(items)} items gave {len(results)} results")
        except Exception as err:  # noqa: BLE001 - every error goes to its request, never to the loop
            release_memory()  # a failed call's tensors are garbage now: give the pages back
            if len(taken) == 1:
                _settle(batch[0], error=err)
                return
            for job in batch:  # find whose items failed: each job alone
                self.stats.calls += 1
                try:
                    _settle(job, job.done + await loop.run_in_executor(self.executor, job.run, job.left))
                except Exception as alone:  # noqa: BLE001
                    _settle(job, error=alone)
            return
        finally:
            self.running, self._inflight = False, []
            self._free_at = time.monotonic()
        start = 0
        for job, n in taken:
            job.done += results[start:start + n]
            start += n
            if len(job.done) < len(job.items) and not job.future.done():  # the rest: after the jobs that came meanwhile
                self.pending.append(job)
            else:
                _settle(job, job.done)


def release_memory() -> None:
    """Collect the garbage a failed call left and hand freed heap pages back to the system (glibc keeps them
    otherwise: a failed request of gigabytes would leave the process that large)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def _settle(job: _Job, results: list[Any] | None = None, error: BaseException | None = None) -> None:
    if job.future.done():
        return
    if error is not None:
        job.future.set_exception(error)
    else:
        job.future.set_result(results)

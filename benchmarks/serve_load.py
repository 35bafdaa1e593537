"""Load on `maskplay serve`: throughput and p50 / p99 latency at 1, 8, 32 and 64 concurrent clients, dynamic
batching on and off, in one run.

Two servers start on free ports of this machine (loopback only): one with dynamic batching (--max-batch-size,
--max-wait-ms), one with --no-batching (one model call per request, as it arrives). For each client count, each
server gets --seconds of load, in --rounds turns that alternate (on, off, off, on, ...: a change in the
machine's other load hits both; the median round's throughput is reported, p50 the median round's, p99 the worst
round's): N asyncio clients, each sending one request at a time - one sentence to POST /v1/score (or
/v1/embeddings with --endpoint embeddings) - and sending the next as soon as the answer comes, each on its own
keep-alive connection (a bare asyncio HTTP/1.1 client: httpx would cost the shared cores more than the server).
Throughput is the requests answered per second; latency is each request's time from sending to the whole
answer. The clients run in this process, on the same cores as the server: that is part of what is measured.
Every answer is checked (status 200, its sentence's text back).

--mixed: long and short requests together. Two servers of the same model: one as `maskplay serve`
runs by default (a request of more than --max-batch-size sentences runs in parts, other requests between them),
one with --max-batch-size as large as a long request, so that it runs whole (how every request ran before the
split: the baseline). Each gets --seconds of --long-clients sending /v1/score requests of --long-sentences sentences
and --clients (the first count) sending one sentence each; reported: the short requests' latency percentiles on
each server and their ratio, and the long requests answered.

    .venv/bin/python benchmarks/serve_load.py --model tta-mini-wiki --seconds 5
    .venv/bin/python benchmarks/serve_load.py --mixed --clients 4 --long-clients 2 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [
    "the cat sat on the mat .", "paris is the capital of france .", "he plays the guitar in a band .",
    "the river flows into the sea near the old harbour .", "she wrote a book about the birds of the island .",
    "the election was held in may and the party lost two seats .", "the team won the cup in 1998 .",
    "the church was built in the twelfth century and rebuilt after the fire .", "he was born in a small village .",
    "the album reached number three on the charts .", "the bridge carries the road over the railway .",
    "the species is found in the forests of central africa .",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model: str, extra: list[str], threads: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-m", "maskplay", "serve", model, "--port", str(port), "--log-level",
                             "warning", "--max-queue", "4096", *extra], env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server {' '.join(extra)} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("a server did not answer /health within 180 s")


class Connection:
    """A bare HTTP/1.1 keep-alive connection on asyncio streams: a client that costs the shared cores far less
    than httpx per request, so that the figures are the server's."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        data = await self.reader.readexactly(int(length.group(1)))
        return int(head.split(b" ", 2)[1]), data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(url: str, path: str, clients: int, seconds: float) -> dict[str, float]:
    """`clients` loops of request-after-answer for `seconds`; the answered requests' latencies."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def one(k: int) -> None:
        nonlocal errors
        connection, n = Connection(url), k
        try:
            while time.perf_counter() < deadline:
                sentence = SENTENCES[n % len(SENTENCES)]
                n += clients
                sent = time.perf_counter()
                status, data = await connection.post(path, json.dumps({"input": sentence}).encode())
                if status != 200 or (path == "/v1/score" and json.loads(data)["data"][0]["text"] != sentence):
                    errors += 1
                    continue
                latencies.append(time.perf_counter() - sent)
        finally:
            connection.close()

    began = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(clients)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {"requests": len(latencies), "errors": errors, "throughput": len(latencies) / elapsed,
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]}


def percentiles(latencies: list[float]) -> dict[str, float]:
    latencies = sorted(latencies)

    def at(q: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {"requests": len(latencies), "p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99),
            "max_ms": 1000 * latencies[-1]}


async def mixed(url: str, short_clients: int, long_clients: int, long_sentences: int, seconds: float) -> dict:
    """Short (one sentence) and long (`long_sentences` sentences) /v1/score requests at once for `seconds`."""
    short: list[float] = []
    long: list[float] = []
    deadline = time.perf_counter() + seconds
    body = json.dumps({"input": [SENTENCES[k % len(SENTENCES)] for k in range(long_sentences)],
                       "explain": False}).encode()

    async def client(k: int, is_long: bool) -> None:
        connection = Connection(url)
        try:
            while time.perf_counter() < deadline:
                data = body if is_long else json.dumps({"input": SENTENCES[k % len(SENTENCES)]}).encode()
                sent = time.perf_counter()
                status, answer = await connection.post("/v1/score", data)
                if status != 200:
                    raise SystemExit(f"a {'long' if is_long else 'short'} request failed: {status} {answer[:200]!r}")
                (long if is_long else short).append(time.perf_counter() - sent)
                k += 1
        finally:
            connection.close()

    await asyncio.gather(*(client(k, False) for k in range(short_clients)),
                         *(client(k, True) for k in range(long_clients)))
    return {"short": percentiles(short), "long_requests": len(long),
            "long_p50_ms": 1000 * statistics.median(long) if long else None}


def run_mixed(args: argparse.Namespace) -> None:
    short_clients = int(args.clients.split(",")[0])
    common = ["--device", args.device, "--precision", args.precision]
    servers = {"split": start(args.model, [*common, "--max-batch-size", str(args.max_batch_size)], args.threads),
               "whole": start(args.model, [*common, "--max-batch-size", str(args.long_sentences)], args.threads)}
    rows: dict[str, dict] = {}
    try:
        for _, url in servers.values():
            asyncio.run(load(url, "/v1/score", 2, 1.0))  # warm-up
        for mode in ("split", "whole"):
            rows[mode] = asyncio.run(mixed(servers[mode][1], short_clients, args.long_clients, args.long_sentences,
                                           args.seconds))
            print(mode, json.dumps(rows[mode]), flush=True)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=60)
    print(f"\n{machine()}; {args.model} ({args.precision}, {args.threads} torch thread per server), POST /v1/score: "
          f"{short_clients} clients of one sentence and {args.long_clients} of {args.long_sentences} sentences, "
          f"{args.seconds:g} s per server; split: --max-batch-size {args.max_batch_size}, whole: --max-batch-size "
          f"{args.long_sentences}\n")
    print("| server | short requests | p50 ms | p90 ms | p99 ms | max ms | long requests answered |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, r in rows.items():
        s = r["short"]
        print(f"| {mode} | {s['requests']} | {s['p50_ms']:.0f} | {s['p90_ms']:.0f} | {s['p99_ms']:.0f} | "
              f"{s['max_ms']:.0f} | {r['long_requests']} |")
    whole, split = rows["whole"]["short"], rows["split"]["short"]
    print(f"\nshort-request p50 whole / split: {whole['p50_ms'] / split['p50_ms']:.1f}x, p99: "
          f"{whole['p99_ms'] / split['p99_ms']:.1f}x")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "args": vars(args), "rows": rows}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tta-mini-wiki")
    parser.add_argument("--endpoint", choices=["score", "embeddings"], default="score")
    parser.add_argument("--clients", default="1,8,32,64", help="comma-separated client counts")
    parser.add_argument("--seconds", type=float, default=6.0, help="load per cell, split into --rounds")
    parser.add_argument("--rounds", type=int, default=3,
                        help="each cell's load in this many rounds, the modes alternating; the median round counts")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads per server (OMP_NUM_THREADS; default 1: two servers and the clients "
                             "share the cores)")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    parser.add_argument("--mixed", action="store_true", help="long and short requests together (see above)")
    parser.add_argument("--long-clients", type=int, default=2, help="--mixed: clients sending long requests")
    parser.add_argument("--long-sentences", type=int, default=2000, help="--mixed: sentences per long request")
    args = parser.parse_args()
    if args.mixed:
        run_mixed(args)
        return
    counts = [int(c) for c in args.clients.split(",")]
    path = f"/v1/{args.endpoint}"
    common = ["--device", args.device, "--precision", args.precision]
    servers = {"on": start(args.model, [*common, "--max-batch-size", str(args.max_batch_size), "--max-wait-ms",
                                        str(args.max_wait_ms)], args.threads),
               "off": start(args.model, [*common, "--no-batching"], args.threads)}
    rows = []
    try:
        for _, url in servers.values():  # warm-up: the first calls of a process are slow
            asyncio.run(load(url, path, 4, 1.0))
        for clients in counts:
            row = {"clients": clients}
            runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
            for r in range(args.rounds):  # on, off, off, on, ...: neither mode always runs first
                for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                    runs[mode].append(asyncio.run(load(servers[mode][1], path, clients, args.seconds / args.rounds)))
                    if runs[mode][-1]["errors"]:
                        raise SystemExit(f"{runs[mode][-1]['errors']} failed requests at {clients} clients, "
                                         f"batching {mode}")
            for mode, got in runs.items():  # the median round's throughput; latencies over all rounds
                row[mode] = {"throughput": statistics.median(g["throughput"] for g in got),
                             "requests": sum(g["requests"] for g in got),
                             "p50_ms": statistics.median(g["p50_ms"] for g in got),
                             "p99_ms": max(g["p99_ms"] for g in got)}
            row["speedup"] = row["on"]["throughput"] / row["off"]["throughput"]
            rows.append(row)
            print(json.dumps(row), flush=True)
        batches = httpx.get(servers["on"][1] + "/health").json()["batching"]
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    print(f"\n{machine()}; {args.model} ({args.precision}, {args.threads} torch thread per server), POST {path}, "
          f"one sentence per request, {args.seconds:g} s per cell in {args.rounds} rounds; "
          f"batching on: --max-batch-size {args.max_batch_size} --max-wait-ms {args.max_wait_ms:g} "
          f"({batches['requests']} requests in {batches['model_calls']} model calls, at most {batches['largest_batch']}"
          f" per call)\n")
    print("| clients | on: req/s | on: p50 ms | on: p99 ms | off: req/s | off: p50 ms | off: p99 ms | on / off |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        on, off = r["on"], r["off"]
        print(f"| {r['clients']} | {on['throughput']:.0f} | {on['p50_ms']:.1f} | {on['p99_ms']:.1f} | "
              f"{off['throughput']:.0f} | {off['p50_ms']:.1f} | {off['p99_ms']:.1f} | {r['speedup']:.2f}x |")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "args": vars(args), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

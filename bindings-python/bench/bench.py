"""Benchmarks of the Python binding (timeit; no pytest):

1. the acquire -> verify -> release cycle (3 receipts, each handed to a sink that drops it)
   on a resource run released back to ``ready``: over the Rust MemoryLeaseStore (driven
   inside Rust) through the blocking and the asyncio API, and over pure-Python store objects
   forwarding to a memory store: ``execute`` handing each ``StoreRequest`` on as it is
   (blocking and asyncio), and ``execute_json`` handing on its text (blocking and asyncio);
2. digest of small, medium and large values: ``heart_fleet.digest`` (the reference's
   canonical JSON) against ``hashlib.sha256(json.dumps(v, sort_keys=True))`` (a plain
   sorted-keys digest, not byte-compatible with the reference, as a floor).

    python bench/bench.py            # about 1 s per row
    python bench/bench.py --seconds 0.3
    python bench/bench.py --native-cycle ../target/release/examples/cycle_profile

``--native-cycle`` also times the same cycle in the native core (the example
``core/examples/cycle_profile``, built with ``cargo build --release -p heart-fleet-core
--example cycle_profile``) in the same run, as a subprocess, and prints each cycle's ratio to it.

Prints a Markdown table (for the root BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

import heart_fleet as hf

T0 = "2026-07-30T00:00:00.000Z"


def drop(_r: hf.HeartReceipt) -> None:
    pass


def measure(fn: Callable[[int], None], seconds: float) -> tuple[float, float]:
    """(median, min) microseconds per call over 5 rounds of ~seconds/5 each."""
    n = 1
    while True:  # calibrate
        t = time.perf_counter()
        fn(n)
        dt = time.perf_counter() - t
        if dt > 0.05:
            break
        n *= 2
    per_round = max(1, int(n * (seconds / 5) / dt))
    samples = []
    for _ in range(5):
        t = time.perf_counter()
        fn(per_round)
        samples.append((time.perf_counter() - t) / per_round * 1e6)
    return statistics.median(samples), min(samples)


def sync_cycle(heart: hf.HeartFleet, run_id: str) -> Callable[[int], None]:
    def go(n: int) -> None:
        for _ in range(n):
            a = heart.acquire(run_id, "worker-A", 60)
            assert a.fence is not None
            assert heart.verify_fence(a.fence)
            assert heart.release(a.fence, "ready") is not None

    return go


def async_cycle(heart: hf.HeartFleet, run_id: str) -> Callable[[int], None]:
    async def cycles(n: int) -> None:
        for _ in range(n):
            a = await heart.acquire_async(run_id, "worker-A", 60)
            assert a.fence is not None
            assert await heart.verify_fence_async(a.fence)
            assert await heart.release_async(a.fence, "ready") is not None

    loop = asyncio.new_event_loop()
    return lambda n: loop.run_until_complete(cycles(n))


def native_cycle(binary: str, seconds: float) -> tuple[float, float]:
    """(median, min) microseconds per cycle of the native core: 5 runs of the example, each
    timed from outside (its start-up is a millisecond against ~0.1 s of cycles)."""
    n = max(10_000, int(seconds / 5 / 2e-6))
    samples = []
    for _ in range(5):
        t = time.perf_counter()
        out = subprocess.run([binary, str(n)], check=True, capture_output=True, text=True).stdout
        samples.append((time.perf_counter() - t) / n * 1e6)
        if out.split()[0] != str(n):
            raise SystemExit(f"{binary}: {out.strip()} (expected {n} cycles)")
    return statistics.median(samples), min(samples)


def bare(heart: hf.HeartFleet, run_id: str) -> Callable[[int], None]:
    nf = heart._native
    acquire = json.dumps({"runId": run_id, "owner": "worker-A", "ttlSeconds": 60})

    def go(n: int) -> None:
        for _ in range(n):
            step = json.loads(nf.begin("acquire", acquire))
            fence = json.dumps({"fence": step["ok"]["fence"]})
            nf.begin("verify", fence)
            nf.begin("release", fence[:-1] + ',"nextStatus":"ready"}')

    return go


class SyncTyped:
    """A store object with ``execute``: each StoreRequest forwarded as it is."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
        return self.memory.execute(request)


class AsyncTyped:
    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    async def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
        return self.memory.execute(request)


class SyncText:
    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    def execute_json(self, text: str) -> str:
        return self.memory.execute_json(text)


class AsyncText:
    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    async def execute_json(self, text: str) -> str:
        return self.memory.execute_json(text)


def fleet(store: Any) -> tuple[hf.HeartFleet, str]:
    heart = hf.HeartFleet(store, on_receipt=drop)
    run = asyncio.run(heart.ensure_resource_run_async("bench", "cycle")).run
    return heart, run.id


def values() -> dict[str, Any]:
    small = {"b": 1, "a": [1, 2], "c": "x"}
    medium = {f"k{i}": {"n": i, "s": "é" * 5, "l": [i, i + 0.5, None, True]} for i in range(20)}
    large = {f"k{i}": {"n": i, "s": "text" * 10, "l": list(range(20)), "o": {"x": i / 3}} for i in range(300)}
    return {"small": small, "medium (20 keys)": medium, "large (300 keys)": large}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--native-cycle", metavar="BIN", help="the core's cycle_profile example, timed in the same run")
    args = p.parse_args()
    s = args.seconds
    rows: list[tuple[str, float, float]] = []
    if args.native_cycle:
        rows.append(("cycle, the native core (cycle_profile, same run)", *native_cycle(args.native_cycle, s)))

    heart, rid = fleet(hf.MemoryLeaseStore(T0))
    rows.append(("cycle, MemoryLeaseStore (Rust), blocking API", *measure(sync_cycle(heart, rid), s)))
    heart, rid = fleet(hf.MemoryLeaseStore(T0))
    rows.append(("cycle, bare native calls (NativeFleet.begin x3, JSON text, no Python API layer)", *measure(bare(heart, rid), s)))
    heart, rid = fleet(hf.MemoryLeaseStore(T0))
    rows.append(("cycle, MemoryLeaseStore (Rust), asyncio API", *measure(async_cycle(heart, rid), s)))
    heart, rid = fleet(SyncTyped(hf.MemoryLeaseStore(T0)))
    rows.append(("cycle, Python store object (blocking execute), blocking API", *measure(sync_cycle(heart, rid), s)))
    heart, rid = fleet(AsyncTyped(hf.MemoryLeaseStore(T0)))
    rows.append(("cycle, Python store object (async execute), asyncio API", *measure(async_cycle(heart, rid), s)))
    heart, rid = fleet(SyncText(hf.MemoryLeaseStore(T0)))
    rows.append(("cycle, Python store object (blocking execute_json), blocking API", *measure(sync_cycle(heart, rid), s)))
    heart, rid = fleet(AsyncText(hf.MemoryLeaseStore(T0)))
    rows.append(("cycle, Python store object (async execute_json), asyncio API", *measure(async_cycle(heart, rid), s)))
    for name, v in values().items():

        def ours(n: int, v: Any = v) -> None:
            for _ in range(n):
                hf.digest(v)

        def base(n: int, v: Any = v) -> None:
            for _ in range(n):
                hashlib.sha256(json.dumps(v, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

        rows.append((f"digest {name}: heart_fleet.digest", *measure(ours, s)))
        rows.append((f"digest {name}: hashlib.sha256(json.dumps(sort_keys=True))", *measure(base, s)))

    print(f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print()
    native = rows[0][1] if args.native_cycle else None
    print("| task | median µs/op | min µs/op | ops/s (median) | cycle ÷ native cycle |")
    print("|---|---:|---:|---:|---:|")
    for name, med, mn in rows:
        ratio = f"{med / native:.1f}×" if native and name.startswith("cycle") else ""
        print(f"| {name} | {med:.2f} | {mn:.2f} | {1e6 / med:,.0f} | {ratio} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""A store object's lease cycle against the Rust memory store's, interleaved in one process:
issue 16's "a Python store object cycle <= 2x the Rust-memory cycle", in time.

    python bench/ratio.py [--rounds 40] [--cycles 2000]

Each round times ``--cycles`` acquire -> verify -> release cycles of each of the four
fleets below, one after the other (the order rotated every round), so that a slow phase of
the machine falls on all of them; it prints each fleet's median microseconds per cycle and the
median over the rounds of each store object's ratio to the memory store in the same API,
within the same round. The fleets: the Rust ``MemoryLeaseStore`` (blocking and asyncio API)
and a store object whose ``execute`` forwards each ``StoreRequest`` to a memory store
(blocking, and ``async def execute`` under the asyncio API), as in ``bench.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Callable

import heart_fleet as hf
from bench import T0, AsyncTyped, SyncTyped, async_cycle, fleet, sync_cycle


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--cycles", type=int, default=2000)
    args = p.parse_args()
    runs: dict[str, Callable[[int], None]] = {
        "memory, blocking": sync_cycle(*fleet(hf.MemoryLeaseStore(T0))),
        "store object, blocking": sync_cycle(*fleet(SyncTyped(hf.MemoryLeaseStore(T0)))),
        "memory, asyncio": async_cycle(*fleet(hf.MemoryLeaseStore(T0))),
        "store object, asyncio": async_cycle(*fleet(AsyncTyped(hf.MemoryLeaseStore(T0)))),
    }
    for run in runs.values():
        run(args.cycles)  # warm-up
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {"blocking": [], "asyncio": []}
    for r in range(args.rounds):
        this_round = {}
        for name in names[r % 4 :] + names[: r % 4]:
            t = time.perf_counter()
            runs[name](args.cycles)
            this_round[name] = (time.perf_counter() - t) / args.cycles * 1e6
            times[name].append(this_round[name])
        for api in ratios:
            ratios[api].append(this_round[f"store object, {api}"] / this_round[f"memory, {api}"])
    print(f"{args.rounds} rounds of {args.cycles} cycles each")
    print("| fleet | median µs per cycle |\n|---|---:|")
    for name in names:
        print(f"| {name} | {statistics.median(times[name]):.2f} |")
    for api, rs in ratios.items():
        print(f"store object ÷ memory store, {api} API: median {statistics.median(rs):.2f}× (rounds {min(rs):.2f}-{max(rs):.2f}×)")


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()

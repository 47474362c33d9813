"""Runs N acquire -> verify -> release cycles over one kind of store, for counting the
instructions a cycle costs (the machine's throughput varies by a third from run to run;
instruction counts do not):

    for n in 1000 5000; do
      valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python bindings-python/bench/cycles.py typed $n 2>&1 | grep 'I *refs'
    done

(the difference of the two counts over 4,000 is one cycle). Kinds: ``memory`` and
``memory-async`` (the Rust MemoryLeaseStore, blocking and asyncio API), ``typed`` and
``typed-async`` (a store object whose ``execute`` forwards each StoreRequest to the memory
store), ``text`` and ``text-async`` (one whose ``execute_json`` forwards the request's text).
Under valgrind SHA-256 runs without the CPU's SHA instructions, about 30 K instructions of a
cycle's three receipt digests that a real run does not pay.
"""

from __future__ import annotations

import asyncio
import sys

import heart_fleet as hf
from bench import T0, AsyncText, AsyncTyped, SyncText, SyncTyped


def main() -> None:
    kind, n = sys.argv[1], int(sys.argv[2])
    memory = hf.MemoryLeaseStore(T0)
    wrap = {"memory": None, "memory-async": None, "typed": SyncTyped, "typed-async": AsyncTyped, "text": SyncText, "text-async": AsyncText}
    if kind not in wrap:
        raise SystemExit(f"cycles.py: the kind is one of {', '.join(wrap)}, not {kind!r}")
    store_class = wrap[kind]
    heart = hf.HeartFleet(memory if store_class is None else store_class(memory), on_receipt=lambda r: None)
    run_id = asyncio.run(heart.ensure_resource_run_async("bench", "cycle")).run.id
    if kind.endswith("-async"):

        async def cycles() -> None:
            for _ in range(n):
                a = await heart.acquire_async(run_id, "worker-A", 60)
                assert a.fence is not None and await heart.verify_fence_async(a.fence)
                assert await heart.release_async(a.fence, "ready") is not None

        asyncio.new_event_loop().run_until_complete(cycles())
    else:
        for _ in range(n):
            a = heart.acquire(run_id, "worker-A", 60)
            assert a.fence is not None and heart.verify_fence(a.fence)
            assert heart.release(a.fence, "ready") is not None


if __name__ == "__main__":
    main()

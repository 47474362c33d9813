"""The acquire -> verify -> release cycle over the SQL stores the package ships, for timing
and for counting the instructions a cycle costs in this process:

    python bindings-python/bench/sql_stores.py KIND N

runs 200 warm-up cycles, then N cycles, and prints the microseconds per cycle. Kinds:
``sqlite`` and ``sqlite-async`` (``SqliteLeaseStore`` / ``AsyncSqliteLeaseStore`` on a
fresh file in a temporary directory, blocking and asyncio API), ``postgres`` and
``postgres-async`` (``PsycopgLeaseStore`` / ``AsyncPsycopgLeaseStore`` on
``$DATABASE_URL``). For instructions, run it under cachegrind at two counts and divide the
difference by the difference of the counts (start-up costs the same at any count):

    for n in 1000 3000; do
      valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python bindings-python/bench/sql_stores.py sqlite $n 2>&1 | grep 'I *refs'
    done

Under valgrind SHA-256 runs without the CPU's SHA instructions, and the time printed is
valgrind's. The database's own work in another process (PostgreSQL) is not counted.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import heart_fleet as hf

KINDS = ("sqlite", "sqlite-async", "postgres", "postgres-async")


def store_of(kind: str, loop: asyncio.AbstractEventLoop) -> Any:
    if kind.startswith("sqlite"):
        path = os.path.join(tempfile.mkdtemp(prefix="heart-bench-"), "fleet.db")
        return hf.AsyncSqliteLeaseStore(path) if kind.endswith("-async") else hf.SqliteLeaseStore(path)
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("sql_stores.py: the postgres kinds need DATABASE_URL")
    if kind.endswith("-async"):
        return loop.run_until_complete(hf.AsyncPsycopgLeaseStore.connect(url))
    store = hf.PsycopgLeaseStore.connect(url)
    store.migrate()
    return store


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in KINDS:
        raise SystemExit(f"usage: sql_stores.py {{{','.join(KINDS)}}} N")
    kind, n = sys.argv[1], int(sys.argv[2])
    loop = asyncio.new_event_loop()  # the asyncio kinds' one loop, the connection's too
    store = store_of(kind, loop)
    heart = hf.HeartFleet(store, on_receipt=lambda r: None)
    if kind.endswith("-async"):
        if kind.startswith("postgres"):
            loop.run_until_complete(store.migrate())
        run_id = loop.run_until_complete(heart.ensure_resource_run_async("bench", f"cycle-{os.getpid()}")).run.id

        async def cycles(count: int) -> None:
            for _ in range(count):
                a = await heart.acquire_async(run_id, "worker-A", 60)
                assert a.fence is not None and await heart.verify_fence_async(a.fence)
                assert await heart.release_async(a.fence, "ready") is not None

        go: Callable[[int], object] = lambda count: loop.run_until_complete(cycles(count))  # noqa: E731
    else:
        run_id = heart.ensure_resource_run("bench", f"cycle-{os.getpid()}").run.id

        def go(count: int) -> None:
            for _ in range(count):
                a = heart.acquire(run_id, "worker-A", 60)
                assert a.fence is not None and heart.verify_fence(a.fence)
                assert heart.release(a.fence, "ready") is not None

    go(200)
    t = time.perf_counter()
    go(n)
    print(f"{kind}: {(time.perf_counter() - t) / n * 1e6:.1f} us per cycle ({n} cycles)")


if __name__ == "__main__":
    main()

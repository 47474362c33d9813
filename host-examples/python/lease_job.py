"""A lease-guarded job on SQLite or PostgreSQL, with the heart-fleet Python package.

    python lease_job.py sqlite:heart-fleet.db
    python lease_job.py postgres://heart:heart@127.0.0.1:5432/heart_test
    python lease_job.py --async postgres://...          # the asyncio API over psycopg's AsyncConnection

The job finds or creates its resource run (``deterministic_resource_id("report",
"nightly")``), runs under a lease (a heartbeat renews it), sends its one irreversible
message at most once through the durable outbox, and releases the run back to ``ready``.
Run it twice at once (``--hold-ms 2000``) and the second reports ``lease-held``. Prints the
receipts as JSON lines, then one summary line; exits 0 when the job ran, 1 when it could not
get the lease, 2 when the store failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from typing import Any

import heart_fleet as hf

OWNER = f"lease-job:{socket.gethostname()}:{os.getpid()}"


def open_store(url: str) -> Any:
    if url.startswith("sqlite:"):
        return hf.SqliteLeaseStore(url[len("sqlite:") :])  # created and migrated on first use
    if url.startswith(("postgres://", "postgresql://")):
        store = hf.PsycopgLeaseStore.connect(url)
        store.migrate()
        return store
    raise SystemExit(f"lease_job: unknown store {url!r} (sqlite:PATH or postgres://...)")


def summary(heart: hf.HeartFleet, result: hf.ExecuteResult) -> int:
    for r in heart.receipts():
        print(json.dumps(r.to_dict()))
    m = heart.metrics
    print(json.dumps({**result.to_dict(), "metrics": {"acquireWins": m.acquire_wins, "renews": m.renews, "effectCommits": m.effect_commits}}))
    return 0 if result.ran else 1


def blocking(url: str, hold_ms: int) -> int:
    store = open_store(url)
    heart = hf.HeartFleet(store)
    ledger = hf.DurableEffectLedger(heart)
    run = heart.ensure_resource_run("report", "nightly").run
    day = time.strftime("%Y-%m-%d", time.gmtime())

    def job(lease: hf.Lease) -> dict[str, Any]:
        time.sleep(hold_ms / 1000)
        sent = hf.send_once(
            heart,
            ledger,
            fence=lease.fence,
            channel="internal",
            effect_key=hf.effect_key("report-mail", {"day": day}),
            payload={"day": day},
            send=lambda ctx: {"queued": day, "epoch": ctx.epoch},  # the irreversible effect
        )
        lease.raise_if_lost()
        return {"sent": sent.sent, "reason": sent.reason}

    result = hf.execute_with_lease(heart, run.id, OWNER, 30, job, release_to_ready=True)
    return summary(heart, result)


async def non_blocking(url: str, hold_ms: int) -> int:
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("lease_job: --async needs a postgres:// store")
    store = await hf.AsyncPsycopgLeaseStore.connect(url)
    try:
        await store.migrate()
        heart = hf.HeartFleet(store)
        ledger = hf.DurableEffectLedger(heart)
        run = (await heart.ensure_resource_run_async("report", "nightly")).run
        day = time.strftime("%Y-%m-%d", time.gmtime())

        async def job(lease: hf.AsyncLease) -> dict[str, Any]:
            await asyncio.sleep(hold_ms / 1000)
            sent = await hf.send_once_async(
                heart,
                ledger,
                fence=lease.fence,
                channel="internal",
                effect_key=hf.effect_key("report-mail", {"day": day}),
                payload={"day": day},
                send=lambda ctx: {"queued": day, "epoch": ctx.epoch},
            )
            return {"sent": sent.sent, "reason": sent.reason}

        result = await hf.execute_with_lease_async(heart, run.id, OWNER, 30, job, release_to_ready=True)
        return summary(heart, result)
    finally:
        await store.close()


def main() -> int:
    p = argparse.ArgumentParser(description="A lease-guarded job with heart-fleet.")
    p.add_argument("store", help="sqlite:PATH or postgres://USER:PASSWORD@HOST:PORT/DB")
    p.add_argument("--async", dest="use_async", action="store_true", help="use the asyncio API (PostgreSQL)")
    p.add_argument("--hold-ms", type=int, default=0, help="how long the job works under the lease")
    a = p.parse_args()
    try:
        if a.use_async:
            return asyncio.run(non_blocking(a.store, a.hold_ms))
        return blocking(a.store, a.hold_ms)
    except hf.StoreUnavailableError as e:
        print(f"lease_job: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""The Python worker of ``heart-fleet fleet-chaos``: the heart_fleet wheel over psycopg
(PostgreSQL) or sqlite3 (a SQLite file), its receipts to heart_receipts, its effects through
send_once to the harness's receiver. The loop is the Rust worker's
(host-examples/src/chaos/worker.rs), step for step; everything comes from HEART_CHAOS_*
(started by the harness, not for people)."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

import heart_fleet as hf

MASK = (1 << 64) - 1


def env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        print(f"chaos worker: {name} is not set", file=sys.stderr)
        sys.exit(2)
    return value


class SplitMix64:
    """The Rust worker's rng."""

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK

    def below(self, n: int) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return (z ^ (z >> 31)) % n


RUNS = [r for r in env("HEART_CHAOS_RUNS").split(",") if r]
RECEIVER = env("HEART_CHAOS_RECEIVER")
OWNER = f"{env('HEART_CHAOS_NAME')}:{os.getpid()}"
TTL = int(env("HEART_CHAOS_TTL"))
WORK_S = int(env("HEART_CHAOS_WORK_MS")) / 1000
STOP = env("HEART_CHAOS_STOP")
TIMEOUT_MS = int(env("HEART_CHAOS_TIMEOUT_MS"))
URL = env("HEART_CHAOS_STORE")
rng = SplitMix64(int(env("HEART_CHAOS_SEED")))


def open_store() -> object:
    if URL.startswith("sqlite:"):
        from heart_fleet.sqlite import SqliteLeaseStore

        return SqliteLeaseStore(URL.removeprefix("sqlite:"), migrate=False)
    from heart_fleet.postgres import PsycopgLeaseStore

    while True:
        try:
            return PsycopgLeaseStore.connect(URL, statement_timeout_ms=TIMEOUT_MS, connect_timeout=3)
        except hf.HeartFleetError as e:  # the server may be restarting
            print(f"{OWNER}: {e}", file=sys.stderr)
            if os.path.exists(STOP):
                sys.exit(0)
            time.sleep(0.2)


store = open_store()
heart = hf.HeartFleet(store, on_receipt=store.receipt_sink())  # type: ignore[attr-defined]
ledger = hf.DurableEffectLedger(heart)


def heartbeat() -> None:
    if not heart.heartbeat_instance(OWNER):
        heart.register_instance(OWNER, pid=os.getpid())


def deliver(run: str, key: str, epoch: int | None) -> object:
    body = json.dumps({"run": run, "key": key, "owner": OWNER, "epoch": -1 if epoch is None else epoch}).encode()
    req = urllib.request.Request(f"{RECEIVER}/deliver", data=body, headers={"content-type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as res:
            return json.loads(res.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"receiver {e.code}: {e.read().decode(errors='replace')}") from None


def send(fence: hf.FencingToken, unit: int) -> bool:
    """One unit's effect; False: the lease is lost."""
    key = f"chaos:{fence.run_id}:{unit}"
    out = hf.send_once(
        heart,
        ledger,
        fence=fence,
        channel="internal",
        effect_key=key,
        payload={"run": fence.run_id, "unit": unit},
        send=lambda ctx: deliver(fence.run_id, key, ctx.epoch),
    )
    return bool(out.sent or out.reason == "deduped")


def one_round() -> None:
    heartbeat()
    run = RUNS[rng.below(len(RUNS))]
    acq = heart.acquire(run, OWNER, TTL)
    if not acq.acquired or acq.fence is None:
        time.sleep((20 + rng.below(60)) / 1000)
        return
    fence = acq.fence
    epoch = fence.epoch or 0
    for unit in [u for u in (epoch - 1, epoch) if u >= 1]:
        time.sleep(WORK_S)
        if os.path.exists(STOP):
            break
        heartbeat()
        renewed = heart.renew(fence, TTL)
        if renewed is None:
            return
        fence = renewed
        if not send(fence, unit):
            return
    heart.release(fence, "ready")


# A harness that died cannot create the stop file: a new parent means it is gone.
PARENT = os.getppid()
while not os.path.exists(STOP) and os.getppid() == PARENT:
    try:
        one_round()
    except Exception as e:  # a store failure, a refused send: the next round goes on
        print(f"{OWNER}: {type(e).__name__}: {e}", file=sys.stderr)
        time.sleep(0.2)
sys.exit(0)

"""Randomized differential test: the same seeded sequence of operations (acquire, renew,
release, verify, guard, send_once, reclaim, liveness, clock jumps, injected store failures)
gives the same results, receipts, counters and rows whether the store requests are answered
inside Rust (MemoryLeaseStore) or by a Python store object through the asyncio driving loop;
and every effect fires at most once per (run, effect key) on every run. (The core checks the
safety properties against a model with proptest; this proves the foreign-store path.)"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

import heart_fleet as hf
from conftest import T0

RUNS = ["r1", "r2"]
WORKERS = ["A", "B", "C"]


class AsyncStore:
    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return self.memory.execute(request)


def plan(seed: int, steps: int = 120) -> list[tuple[str, Any]]:
    rnd = random.Random(seed)
    out: list[tuple[str, Any]] = []
    for _ in range(steps):
        kind = rnd.choice(
            ["acquire", "acquire", "renew", "release", "verify", "guard", "send", "reclaim", "advance", "fail", "liveness"]
        )
        out.append((kind, (rnd.choice(RUNS), rnd.choice(WORKERS), rnd.randint(1, 90), rnd.randint(0, 1), rnd.random())))
    return out


async def play(seed: int, python_store: bool) -> dict[str, Any]:
    memory = hf.MemoryLeaseStore(T0)
    for rid in RUNS:
        memory.insert({"id": rid})
    for w in WORKERS:
        memory.insert_instance({"instance_id": w})
    heart = hf.HeartFleet(AsyncStore(memory) if python_store else memory, max_retries=3)
    ledger = hf.MemoryEffectLedger()
    durable = hf.DurableEffectLedger(heart)
    fences: dict[tuple[str, str], hf.FencingToken] = {}
    fired: dict[str, int] = {}
    log: list[Any] = []

    def effect_for(key: str) -> Any:
        # Effects are keyed per run (the ledger's key is (run_id, effect_key)).
        def effect(ctx: hf.EffectContext) -> str:
            fired[key] = fired.get(key, 0) + 1
            return key

        return effect

    for kind, (rid, w, n, k, x) in plan(seed):
        fence = fences.get((rid, w))
        try:
            if kind == "acquire":
                a = await heart.acquire_async(rid, w, n)
                if a.fence is not None:
                    fences[(rid, w)] = a.fence
                out: Any = a.to_dict()
            elif kind == "renew" and fence is not None:
                f2 = await heart.renew_async(fence, n)
                if f2 is not None:
                    fences[(rid, w)] = f2
                out = f2 and f2.to_dict()
            elif kind == "release" and fence is not None:
                out = await heart.try_release_async(fence, "ready" if x < 0.5 else "failed")
                out = out.to_dict()
            elif kind == "verify" and fence is not None:
                out = await heart.verify_fence_async(fence)
            elif kind == "guard" and fence is not None:
                key = f"g{k}"
                out = (await hf.guard_irreversible_async(heart, fence, ledger, key, effect_for(f"{rid}/{key}"))).to_dict()
            elif kind == "send" and fence is not None:
                key = f"s{k}"
                out = (
                    await hf.send_once_async(
                        heart,
                        durable,
                        fence=fence,
                        channel="internal",
                        effect_key=key,
                        payload={"k": k},
                        send=effect_for(f"{rid}/{key}"),
                    )
                ).to_dict()
            elif kind == "reclaim":
                out = (await heart.reclaim_expired_async()).to_dict()
            elif kind == "liveness":
                out = (await heart.reclaim_dead_instance_runs_async(ttl_ms=60_000)).to_dict()
            elif kind == "advance":
                memory.advance(n * 1000 if x < 0.8 else -1000)
                out = None
            elif kind == "fail":
                memory.fail_after("*", k, 1)
                out = None
            else:
                out = "skipped"
        except hf.HeartFleetError as e:
            out = {"error": e.code}
        log.append((kind, out))
    assert all(v == 1 for v in fired.values()), fired
    return {
        "log": log,
        "receipts": [r.to_dict() for r in heart.receipts()],
        "metrics": heart.metrics.to_dict(),
        "runs": [r.to_dict() for r in memory.runs()],
        "intents": [i.to_dict() for i in memory.intents()],
        "fired": fired,
    }


@pytest.mark.parametrize("seed", range(12))
def test_memory_and_python_store_paths_agree(seed: int) -> None:
    native = asyncio.run(play(seed, python_store=False))
    foreign = asyncio.run(play(seed, python_store=True))
    assert foreign["log"] == native["log"]
    assert foreign["receipts"] == native["receipts"]
    assert foreign["metrics"] == native["metrics"]
    assert foreign["runs"] == native["runs"]
    assert foreign["intents"] == native["intents"]
    assert foreign["fired"] == native["fired"]
    assert all(hf.verify_receipt(r) for r in native["receipts"])
    # The sequence did exercise the interesting paths.
    kinds = {k for k, out in native["log"] if out not in (None, "skipped")}
    assert {"acquire", "reclaim"} <= kinds


def test_the_sequences_reach_dedupes_quarantines_and_store_failures() -> None:
    totals: dict[str, int] = {}
    errors: set[str] = set()
    for seed in range(12):
        r = asyncio.run(play(seed, python_store=False))
        for k, v in r["metrics"].items():
            totals[k] = totals.get(k, 0) + v
        errors |= {out["error"] for _, out in r["log"] if isinstance(out, dict) and "error" in out}
    assert totals["effectDedupes"] > 0 and totals["effectCommits"] > 0
    assert totals["quarantines"] > 0 and totals["reclaims"] > 0 and totals["renews"] > 0
    assert "store-unavailable" in errors

"""A typed use of the public API; CI checks it with ``mypy --strict`` against the installed
wheel (its ``py.typed`` and stubs). Not collected by pytest."""

from __future__ import annotations

import asyncio

import heart_fleet as hf


def blocking(heart: hf.HeartFleet) -> int:
    a: hf.AcquireResult = heart.acquire("r1", "w", 60)
    if not a.acquired or a.fence is None:
        return 0
    fence: hf.FencingToken = a.fence
    ok: bool = heart.verify_fence(fence)
    nxt: hf.FencingToken | None = heart.renew(fence, 60)
    row: hf.RunRow | None = heart.release(nxt or fence, "completed")
    m: hf.Metrics = heart.metrics
    receipts: list[hf.HeartReceipt] = heart.receipts()
    g: hf.GuardResult = hf.guard_irreversible(heart, fence, hf.MemoryEffectLedger(), "k", lambda ctx: ctx.epoch)
    r: hf.ExecuteResult = hf.execute_with_lease(heart, "r2", "w", 60, lambda lease: lease.fence.owner)
    return int(ok) + m.acquire_wins + len(receipts) + int(g.committed) + int(r.ran) + (0 if row is None else 1)


async def non_blocking(heart: hf.HeartFleet) -> bool:
    a = await heart.acquire_async("r1", "w", 60)
    ledger = hf.DurableEffectLedger(heart)
    if a.fence is None:
        return False
    s: hf.SendOnceResult = await hf.send_once_async(
        heart, ledger, fence=a.fence, channel="mail", effect_key="k", payload={}, send=lambda ctx: "ref"
    )
    out: hf.ReconcileResult = await hf.reconcile_outbox_async(ledger, {"mail": lambda intent: "unknown"})
    return s.sent and out.scanned >= 0


class Forwarding:
    """A store object of one's own: handed each StoreRequest, it forwards it to a Rust store."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
        op: str = request.op
        shape: dict[str, object] = request.to_dict()
        assert op == shape["op"] and request.get("run_id") is not None
        answer: hf.StoreAnswer = self.memory.execute(request)
        return answer


def main() -> None:
    store = hf.MemoryLeaseStore("2026-07-30T00:00:00.000Z")
    store.insert({"id": "r1"})
    heart = hf.HeartFleet(store, max_retries=None)
    print(blocking(heart), asyncio.run(non_blocking(heart)), hf.digest({"a": 1}))
    store.insert({"id": "r3"})
    print(hf.HeartFleet(Forwarding(store)).acquire("r3", "w", 60).acquired)
    try:
        heart.renew(hf.FencingToken("r1", "w", "x"), 0)
    except hf.HeartFleetError as e:
        code: str = e.code
        print(code)


if __name__ == "__main__":
    main()

"""The asyncio API: the event loop keeps running while the store works, concurrent acquires
have exactly one winner, and execute_with_lease_async heartbeats on a task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import heart_fleet as hf
from conftest import LoopTicker, T0
from heart_fleet._driver import CancelledAfterCommit


class SlowStore:
    """An asyncio store over a memory store that takes ``delay`` seconds per request."""

    def __init__(self, memory: hf.MemoryLeaseStore, delay: float = 0.005) -> None:
        self.memory = memory
        self.delay = delay
        self.calls = 0

    async def execute_json(self, text: str) -> str:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return self.memory.execute_json(text)


async def test_the_event_loop_keeps_ticking_during_an_operation(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(SlowStore(memory, delay=0.02))
    async with LoopTicker(0.001) as loop:
        a = await heart.acquire_async("r1", "w", 60)
        assert await heart.verify_fence_async(a.fence)  # type: ignore[arg-type]
    assert a.acquired
    assert loop.ticks >= 5, f"the loop ticked only {loop.ticks} times during 2 store round trips of 20 ms"


async def test_concurrent_acquires_have_exactly_one_winner(memory: hf.MemoryLeaseStore) -> None:
    store = SlowStore(memory, delay=0.001)
    heart = hf.HeartFleet(store)
    results = await asyncio.gather(*(heart.acquire_async("r1", f"worker-{i}", 60) for i in range(20)))
    winners = [r for r in results if r.acquired]
    assert len(winners) == 1
    assert {r.code for r in results if not r.acquired} == {"lease-held"}
    assert heart.metrics.acquire_wins == 1 and heart.metrics.acquire_collisions == 19
    assert memory.get_run("r1").lease_owner == winners[0].fence.owner  # type: ignore[union-attr]


async def test_the_async_api_over_the_memory_store(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    a = await heart.acquire_async("r1", "w", 60)
    f2 = await heart.renew_async(a.fence, 60)  # type: ignore[arg-type]
    assert f2 is not None
    assert (await heart.try_release_async(f2, "completed")).ok
    assert (await heart.reclaim_expired_async()).reclaimed_count == 0
    assert await heart.list_runs_async(status="completed") == [memory.get_run("r1")]
    assert (await heart.get_run_async("r1")).status == "completed"  # type: ignore[union-attr]
    assert (await heart.ensure_resource_run_async("k", "v")).created
    assert (await heart.register_instance_async("i1")).status == "alive"
    assert await heart.heartbeat_instance_async("i1")
    assert await heart.drain_instance_async("i1")
    assert [i.instance_id for i in await heart.list_instances_async()] == ["i1"]
    assert (await heart.reclaim_dead_instance_runs_async()).dead_instance_ids == []


async def test_execute_with_lease_async_heartbeats_on_a_task(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(SlowStore(memory, delay=0.001))

    async def work(lease: hf.AsyncLease) -> str:
        await asyncio.sleep(0.3)
        return "ok"

    r = await hf.execute_with_lease_async(heart, "r1", "w", 60, work, renew_every_ms=40)
    assert (r.ran, r.result, r.released, r.lost) == (True, "ok", True, None)
    assert heart.metrics.renews >= 3


async def test_the_async_lease_lost_signal(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(memory)

    async def work(lease: hf.AsyncLease) -> str | None:
        memory.advance(61_000)
        assert (await heart.acquire_async("r1", "thief", 60)).acquired
        await asyncio.wait_for(lease.signal.wait(), 2.0)
        assert lease.lost_error is not None and lease.lost_error.cause == lease.lost
        return lease.lost

    r = await hf.execute_with_lease_async(heart, "r1", "w", 60, work, renew_every_ms=20)
    assert r.lost in ("superseded", "expired") and r.result == r.lost and not r.released


async def test_async_context_manager_and_decorator(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    scope = hf.execute_with_lease(heart, "r1", "w", 60)
    async with scope as lease:
        assert isinstance(lease, hf.AsyncLease)
        assert await heart.verify_fence_async(lease.fence)
    assert scope.result is not None and scope.result.released

    @hf.execute_with_lease(heart, "r2", "w", 60)
    async def job(lease: hf.AsyncLease, n: int) -> int:
        await asyncio.sleep(0)
        return n + 1

    r = await job(1)
    assert (r.ran, r.result, r.released) == (True, 2, True)
    with pytest.raises(hf.LeaseHeldError):
        async with hf.execute_with_lease(heart, "r3", "a", 60):
            async with hf.execute_with_lease(heart, "r3", "b", 60):
                pass
    assert memory.get_run("r3").status == "failed"  # type: ignore[union-attr]


async def test_send_once_and_reconcile_with_async_callbacks(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(SlowStore(memory, delay=0))
    ledger = hf.DurableEffectLedger(heart)
    fence = (await heart.acquire_async("r1", "w", 60)).fence
    fired = 0

    async def send(ctx: hf.EffectContext) -> str:
        nonlocal fired
        fired += 1
        await asyncio.sleep(0)
        return "ref-1"

    kw: dict[str, Any] = dict(fence=fence, channel="internal", effect_key="k1", payload={"a": 1}, send=send)
    first, second = await asyncio.gather(hf.send_once_async(heart, ledger, **kw), hf.send_once_async(heart, ledger, **kw))
    assert sorted([first.sent, second.sent]) == [False, True] and fired == 1
    assert [e.outcome for e in await ledger.dispatch_log_async("r1", "k1")]
    assert await ledger.find_stale_dispatched_async() == []

    async def probe(intent: hf.IntentRow) -> str:
        return "not-sent"

    out = await hf.reconcile_outbox_async(ledger, {"internal": probe})
    assert out.scanned == 0
    g = await hf.guard_irreversible_async(heart, fence, ledger, "k2", send)  # type: ignore[arg-type]
    assert g.committed and g.result == "ref-1"


async def test_a_cancelled_operation_leaves_the_fleet_usable(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(SlowStore(memory, delay=0.2))
    task = asyncio.ensure_future(heart.acquire_async("r1", "w", 60))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fast = hf.HeartFleet(memory)
    assert (await fast.acquire_async("r2", "w", 60)).acquired
    assert T0.startswith("2026")


def test_an_asyncio_store_that_never_answers_fails_at_store_timeout() -> None:
    import time

    class Silent:
        def __init__(self) -> None:
            self.memory = hf.MemoryLeaseStore(T0)
            self.memory.insert({"id": "r1"})
            self.calls = 0

        async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
            self.calls += 1
            await asyncio.Event().wait()  # never set: no answer, ever
            return self.memory.execute(request)

    store = Silent()
    heart = hf.HeartFleet(store, store_timeout=0.2)

    async def go() -> None:
        started = time.monotonic()
        with pytest.raises(hf.StoreUnavailableError) as e:
            await heart.acquire_async("r1", "w", 60)
        assert time.monotonic() - started < 2
        assert "no answer within 0.2 s" in str(e.value)

    asyncio.run(go())
    assert store.calls == 1
    assert store.memory.get_run("r1").status == "ready"
    for bad in (0, -1, float("nan"), "1", True, 10**9):
        with pytest.raises(hf.InvalidTypeError):
            hf.HeartFleet(store, store_timeout=bad)  # type: ignore[arg-type]


def test_the_store_timeout_counts_from_the_call_not_from_the_stores_first_suspension() -> None:
    import time

    class BusyThenSilent:
        def __init__(self) -> None:
            self.memory = hf.MemoryLeaseStore(T0)
            self.memory.insert({"id": "r1"})

        async def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            time.sleep(0.4)  # holds the loop before its first suspension
            await asyncio.Event().wait()  # then never answers
            return self.memory.execute(request)

    heart = hf.HeartFleet(BusyThenSilent(), store_timeout=0.3)

    async def go() -> float:
        started = time.monotonic()
        with pytest.raises(hf.StoreUnavailableError, match="no answer within 0.3 s"):
            await heart.acquire_async("r1", "w", 60)
        return time.monotonic() - started

    elapsed = asyncio.run(go())
    # The deadline passed while the store held the loop: it fires at the first suspension
    # (0.4 s), not 0.3 s after it (0.7 s).
    assert 0.4 <= elapsed < 0.62, elapsed


class CommitsWhenCancelled:
    """An asyncio store that answers nothing until cancelled, then makes its write and says
    so (``CancelledAfterCommit``), as a thread-backed store whose COMMIT had returned does."""

    def __init__(self) -> None:
        self.memory = hf.MemoryLeaseStore(T0)
        self.memory.insert({"id": "r1"})
        self.cancelled = 0

    async def execute_json(self, text: str) -> str:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise CancelledAfterCommit(self.memory.execute_json(text)) from None
        raise AssertionError("never set")


def test_a_write_committed_as_store_timeout_cancels_it_is_recorded() -> None:
    store = CommitsWhenCancelled()
    heart = hf.HeartFleet(store, store_timeout=0.05)

    async def go() -> hf.AcquireResult:
        return await heart.acquire_async("r1", "w", 60)

    a = asyncio.run(go())
    assert store.cancelled == 1
    assert a.acquired and a.fence is not None, a  # the write stands, so the result says so
    assert store.memory.get_run("r1").lease_owner == "w"
    assert heart.metrics.acquire_wins == 1


@pytest.mark.parametrize("contract", ["execute", "execute_json"])
def test_a_write_committed_by_a_store_cancelled_before_it_suspends_is_recorded(contract: str) -> None:
    """The operation is started and driven inside Rust while its store answers without
    suspending; a store whose coroutine raises at its first step (here, cancelled with its
    write committed) still reaches the package's loop, which records the write."""

    class CommitsAtOnce:
        def __init__(self) -> None:
            self.memory = hf.MemoryLeaseStore(T0)
            self.memory.insert({"id": "r1"})
            self.cancelled = 0

    class Typed(CommitsAtOnce):
        async def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            self.cancelled += 1
            raise CancelledAfterCommit(self.memory.execute(request))

    class Text(CommitsAtOnce):
        async def execute_json(self, text: str) -> str:
            self.cancelled += 1
            raise CancelledAfterCommit(self.memory.execute_json(text))

    store = Typed() if contract == "execute" else Text()
    heart = hf.HeartFleet(store, store_timeout=5)
    a = asyncio.run(asyncio.wait_for(heart.acquire_async("r1", "w", 60), 2))
    assert store.cancelled == 1 and a.acquired and a.fence is not None, a
    assert store.memory.get_run("r1").lease_owner == "w" and heart.metrics.acquire_wins == 1


def test_a_store_that_interrupts_before_it_suspends_propagates_and_writes_nothing() -> None:
    class Interrupts:
        def __init__(self) -> None:
            self.memory = hf.MemoryLeaseStore(T0)
            self.memory.insert({"id": "r1"})

        async def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            raise KeyboardInterrupt

    store = Interrupts()
    heart = hf.HeartFleet(store)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(heart.acquire_async("r1", "w", 60))
    assert store.memory.get_run("r1").lease_owner is None and heart.metrics.acquire_wins == 0


def test_a_committed_write_the_timeout_reports_as_timeout_error_is_recorded() -> None:
    """From Python 3.13 asyncio.timeout turns a CancelledError subclass raised at the deadline
    into TimeoutError (the subclass its cause): the committed write is still recorded. Here
    the store raises what 3.13's timeout would."""

    class CommitsThenTimesOut(CommitsWhenCancelled):
        async def execute_json(self, text: str) -> str:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise TimeoutError() from CancelledAfterCommit(self.memory.execute_json(text))
            raise AssertionError("never set")

    store = CommitsThenTimesOut()
    heart = hf.HeartFleet(store, store_timeout=0.05)
    a = asyncio.run(heart.acquire_async("r1", "w", 60))
    assert store.cancelled == 1 and a.acquired and a.fence is not None, a
    assert store.memory.get_run("r1").lease_owner == "w" and heart.metrics.acquire_wins == 1


def test_a_caller_cancellation_reaches_the_store_and_a_finished_write_is_returned() -> None:
    store = CommitsWhenCancelled()
    heart = hf.HeartFleet(store, store_timeout=0.2)

    async def both() -> tuple[hf.AcquireResult, hf.AcquireResult]:
        # The write finished the operation: its result, not CancelledError.
        first = await heart.acquire_async("r1", "w", 60)
        # The same task goes on: its absorbed cancellation does not turn a later deadline's
        # write into a cancellation.
        return first, await heart.acquire_async("r1", "w2", 60)

    async def go() -> tuple[hf.AcquireResult, hf.AcquireResult]:
        task = asyncio.ensure_future(both())
        await asyncio.sleep(0.02)
        task.cancel()  # before the deadline
        return await task

    first, second = asyncio.run(go())
    assert first.acquired and first.fence is not None
    assert not second.acquired and second.code == "lease-held", second
    assert store.cancelled == 3  # the first acquire's request, the second's write and its read
    assert store.memory.get_run("r1").lease_owner == "w"
    assert heart.metrics.acquire_wins == 1 and heart.metrics.acquire_collisions == 1


def test_a_store_that_raises_timeout_error_itself_fails_with_its_own_message() -> None:
    class Raises:
        async def execute_json(self, text: str) -> str:
            raise TimeoutError("the driver's own socket timeout")

    heart = hf.HeartFleet(Raises(), store_timeout=30)
    with pytest.raises(hf.StoreUnavailableError, match="the driver's own socket timeout"):
        asyncio.run(heart.acquire_async("r1", "w", 60))


def test_a_store_that_swallows_the_deadline_and_answers_is_answered() -> None:
    class Late:
        def __init__(self) -> None:
            self.memory = hf.MemoryLeaseStore(T0)
            self.memory.insert({"id": "r1"})

        async def execute_json(self, text: str) -> str:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                pass  # finishes its work anyway
            return self.memory.execute_json(text)

    store = Late()
    heart = hf.HeartFleet(store, store_timeout=0.05)
    assert asyncio.run(heart.acquire_async("r1", "w", 60)).acquired

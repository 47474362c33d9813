"""The public API over the memory store: leases, execute_with_lease (function, context
manager, decorator; heartbeat thread and task; the lease-lost signal), effects at most once,
the outbox, liveness, operator actions, canonical JSON and typed results."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import threading
import time
import weakref
from typing import Any

import pytest

import heart_fleet as hf
from conftest import T0, snapshot


def test_the_installed_package_is_tested_when_ci_asks_for_it() -> None:
    import os

    if os.environ.get("HEART_FLEET_REQUIRE_INSTALLED"):
        assert "site-packages" in hf.__file__, hf.__file__
    assert hf._native.__file__.endswith(".so")


def test_a_lease_cycle_with_typed_results(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    a = heart.acquire("r1", "worker-A", 60)
    assert isinstance(a, hf.AcquireResult) and a.acquired and a.reason is None
    assert isinstance(a.fence, hf.FencingToken)
    assert a.fence.to_dict() == {"runId": "r1", "owner": "worker-A", "leaseExpiresAt": "2026-07-30T00:01:00.000Z", "epoch": 1}
    assert a.run is not None and a.run.status == "leased" and a.run.lease_owner == "worker-A"
    held = heart.acquire("r1", "worker-B", 60)
    assert (held.acquired, held.code) == (False, "lease-held")
    assert heart.verify_fence(a.fence) is True
    memory.advance(10_000)
    f2 = heart.renew(a.fence, 60)
    assert f2 is not None and f2.lease_expires_at == "2026-07-30T00:01:10.000Z"
    assert heart.verify_fence(a.fence) is False  # the old token no longer proves the lease
    row = heart.release(f2, "completed")
    assert row is not None and row.status == "completed" and row.lease_owner is None
    assert heart.release(f2) is None
    m = heart.metrics
    assert (m.acquire_wins, m.acquire_collisions, m.renews, m.releases, m.fence_rejections) == (1, 1, 1, 1, 1)
    events = [r.event for r in heart.receipts()]
    assert events[0] == "acquired" and "released" in events
    assert all(hf.verify_receipt(r) for r in heart.receipts())
    assert "\nheart_fleet_acquire_wins_total 1\n" in heart.prometheus()


def test_try_renew_reports_the_cause(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    a = heart.acquire("r1", "w", 1)
    memory.advance(1_000)
    out = heart.try_renew(a.fence, 60)  # type: ignore[arg-type]
    assert (out.outcome, out.cause, out.code, out.ok) == ("rejected", "expired", "fence-rejected", False)
    assert heart.metrics.renew_failures == 1


def test_acquire_keeps_the_reference_shape_for_bad_values_and_raises_for_wrong_types(heart: hf.HeartFleet) -> None:
    for args in (("", "w", 60), ("r1", "", 60), ("r1", "w", 0), ("r1", "w", 31_536_001)):
        r = heart.acquire(*args)
        assert r.to_dict() == {"acquired": False, "run": None, "reason": "Invalid input", "code": "invalid-input"}
    for args in ((1, "w", 60), ("r1", None, 60), ("r1", "w", 1.5), ("r1", "w", True), ("r1", "w", "60")):
        with pytest.raises(hf.InvalidTypeError) as e:
            heart.acquire(*args)  # type: ignore[arg-type]
        assert e.value.code == "invalid-input" and isinstance(e.value, TypeError)
    assert heart.metrics.acquire_attempts == 0


def test_reclaim_and_quarantine(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(memory, max_retries=1)
    heart.acquire("r1", "w", 1)
    memory.advance(1_000)
    r = heart.reclaim_expired()
    assert r.reclaimed_ids == ["r1"] and r.quarantined_ids == [] and r.errors == []
    heart.acquire("r1", "w", 1)
    memory.advance(1_000)
    r = heart.reclaim_expired(limit=10)
    assert r.quarantined_ids == ["r1"]
    assert heart.acquire("r1", "w", 60).code == "quarantined"
    row = heart.requeue_run("r1", "operator-1")
    assert row.status == "ready" and row.retries == 0
    assert heart.get_run("r1") == row
    assert heart.get_run("nope") is None
    f = heart.acquire("r1", "w", 60)
    assert f.acquired
    assert heart.force_release("r1").status == "ready"
    assert [r.event for r in heart.receipts()][-2:] == ["acquired", "force_released"]
    assert sorted(r.id for r in heart.list_runs(status="ready")) == ["r1", "r2", "r3"]
    assert len(heart.list_runs(limit=2)) == 2


def test_receipts_go_to_a_sink_and_sink_errors_are_swallowed(memory: hf.MemoryLeaseStore) -> None:
    got: list[hf.HeartReceipt] = []

    def sink(r: hf.HeartReceipt) -> None:
        got.append(r)
        raise RuntimeError("the sink failed")

    heart = hf.HeartFleet(memory, on_receipt=sink)
    assert heart.acquire("r1", "w", 60).acquired
    assert [r.event for r in got] == ["acquired"] and heart.receipts() == []


# -- execute_with_lease -------------------------------------------------------------------


def test_execute_with_lease_runs_releases_and_reports(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    seen: list[hf.FencingToken] = []
    r = hf.execute_with_lease(heart, "r1", "w", 60, lambda lease: seen.append(lease.fence) or "done")
    assert r.to_dict() == {"ran": True, "result": "done", "released": True}
    assert seen[0].run_id == "r1"
    assert memory.get_run("r1").status == "completed"  # type: ignore[union-attr]
    held = hf.execute_with_lease(heart, "r1", "w", 60, lambda lease: "never")
    assert (held.ran, held.reason) == (False, "lease-held")
    bad = hf.execute_with_lease(heart, "r2", "w", 0, lambda lease: "never")
    assert (bad.ran, bad.reason, bad.code) == (False, "lease-error", "invalid-input")


def test_a_failing_work_releases_to_failed_and_raises(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    def work(lease: hf.Lease) -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        hf.execute_with_lease(heart, "r1", "w", 60, work)
    assert memory.get_run("r1").status == "failed"  # type: ignore[union-attr]


def test_the_heartbeat_thread_renews_while_the_work_runs(heart: hf.HeartFleet) -> None:
    def work(lease: hf.Lease) -> str:
        time.sleep(0.35)
        return lease.fence.lease_expires_at

    r = hf.execute_with_lease(heart, "r1", "w", 60, work, renew_every_ms=50)
    assert r.ran and r.released and r.lost is None
    assert heart.metrics.renews >= 3, heart.metrics
    assert not [t for t in threading.enumerate() if t.name.startswith("heart-fleet-heartbeat")]


def test_lease_lost_signal_carries_the_cause(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    causes: list[str | None] = []

    def work(lease: hf.Lease) -> str:
        # Another owner takes the run over after our lease expired on the store's clock.
        memory.advance(61_000)
        assert heart.acquire("r1", "thief", 60).acquired
        assert lease.signal.wait(2.0), "the lease-lost signal did not fire"
        causes.append(lease.lost)
        with pytest.raises(hf.LeaseLostError) as e:
            lease.raise_if_lost()
        assert e.value.cause == lease.lost and e.value.code == "fence-rejected"
        return "finished anyway"

    r = hf.execute_with_lease(heart, "r1", "w", 60, work, renew_every_ms=20)
    assert r.ran and r.result == "finished anyway" and r.lost in ("superseded", "expired")
    assert causes == [r.lost]
    assert r.released is False  # the newest token no longer holds the lease
    assert memory.get_run("r1").lease_owner == "thief"  # type: ignore[union-attr]


def test_a_store_outage_past_the_expiry_is_lease_lost_store_unavailable(memory: hf.MemoryLeaseStore) -> None:
    clock = [0.0]
    heart = hf.HeartFleet(memory)

    def work(lease: hf.Lease) -> None:
        memory.fail_next("*", 10)
        clock[0] += 1_500
        assert lease.heartbeat() is None  # a failed beat is retried on the next one
        clock[0] += 1_000  # past the held expiry (ttl 2 s) without a successful renew
        assert lease.heartbeat() == "store-unavailable"
        assert lease.signal.is_set() and lease.lost_error is not None
        assert lease.lost_error.code == "store-unavailable"

    r = hf.execute_with_lease(
        heart, "r1", "w", 2, work, renew_every_ms=1_000, auto_heartbeat=False, clock=lambda: clock[0]
    )
    assert r.lost == "store-unavailable"


def test_execute_with_lease_as_a_context_manager(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    scope = hf.execute_with_lease(heart, "r1", "w", 60, renew_every_ms=30)
    with scope as lease:
        assert isinstance(lease, hf.Lease) and lease.run_id == "r1"
        time.sleep(0.12)
    assert scope.result is not None and scope.result.released
    assert memory.get_run("r1").status == "completed"  # type: ignore[union-attr]
    assert heart.metrics.renews >= 1
    with pytest.raises(hf.LeaseHeldError) as e:
        memory_scope = hf.execute_with_lease(hf.HeartFleet(memory), "r2", "w", 60)
        with memory_scope:
            with hf.execute_with_lease(heart, "r2", "other", 60):
                pass
    assert e.value.code == "lease-held"
    with pytest.raises(ValueError):
        with hf.execute_with_lease(heart, "r3", "w", 60):
            raise ValueError("inside")
    assert memory.get_run("r3").status == "failed"  # type: ignore[union-attr]


def test_execute_with_lease_as_a_decorator(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    @hf.execute_with_lease(heart, "r1", "w", 60)
    def job(lease: hf.Lease, x: int) -> int:
        assert heart.verify_fence(lease.fence)
        return x * 2

    r = job(21)
    assert (r.ran, r.result, r.released) == (True, 42, True)
    again = job(1)  # the run is completed now: acquire refuses it
    assert again.ran is False


def test_resource_runs_release_to_ready(heart: hf.HeartFleet) -> None:
    e = heart.ensure_resource_run("mutex", "invoice-42")
    assert e.created and e.run.idempotency_key == hf.deterministic_resource_id("mutex", "invoice-42")
    assert hf.ensure_resource_run(heart, "mutex", "invoice-42").created is False
    r = hf.execute_with_lease(heart, e.run.id, "w", 60, lambda lease: 1, release_to_ready=True)
    assert r.released and heart.get_run(e.run.id).status == "ready"  # type: ignore[union-attr]


# -- effects ----------------------------------------------------------------------------


def test_guard_irreversible_fires_at_most_once(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    fence = heart.acquire("r1", "w", 60).fence
    ledger = hf.MemoryEffectLedger()
    fired: list[hf.EffectContext] = []
    g1 = hf.guard_irreversible(heart, fence, ledger, "pay:1", lambda ctx: fired.append(ctx) or "paid")  # type: ignore[arg-type]
    g2 = hf.guard_irreversible(heart, fence, ledger, "pay:1", lambda ctx: fired.append(ctx) or "paid")  # type: ignore[arg-type]
    assert g1.to_dict() == {"committed": True, "result": "paid"}
    assert (g2.committed, g2.reason, g2.code) == (False, "already-committed", "deduped")
    assert len(fired) == 1 and fired[0].epoch == 1 and fired[0].effect_key == "pay:1"
    memory.advance(61_000)
    g3 = hf.guard_irreversible(heart, fence, ledger, "pay:2", lambda ctx: fired.append(ctx))  # type: ignore[arg-type]
    assert (g3.committed, g3.reason) == (False, "fence-rejected") and len(fired) == 1
    m = heart.metrics
    assert (m.effect_commits, m.effect_dedupes) == (1, 1)


def test_an_effect_that_raises_propagates_and_stays_recorded(heart: hf.HeartFleet) -> None:
    fence = heart.acquire("r1", "w", 60).fence
    ledger = hf.MemoryEffectLedger()

    def boom(ctx: hf.EffectContext) -> None:
        raise ConnectionError("the payment API is down")

    with pytest.raises(ConnectionError):
        hf.guard_irreversible(heart, fence, ledger, "pay:1", boom)  # type: ignore[arg-type]
    again = hf.guard_irreversible(heart, fence, ledger, "pay:1", lambda ctx: "x")  # type: ignore[arg-type]
    assert again.code == "deduped"


def test_send_once_dedupes_and_reconcile_commits(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    fence = heart.acquire("r1", "w", 60).fence
    ledger = hf.DurableEffectLedger(heart)
    key = hf.effect_key("notify", {"user": 7, "event": "welcome"})
    sent: list[int | None] = []

    def send(ctx: hf.EffectContext) -> dict[str, Any]:
        sent.append(ctx.epoch)
        return {"messageId": "m-1"}

    s1 = hf.send_once(heart, ledger, fence=fence, channel="mail", effect_key=key, payload={"to": "a@b"}, send=send)  # type: ignore[arg-type]
    s2 = hf.send_once(heart, ledger, fence=fence, channel="mail", effect_key=key, payload={"to": "a@b"}, send=send)  # type: ignore[arg-type]
    assert (s1.sent, s1.committed, s1.external_ref, s1.result) == (True, True, {"messageId": "m-1"}, {"messageId": "m-1"})
    assert (s2.sent, s2.reason, s2.code) == (False, "deduped", "deduped")
    assert sent == [1]
    assert [e.outcome for e in ledger.dispatch_log("r1", key)][0] in ("claimed", "dispatched")
    assert memory.intents()[0].state == "committed"

    # A send that crashed: the intent stays dispatched; the reconciler's probe commits it.
    k2 = "notify:2"

    def crash(ctx: hf.EffectContext) -> None:
        raise TimeoutError("no answer")

    with pytest.raises(TimeoutError):
        hf.send_once(heart, ledger, fence=fence, channel="telegram", effect_key=k2, payload={}, send=crash)  # type: ignore[arg-type]
    memory.advance(61_000)
    assert [i.effect_key for i in ledger.find_stale_dispatched()] == [k2]
    out = hf.reconcile_outbox(ledger, {"telegram": lambda intent: {"status": "sent", "external_ref": "t-9"}})
    assert (out.scanned, out.committed, out.errors) == (1, 1, [])
    assert [i.state for i in memory.intents() if i.effect_key == k2] == ["committed"]


def test_liveness_reclaimer(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(memory)
    live = hf.LivenessReclaimer(heart)
    row = live.register_instance("inst-1", hostname="h", pid=42, metadata={"v": 1})
    assert (row.instance_id, row.status, row.pid, row.metadata) == ("inst-1", "alive", 42, {"v": 1})
    assert heart.acquire("r1", "inst-1", 600).acquired
    memory.advance(90_001)
    r = live.reclaim_dead_instance_runs()
    assert r.dead_instance_ids == ["inst-1"] and r.reclaimed_ids == ["r1"]
    assert live.heartbeat("inst-1") is False
    live.register_instance("inst-2")
    assert live.drain_instance("inst-2") is True
    assert {i.instance_id: i.status for i in heart.list_instances()} == {"inst-1": "dead", "inst-2": "draining"}


# -- canonical ----------------------------------------------------------------------------


def test_canonical_json_and_digests() -> None:
    assert hf.canonicalize({"b": 1, "a": [1, 2.0, "x"], "é": None}) == '{"a":[1,2,"x"],"b":1,"é":null}'
    assert hf.digest({"b": 1, "a": [1, 2]}).endswith("94a786c3662bc7beeb598efa7d8cb58d7bea25d6c275ea9785a0230ff1f8c2ba")
    assert hf.sha256_hex("abc") == hashlib.sha256(b"abc").hexdigest()
    assert hf.canonical_sha256({"a": 1}) == hashlib.sha256(b'{"a":1}').hexdigest()
    assert hf.canonicalize(1e21) == "1e+21" and hf.canonicalize(0.1) == "0.1"
    with pytest.raises(hf.InvalidInputError, match="Non-finite number NaN"):
        hf.canonicalize({"x": float("nan")})
    with pytest.raises(hf.InvalidTypeError, match="Unsupported value type"):
        hf.canonicalize({"x": {1, 2}})
    with pytest.raises(hf.InvalidInputError):
        hf.deterministic_resource_id("", "k")


def test_a_tampered_receipt_is_refused(heart: hf.HeartFleet) -> None:
    heart.acquire("r1", "w", 60)
    receipt = heart.receipts()[0].to_dict()
    receipt["owner"] = "mallory"
    with pytest.raises(hf.ReceiptTamperedError) as e:
        hf.verify_receipt(receipt)
    assert e.value.code == "receipt-tampered"


def test_every_code_has_a_class() -> None:
    # Each code of the core's registry has its own exception class.
    assert set(hf.errors._BY_CODE) == set(hf.ERROR_CODES)
    for code in hf.ERROR_CODES:
        err = hf.errors.error_for_code(code, "m")
        assert isinstance(err, hf.HeartFleetError) and err.code == code


# -- store failures -----------------------------------------------------------------------


class BrokenStore:
    def __init__(self) -> None:
        self.calls = 0

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        raise ConnectionResetError("connection reset by peer")


def test_a_store_failure_is_store_unavailable_and_changes_nothing(memory: hf.MemoryLeaseStore) -> None:
    heart = hf.HeartFleet(BrokenStore())
    with pytest.raises(hf.StoreUnavailableError) as e:
        heart.acquire("r1", "w", 60)
    assert e.value.code == "store-unavailable" and "connection reset" in str(e.value)
    assert heart.metrics.acquire_wins == 0 and heart.receipts() == []
    # The memory store's injected failures too: nothing changes.
    heart = hf.HeartFleet(memory)
    before = snapshot(memory)
    memory.fail_next("*", 1)
    with pytest.raises(hf.StoreUnavailableError):
        heart.acquire("r1", "w", 60)
    assert snapshot(memory) == before
    assert heart.acquire("r1", "w", 60).acquired


class Recording:
    """A blocking store object that keeps what its ``execute`` is handed and forwards it."""

    def __init__(self, memory: hf.MemoryLeaseStore, as_dict: bool = False) -> None:
        self.memory = memory
        self.as_dict = as_dict
        self.requests: list[Any] = []

    def execute(self, request: hf.StoreRequest) -> Any:
        self.requests.append(request)
        return self.memory.execute(request.to_dict() if self.as_dict else request)


def test_a_store_objects_execute_is_handed_a_store_request_that_reads_as_its_json_shape(memory: hf.MemoryLeaseStore) -> None:
    from collections.abc import Mapping

    store = Recording(memory)
    heart = hf.HeartFleet(store)
    a = heart.acquire("r1", "worker-A", 60)
    assert a.acquired and heart.verify_fence(a.fence) and heart.release(a.fence) is not None
    assert len(store.requests) == 3
    request = store.requests[0]
    assert type(request) is hf.StoreRequest and isinstance(request, Mapping)
    shape = json.loads(request.to_json())
    assert request.to_dict() == shape and dict(request) == shape and request == shape
    assert list(request) == list(shape) and len(request) == len(shape)  # the text's key order
    assert request["op"] == request.op == "update_run" and request["run_id"] == "r1"
    assert request.get("nope") is None and request.get("nope", 7) == 7 and "when" in request
    assert request != store.requests[1] and request != {"op": "update_run"}
    assert "StoreRequest(" in repr(request) and '"op":"update_run"' in repr(request)
    with pytest.raises(KeyError):
        request["nope"]
    with pytest.raises(TypeError):
        request["op"] = "drop_table"  # type: ignore[index]
    with pytest.raises(TypeError):
        hf.StoreRequest()  # type: ignore[call-arg]
    # to_dict() gives a new dict each time: changing one changes nothing else.
    mine = request.to_dict()
    mine["op"] = "changed"
    assert request["op"] == "update_run" and request.to_dict()["op"] == "update_run"


def test_the_memory_stores_typed_answer_equals_its_json_answer() -> None:
    def fresh() -> hf.MemoryLeaseStore:
        m = hf.MemoryLeaseStore(T0)
        m.insert({"id": "r1"})
        return m

    typed, by_dict = fresh(), fresh()
    recorded = Recording(typed)
    heart = hf.HeartFleet(recorded)
    a = heart.acquire("r1", "w", 60)
    heart.release(a.fence)
    replay = fresh()
    for request in recorded.requests:
        answer = replay.execute(request)
        assert type(answer) is hf.StoreAnswer
        assert answer == by_dict.execute(request.to_dict()) == json.loads(answer.to_json())
        assert answer["reply"]["kind"] in ("run_write", "run_hit") and answer["now"] == T0
    assert snapshot(replay) == snapshot(typed) == snapshot(by_dict)


class KeepingEverything:
    """A store object that keeps every request it is handed and every answer it gives."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory
        self.kept: list[tuple[hf.StoreRequest, str, hf.StoreAnswer, str]] = []

    def answer(self, request: hf.StoreRequest) -> hf.StoreAnswer:
        answer = self.memory.execute(request)
        self.kept.append((request, request.to_json(), answer, answer.to_json()))
        return answer


def test_what_a_store_keeps_of_its_requests_and_answers_reads_as_it_did(memory: hf.MemoryLeaseStore) -> None:
    # An operation takes its request back, and moves an answer's rows into itself instead of
    # copying them, only when the store kept no reference to them.
    class Blocking(KeepingEverything):
        def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            return self.answer(request)

    class Asyncio(KeepingEverything):
        async def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            return self.answer(request)

    blocking, asyncio_store = Blocking(memory), Asyncio(memory)
    heart, aheart = hf.HeartFleet(blocking), hf.HeartFleet(asyncio_store)
    run = heart.ensure_resource_run("keeping", "cycle").run

    async def cycles() -> None:
        for _ in range(3):
            a = await aheart.acquire_async(run.id, "w", 60)
            assert a.fence is not None and await aheart.verify_fence_async(a.fence)
            assert await aheart.release_async(a.fence, "ready") is not None

    for _ in range(3):
        a = heart.acquire(run.id, "w", 60)
        assert a.fence is not None and heart.verify_fence(a.fence)
        assert heart.release(a.fence, "ready") is not None
    asyncio.run(cycles())
    for store in (blocking, asyncio_store):
        assert len(store.kept) >= 9
        for request, request_text, answer, answer_text in store.kept:
            assert request.to_json() == request_text and answer.to_json() == answer_text
            assert answer["reply"]["kind"] != "now" and request.op != "now"


def test_a_store_reading_each_request_and_answer_as_a_mapping_reads_that_one(memory: hf.MemoryLeaseStore) -> None:
    # A store that lets go of its requests gets the next one in the same object, refilled,
    # and the memory store's answers reuse the object of one whose rows an operation took:
    # what a store reads through the mapping is the value of that call, never the one before.
    class Reading:
        def __init__(self) -> None:
            self.read: list[tuple[dict[str, object], dict[str, object]]] = []
            self.answers: list[tuple[dict[str, object], dict[str, object]]] = []

        def mapped(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            self.read.append(({k: request[k] for k in request}, request.to_dict()))
            answer = memory.execute(request)
            self.answers.append(({k: answer[k] for k in answer}, answer.to_dict()))
            return answer

    class Blocking(Reading):
        def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            return self.mapped(request)

    class Asyncio(Reading):
        async def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            return self.mapped(request)

    blocking, asyncio_store = Blocking(), Asyncio()
    heart, aheart = hf.HeartFleet(blocking), hf.HeartFleet(asyncio_store)
    run = heart.ensure_resource_run("reading", "cycle").run

    async def cycle() -> None:
        a = await aheart.acquire_async(run.id, "w", 60)
        assert a.fence is not None and await aheart.verify_fence_async(a.fence)
        assert await aheart.release_async(a.fence, "ready") is not None

    a = heart.acquire(run.id, "w", 60)
    assert a.fence is not None and heart.verify_fence(a.fence)
    assert heart.release(a.fence, "ready") is not None
    asyncio.run(cycle())
    for store in (blocking, asyncio_store):
        assert len(store.read) >= 3 and len(store.answers) == len(store.read)
        for mapped, made in store.read + store.answers:
            assert mapped == made
        assert store.read[0][0] != store.read[1][0]  # acquire's write, then verify's
        assert store.answers[0][0] != store.answers[1][0]  # the row after, then a hit


@pytest.mark.parametrize("refers_back", ["store", "sink"])
def test_a_fleet_its_store_or_sink_refers_back_to_is_freed_by_the_collector(refers_back: str) -> None:
    # The native fleet holds the store's method and the sink: a store or a sink that holds
    # its HeartFleet makes a cycle through it, which the garbage collector must see.
    class Store:
        def __init__(self) -> None:
            self.memory = hf.MemoryLeaseStore(T0)
            self.heart: hf.HeartFleet | None = None

        def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            return self.memory.execute(request)

    def made() -> weakref.ref[hf.HeartFleet]:
        store = Store()
        heart = hf.HeartFleet(store, on_receipt=(lambda r: heart.metrics) if refers_back == "sink" else None)
        if refers_back == "store":
            store.heart = heart
        run = heart.ensure_resource_run("cycle", refers_back).run
        assert heart.acquire(run.id, "w", 60).acquired
        return weakref.ref(heart)

    freed = made()
    gc.collect()
    assert freed() is None


def test_a_store_may_answer_a_store_request_in_the_json_shape(memory: hf.MemoryLeaseStore) -> None:
    store = Recording(memory, as_dict=True)
    heart = hf.HeartFleet(store)
    a = heart.acquire("r1", "w", 60)
    assert a.acquired and heart.verify_fence(a.fence)
    assert heart.release(a.fence) is not None
    row = memory.get_run("r1")
    assert row is not None and row.status not in ("leased", "running") and row.lease_owner is None


async def test_an_asyncio_store_object_is_handed_store_requests_too(memory: hf.MemoryLeaseStore) -> None:
    class AsyncRecording(Recording):
        async def execute(self, request: hf.StoreRequest) -> Any:  # type: ignore[override]
            await asyncio.sleep(0)
            return Recording.execute(self, request)

    store = AsyncRecording(memory)
    heart = hf.HeartFleet(store)
    a = await heart.acquire_async("r1", "w", 60)
    assert a.acquired and await heart.verify_fence_async(a.fence)
    assert await heart.release_async(a.fence) is not None
    assert [r.op for r in store.requests] == ["update_run"] * 3
    assert all(type(r) is hf.StoreRequest for r in store.requests)


def test_a_store_that_answers_nonsense_is_store_protocol() -> None:
    class Liar:
        def execute(self, request: dict[str, Any]) -> Any:
            return 42

    with pytest.raises(hf.StoreProtocolError):
        hf.HeartFleet(Liar()).acquire("r1", "w", 60)


def test_a_sync_call_on_an_async_store_is_a_clear_error(memory: hf.MemoryLeaseStore) -> None:
    class Async:
        async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
            return memory.execute(request)

    heart = hf.HeartFleet(Async())
    with pytest.raises(hf.InvalidTypeError, match="_async"):
        heart.acquire("r1", "w", 60)
    assert memory.request_count() == 0

    class Sneaky:  # a plain method that returns a coroutine: caught when it happens
        def execute(self, request: dict[str, Any]) -> Any:
            return Async().execute(request)

    with pytest.raises(hf.StoreUnavailableError, match="_async"):
        hf.HeartFleet(Sneaky()).acquire("r1", "w", 60)
    assert asyncio.run(heart.acquire_async("r1", "w", 60)).acquired


def test_a_blocking_call_inside_a_running_loop_never_starts_a_store_coroutine(memory: hf.MemoryLeaseStore) -> None:
    # A blocking API call made from code that runs in an event loop (a notebook, a sync
    # helper called from async code), on a store whose plain execute returns a coroutine
    # for the request after the send: refused, and the coroutine never runs.
    started: list[str] = []
    sent: list[int] = []

    class Sneaky:
        def execute(self, request: hf.StoreRequest) -> Any:
            if not sent:
                return memory.execute(request)

            async def later() -> Any:
                started.append(request.op)
                return memory.execute(request)

            return later()

    heart = hf.HeartFleet(Sneaky())
    a = heart.acquire("r1", "w", 60)
    assert a.fence is not None

    async def inside_a_loop() -> None:
        ledger = hf.DurableEffectLedger(heart)
        with pytest.raises(hf.StoreUnavailableError, match="returned an awaitable"):
            hf.send_once(heart, ledger, fence=a.fence, channel="internal", effect_key="k", payload={}, send=lambda c: sent.append(1) or "ref")

    with pytest.warns(RuntimeWarning, match="never awaited"):
        asyncio.run(inside_a_loop())
        import gc

        gc.collect()
    assert sent == [1] and started == []


def test_an_asyncio_store_that_answers_a_coroutine_is_store_protocol(memory: hf.MemoryLeaseStore) -> None:
    # `return self.inner.execute(request)` with the `await` forgotten: the answer is a
    # coroutine, not awaited on the store's behalf and outside its deadline.
    class Forgetful:
        async def execute(self, request: hf.StoreRequest) -> Any:
            async def inner() -> Any:
                return memory.execute(request)

            return inner()

    heart = hf.HeartFleet(Forgetful())

    async def go() -> None:
        with pytest.raises(hf.StoreProtocolError, match="answered coroutine"):
            await heart.acquire_async("r1", "w", 60)

    with pytest.warns(RuntimeWarning, match="never awaited"):
        asyncio.run(go())
        import gc

        gc.collect()
    assert memory.get_run("r1").status == "ready"


def test_results_round_trip_through_json(heart: hf.HeartFleet) -> None:
    a = heart.acquire("r1", "w", 60)
    text = json.dumps(a.to_dict())
    assert hf.AcquireResult.from_json(json.loads(text)) == a
    assert hf.types.parse_iso(a.fence.lease_expires_at).isoformat() == "2026-07-30T00:01:00+00:00"  # type: ignore[union-attr]
    assert T0 == "2026-07-30T00:00:00.000Z"


def test_the_reference_pure_helpers(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    a = heart.acquire("r1", "w", 60)
    run = a.run
    assert run is not None
    assert hf.is_lease_expired(run, "2026-07-30T00:00:59.999Z") is False
    assert hf.is_lease_expired(run, "2026-07-30T00:01:00.000Z") is True  # expiry <= now
    assert hf.is_lease_expired({"lease_expires_at": None}, 0) is True
    assert hf.can_acquire(run, T0) is False and hf.can_acquire(run.to_dict(), 1_785_369_660_000) is True
    assert hf.can_acquire(memory.get_run("r2"), T0) is True  # type: ignore[arg-type]
    i = heart.register_instance("i1")
    assert hf.is_instance_expired(i, 1_785_369_690_000) is False  # exactly 90 s: not expired (strictly greater)
    assert hf.is_instance_expired(i, 1_785_369_690_001) is True
    assert hf.dead_instance_ids([i, {"instance_id": "x", "status": "dead", "last_heartbeat": T0}], T0) == ["x"]
    assert hf.runs_leased_to_dead_instances([run, memory.get_run("r2")], ["w"]) == [run]  # type: ignore[list-item]
    assert hf.heartbeat_interval_ms(60) == 30_000 and hf.heartbeat_interval_ms(1) == 1_000
    assert hf.heartbeat_interval_ms(60, 250) == 250


def test_guard_across_threads_fires_once(heart: hf.HeartFleet) -> None:
    fence = heart.acquire("r1", "w", 60).fence
    ledger = hf.MemoryEffectLedger()
    fired: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)
    results: list[hf.GuardResult] = []

    def effect(ctx: hf.EffectContext) -> None:
        with lock:
            fired.append(1)

    def worker() -> None:
        barrier.wait()
        results.append(hf.guard_irreversible(heart, fence, ledger, "once", effect))  # type: ignore[arg-type]

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fired) == 1 and sum(r.committed for r in results) == 1
    assert {r.code for r in results if not r.committed} == {"deduped"}


def test_a_coroutine_work_needs_the_async_api(heart: hf.HeartFleet, memory: hf.MemoryLeaseStore) -> None:
    async def work(lease: hf.AsyncLease) -> int:
        return 1

    with pytest.raises(hf.InvalidTypeError, match="execute_with_lease_async"):
        hf.execute_with_lease(heart, "r1", "w", 60, work)  # type: ignore[arg-type]
    assert memory.get_run("r1").status == "ready"  # type: ignore[union-attr]

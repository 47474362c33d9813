"""Bad input at every public entry point: wrong types, empty strings, huge and non-finite
numbers, strings with a lone surrogate, values nested past the core's 512 levels, circular
values, misspelt keyword options and probe channels raise an ``InvalidInputError`` (a
``ValueError``) or ``InvalidTypeError`` (a ``TypeError``), both ``HeartFleetError`` with code
``invalid-input``, before any store call: nothing changes (rows, counters, receipts, the
store's request count)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

import pytest

import heart_fleet as hf
from conftest import T0, nested, snapshot

NAN = float("nan")
INF = float("inf")
HUGE = 2**70
LONE = "r\ud800"  # a lone surrogate: no UTF-8 form




CIRCULAR: list[Any] = [1]
CIRCULAR.append(CIRCULAR)
#: (label, value): lists nested past the core's limit, and circular values.
DEEP = (("nested 513", nested(513)), ("nested 5000", nested(5000)), ("nested 10000", nested(10_000)))
ODD_JSON = (*DEEP, ("circular list", CIRCULAR), ("dict holding a circular list", {"x": CIRCULAR}))


def _env() -> tuple[hf.MemoryLeaseStore, hf.HeartFleet, hf.FencingToken, hf.DurableEffectLedger]:
    store = hf.MemoryLeaseStore(T0)
    store.insert({"id": "r1"})
    heart = hf.HeartFleet(store)
    fence = heart.acquire("r1", "w", 60).fence
    assert fence is not None
    return store, heart, fence, hf.DurableEffectLedger(heart)


def cases() -> list[tuple[str, Callable[[Any, Any, Any, Any], Any]]]:
    """(name, call(store, heart, fence, durable)) pairs; every call must be refused."""
    good = lambda: hf.FencingToken("r1", "w", "2026-07-30T00:01:00.000Z", 1)  # noqa: E731
    ok = lambda ctx: None  # noqa: E731
    out: list[tuple[str, Callable[[Any, Any, Any, Any], Any]]] = []

    def add(name: str, f: Callable[[Any, Any, Any, Any], Any]) -> None:
        out.append((name, f))

    for bad in (None, 42, "store", object()):
        add(f"HeartFleet(store={bad!r})", lambda s, h, f, d, bad=bad: hf.HeartFleet(bad))
    for bad in (-1, 1.5, "5", HUGE, True):
        add(f"HeartFleet(max_retries={bad!r})", lambda s, h, f, d, bad=bad: hf.HeartFleet(s, max_retries=bad))
    add("HeartFleet(on_receipt=5)", lambda s, h, f, d: hf.HeartFleet(s, on_receipt=5))
    for args in ((1, "w", 60), ("r1", None, 60), ("r1", "w", 1.5), ("r1", "w", NAN), ("r1", "w", True), ("r1", "w", "60")):
        add(f"acquire{args!r}", lambda s, h, f, d, args=args: h.acquire(*args))
    bad_fences: list[Any] = [
        None,
        5,
        "fence",
        {},
        {"runId": 1, "owner": "w", "leaseExpiresAt": "x"},
        {"runId": "", "owner": "w", "leaseExpiresAt": "2026-07-30T00:01:00.000Z"},
        {"runId": "r1", "owner": "w", "leaseExpiresAt": "not a time"},
        {"runId": "r1", "owner": "w", "leaseExpiresAt": "2026-07-30T00:01:00.000Z", "epoch": 1.5},
        {"runId": LONE, "owner": "w", "leaseExpiresAt": "2026-07-30T00:01:00.000Z"},
        {"runId": "r1", "owner": "\udc00w", "leaseExpiresAt": "2026-07-30T00:01:00.000Z"},
    ]
    for bad in bad_fences:
        add(f"renew(fence={bad!r})", lambda s, h, f, d, bad=bad: h.renew(bad, 60))
        add(f"verify_fence({bad!r})", lambda s, h, f, d, bad=bad: h.verify_fence(bad))
        add(f"release(fence={bad!r})", lambda s, h, f, d, bad=bad: h.release(bad, "completed"))
        add(f"guard(fence={bad!r})", lambda s, h, f, d, bad=bad: hf.guard_irreversible(h, bad, hf.MemoryEffectLedger(), "k", ok))
    for bad in (0, -1, 31_536_001, 1.5, NAN, INF, True, "60", HUGE, None):
        add(f"renew(ttl={bad!r})", lambda s, h, f, d, bad=bad: h.renew(f, bad))
        add(f"try_renew(ttl={bad!r})", lambda s, h, f, d, bad=bad: h.try_renew(f, bad))
    for bad in ("done", "", 5, None, "ready "):
        add(f"release(next_status={bad!r})", lambda s, h, f, d, bad=bad: h.release(f, bad))
        add(f"try_release(next_status={bad!r})", lambda s, h, f, d, bad=bad: h.try_release(f, bad))
    for bad in (-1, HUGE, 1.5, "x", None, NAN):
        add(f"reclaim_expired({bad!r})", lambda s, h, f, d, bad=bad: h.reclaim_expired(bad))
        add(f"liveness(ttl_ms={bad!r})", lambda s, h, f, d, bad=bad: h.reclaim_dead_instance_runs(bad))
        add(f"liveness(max={bad!r})", lambda s, h, f, d, bad=bad: h.reclaim_dead_instance_runs(90_000, bad))
        add(f"list_runs(limit={bad!r})", lambda s, h, f, d, bad=bad: h.list_runs(None, bad))
        add(f"find_stale_dispatched({bad!r})", lambda s, h, f, d, bad=bad: d.find_stale_dispatched(bad))
    for bad in ("", None, 5, b"r1", LONE, "\udc00"):
        add(f"get_run({bad!r})", lambda s, h, f, d, bad=bad: h.get_run(bad))
        add(f"requeue_run({bad!r})", lambda s, h, f, d, bad=bad: h.requeue_run(bad, "op"))
        add(f"requeue_run(operator={bad!r})", lambda s, h, f, d, bad=bad: h.requeue_run("r1", bad))
        add(f"force_release({bad!r})", lambda s, h, f, d, bad=bad: h.force_release(bad))
        add(f"register_instance({bad!r})", lambda s, h, f, d, bad=bad: h.register_instance(bad))
        add(f"heartbeat_instance({bad!r})", lambda s, h, f, d, bad=bad: h.heartbeat_instance(bad))
        add(f"drain_instance({bad!r})", lambda s, h, f, d, bad=bad: h.drain_instance(bad))
        add(f"ensure_resource_run(kind={bad!r})", lambda s, h, f, d, bad=bad: h.ensure_resource_run(bad, "k"))
        add(f"ensure_resource_run(key={bad!r})", lambda s, h, f, d, bad=bad: h.ensure_resource_run("k", bad))
        add(f"record_once({bad!r})", lambda s, h, f, d, bad=bad: d.record_once(bad, "k"))
        add(f"dispatch_log({bad!r})", lambda s, h, f, d, bad=bad: d.dispatch_log("r1", bad))
        add(f"memory ledger record_once({bad!r})", lambda s, h, f, d, bad=bad: hf.MemoryEffectLedger().record_once(bad, "k"))
        add(f"guard(effect_key={bad!r})", lambda s, h, f, d, bad=bad: hf.guard_irreversible(h, f, hf.MemoryEffectLedger(), bad, ok))
    add("register_instance(pid=-1)", lambda s, h, f, d: h.register_instance("i", pid=-1))
    add("register_instance(pid=1.5)", lambda s, h, f, d: h.register_instance("i", pid=1.5))
    add("register_instance(hostname=5)", lambda s, h, f, d: h.register_instance("i", hostname=5))
    add("register_instance(metadata=set)", lambda s, h, f, d: h.register_instance("i", metadata={1}))
    add("register_instance(metadata=nan)", lambda s, h, f, d: h.register_instance("i", metadata={"x": NAN}))
    add("register_instance(hostname=lone surrogate)", lambda s, h, f, d: h.register_instance("i", hostname=LONE))
    add("register_instance(metadata=circular)", lambda s, h, f, d: h.register_instance("i", metadata=CIRCULAR))
    for label, deep in DEEP:
        add(f"register_instance(metadata={label})", lambda s, h, f, d, deep=deep: h.register_instance("i", metadata=deep))
        add(f"insert(budget={label})", lambda s, h, f, d, deep=deep: s.insert({"id": "x", "budget": deep}))
    add("ensure_resource_run(objective=lone surrogate)", lambda s, h, f, d: h.ensure_resource_run("k", "v", objective=LONE))
    add("ensure_resource_run(objective=5)", lambda s, h, f, d: h.ensure_resource_run("k", "v", objective=5))
    add("list_runs(status=bogus)", lambda s, h, f, d: h.list_runs("bogus"))
    add("list_runs(status=5)", lambda s, h, f, d: h.list_runs(5))
    # guard_irreversible
    add("guard(heart=5)", lambda s, h, f, d: hf.guard_irreversible(5, f, hf.MemoryEffectLedger(), "k", ok))
    add("guard(ledger=5)", lambda s, h, f, d: hf.guard_irreversible(h, f, 5, "k", ok))
    async def coro(ctx: Any) -> None:
        return None

    add("guard(effect=async def)", lambda s, h, f, d: hf.guard_irreversible(h, f, hf.MemoryEffectLedger(), "k", coro))
    add("reconcile(probe=async def)", lambda s, h, f, d: hf.reconcile_outbox(d, {"mail": coro}))
    add("execute(work=async def)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, coro))
    add("guard(effect=5)", lambda s, h, f, d: hf.guard_irreversible(h, f, hf.MemoryEffectLedger(), "k", 5))
    # send_once
    base = dict(channel="mail", effect_key="k", payload={}, send=ok)

    def send(over: dict[str, Any]) -> Callable[[Any, Any, Any, Any], Any]:
        return lambda s, h, f, d: hf.send_once(h, d, **{"fence": f, **base, **over})

    for over in (
        {"channel": "pigeon"},
        {"channel": 5},
        {"effect_key": ""},
        {"effect_key": 5},
        {"payload": {"x": NAN}},
        {"payload": {"x": INF}},
        {"payload": {1, 2}},
        {"send": 5},
        {"to_external_ref": 5},
        {"fence": None},
        {"fence": good() and {"runId": "r1"}},
        {"effect_key": LONE},
    ):
        add(f"send_once({over!r})", send(over))
    for label, bad in ODD_JSON:
        add(f"send_once(payload={label})", send({"payload": bad}))
    add("send_once(send=async def)", lambda s, h, f, d: hf.send_once(h, d, fence=f, **{**base, "send": coro}))
    add("send_once(ledger=memory)", lambda s, h, f, d: hf.send_once(h, hf.MemoryEffectLedger(), fence=f, **base))
    add("send_once(heart=5)", lambda s, h, f, d: hf.send_once(5, d, fence=f, **base))
    add("send_once(other heart)", lambda s, h, f, d: hf.send_once(hf.HeartFleet(hf.MemoryLeaseStore()), d, fence=f, **base))
    # reconcile_outbox
    add("reconcile(ledger=5)", lambda s, h, f, d: hf.reconcile_outbox(5, {}))
    add("reconcile(probes=5)", lambda s, h, f, d: hf.reconcile_outbox(d, 5))
    add("reconcile(probe=5)", lambda s, h, f, d: hf.reconcile_outbox(d, {"mail": 5}))
    add("reconcile(max_attempts=-1)", lambda s, h, f, d: hf.reconcile_outbox(d, {}, max_attempts=-1))
    add("reconcile(limit=x)", lambda s, h, f, d: hf.reconcile_outbox(d, {}, limit="x"))
    add("reconcile(probes=misspelt channel)", lambda s, h, f, d: hf.reconcile_outbox(d, {"telgram": lambda i: "sent"}))
    add("reconcile(probes=unknown channel)", lambda s, h, f, d: hf.reconcile_outbox(d, {"sms": lambda i: "sent"}))
    # execute_with_lease
    work = lambda lease: None  # noqa: E731
    add("execute(heart=5)", lambda s, h, f, d: hf.execute_with_lease(5, "r1", "w", 60, work))
    add("execute(run_id=5)", lambda s, h, f, d: hf.execute_with_lease(h, 5, "w", 60, work))
    add("execute(ttl=1.5)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 1.5, work))
    add("execute(ttl=nan)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", NAN, work))
    add("execute(renew_every_ms=x)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, work, renew_every_ms="x"))
    add("execute(release_to_ready=yes)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, work, release_to_ready="yes"))
    add("execute(clock=5)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, work, clock=5))
    add("execute(work=5)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, 5))
    add("with execute(ttl=2**70)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", HUGE).__enter__())
    add("with execute(renew_every_ms=2**70)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, renew_every_ms=HUGE).__enter__())
    add("with execute(run_id=lone surrogate)", lambda s, h, f, d: hf.execute_with_lease(h, LONE, "w", 60).__enter__())
    # liveness, ledgers
    add("LivenessReclaimer(5)", lambda s, h, f, d: hf.LivenessReclaimer(5))
    add("LivenessReclaimer(ttl_ms=-1)", lambda s, h, f, d: hf.LivenessReclaimer(h, -1))
    add("DurableEffectLedger(5)", lambda s, h, f, d: hf.DurableEffectLedger(5))
    # canonical
    for bad in ({1, 2}, NAN, INF, -INF, {"x": [1, NAN]}, b"bytes", object()):
        add(f"canonicalize({bad!r})", lambda s, h, f, d, bad=bad: hf.canonicalize(bad))
        add(f"digest({bad!r})", lambda s, h, f, d, bad=bad: hf.digest(bad))
        add(f"canonical_sha256({bad!r})", lambda s, h, f, d, bad=bad: hf.canonical_sha256(bad))
        add(f"effect_key(identity={bad!r})", lambda s, h, f, d, bad=bad: hf.effect_key("p", bad))
    for label, bad in ODD_JSON:
        add(f"canonicalize({label})", lambda s, h, f, d, bad=bad: hf.canonicalize(bad))
        add(f"digest({label})", lambda s, h, f, d, bad=bad: hf.digest(bad))
        add(f"canonical_sha256({label})", lambda s, h, f, d, bad=bad: hf.canonical_sha256(bad))
        add(f"effect_key(identity={label})", lambda s, h, f, d, bad=bad: hf.effect_key("p", bad))
        add(f"verify_receipt({label})", lambda s, h, f, d, bad=bad: hf.verify_receipt({"x": bad}))
    add("deterministic_resource_id(k, lone surrogate)", lambda s, h, f, d: hf.deterministic_resource_id("k", LONE))
    add("deterministic_resource_id(lone surrogate, k)", lambda s, h, f, d: hf.deterministic_resource_id("\udc00", "k"))
    add("effect_key(prefix=lone surrogate)", lambda s, h, f, d: hf.effect_key(LONE, {}))
    add("sha256_hex(5)", lambda s, h, f, d: hf.sha256_hex(5))
    add("deterministic_resource_id(5, k)", lambda s, h, f, d: hf.deterministic_resource_id(5, "k"))
    add("deterministic_resource_id('', k)", lambda s, h, f, d: hf.deterministic_resource_id("", "k"))
    add("effect_key(5, {})", lambda s, h, f, d: hf.effect_key(5, {}))
    add("verify_receipt(5)", lambda s, h, f, d: hf.verify_receipt(5))
    add("verify_receipt({})", lambda s, h, f, d: hf.verify_receipt({}))
    add("is_lease_expired(5, now)", lambda s, h, f, d: hf.is_lease_expired(5, 0))
    add("is_lease_expired(now=garbage)", lambda s, h, f, d: hf.is_lease_expired({"lease_expires_at": T0}, "garbage"))
    add("can_acquire(None, now)", lambda s, h, f, d: hf.can_acquire(None, 0))
    add("is_instance_expired(now=1.5)", lambda s, h, f, d: hf.is_instance_expired({"last_heartbeat": T0}, 1.5))
    add("dead_instance_ids([5])", lambda s, h, f, d: hf.dead_instance_ids([5], 0))
    add("heartbeat_interval_ms(1.5)", lambda s, h, f, d: hf.heartbeat_interval_ms(1.5))
    # the memory store's controls
    for bad in ("garbage", 1.5, NAN, HUGE, None if False else [], True):
        add(f"MemoryLeaseStore({bad!r})", lambda s, h, f, d, bad=bad: hf.MemoryLeaseStore(bad))
        add(f"set_now({bad!r})", lambda s, h, f, d, bad=bad: s.set_now(bad))
    add("advance(1.5)", lambda s, h, f, d: s.advance(1.5))
    add("advance(huge)", lambda s, h, f, d: s.advance(HUGE))
    add("insert(5)", lambda s, h, f, d: s.insert(5))
    add("insert(id='')", lambda s, h, f, d: s.insert({"id": ""}))
    add("insert(duplicate key)", lambda s, h, f, d: s.insert({"id": "r9", "idempotency_key": "key:r1"}))
    add("insert(retries=nan)", lambda s, h, f, d: s.insert({"id": "x", "retries": NAN}))
    add("insert(status=bogus)", lambda s, h, f, d: s.insert({"id": "x", "status": "bogus"}))
    add("insert_instance(5)", lambda s, h, f, d: s.insert_instance(5))
    add("fail_after(times=-1)", lambda s, h, f, d: s.fail_after("*", 0, -1))
    add("execute_json(5)", lambda s, h, f, d: s.execute_json(5))
    add("execute_json(lone surrogate)", lambda s, h, f, d: s.execute_json('{"op":"read_run","run_id":"\ud800"}'))
    add("from_scenario(lone surrogate)", lambda s, h, f, d: hf.MemoryLeaseStore.from_scenario('{"x":"\ud800"}'))
    add("sqlite execute_json(lone surrogate)", lambda s, h, f, d: hf.SqliteLeaseStore(":memory:").execute_json("\ud800"))
    add("execute(5)", lambda s, h, f, d: s.execute(5))
    add("from_scenario(5)", lambda s, h, f, d: hf.MemoryLeaseStore.from_scenario(5))
    add("from_scenario('{}')", lambda s, h, f, d: hf.MemoryLeaseStore.from_scenario("{}"))
    add("SqliteLeaseStore(5)", lambda s, h, f, d: hf.SqliteLeaseStore(5))
    add("SqliteLeaseStore(timeout=-1)", lambda s, h, f, d: hf.SqliteLeaseStore(":memory:", timeout=-1))
    add("SqliteLeaseStore('a\\0b')", lambda s, h, f, d: hf.SqliteLeaseStore("a\0b"))
    add("SqliteLeaseStore(lone surrogate)", lambda s, h, f, d: hf.SqliteLeaseStore("/tmp/heart-fleet-\ud800.db"))
    add("AsyncSqliteLeaseStore('a\\0b')", lambda s, h, f, d: hf.AsyncSqliteLeaseStore("a\0b"))
    # Misspelt keyword options and missing arguments: coded too (and still TypeErrors).
    work_ = lambda lease: None  # noqa: E731
    for name, call in (
        ("HeartFleet(maxRetry=3)", lambda s, h, f, d: hf.HeartFleet(s, maxRetry=3)),
        ("HeartFleet(on_reciept=...)", lambda s, h, f, d: hf.HeartFleet(s, on_reciept=print)),
        ("acquire(ttl=60)", lambda s, h, f, d: h.acquire("r1", "w", ttl=60)),
        ("acquire(missing ttl)", lambda s, h, f, d: h.acquire("r1", "w")),
        ("list_runs(statuses=...)", lambda s, h, f, d: h.list_runs(statuses="ready")),
        ("register_instance(host=...)", lambda s, h, f, d: h.register_instance("i", host="x")),
        ("ensure_resource_run(createdBy=...)", lambda s, h, f, d: h.ensure_resource_run("k", "v", createdBy="x")),
        ("reclaim_dead_instance_runs(ttl=...)", lambda s, h, f, d: h.reclaim_dead_instance_runs(ttl=1)),
        ("execute_with_lease(renewEveryMs=...)", lambda s, h, f, d: hf.execute_with_lease(h, "r1", "w", 60, work_, renewEveryMs=5)),
        ("LeaseScope(release_to_redy=...)", lambda s, h, f, d: hf.LeaseScope(h, "r1", "w", 60, release_to_redy=True)),
        ("send_once(toExternalRef=...)", lambda s, h, f, d: hf.send_once(h, d, fence=f, **base, toExternalRef=ok)),
        ("send_once(positional)", lambda s, h, f, d: hf.send_once(h, d, f, "mail", "k", {}, ok)),
        ("guard_irreversible(extra)", lambda s, h, f, d: hf.guard_irreversible(h, f, hf.MemoryEffectLedger(), "k", ok, retries=1)),
        ("reconcile_outbox(maxAttempts=...)", lambda s, h, f, d: hf.reconcile_outbox(d, {}, maxAttempts=1)),
        ("find_stale_dispatched(lim=...)", lambda s, h, f, d: d.find_stale_dispatched(lim=1)),
        ("LivenessReclaimer(ttl=...)", lambda s, h, f, d: hf.LivenessReclaimer(h, ttl=1)),
        ("MemoryLeaseStore(clock=...)", lambda s, h, f, d: hf.MemoryLeaseStore(clock=0)),
        ("SqliteLeaseStore(busy_timeout=...)", lambda s, h, f, d: hf.SqliteLeaseStore(":memory:", busy_timeout=1)),
        ("PsycopgLeaseStore(prepared=...)", lambda s, h, f, d: hf.PsycopgLeaseStore(None, prepared=False)),
        ("AsyncPsycopgLeaseStore(prepared=...)", lambda s, h, f, d: hf.AsyncPsycopgLeaseStore(None, prepared=False)),
        ("memory ledger record_once(missing)", lambda s, h, f, d: hf.MemoryEffectLedger().record_once("r1")),
        ("canonicalize()", lambda s, h, f, d: hf.canonicalize()),
        ("effect_key(extra)", lambda s, h, f, d: hf.effect_key("p", {}, salt=1)),
    ):
        add(name, call)
    add("PsycopgLeaseStore(5)", lambda s, h, f, d: hf.PsycopgLeaseStore(5))
    add("AsyncPsycopgLeaseStore(5)", lambda s, h, f, d: hf.AsyncPsycopgLeaseStore(5))
    return out


CASES = cases()


@pytest.mark.parametrize("name,call", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(name: str, call: Callable[[Any, Any, Any, Any], Any]) -> None:
    store, heart, fence, durable = _env()
    before = (snapshot(store), store.request_count(), heart.metrics, heart.receipts(), store.now_ms())
    with pytest.raises(hf.HeartFleetError) as e:
        call(store, heart, fence, durable)
    err = e.value
    assert err.code == "invalid-input", f"{name}: {type(err).__name__} {err.code}: {err}"
    assert isinstance(err, (TypeError, ValueError)), f"{name}: {type(err).__mro__}"
    assert isinstance(err, hf.InvalidInputError)
    after = (snapshot(store), store.request_count(), heart.metrics, heart.receipts(), store.now_ms())
    assert after == before, f"{name} changed something"


ASYNC_CASES: list[tuple[str, Callable[[Any, Any, Any], Any]]] = [
    ("acquire_async(ttl=1.5)", lambda h, f, d: h.acquire_async("r1", "w", 1.5)),
    ("renew_async(ttl=0)", lambda h, f, d: h.renew_async(f, 0)),
    ("try_release_async(done)", lambda h, f, d: h.try_release_async(f, "done")),
    ("verify_fence_async(None)", lambda h, f, d: h.verify_fence_async(None)),
    ("reclaim_expired_async(-1)", lambda h, f, d: h.reclaim_expired_async(-1)),
    ("list_runs_async(bogus)", lambda h, f, d: h.list_runs_async("bogus")),
    ("requeue_run_async('')", lambda h, f, d: h.requeue_run_async("", "op")),
    ("guard_irreversible_async(effect_key='')", lambda h, f, d: hf.guard_irreversible_async(h, f, d, "", lambda c: 1)),
    (
        "send_once_async(channel=pigeon)",
        lambda h, f, d: hf.send_once_async(h, d, fence=f, channel="pigeon", effect_key="k", payload={}, send=lambda c: 1),
    ),
    ("reconcile_outbox_async(limit=-1)", lambda h, f, d: hf.reconcile_outbox_async(d, {}, limit=-1)),
    ("execute_with_lease_async(work=5)", lambda h, f, d: hf.execute_with_lease_async(h, "r1", "w", 60, 5)),
    ("record_once_async('')", lambda h, f, d: d.record_once_async("", "k")),
    ("acquire_async(ttl=60)", lambda h, f, d: h.acquire_async("r1", "w", ttl=60)),
    ("get_run_async(lone surrogate)", lambda h, f, d: h.get_run_async(LONE)),
    (
        "send_once_async(toExternalRef=...)",
        lambda h, f, d: hf.send_once_async(h, d, fence=f, channel="mail", effect_key="k", payload={}, send=lambda c: 1, toExternalRef=str),
    ),
    ("reconcile_outbox_async(probes=misspelt)", lambda h, f, d: hf.reconcile_outbox_async(d, {"telgram": lambda i: "sent"})),
    ("execute_with_lease_async(renewEveryMs=...)", lambda h, f, d: hf.execute_with_lease_async(h, "r1", "w", 60, lambda l: 1, renewEveryMs=1)),
]


@pytest.mark.parametrize("name,call", ASYNC_CASES, ids=[c[0] for c in ASYNC_CASES])
def test_bad_input_to_the_async_api(name: str, call: Callable[[Any, Any, Any], Any]) -> None:
    store, heart, fence, durable = _env()
    before = (snapshot(store), store.request_count(), heart.metrics)

    async def go() -> None:
        await call(heart, fence, durable)

    with pytest.raises(hf.InvalidInputError) as e:
        asyncio.run(go())
    assert e.value.code == "invalid-input"
    assert (snapshot(store), store.request_count(), heart.metrics) == before


def test_a_lone_surrogate_in_a_run_id_or_owner_gives_acquire_its_documented_shape() -> None:
    for run_id, owner in ((LONE, "w"), ("r1", "\udc00w"), ("r1", "w\ud83d"), ("\udfff", "\ud800")):
        store, heart, fence, durable = _env()
        before = (snapshot(store), store.request_count(), heart.metrics, heart.receipts())
        r = heart.acquire(run_id, owner, 60)
        assert (r.acquired, r.run, r.fence, r.reason, r.code) == (False, None, None, "Invalid input", "invalid-input")
        x = hf.execute_with_lease(heart, run_id, owner, 60, lambda lease: pytest.fail("the work ran"))
        assert (x.ran, x.reason, x.code) == (False, "lease-error", "invalid-input")
        assert asyncio.run(heart.acquire_async(run_id, owner, 60)) == r
        assert (snapshot(store), store.request_count(), heart.metrics, heart.receipts()) == before


def test_a_ttl_or_period_beyond_64_bits_is_a_bad_value_not_an_overflow() -> None:
    store, heart, fence, durable = _env()
    before = (snapshot(store), store.request_count(), heart.metrics)
    for kw in ({"ttl_seconds": HUGE}, {"ttl_seconds": -HUGE}, {"ttl_seconds": 60, "renew_every_ms": HUGE}):
        ttl = kw.pop("ttl_seconds")
        r = hf.execute_with_lease(heart, "r1", "w", ttl, lambda lease: pytest.fail("the work ran"), **kw)
        assert (r.ran, r.reason, r.code) == (False, "lease-error", "invalid-input")
        ra = asyncio.run(hf.execute_with_lease_async(heart, "r1", "w", ttl, lambda lease: pytest.fail("the work ran"), **kw))
        assert (ra.ran, ra.reason, ra.code) == (False, "lease-error", "invalid-input")
    assert heart.acquire("r1", "w", HUGE).code == "invalid-input"
    assert (snapshot(store), store.request_count(), heart.metrics) == before


def test_sha256_hex_of_a_lone_surrogate_is_the_reference_digest() -> None:
    # TextEncoder (the reference, the Node package) writes a lone surrogate as U+FFFD.
    assert hf.sha256_hex("a\ud800") == hf.sha256_hex("a\ufffd")
    assert hf.sha256_hex("\ud800") == "83d544ccc223c057d2bf80d3f2a32982c32c3c0db8e2674820da5064783fb097"
    assert hf.sha256_hex("\ud83d\ude00") == hf.sha256_hex("\U0001f600")


def test_the_depth_limit_is_the_cores_512_levels() -> None:
    assert hf.canonicalize(nested(512)) == "[" * 512 + "]" * 512
    for n in (513, 5000, 10_000):
        with pytest.raises(hf.InvalidInputError, match="nesting deeper than 512 levels"):
            hf.canonicalize(nested(n))


def test_coded_methods_keep_their_kind() -> None:
    # The coded wrappers keep coroutine functions coroutine functions, and the docs.
    assert inspect.iscoroutinefunction(hf.HeartFleet.acquire_async)
    assert inspect.iscoroutinefunction(hf.send_once_async)
    assert not inspect.iscoroutinefunction(hf.send_once)
    assert hf.HeartFleet.acquire.__doc__ and "fenced lease" in hf.HeartFleet.acquire.__doc__
    assert list(inspect.signature(hf.HeartFleet.acquire).parameters) == ["self", "run_id", "owner", "ttl_seconds"]

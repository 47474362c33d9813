"""Cancellation, what a send returns after it went out, and what a wrong store reply shows.

* A cancelled operation on a thread-backed store (``AsyncSqliteLeaseStore``) has not
  written: its request rolls back, unless it was already past its commit point, and then the
  write is recorded (receipt, counters) and, when it ended the operation, returned. Never a
  lease nobody knows about. ``SqliteLeaseStore`` decodes inside the transaction: a request
  interrupted or failing before its end writes nothing.
* ``send_once`` checks what it can before the send; a result it cannot store is committed as
  ``{"unstorable": {...}}`` evidence, never reported as bad input with the intent dispatched.
* A store answering a reply of the wrong kind: ``store-protocol``, one line, the step, no
  Rust ``Debug`` text and none of the store's rows.
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import heart_fleet as hf
from conftest import T0, nested

T1 = "2026-07-30T00:01:00.000Z"




class HeldCommit:
    """A sqlite3 connection whose COMMIT, once it committed, waits for the test to let it
    return: the window in which a cancellation finds the write already made, held open."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.committed = threading.Event()
        self.go_on = threading.Event()

    def execute(self, sql: str, *args: Any) -> Any:
        out = self._conn.execute(sql, *args)
        if sql == "COMMIT":
            self.committed.set()
            self.go_on.wait(10)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def hold_commits(store: hf.AsyncSqliteLeaseStore) -> HeldCommit:
    held = HeldCommit(store.sync._conn)
    store.sync._conn = held  # type: ignore[assignment]
    return held


def unhold(store: hf.AsyncSqliteLeaseStore) -> None:
    store.sync._conn = store.sync._conn._conn  # type: ignore[attr-defined]


async def cancel_after_the_commit(held: HeldCommit, task: asyncio.Future[Any]) -> None:
    """Cancels ``task`` while its request's COMMIT has committed but not yet returned."""
    while not held.committed.is_set():
        await asyncio.sleep(0.001)
    task.cancel()
    await asyncio.sleep(0.01)
    held.go_on.set()


def sqlite_world(tmp_path: Path) -> tuple[hf.AsyncSqliteLeaseStore, hf.HeartFleet, str]:
    store = hf.AsyncSqliteLeaseStore(tmp_path / "fleet.db")
    run = hf.HeartFleet(store.sync).ensure_resource_run("job", "cancel").run
    return store, hf.HeartFleet(store), run.id


def row(store: hf.AsyncSqliteLeaseStore, run_id: str) -> hf.RunRow:
    # Through the blocking store: waits on the store's lock for a worker still running.
    got = hf.HeartFleet(store.sync).get_run(run_id)
    assert got is not None
    return got


# -- item: cancellation on thread-backed stores --------------------------------------------


async def test_a_cancelled_async_sqlite_acquire_waiting_for_the_lock_has_not_written(tmp_path: Path) -> None:
    store, heart, run_id = sqlite_world(tmp_path)
    blocker = sqlite3.connect(tmp_path / "fleet.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(heart.acquire_async(run_id, "w", 60), 0.05)
    blocker.execute("COMMIT")  # the worker gets the lock, sees the cancellation, rolls back
    r = row(store, run_id)
    assert (r.status, r.lease_owner, r.fencing_epoch) == ("ready", None, 0)
    assert heart.receipts() == [] and heart.metrics.acquire_wins == 0
    # The same owner's retry takes the run at once (not lease-held for the TTL).
    again = await heart.acquire_async(run_id, "w", 60)
    assert again.acquired and again.fence is not None and again.fence.epoch == 1
    assert [x.event for x in heart.receipts()] == ["acquired"] and heart.metrics.acquire_wins == 1


async def test_a_cancellation_after_the_commit_records_the_write_and_returns_its_fence(tmp_path: Path) -> None:
    store, heart, run_id = sqlite_world(tmp_path)
    held = hold_commits(store)
    # The cancellation comes while the acquire's COMMIT returns: the lease is written, so the
    # operation finishes with it (the task returns the result instead of being cancelled).
    task = asyncio.ensure_future(heart.acquire_async(run_id, "w", 60))
    await cancel_after_the_commit(held, task)
    got = await task
    assert not task.cancelled()
    unhold(store)
    assert got.acquired and got.fence is not None and got.fence.epoch == 1
    r = row(store, run_id)
    assert (r.status, r.lease_owner, r.fencing_epoch) == ("leased", "w", 1)
    assert [x.event for x in heart.receipts()] == ["acquired"]
    assert heart.metrics.acquire_wins == 1
    assert await heart.verify_fence_async(got.fence)


async def test_wait_for_gets_the_result_of_an_acquire_cancelled_after_its_commit(tmp_path: Path) -> None:
    store, heart, run_id = sqlite_world(tmp_path)
    held = hold_commits(store)
    held.go_on.clear()
    # wait_for's timeout lands while the COMMIT is held: it returns the fence, no TimeoutError.
    waiter = asyncio.ensure_future(asyncio.wait_for(heart.acquire_async(run_id, "w", 60), 0.05))
    while not held.committed.is_set():
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.1)  # past wait_for's timeout
    held.go_on.set()
    got = await waiter
    unhold(store)
    assert got.acquired and got.fence is not None and row(store, run_id).lease_owner == "w"
    assert heart.metrics.acquire_wins == 1


async def test_a_cancellation_after_a_commit_in_the_middle_stops_there_recorded_and_recoverable(tmp_path: Path) -> None:
    store, heart, run_id = sqlite_world(tmp_path)
    fence = (await heart.acquire_async(run_id, "w", 60)).fence
    assert fence is not None
    ledger = hf.DurableEffectLedger(heart)
    fired: list[int | None] = []

    def send(ctx: hf.EffectContext) -> str:
        fired.append(ctx.epoch)
        return "ref-1"

    kw: dict[str, Any] = dict(fence=fence, channel="internal", effect_key="k1", payload={"n": 1}, send=send)
    held = hold_commits(store)
    # Cancelled during the first request's COMMIT (the fence check): it is recorded, and the
    # cancellation stands before the next request: no claim, no send.
    task = asyncio.ensure_future(hf.send_once_async(heart, ledger, **kw))
    await cancel_after_the_commit(held, task)
    with pytest.raises(asyncio.CancelledError):
        await task
    unhold(store)
    assert fired == [] and store.sync.connection.execute("SELECT count(*) FROM effect_intents").fetchone()[0] == 0
    assert heart.metrics.fence_verifications == 1
    # The same owner goes on: the effect happens once.
    s = await hf.send_once_async(heart, ledger, **kw)
    assert s.sent and s.committed and fired == [1]


async def test_execute_with_lease_async_cancelled_while_acquiring_never_runs_the_work(tmp_path: Path) -> None:
    ran: list[str] = []

    async def work(lease: hf.AsyncLease) -> str:
        ran.append(lease.fence.owner)
        return "done"

    # Waiting for the lock: nothing written, the run is as it was.
    store, heart, run_id = sqlite_world(tmp_path)
    blocker = sqlite3.connect(tmp_path / "fleet.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hf.execute_with_lease_async(heart, run_id, "w", 60, work), 0.05)
    blocker.execute("COMMIT")
    assert row(store, run_id).status == "ready" and ran == []
    # Past the acquire's commit: the lease is recorded, released as a cancelled work's is, and
    # the cancellation stands (the work never starts).
    held = hold_commits(store)
    task = asyncio.ensure_future(hf.execute_with_lease_async(heart, run_id, "w", 60, work))
    await cancel_after_the_commit(held, task)
    with pytest.raises(asyncio.CancelledError):
        await task
    unhold(store)
    assert ran == []
    r = row(store, run_id)
    assert (r.status, r.lease_owner) == ("failed", None)
    assert [x.event for x in heart.receipts()] == ["acquired", "released"]
    assert (heart.metrics.acquire_wins, heart.metrics.releases) == (1, 1)


def test_sync_sqlite_a_request_that_fails_or_is_interrupted_before_its_end_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = hf.SqliteLeaseStore(tmp_path / "fleet.db")
    heart = hf.HeartFleet(store)
    run_id = heart.ensure_resource_run("job", "sync").run.id
    real = hf._native.sql_answer
    for failure in (hf.StoreProtocolError("decode failed"), KeyboardInterrupt()):

        def broken(*args: Any, failure: BaseException = failure) -> str:
            raise failure

        monkeypatch.setattr(hf._native, "sql_answer", broken)
        with pytest.raises((hf.HeartFleetError, KeyboardInterrupt)):
            heart.acquire(run_id, "w", 60)
        monkeypatch.setattr(hf._native, "sql_answer", real)
        r = heart.get_run(run_id)
        assert r is not None and (r.status, r.fencing_epoch) == ("ready", 0), type(failure).__name__
    assert heart.acquire(run_id, "w", 60).acquired


# -- item: send_once's result after a real send ---------------------------------------------


class TextStore:
    """A blocking store that takes and gives JSON text (as a database store does)."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    def execute_json(self, text: str) -> str:
        return self.memory.execute_json(text)


circular: list[Any] = [1]
circular.append(circular)

UNSTORABLE: list[tuple[str, Any, str]] = [
    ("nan", float("nan"), "float nan"),
    ("inf", float("inf"), "float inf"),
    ("bytes", b"\x00ref", "bytes"),
    ("object", object(), "object"),
    ("set", {1, 2}, "set"),
    ("circular", circular, "list"),
    ("nested 101", nested(101), "list"),
    ("nested 6000", nested(6000), "list"),
]


@pytest.mark.parametrize("mode", ["memory", "text store", "sqlite"])
def test_send_once_commits_an_unstorable_result_as_evidence_never_invalid_input(mode: str, tmp_path: Path) -> None:
    for label, value, kind in UNSTORABLE:
        if mode == "sqlite":
            store: Any = hf.SqliteLeaseStore(tmp_path / f"{label}.db")
            run_id = hf.HeartFleet(store).ensure_resource_run("job", "send").run.id
        else:
            memory = hf.MemoryLeaseStore(T0)
            memory.insert({"id": "r1"})
            store, run_id = (memory if mode == "memory" else TextStore(memory)), "r1"
        heart = hf.HeartFleet(store)
        fence = heart.acquire(run_id, "w", 60).fence
        ledger = hf.DurableEffectLedger(heart)
        fired: list[int] = []

        def send(ctx: hf.EffectContext, value: Any = value) -> Any:
            fired.append(1)
            return value

        s = hf.send_once(heart, ledger, fence=fence, channel="mail", effect_key="k", payload={"to": "x"}, send=send)
        assert (s.sent, s.committed, len(fired)) == (True, True, 1), label
        assert s.result is value, label
        assert isinstance(s.external_ref, dict) and s.external_ref["unstorable"]["type"] == kind, (label, s.external_ref)
        assert "\n" not in s.external_ref["unstorable"]["reason"]
        [intent] = stored_intents(store)
        assert intent["state"] == "committed", label
        assert intent["external_ref"] == s.external_ref, label
        assert heart.metrics.effect_commits == 1
        again = hf.send_once(heart, ledger, fence=fence, channel="mail", effect_key="k", payload={"to": "x"}, send=send)
        assert (again.sent, again.reason, len(fired)) == (False, "deduped", 1), label


def stored_intents(store: Any) -> list[dict[str, Any]]:
    if isinstance(store, (TextStore, hf.MemoryLeaseStore)):
        memory = store.memory if isinstance(store, TextStore) else store
        return [i.to_dict() for i in memory.intents()]
    rows = store.connection.execute("SELECT state, external_ref FROM effect_intents").fetchall()
    return [{"state": st, "external_ref": json.loads(ref)} for st, ref in rows]


def test_send_once_stores_evidence_nested_100_deep_as_it_is() -> None:
    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1"})
    heart = hf.HeartFleet(TextStore(memory))
    fence = heart.acquire("r1", "w", 60).fence
    s = hf.send_once(heart, hf.DurableEffectLedger(heart), fence=fence, channel="mail", effect_key="k", payload=1, send=lambda c: nested(100))
    assert s.external_ref == nested(100) and memory.intents()[0].external_ref == nested(100)


def test_a_to_external_ref_that_raises_commits_the_unstorable_form_then_raises() -> None:
    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1"})
    heart = hf.HeartFleet(memory)
    fence = heart.acquire("r1", "w", 60).fence
    ledger = hf.DurableEffectLedger(heart)
    fired: list[int] = []

    def to_ref(result: Any) -> Any:
        raise KeyError("message_id")

    kw: dict[str, Any] = dict(
        fence=fence, channel="telegram", effect_key="k", payload={}, send=lambda c: fired.append(1) or {"ok": True}, to_external_ref=to_ref
    )
    with pytest.raises(KeyError):
        hf.send_once(heart, ledger, **kw)
    [intent] = memory.intents()
    assert intent.state == "committed"
    assert intent.external_ref["unstorable"]["type"] == "to_external_ref"
    assert "to_external_ref raised KeyError" in intent.external_ref["unstorable"]["reason"]
    again = hf.send_once(heart, ledger, **kw)
    assert (again.sent, again.reason, fired) == (False, "deduped", [1])


def test_send_once_checks_what_it_can_before_any_io() -> None:
    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1"})
    heart = hf.HeartFleet(memory)
    fence = heart.acquire("r1", "w", 60).fence
    ledger = hf.DurableEffectLedger(heart)
    before = (memory.request_count(), heart.metrics)
    fired: list[int] = []
    base: dict[str, Any] = dict(fence=fence, channel="mail", effect_key="k", payload={}, send=lambda c: fired.append(1))
    for over in (
        {"payload": {"x": math.nan}},
        {"payload": nested(6000)},
        {"payload": {b"k": 1}},
        {"effect_key": "k\ud800"},
        {"to_external_ref": "nope"},
        {"toExternalRef": lambda r: r},
    ):
        with pytest.raises(hf.InvalidInputError):
            hf.send_once(heart, ledger, **{**base, **over})
    assert fired == [] and (memory.request_count(), heart.metrics) == before and memory.intents() == []


# -- item: a reply of the wrong kind -----------------------------------------------------------


class WrongReplyStore:
    """Answers every request with a well-formed reply of the wrong kind, carrying a row."""

    def __init__(self, kind: str) -> None:
        memory = hf.MemoryLeaseStore(T0)
        memory.insert({"id": "r1", "objective": "ROW-CONTENT-MARKER", "lease_owner": "secret-owner"})
        self.rows = [r.to_dict() for r in memory.runs()]
        self.kind = kind

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = {"kind": "runs", "runs": self.rows} if self.kind == "runs" else {"kind": "instances", "instances": []}
        return {"now": T0, "reply": reply}


@pytest.mark.parametrize("kind", ["runs", "instances"])
def test_a_store_answering_the_wrong_reply_kind_is_one_line_of_store_protocol(kind: str) -> None:
    heart = hf.HeartFleet(WrongReplyStore(kind))
    fence = hf.FencingToken("r1", "w", T1, 1)
    ledger = hf.DurableEffectLedger(heart)
    calls = {
        "acquire": lambda: heart.acquire("r1", "w", 60),
        "verify": lambda: heart.verify_fence(fence),
        "release": lambda: heart.release(fence),
        "ensure": lambda: heart.ensure_resource_run("k", "v"),
        "dispatch log": lambda: ledger.dispatch_log("r1", "k"),
        "stale": lambda: ledger.find_stale_dispatched(),
    }
    for step, call in calls.items():
        with pytest.raises(hf.StoreProtocolError) as e:
            call()
        m = str(e.value)
        assert e.value.code == "store-protocol"
        for internal in ("StoreAnswer {", "Timestamp(", "Runs {", "Ok(", "Some(", "ROW-CONTENT-MARKER", "secret-owner", "\n"):
            assert internal not in m, f"{step}: {m}"
        assert kind in m, f"{step} names the reply that came: {m}"
    with pytest.raises(hf.StoreProtocolError, match=r"^unexpected answer at acquire"):
        heart.acquire("r1", "w", 60)


async def test_the_wrong_reply_kind_through_the_async_api() -> None:
    class AsyncWrong(WrongReplyStore):
        async def execute(self, request: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
            return WrongReplyStore.execute(self, request)

    heart = hf.HeartFleet(AsyncWrong("runs"))
    with pytest.raises(hf.StoreProtocolError) as e:
        await heart.acquire_async("r1", "w", 60)
    assert "StoreAnswer {" not in str(e.value) and "Timestamp(" not in str(e.value)


def test_the_unstorable_form_is_the_cores_first_line_cut_to_200_units_in_every_runtime() -> None:
    from heart_fleet.outbox import unstorable_evidence

    got = json.loads(unstorable_evidence("object", "😀" * 150 + "\r\nsecond line"))
    assert got == {"unstorable": {"type": "object", "reason": "😀" * 100}}
    # A lone surrogate (no UTF-8 form) becomes U+FFFD, as it does from JavaScript.
    assert json.loads(unstorable_evidence("object", "a\ud800b"))["unstorable"]["reason"] == "a\ufffdb"


# -- item: a blocking store object's requests, answered inside Rust (NativeOp.drive_store) ---


class Answers:
    """A blocking store with ``execute_json`` whose answer to each request is ``answer(text)``."""

    def __init__(self, answer: Any) -> None:
        self.memory = hf.MemoryLeaseStore(T0)
        self.memory.insert({"id": "r1"})
        self.answer = answer
        self.calls = 0

    def execute_json(self, text: str) -> Any:
        self.calls += 1
        return self.answer(self, text)


class TypedAnswers(Answers):
    """:class:`Answers` with ``execute``: handed each :class:`StoreRequest`."""

    def __init__(self, answer: Any) -> None:
        super().__init__(answer)
        self.execute_json = None  # type: ignore[assignment]

    def execute(self, request: hf.StoreRequest) -> Any:
        self.calls += 1
        return self.answer(self, request)


def _on(store: Answers) -> list[Any]:
    """Every lease-cycle path of the blocking API on ``store``: the typed one and the checked one."""
    heart = hf.HeartFleet(store)
    fence = hf.FencingToken("r1", "w", T1, 1)
    return [
        lambda: heart.acquire("r1", "w", 60),
        lambda: heart.verify_fence(fence),
        lambda: heart.verify_fence({"runId": "r1", "owner": "w", "leaseExpiresAt": T1}),
        lambda: heart.get_run("r1"),
    ]


def test_a_blocking_store_that_returns_an_awaitable_fails_the_request_and_says_why() -> None:
    async def later() -> str:
        return "{}"

    store = Answers(lambda self, text: later())
    for call in _on(store):
        with pytest.raises(hf.StoreUnavailableError, match=r"Answers\.execute_json returned an awaitable: use the \*_async method"):
            call()
    assert store.calls == 4
    assert store.memory.get_run("r1").status == "ready"


class AsyncAnswers(Answers):
    """:class:`Answers` as an asyncio store."""

    async def execute_json(self, text: str) -> Any:  # type: ignore[override]
        return super().execute_json(text)


def _on_async(store: Answers) -> list[Any]:
    heart = hf.HeartFleet(store)
    fence = hf.FencingToken("r1", "w", T1, 1)
    return [
        lambda: asyncio.run(heart.acquire_async("r1", "w", 60)),
        lambda: asyncio.run(heart.verify_fence_async(fence)),
        lambda: asyncio.run(heart.get_run_async("r1")),
    ]


def test_a_store_answering_nonsense_is_store_protocol_and_its_failure_store_unavailable() -> None:
    for answer, error, says in (
        (lambda self, text: 42, hf.StoreProtocolError, "the store answered int, not a StoreAnswer$"),
        (lambda self, text: "not json", hf.StoreProtocolError, "not a StoreAnswer"),
        (lambda self, text: (_ for _ in ()).throw(ValueError("the disk is gone")), hf.StoreUnavailableError, "the disk is gone"),
    ):
        for call in _on(Answers(answer)) + _on(TypedAnswers(answer)) + _on_async(AsyncAnswers(answer)):
            with pytest.raises(error, match=says):
                call()


def test_a_blocking_store_interrupted_mid_request_propagates_it_and_the_fleet_goes_on() -> None:
    def interrupted(self: Answers, text: str) -> str:
        if self.calls == 1:
            raise KeyboardInterrupt
        return self.memory.execute_json(text)

    def typed_interrupted(self: Answers, request: hf.StoreRequest) -> hf.StoreAnswer:
        if self.calls == 1:
            raise KeyboardInterrupt
        return self.memory.execute(request)

    for store in (Answers(interrupted), TypedAnswers(typed_interrupted)):
        heart = hf.HeartFleet(store)
        with pytest.raises(KeyboardInterrupt):
            heart.acquire("r1", "w", 60)
        assert store.memory.get_run("r1").status == "ready", "nothing was written"
        assert heart.acquire("r1", "w", 60).acquired
        assert heart.metrics.acquire_wins == 1

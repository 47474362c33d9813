"""PsycopgLeaseStore and AsyncPsycopgLeaseStore against a real PostgreSQL server, in a
private database per test session and route (``conftest.pg_database``): every test runs
``[direct]`` and ``[pooler]`` (through PgBouncer in transaction mode, ``pgbouncer=true``),
except the ones marked ``direct_route_only``, which say why. These tests FAIL, not skip,
when ``CI`` is set and ``DATABASE_URL`` or ``HEART_PGBOUNCER_URL`` is unusable."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

import heart_fleet as hf
from conftest import LoopTicker, PgDatabase, _with_db, direct_route_only, pg_run_id, plain_conninfo, plain_connect, seed_pg_run


def test_migrate_is_idempotent_under_the_advisory_lock(pg_url: str) -> None:
    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        assert all(applied is False for _, applied in store.migrate())
        names = [r[0] for r in store.conn.execute("SELECT name FROM heart_fleet_migrations ORDER BY name")]
        assert names == sorted(n for n, _ in hf.postgres._MigrationPlan().migrations)


def test_a_lease_cycle_on_postgres(pg_url: str) -> None:
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        heart = hf.HeartFleet(store)
        a = heart.acquire(rid, "worker-A", 60)
        assert a.acquired and a.fence is not None and a.run is not None and a.run.status == "leased"
        assert a.fence.lease_expires_at.endswith("Z") and len(a.fence.lease_expires_at) == 24
        held = heart.acquire(rid, "worker-B", 60)
        assert (held.acquired, held.code, held.reason is not None) == (False, "lease-held", True)
        assert heart.verify_fence(a.fence)
        f2 = heart.renew(a.fence, 120)
        assert f2 is not None and f2.lease_expires_at > a.fence.lease_expires_at
        assert heart.verify_fence(a.fence) is False
        row = heart.release(f2, "completed")
        assert row is not None and row.status == "completed"
        assert heart.acquire(pg_run_id(), "w", 60).code == "run-not-found"
        m = heart.metrics
        assert (m.acquire_wins, m.acquire_collisions, m.renews, m.releases) == (1, 1, 1, 1)
        assert all(hf.verify_receipt(r) for r in heart.receipts())


def test_the_fleet_hands_the_psycopg_stores_execute_the_core_request_and_its_text_form_agrees(pg_url: str) -> None:
    """A HeartFleet hands PsycopgLeaseStore.execute (and the asyncio twin's) the core's
    StoreRequest and resumes with the StoreAnswer the core read from the rows, no JSON either
    way; execute_json, given the same request's text, answers the same on the same row."""
    rid, async_rid = pg_run_id(), pg_run_id()
    seed_pg_run(pg_url, rid)
    seed_pg_run(pg_url, async_rid)

    def no_text(text: str) -> str:
        raise AssertionError("the fleet took the text path")

    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        handed: list[str] = []
        compared: list[str] = []
        execute = store.execute

        def recording(request: Any) -> Any:
            assert type(request) is hf.StoreRequest
            handed.append(request.op)
            answer = execute(request)
            assert type(answer) is hf.StoreAnswer
            if request.op == "read_run":
                text = json.loads(store.execute_json_real(request.to_json()))
                assert text["reply"] == answer.to_dict()["reply"] and text.keys() == answer.to_dict().keys()
                compared.append(request.op)
            return answer

        store.execute_json_real = store.execute_json  # type: ignore[attr-defined]
        store.execute_json = no_text  # type: ignore[method-assign,assignment]
        store.execute = recording  # type: ignore[method-assign]
        heart = hf.HeartFleet(store)
        a = heart.acquire(rid, "worker-A", 60)
        assert a.fence is not None and heart.verify_fence(a.fence)
        assert heart.get_run(rid) is not None and heart.release(a.fence, "failed") is not None
        assert handed == ["update_run", "update_run", "read_run", "update_run"] and compared == ["read_run"], handed

    async def go() -> None:
        store = await hf.AsyncPsycopgLeaseStore.connect(pg_url)
        try:
            handed: list[str] = []
            execute = store.execute

            async def recording(request: Any) -> Any:
                assert type(request) is hf.StoreRequest
                handed.append(request.op)
                answer = await execute(request)
                assert type(answer) is hf.StoreAnswer
                return answer

            store.execute = recording  # type: ignore[method-assign]
            heart = hf.HeartFleet(store)
            a = await heart.acquire_async(async_rid, "worker-B", 60)
            assert a.fence is not None and a.fence.epoch == 1
            assert await heart.release_async(a.fence, "failed") is not None
            assert handed == ["update_run", "update_run"], handed
            read = hf._native.parse_store_request(json.dumps({"op": "read_run", "run_id": async_rid}))
            typed = await execute(read)
            text = json.loads(await store.execute_json(read.to_json()))
            assert text["reply"] == typed.to_dict()["reply"] and text["reply"]["run"]["status"] == "failed"
        finally:
            await store.close()

    asyncio.run(go())


def test_a_connection_with_its_own_row_factory_still_serves_the_stores(pg_url: str) -> None:
    import psycopg
    from psycopg.rows import dict_row

    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    conninfo, kwargs = plain_conninfo(pg_url)
    conn = psycopg.connect(conninfo, autocommit=True, row_factory=dict_row, **kwargs)
    try:
        heart = hf.HeartFleet(hf.PsycopgLeaseStore(conn))
        a = heart.acquire(rid, "worker-A", 60)
        assert a.acquired and a.fence is not None and heart.release(a.fence, "completed") is not None
        assert conn.execute("SELECT status FROM agent_runs WHERE id = %s", (rid,)).fetchone() == {"status": "completed"}
    finally:
        conn.close()


def test_concurrent_acquires_on_separate_connections_have_one_winner(pg_url: str) -> None:
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    results: list[hf.AcquireResult] = []
    barrier = threading.Barrier(6)

    def worker(i: int) -> None:
        with hf.PsycopgLeaseStore.connect(pg_url) as store:
            heart = hf.HeartFleet(store)
            barrier.wait()
            results.append(heart.acquire(rid, f"w{i}", 60))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.acquired for r in results) == 1, results
    assert {r.code for r in results if not r.acquired} <= {"lease-held", "collision"}


def test_send_once_and_execute_with_lease_on_postgres(pg_url: str) -> None:
    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        heart = hf.HeartFleet(store)
        run = heart.ensure_resource_run("mutex", "pg-" + pg_run_id()).run
        ledger = hf.DurableEffectLedger(heart)
        fired: list[int | None] = []

        def work(lease: hf.Lease) -> str:
            time.sleep(0.15)  # the heartbeat thread renews meanwhile
            # A renew replaces the token: one landing between reading lease.fence and the
            # send's fenced writes rejects them (safely). The test holds the beats off (the
            # lock each beat takes) so that what it checks is the send, not that race.
            with lease._lock:
                return sends(lease)

        def sends(lease: hf.Lease) -> str:
            out = hf.send_once(
                heart,
                ledger,
                fence=lease.fence,
                channel="internal",
                effect_key="welcome:1",
                payload={"user": 1},
                send=lambda ctx: fired.append(ctx.epoch) or {"id": "msg-1"},
            )
            assert out.sent and out.committed and out.external_ref == {"id": "msg-1"}
            dup = hf.send_once(
                heart, ledger, fence=lease.fence, channel="internal", effect_key="welcome:1", payload={"user": 1}, send=lambda c: 1
            )
            assert dup.code == "deduped"
            return "ok"

        r = hf.execute_with_lease(heart, run.id, "pg-worker", 60, work, renew_every_ms=40, release_to_ready=True)
        assert (r.ran, r.result, r.released, r.lost) == (True, "ok", True, None)
        assert heart.metrics.renews >= 1 and fired == [1]
        assert [e.outcome for e in ledger.dispatch_log(run.id, "welcome:1")]
        assert heart.get_run(run.id).status == "ready"  # type: ignore[union-attr]


def test_the_receipt_sinks_append_to_heart_receipts(pg_url: str) -> None:
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    key = "heart-fleet-hmac-sha256-key:" + "cd" * 32
    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        heart = hf.HeartFleet(store, on_receipt=store.receipt_sink(signing_keys=[key]))
        a = heart.acquire(rid, "w", 60)
        heart.release(a.fence, "completed")  # type: ignore[arg-type]
        rows = store.conn.execute("SELECT event, receipt::text FROM heart_receipts WHERE run_id::text = %s ORDER BY id", (rid,)).fetchall()
        assert [r[0] for r in rows] == ["acquired", "released"]
        # Chained and signed, as the CLI writes them.
        report = hf.verify_receipts([json.loads(r[1]) for r in rows], key=key, require_chain=True)
        assert (report.findings, report.signed, report.runs[rid].last_seq) == ([], 2, 2)
        with pytest.raises(hf.InvalidInputError, match="signing key 0"):
            store.receipt_sink(signing_keys=["heart-fleet-hmac-sha256-key:00"])

    async def go() -> list[str]:
        rid2 = pg_run_id()
        seed_pg_run(pg_url, rid2)
        astore = await hf.AsyncPsycopgLeaseStore.connect(pg_url)
        try:
            heart = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())
            a = await heart.acquire_async(rid2, "w", 60)
            await heart.release_async(a.fence, "completed")  # type: ignore[arg-type]
            for _ in range(100):  # the sink runs in the background, in order
                cur = await astore.conn.execute(
                    "SELECT event FROM heart_receipts WHERE run_id::text = %s ORDER BY id", (rid2,)
                )
                events = [r[0] for r in await cur.fetchall()]
                if len(events) == 2:
                    return events
                await asyncio.sleep(0.02)
            return events
        finally:
            await astore.close()

    assert asyncio.run(go()) == ["acquired", "released"]


def test_a_failed_statement_is_store_unavailable(pg_url: str) -> None:
    # A connection of the caller's (a store never replaces one it did not open), closed.
    conn = plain_connect(pg_url, autocommit=True)
    store = hf.PsycopgLeaseStore(conn)
    heart = hf.HeartFleet(store)
    conn.close()
    with pytest.raises(hf.StoreUnavailableError):
        heart.acquire(pg_run_id(), "w", 60)


def test_the_async_store(pg_url: str) -> None:
    async def go() -> None:
        rid = pg_run_id()
        seed_pg_run(pg_url, rid)
        stores = [await hf.AsyncPsycopgLeaseStore.connect(pg_url) for _ in range(5)]
        try:
            assert all(applied is False for _, applied in await stores[0].migrate())
            hearts = [hf.HeartFleet(s) for s in stores]
            async with LoopTicker() as loop:
                results = await asyncio.gather(*(h.acquire_async(rid, f"w{i}", 60) for i, h in enumerate(hearts)))
            assert sum(r.acquired for r in results) == 1
            assert loop.ticks > 5, "the event loop was blocked while PostgreSQL worked"
            winner = next(h for h, r in zip(hearts, results) if r.acquired)
            fence = next(r.fence for r in results if r.acquired)
            assert await winner.verify_fence_async(fence)  # type: ignore[arg-type]

            async def work(lease: hf.AsyncLease) -> int:
                await asyncio.sleep(0.12)
                return 7

            rid2 = pg_run_id()
            seed_pg_run(pg_url, rid2)
            r = await hf.execute_with_lease_async(hearts[1], rid2, "async-worker", 60, work, renew_every_ms=30)
            assert (r.ran, r.result, r.released) == (True, 7, True)
            assert hearts[1].metrics.renews >= 1
        finally:
            for s in stores:
                await s.close()

    asyncio.run(go())


def test_the_sinks_of_two_stores_keep_every_receipt(pg_url: str) -> None:
    # Two stores' inserts interleave past psycopg's prepare threshold (5): through a
    # transaction pooler a statement prepared on one server connection is missing (or already
    # there) on the other, so a sink whose statements get prepared loses receipts.
    errors: list[str] = []
    with hf.PsycopgLeaseStore.connect(pg_url) as first, hf.PsycopgLeaseStore.connect(pg_url) as second:
        fleets = [hf.HeartFleet(s, on_receipt=s.receipt_sink(lambda e, r: errors.append(repr(e)))) for s in (first, second)]
        runs = [fleets[0].ensure_resource_run("sinks-py", pg_run_id()).run.id for _ in fleets]
        for _ in range(8):
            for fleet, rid in zip(fleets, runs):
                a = fleet.acquire(rid, "w", 60)
                assert a.fence is not None and fleet.release(a.fence, "ready") is not None
        count = first.conn.execute("SELECT count(*) FROM heart_receipts WHERE run_id::text = ANY(%s)", (runs,)).fetchone()
        assert (errors, count) == ([], (32,))
        # Two sinks appended to each run, each chaining after the other's receipts.
        rows = first.conn.execute("SELECT receipt::text FROM heart_receipts WHERE run_id::text = ANY(%s) ORDER BY id", (runs,)).fetchall()
        report = hf.verify_receipts([json.loads(r[0]) for r in rows], require_chain=True)
        assert (report.findings, report.chained) == ([], 32)

    async def go() -> tuple[list[str], Any]:
        stores = [await hf.AsyncPsycopgLeaseStore.connect(pg_url) for _ in range(2)]
        try:
            fleets = [hf.HeartFleet(s, on_receipt=s.receipt_sink(lambda e, r: errors.append(repr(e)))) for s in stores]
            runs = [(await fleets[0].ensure_resource_run_async("sinks-py", pg_run_id())).run.id for _ in fleets]
            for _ in range(8):
                for fleet, rid in zip(fleets, runs):
                    a = await fleet.acquire_async(rid, "w", 60)
                    assert a.fence is not None and await fleet.release_async(a.fence, "ready") is not None
            for _ in range(100):  # the sinks run in the background
                cur = await stores[0].conn.execute("SELECT count(*) FROM heart_receipts WHERE run_id::text = ANY(%s)", (runs,))
                count = await cur.fetchone()
                if count == (32,) or errors:
                    break
                await asyncio.sleep(0.02)
            return errors, count
        finally:
            for s in stores:
                await s.close()

    assert asyncio.run(go()) == ([], (32,))


def _locked(url: str, run_id: str) -> Any:
    """Another session holding the run's row lock (a statement on it waits, with no answer)."""
    blocker = plain_connect(url)
    blocker.execute("SELECT 1 FROM agent_runs WHERE id = %s FOR UPDATE", (run_id,))
    return blocker


def run_bounded(calls: dict[str, Callable[[], object]], limit: float) -> dict[str, tuple[float, object]]:
    """Runs the calls at once, each on a thread of its own: for each, the seconds it took and
    what it returned or raised. A call still running after ``limit`` seconds (without a
    deadline it would wait forever) fails the test instead of hanging it."""
    out: dict[str, tuple[float, object]] = {}
    started = time.monotonic()

    def one(name: str, call: Callable[[], object]) -> None:
        try:
            outcome: object = call()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            outcome = e
        out[name] = (time.monotonic() - started, outcome)

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in calls.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, started + limit - time.monotonic()))
    hung = sorted(set(calls) - set(out))
    assert not hung, f"still waiting after {limit} s: {hung}"
    return out


def test_a_statement_without_an_answer_fails_at_its_deadline_and_is_not_applied(pg_database: PgDatabase) -> None:
    pg_url = pg_database.url
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    loop = asyncio.new_event_loop()
    sync_store = hf.PsycopgLeaseStore.connect(pg_url, statement_timeout_ms=300)
    async_store = loop.run_until_complete(hf.AsyncPsycopgLeaseStore.connect(pg_url, statement_timeout_ms=300))
    try:
        for name, call in {
            "blocking": lambda: hf.HeartFleet(sync_store).acquire(rid, "w", 60),
            "asyncio": lambda: loop.run_until_complete(hf.HeartFleet(async_store).acquire_async(rid, "w", 60)),
        }.items():
            blocker = _locked(pg_url, rid)
            try:
                [(elapsed, outcome)] = run_bounded({name: call}, limit=10).values()
            finally:
                blocker.rollback()
                blocker.close()
            assert isinstance(outcome, hf.StoreUnavailableError) and elapsed < 3, (name, elapsed, outcome)
            # Directly, the server's statement_timeout (a little shorter) abandons the
            # statement. Through the pooler, which refuses that startup parameter, the
            # client's cancel at its deadline does, and the error says so.
            expected = "statement timeout" if pg_database.route == "direct" else "no answer within 300 ms (statement_timeout_ms); the server cancelled it"
            assert expected in str(outcome), (name, str(outcome))
    finally:
        sync_store.close()
        loop.run_until_complete(async_store.close())
        loop.close()
    # The server abandoned both statements: the run is still free.
    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        a = hf.HeartFleet(store).acquire(rid, "w", 60)
        assert a.acquired and a.fence is not None and a.fence.epoch == 1


@direct_route_only  # pg_terminate_backend ends a server connection: behind a transaction
# pooler that is not the client's (the pooler opens another, unseen by the client); the
# client's own connection is cut in the next test, on both routes.
def test_a_lost_connection_fails_one_request_and_the_next_one_reconnects(pg_url: str) -> None:
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    app = f"heart-py-{uuid.uuid4().hex[:8]}"
    with hf.PsycopgLeaseStore.connect(pg_url, application_name=app) as store:
        heart = hf.HeartFleet(store)
        a = heart.acquire(rid, "w", 60)
        assert a.fence is not None
        with plain_connect(pg_url, autocommit=True) as admin:
            n = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()
            assert n is not None and n[0] == 1
        with pytest.raises(hf.StoreUnavailableError):
            heart.verify_fence(a.fence)
        assert heart.verify_fence(a.fence) is True
        assert heart.release(a.fence, "completed") is not None


class Proxy:
    """A TCP forwarder between the stores and the test's server (PostgreSQL, or the pooler),
    which can cut its connections, or freeze: stop forwarding and accepting while closing
    nothing, the way a server stopped with SIGSTOP looks to a client (the kernel still
    completes new connections into the listen backlog; nothing ever answers)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        userinfo = parts.netloc.rpartition("@")[0]
        port = self._listener.getsockname()[1]
        #: ``url`` through the proxy.
        self.url = parts._replace(netloc=f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}").geturl()
        self._peers: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._frozen = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                watched = None if self._frozen else [self._listener, *self._peers]
            if watched is None:
                time.sleep(0.01)
                continue
            try:
                ready, _, _ = select.select(watched, [], [], 0.01)
            except (OSError, ValueError):  # a socket closed meanwhile (cut)
                continue
            with self._lock:
                for s in ready:
                    if self._frozen or self._closed:
                        break
                    if s is self._listener:
                        self._accept()
                    elif s in self._peers:
                        self._pass_on(s)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        server = socket.create_connection(self._upstream, timeout=5)
        server.settimeout(None)
        self._peers[client], self._peers[server] = server, client

    def _pass_on(self, s: socket.socket) -> None:
        try:
            data = s.recv(65536)
            if data:
                self._peers[s].sendall(data)
                return
        except OSError:
            pass
        self._close(s)

    def _close(self, s: socket.socket) -> None:
        other = self._peers.pop(s)
        self._peers.pop(other, None)
        for x in (s, other):
            x.close()

    def _cut_all(self) -> None:
        while self._peers:
            self._close(next(iter(self._peers)))

    def cut(self) -> None:
        """Closes every connection through the proxy (the server is reached again after)."""
        with self._lock:
            self._cut_all()

    def freeze(self) -> None:
        """From now on nothing is forwarded or accepted; nothing is closed."""
        with self._lock:
            self._frozen = True

    def thaw(self) -> None:
        """Forwards again, for new connections: those of the freeze are dropped with what
        they sent meanwhile (it never reached the server), and so are the ones that waited in
        the backlog (a late cancel request, say)."""
        with self._lock:
            self._cut_all()
            while True:
                try:
                    self._listener.accept()[0].close()
                except BlockingIOError:
                    break
            self._frozen = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._cut_all()
            self._listener.close()
        self._thread.join()


@pytest.fixture
def proxy(pg_url: str) -> Iterator[Proxy]:
    p = Proxy(pg_url)
    try:
        yield p
    finally:
        p.close()  # also ends a call that never got its answer (it sees its connection close)


def test_a_cut_connection_fails_one_request_and_the_next_one_reconnects(pg_url: str, proxy: Proxy) -> None:
    rid, rid2 = pg_run_id(), pg_run_id()
    seed_pg_run(pg_url, rid)
    seed_pg_run(pg_url, rid2)
    with hf.PsycopgLeaseStore.connect(proxy.url) as store:
        heart = hf.HeartFleet(store)
        a = heart.acquire(rid, "w", 60)
        assert a.fence is not None
        proxy.cut()
        with pytest.raises(hf.StoreUnavailableError):
            heart.verify_fence(a.fence)
        assert heart.verify_fence(a.fence) is True
        assert heart.release(a.fence, "completed") is not None

    async def go() -> None:
        store = await hf.AsyncPsycopgLeaseStore.connect(proxy.url)
        try:
            heart = hf.HeartFleet(store)
            a = await heart.acquire_async(rid2, "w", 60)
            assert a.fence is not None
            proxy.cut()
            with pytest.raises(hf.StoreUnavailableError):
                await heart.verify_fence_async(a.fence)
            assert await heart.verify_fence_async(a.fence) is True
            assert await heart.release_async(a.fence, "completed") is not None
        finally:
            await store.close()

    asyncio.run(go())


def test_a_frozen_server_fails_each_call_at_its_deadline_and_the_next_call_connects_again(pg_url: str, proxy: Proxy) -> None:
    names = ("connect()", "your connection", "asyncio")
    runs = {name: pg_run_id() for name in names}
    for rid in runs.values():
        seed_pg_run(pg_url, rid)
    loop = asyncio.new_event_loop()
    yours = plain_connect(proxy.url, autocommit=True)
    astore = loop.run_until_complete(hf.AsyncPsycopgLeaseStore.connect(proxy.url, statement_timeout_ms=500))
    stores: dict[str, Any] = {
        "connect()": hf.PsycopgLeaseStore.connect(proxy.url, statement_timeout_ms=500),
        "your connection": hf.PsycopgLeaseStore(yours, statement_timeout_ms=500),
        "asyncio": astore,
    }
    fleets = {name: hf.HeartFleet(store) for name, store in stores.items()}

    def acquire(name: str) -> hf.AcquireResult:
        if name == "asyncio":
            return loop.run_until_complete(fleets[name].acquire_async(runs[name], "w", 60))
        return fleets[name].acquire(runs[name], "w", 60)

    try:
        for name in names:  # each store answers through the proxy
            got = fleets[name].get_run(runs[name]) if name != "asyncio" else loop.run_until_complete(fleets[name].get_run_async(runs[name]))
            assert got is not None and got.status == "ready", name
        proxy.freeze()
        results = run_bounded({name: functools.partial(acquire, name) for name in names}, limit=10)
        for name, (elapsed, outcome) in results.items():
            assert isinstance(outcome, hf.StoreUnavailableError), (name, outcome)
            assert "no answer within 500 ms (statement_timeout_ms); its connection was shut down" in str(outcome), (name, str(outcome))
            assert elapsed < 5, (name, elapsed)
        proxy.thaw()
        # A store that opened its connection opens another: the next call succeeds, and takes
        # the run at epoch 1 (the frozen statement never reached the server).
        for name in ("connect()", "asyncio"):
            a = acquire(name)
            assert a.acquired and a.fence is not None and a.fence.epoch == 1, (name, a.reason)
        # Your connection stays yours: its socket was shut down (the server gave no answer to
        # the cancel either), so it is broken, and the store fails at once without replacing it.
        assert yours.broken
        [(elapsed, outcome)] = run_bounded({"again": lambda: acquire("your connection")}, limit=5).values()
        assert isinstance(outcome, hf.StoreUnavailableError) and elapsed < 1, (elapsed, outcome)
    finally:
        for name in ("connect()", "your connection"):
            stores[name].close()
        yours.close()
        if not loop.is_running():  # still running: a call that never got its answer (a failure above)
            loop.run_until_complete(astore.close())
            loop.close()


def test_connect_has_the_server_give_up_just_before_the_client(pg_database: PgDatabase, pg_url: str) -> None:
    """On a direct connection the server's statement_timeout is the core's margin inside the
    client's deadline (300 ms: 240 ms); a pooler takes no session parameters, so none is sent
    and the server's default (0, none) stays."""
    store = hf.PsycopgLeaseStore.connect(pg_url, statement_timeout_ms=300)
    try:
        shown = store.conn.execute("SHOW statement_timeout").fetchone()[0]
    finally:
        store.close()
    if pg_database.route == "direct":
        assert shown == "240ms"
    else:
        assert shown == "0"


def test_the_constructors_check_statement_timeout_ms(pg_url: str) -> None:
    import psycopg

    bad: list[object] = [0, -1, 86_400_001, True, 1.5, "500", None]
    with plain_connect(pg_url, autocommit=True) as conn:
        for value in bad:
            with pytest.raises(hf.InvalidInputError, match=r"^statement_timeout_ms must be an int in 1\.\.86400000"):
                hf.PsycopgLeaseStore(conn, statement_timeout_ms=value)  # type: ignore[arg-type]

    async def go() -> None:
        conninfo, needed = plain_conninfo(pg_url)
        aconn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **needed)
        try:
            for value in bad:
                with pytest.raises(hf.InvalidInputError, match=r"^statement_timeout_ms must be an int"):
                    hf.AsyncPsycopgLeaseStore(aconn, statement_timeout_ms=value)  # type: ignore[arg-type]
        finally:
            await aconn.close()

    asyncio.run(go())


def test_two_stores_interleave_their_statements_on_shared_server_connections(pg_url: str) -> None:
    # Through the pooler two clients' statements take turns on its two server connections
    # (no prepared statement, no session state may be relied on); directly, each has its own.
    tag = uuid.uuid4().hex[:8]
    with hf.PsycopgLeaseStore.connect(pg_url) as first, hf.PsycopgLeaseStore.connect(pg_url) as second:
        first.migrate()
        assert all(applied is False for _, applied in second.migrate())
        fleets = [hf.HeartFleet(first), hf.HeartFleet(second)]
        runs = [fleets[0].ensure_resource_run("pooler-py", f"{tag}-{i}").run.id for i in range(2)]
        for n in range(30):
            for fleet, rid in zip(fleets, runs):
                a = fleet.acquire(rid, "w", 60)
                assert a.acquired and a.fence is not None, (n, a.reason)
                assert fleet.verify_fence(a.fence)
                assert fleet.release(a.fence, "ready") is not None

    async def go() -> None:
        store = await hf.AsyncPsycopgLeaseStore.connect(pg_url)
        try:
            heart = hf.HeartFleet(store)
            rid = (await heart.ensure_resource_run_async("pooler-py", f"{tag}-async")).run.id
            for _ in range(10):
                a = await heart.acquire_async(rid, "w", 60)
                assert a.acquired and a.fence is not None
                assert await heart.release_async(a.fence, "ready") is not None
        finally:
            await store.close()

    asyncio.run(go())


def _pg_receipt_events(url: str, rid: str) -> list[str]:
    with plain_connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT event FROM heart_receipts WHERE run_id::text = %s ORDER BY id", (rid,))]


def _pg_run_row(url: str, rid: str) -> tuple[Any, ...]:
    with plain_connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT status, lease_owner, retries, fencing_epoch FROM agent_runs WHERE id::text = %s", (rid,)).fetchone()
        assert row is not None
        return tuple(row)


class _RefusedReceipts:
    """A trigger that refuses every receipt of run ``rid`` (dropped on exit)."""

    def __init__(self, url: str, rid: str) -> None:
        self.url, self.rid, self.name = url, rid, "refuse_" + rid.replace("-", "_")

    def __enter__(self) -> None:
        with plain_connect(self.url, autocommit=True) as conn:
            conn.execute(
                f"CREATE FUNCTION {self.name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                f"IF NEW.run_id = '{self.rid}' THEN RAISE EXCEPTION 'receipts refused for this run'; END IF; RETURN NEW; END $$"
            )
            conn.execute(f"CREATE TRIGGER {self.name} BEFORE INSERT ON heart_receipts FOR EACH ROW EXECUTE FUNCTION {self.name}()")

    def __exit__(self, *exc: Any) -> None:
        with plain_connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP TRIGGER {self.name} ON heart_receipts")
            conn.execute(f"DROP FUNCTION {self.name}()")


def test_receipts_commit_with_their_writes_or_roll_them_back(pg_url: str) -> None:
    # Blocking store: a refused receipt rolls its write back (run and counters as they were).
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    with hf.PsycopgLeaseStore.connect(pg_url) as store:
        heart = hf.HeartFleet(store, on_receipt=store.receipt_sink())
        with _RefusedReceipts(pg_url, rid):
            with pytest.raises(hf.StoreUnavailableError, match="rolled back with their receipts.*receipts refused"):
                heart.acquire(rid, "w", 60)
        assert _pg_run_row(pg_url, rid) == ("ready", None, 0, 0)
        assert _pg_receipt_events(pg_url, rid) == []
        assert (heart.metrics.acquire_attempts, heart.metrics.acquire_wins) == (0, 0)
        a = heart.acquire(rid, "w", 60)
        assert a.acquired and a.fence is not None and a.fence.epoch == 1
        # sendOnce: the claim and the dispatch mark are committed before the send runs.
        seen: list[str] = []

        def send(ctx: Any) -> dict[str, bool]:
            with plain_connect(pg_url, autocommit=True) as conn:
                seen.extend(r[0] for r in conn.execute("SELECT state FROM effect_intents WHERE run_id::text = %s", (rid,)))
            return {"ok": True}

        out = hf.send_once(heart, hf.DurableEffectLedger(heart), fence=a.fence, channel="internal", effect_key="held:1", payload={}, send=send)
        assert out.committed and seen == ["dispatched"]
        assert heart.release(a.fence, "completed") is not None
        events = _pg_receipt_events(pg_url, rid)
        assert events[0] == "acquired" and events[-1] == "released" and "effect_committed" in events
        assert (heart.metrics.acquire_attempts, heart.metrics.acquire_wins) == (1, 1)

    # The asyncio store: the same.
    async def go() -> tuple[Any, ...]:
        rid2 = pg_run_id()
        seed_pg_run(pg_url, rid2)
        astore = await hf.AsyncPsycopgLeaseStore.connect(pg_url)
        try:
            h = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())
            with _RefusedReceipts(pg_url, rid2):
                with pytest.raises(hf.StoreUnavailableError, match="receipts refused"):
                    await h.acquire_async(rid2, "w", 60)
            left = (_pg_run_row(pg_url, rid2), _pg_receipt_events(pg_url, rid2), h.metrics.acquire_attempts)
            a = await h.acquire_async(rid2, "w", 60)
            assert a.fence is not None and await h.release_async(a.fence, "completed") is not None
            # No wait: each receipt committed with its write.
            return left + (_pg_receipt_events(pg_url, rid2),)
        finally:
            await astore.close()

    assert asyncio.run(go()) == (("ready", None, 0, 0), [], 0, ["acquired", "released"])


def test_a_worker_killed_between_its_write_and_its_receipt_leaves_neither(pg_url: str) -> None:
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    # The test's own sessions go to the server directly: through the pooler (a pool of two)
    # the locker and the worker's transaction would take every server connection.
    direct = _with_db(os.environ["DATABASE_URL"], urlsplit(pg_url).path.lstrip("/"))
    # The receipts table is locked: the worker's receipt insert waits inside its transaction,
    # after its acquire's UPDATE; then the worker is killed.
    with plain_connect(direct) as locker:
        locker.execute("LOCK TABLE heart_receipts IN EXCLUSIVE MODE")
        script = (
            "import sys, heart_fleet as hf\n"
            "store = hf.PsycopgLeaseStore.connect(sys.argv[1])\n"
            "hf.HeartFleet(store, on_receipt=store.receipt_sink()).acquire(sys.argv[2], 'doomed', 60)\n"
        )
        worker = subprocess.Popen([sys.executable, "-c", script, pg_url, rid])
        try:
            with plain_connect(direct, autocommit=True) as probe:
                for _ in range(400):
                    row = probe.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'heart_receipts'::regclass").fetchone()
                    if row is not None and row[0] > 0:
                        break
                    time.sleep(0.025)
                else:
                    pytest.fail("the worker never reached its receipt insert")
        finally:
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait()
        locker.commit()
    with plain_connect(direct, autocommit=True) as probe:
        for _ in range(400):  # the server rolls the dead worker's transaction back
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.025)
    assert _pg_run_row(pg_url, rid) == ("ready", None, 0, 0)
    assert _pg_receipt_events(pg_url, rid) == []


def test_a_cancelled_held_operation_writes_nothing_and_gives_the_store_back(pg_url: str) -> None:
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    direct = _with_db(os.environ["DATABASE_URL"], urlsplit(pg_url).path.lstrip("/"))

    async def go() -> tuple[object, ...]:
        astore = await hf.AsyncPsycopgLeaseStore.connect(pg_url)
        try:
            h = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())
            # Another session holds the run's row: the acquire's UPDATE waits inside the held
            # transaction, and the operation is cancelled there.
            with plain_connect(direct) as locker:
                locker.execute("SELECT 1 FROM agent_runs WHERE id::text = %s FOR UPDATE", (rid,))
                task = asyncio.ensure_future(h.acquire_async(rid, "cancelled", 60))
                await asyncio.sleep(0.3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                locker.commit()
            a = await asyncio.wait_for(h.acquire_async(rid, "next", 60), 10)
            return a.acquired, _pg_run_row(pg_url, rid), _pg_receipt_events(pg_url, rid)
        finally:
            await astore.close()

    assert asyncio.run(go()) == (True, ("leased", "next", 0, 1), ["acquired"])


def test_held_transactions_on_a_connection_without_autocommit_and_concurrent_tasks(pg_url: str) -> None:
    # A connection of the caller's without autocommit: the held transaction is still one
    # transaction (a refused receipt rolls the acquire back).
    rid = pg_run_id()
    seed_pg_run(pg_url, rid)
    conn = plain_connect(pg_url)
    assert conn.autocommit is False
    try:
        store = hf.PsycopgLeaseStore(conn, prepare=False)
        heart = hf.HeartFleet(store, on_receipt=store.receipt_sink())
        with _RefusedReceipts(pg_url, rid):
            with pytest.raises(hf.StoreUnavailableError, match="receipts refused"):
                heart.acquire(rid, "w", 60)
        assert _pg_run_row(pg_url, rid) == ("ready", None, 0, 0)
        a = heart.acquire(rid, "w", 60)
        assert a.fence is not None and heart.release(a.fence, "completed") is not None
        assert _pg_receipt_events(pg_url, rid) == ["acquired", "released"]
    finally:
        conn.close()

    # Concurrent tasks on one asyncio store: each operation's transaction in its turn, and
    # guard's effect receipts in the chain.
    async def go() -> list[list[str]]:
        runs = [pg_run_id() for _ in range(4)]
        for r in runs:
            seed_pg_run(pg_url, r)
        astore = await hf.AsyncPsycopgLeaseStore.connect(pg_url)
        try:
            h = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())

            async def one(i: int, r: str) -> None:
                a = await h.acquire_async(r, f"a{i}", 60)
                assert a.fence is not None
                g = await hf.guard_irreversible_async(h, a.fence, hf.MemoryEffectLedger(), f"fx:{r}", lambda ctx: i)
                assert g.committed and await h.release_async(a.fence, "completed") is not None

            await asyncio.wait_for(asyncio.gather(*(one(i, r) for i, r in enumerate(runs))), 60)
            return [_pg_receipt_events(pg_url, r) for r in runs]
        finally:
            await astore.close()

    events = asyncio.run(go())
    assert events == [["acquired", "fence_verified", "effect_committed", "released"]] * 4

"""SqliteLeaseStore over the standard library's sqlite3: the statements the core renders,
the Rust store's schema and migrations, WAL, and one database file shared with the Rust CLI.

The CLI is ``$HEART_FLEET_CLI`` (the CI script builds it); without it, the shared-file tests
are skipped on a developer's machine and FAIL when ``CI`` is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import heart_fleet as hf
from conftest import LoopTicker, cli


def run_cli(db: Path, *args: str) -> str:
    out = subprocess.run([cli(), "--store", f"sqlite:{db}", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"heart-fleet {' '.join(args)} failed ({out.returncode}): {out.stderr}"
    return out.stdout


def test_a_file_is_created_migrated_in_wal_mode_and_migrate_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    store = hf.SqliteLeaseStore(db)
    assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    names = [r[0] for r in store.connection.execute("SELECT name FROM heart_fleet_migrations")]
    assert names == [n for n, _ in json.loads(hf._native.sql_migration_plan("sqlite"))["migrations"]]
    assert all(applied is False for _, applied in store.migrate())
    store.close()
    again = hf.SqliteLeaseStore(db)
    assert all(applied is False for _, applied in again.migrate())


def test_a_lease_cycle_on_sqlite(tmp_path: Path) -> None:
    store = hf.SqliteLeaseStore(tmp_path / "fleet.db")
    heart = hf.HeartFleet(store)
    run = heart.ensure_resource_run("job", "nightly-report").run
    a = heart.acquire(run.id, "worker-A", 60)
    assert a.acquired and a.fence is not None and a.fence.epoch == 1
    assert heart.acquire(run.id, "worker-B", 60).code == "lease-held"
    assert heart.verify_fence(a.fence)
    f2 = heart.renew(a.fence, 60)
    assert f2 is not None
    ledger = hf.DurableEffectLedger(heart)
    fired: list[int | None] = []
    s = hf.send_once(
        heart, ledger, fence=f2, channel="internal", effect_key="k1", payload={"n": 1}, send=lambda c: fired.append(c.epoch) or "ref"
    )
    assert s.sent and s.committed and fired == [1]
    dup = hf.send_once(heart, ledger, fence=f2, channel="internal", effect_key="k1", payload={"n": 1}, send=lambda c: fired.append(0))
    assert dup.reason == "deduped" and fired == [1]
    row = heart.release(f2, "ready")
    assert row is not None and row.status == "ready"
    r = hf.execute_with_lease(heart, run.id, "worker-C", 60, lambda lease: heart.verify_fence(lease.fence), renew_every_ms=20)
    assert r.ran and r.result is True and r.released
    assert [x.event for x in heart.receipts()][:2] == ["acquired", "fence_verified"]


def test_a_store_object_forwards_its_store_requests_to_the_sqlite_stores_execute(tmp_path: Path) -> None:
    class Forwarding:
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.ops: list[str] = []

        def execute(self, request: hf.StoreRequest) -> Any:
            self.ops.append(request.op)
            return self.inner.execute(request)

    class ForwardingAsync(Forwarding):
        async def execute(self, request: hf.StoreRequest) -> Any:  # type: ignore[override]
            self.ops.append(request.op)
            return await self.inner.execute(request)

    blocking = Forwarding(hf.SqliteLeaseStore(tmp_path / "fleet.db"))
    heart = hf.HeartFleet(blocking)
    run = heart.ensure_resource_run("job", "forwarded").run
    a = heart.acquire(run.id, "worker-A", 60)
    assert a.acquired and a.fence is not None and heart.verify_fence(a.fence)
    assert heart.release(a.fence, "ready") is not None
    assert blocking.ops[-3:] == ["update_run"] * 3

    async def go() -> None:
        store = ForwardingAsync(hf.AsyncSqliteLeaseStore(tmp_path / "fleet.db"))
        heart = hf.HeartFleet(store)
        a = await heart.acquire_async(run.id, "worker-B", 60)
        assert a.acquired and a.fence is not None and a.fence.epoch == 2
        assert await heart.release_async(a.fence, "ready") is not None
        assert store.ops == ["update_run"] * 2

    asyncio.run(go())


def test_the_typed_execute_answers_as_the_text_form_and_both_write_the_same_rows(tmp_path: Path) -> None:
    """A HeartFleet hands SqliteLeaseStore.execute the core's StoreRequest (no JSON): each
    request, answered typed on one file and as text on a twin, gives the same answer and
    leaves the same rows."""
    typed_store = hf.SqliteLeaseStore(tmp_path / "typed.db")
    text_store = hf.SqliteLeaseStore(tmp_path / "text.db")
    for store in (typed_store, text_store):
        # A file's clock never goes back: set ahead, both stay at this instant.
        store.connection.execute("INSERT OR REPLACE INTO heart_clock (id, now) VALUES (1, '2090-01-01T00:00:00.000Z')")
    seen: list[str] = []

    class Twin:
        def execute(self, request: hf.StoreRequest) -> hf.StoreAnswer:
            assert type(request) is hf.StoreRequest
            typed = typed_store.execute(request)
            assert type(typed) is hf.StoreAnswer
            text = text_store.execute_json(request.to_json())
            assert typed.to_json() == text and "2090-01-01T00:00:00.000Z" in text
            assert typed.to_dict() == json.loads(typed.to_json())
            seen.append(request.op)
            return typed

    # The run's ids are random (the store draws them): the twin starts with the same row.
    run = hf.HeartFleet(typed_store).ensure_resource_run("job", "twin").run
    text_store.connection.execute("ATTACH DATABASE ? AS typed", (str(tmp_path / "typed.db"),))
    text_store.connection.execute("INSERT INTO main.agent_runs SELECT * FROM typed.agent_runs")
    text_store.connection.execute("DETACH DATABASE typed")
    heart = hf.HeartFleet(Twin(), max_retries=1)
    assert heart.ensure_resource_run("job", "twin").run.id == run.id
    a = heart.acquire(run.id, "worker-A", 60)
    assert a.acquired and a.fence is not None
    assert heart.acquire(run.id, "worker-B", 60).code == "lease-held"
    assert heart.verify_fence(a.fence)
    f2 = heart.renew(a.fence, 60)
    assert f2 is not None and heart.release(f2, "ready") is not None
    assert not heart.verify_fence(f2)
    heart.register_instance("i-1", hostname="h", pid=1)
    assert heart.heartbeat_instance("i-1") and [i.instance_id for i in heart.list_instances()] == ["i-1"]
    assert heart.reclaim_expired().reclaimed_count == 0
    assert {"update_run", "ensure_run", "scan_runs", "upsert_instance"} <= set(seen), seen

    def rows(store: hf.SqliteLeaseStore) -> list[tuple[Any, ...]]:
        cur = store.connection.execute(
            "SELECT * FROM agent_runs ORDER BY id"
        )
        return cur.fetchall() + store.connection.execute("SELECT * FROM agent_instances").fetchall()

    assert rows(typed_store) == rows(text_store) and len(rows(typed_store)) == 2


def test_a_fleet_hands_the_sqlite_stores_execute_the_core_request(tmp_path: Path) -> None:
    def no_text(text: str) -> str:
        raise AssertionError("the fleet took the text path")

    for store in (hf.SqliteLeaseStore(tmp_path / "blocking.db"), hf.AsyncSqliteLeaseStore(tmp_path / "async.db")):
        handed: list[type] = []
        execute = store.execute

        def recording(request: Any, execute: Any = execute, handed: list[type] = handed) -> Any:
            handed.append(type(request))
            return execute(request)

        async def recording_async(request: Any, execute: Any = execute, handed: list[type] = handed) -> Any:
            handed.append(type(request))
            return await execute(request)

        store.execute_json = no_text  # type: ignore[method-assign,assignment]
        heart = hf.HeartFleet(store)
        assert not heart._text_store and heart._async_store is isinstance(store, hf.AsyncSqliteLeaseStore)
        store.execute = recording if isinstance(store, hf.SqliteLeaseStore) else recording_async  # type: ignore[method-assign]
        if isinstance(store, hf.SqliteLeaseStore):
            run = heart.ensure_resource_run("job", "typed").run
            a = heart.acquire(run.id, "w", 60)
            assert a.fence is not None and heart.release(a.fence, "ready") is not None
        else:

            async def cycle(heart: hf.HeartFleet = heart) -> None:
                run = (await heart.ensure_resource_run_async("job", "typed")).run
                a = await heart.acquire_async(run.id, "w", 60)
                assert a.fence is not None and await heart.release_async(a.fence, "ready") is not None

            asyncio.run(cycle())
        assert handed and set(handed) == {hf.StoreRequest}, handed


def test_a_subclass_that_overrides_execute_json_keeps_being_handed_text(tmp_path: Path) -> None:
    class Logged(hf.SqliteLeaseStore):
        texts: list[str] = []

        def execute_json(self, request: str) -> str:
            self.texts.append(request)
            return super().execute_json(request)

    store = Logged(tmp_path / "fleet.db")
    heart = hf.HeartFleet(store)
    run = heart.ensure_resource_run("job", "logged").run
    assert heart.acquire(run.id, "w", 60).acquired
    assert len(store.texts) == 2 and json.loads(store.texts[-1])["op"] == "update_run"


def test_rows_the_core_cannot_read_and_requests_that_are_not_one_are_store_protocol_errors() -> None:
    request = hf._native.parse_store_request(hf._native.store_request("now", "{}"))
    assert request.op == "now"
    bad_rows = ([(b"bytes",)], [(1 << 64,)], [("2026-07-30T00:00:00.000Z", "one too many")], [object()], [("\ud800",)])
    for bad in bad_rows:
        with pytest.raises(hf.StoreProtocolError):
            hf._native.sql_answer(request, "sqlite", [(["now"], bad)])
    with pytest.raises(hf.StoreProtocolError):
        hf._native.sql_answer(request, "sqlite", [(["n\ud800"], [("2026-07-30T00:00:00.000Z",)])])
    with pytest.raises(hf.InvalidInputError):
        hf._native.sql_answer(request, "mysql", [])
    with pytest.raises(hf.StoreProtocolError):
        hf._native.parse_store_request('{"op":"drop_table"}')
    with pytest.raises(hf.InvalidInputError):
        hf.SqliteLeaseStore(":memory:").execute_json("{\"op\":\"now\",\"x\":\"\ud800\"}")
    answer = hf._native.sql_answer(request, "sqlite", [(["now"], [("2026-07-30T00:00:00.000Z",)])])
    assert type(answer) is hf.StoreAnswer


def test_the_receipt_sink_appends_to_heart_receipts(tmp_path: Path) -> None:
    store = hf.SqliteLeaseStore(tmp_path / "fleet.db")
    errors: list[BaseException] = []
    heart = hf.HeartFleet(store, on_receipt=store.receipt_sink(lambda e, r: errors.append(e)))
    run = heart.ensure_resource_run("job", "x").run
    a = heart.acquire(run.id, "w", 60)
    heart.release(a.fence, "ready")  # type: ignore[arg-type]
    rows = store.connection.execute("SELECT event, run_id, digest, receipt FROM heart_receipts ORDER BY rowid").fetchall()
    assert [r[0] for r in rows] == ["acquired", "released"] and errors == []
    assert all(r[1] == run.id and r[2].startswith(hf.DIGEST_PREFIX) for r in rows)
    report = hf.verify_receipts([json.loads(r[3]) for r in rows], require_chain=True)
    assert (report.findings, report.chained) == ([], 2)


def test_a_sqlite_store_failure_is_store_unavailable(tmp_path: Path) -> None:
    store = hf.SqliteLeaseStore(tmp_path / "fleet.db")
    heart = hf.HeartFleet(store)
    store.connection.execute("DROP TABLE agent_runs")
    with pytest.raises(hf.StoreUnavailableError):
        heart.acquire("00000000-0000-4000-8000-000000000001", "w", 60)


def test_threads_share_one_store_and_one_wins(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    store = hf.SqliteLeaseStore(db)
    heart = hf.HeartFleet(store)
    run = heart.ensure_resource_run("job", "x").run
    results: list[hf.AcquireResult] = []

    def worker(i: int) -> None:
        # Each worker has its own connection to the shared file, as separate processes would.
        h = hf.HeartFleet(hf.SqliteLeaseStore(db))
        results.append(h.acquire(run.id, f"w{i}", 60))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.acquired for r in results) == 1
    assert {r.code for r in results if not r.acquired} == {"lease-held"}


def test_the_async_api_drives_the_sync_sqlite_store(tmp_path: Path) -> None:
    heart = hf.HeartFleet(hf.SqliteLeaseStore(tmp_path / "fleet.db"))

    async def go() -> bool:
        run = (await heart.ensure_resource_run_async("k", "v")).run
        a = await heart.acquire_async(run.id, "w", 60)
        return await heart.verify_fence_async(a.fence)  # type: ignore[arg-type]

    assert asyncio.run(go())


def test_the_rust_cli_reads_what_python_wrote_and_python_reads_what_it_wrote(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    store = hf.SqliteLeaseStore(db)
    heart = hf.HeartFleet(store, on_receipt=store.receipt_sink())
    run = heart.ensure_resource_run("job", "shared").run
    a = heart.acquire(run.id, "python-worker", 60)
    assert a.acquired
    store.close()

    listed = [json.loads(line) for line in run_cli(db, "runs", "list", "--json").splitlines() if line.strip()]
    mine = [r for r in listed if r["id"] == run.id]
    assert mine and mine[0]["status"] == "leased" and mine[0]["lease_owner"] == "python-worker"
    assert mine[0]["fencing_epoch"] == 1 and mine[0]["lease_expires_at"] == a.fence.lease_expires_at  # type: ignore[union-attr]

    # The receipts Python appended to heart_receipts verify in the Rust CLI, chained.
    verified = run_cli(db, "verify-receipts", "--table").strip().splitlines()[-1]
    assert verified == "1 receipts, 1 ok, 0 tampered, 0 malformed; 1 runs, 1 chained, 0 unchained, 0 signed, 0 chain findings", verified

    # The CLI writes (an operator force-release and a new run); Python sees it.
    run_cli(db, "runs", "force-release", run.id)
    run_cli(db, "runs", "create", "cli-made-key")
    store = hf.SqliteLeaseStore(db)
    heart = hf.HeartFleet(store)
    assert heart.get_run(run.id).status == "ready"  # type: ignore[union-attr]
    made = [r for r in heart.list_runs() if r.idempotency_key == "cli-made-key"]
    assert len(made) == 1
    again = heart.acquire(made[0].id, "python-worker", 60)
    assert again.acquired
    # The Python lease fences the CLI out.
    assert heart.verify_fence(again.fence)  # type: ignore[arg-type]
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM heart_fleet_migrations").fetchone()[0] >= 1
    conn.close()


def test_the_async_sqlite_store_keeps_the_loop_running(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    store = hf.AsyncSqliteLeaseStore(db)
    heart = hf.HeartFleet(store)

    async def go() -> tuple[int, list[hf.AcquireResult]]:
        run = (await heart.ensure_resource_run_async("k", "v")).run
        # Another connection holds the write lock for a while: the acquire waits on a thread.
        blocker = sqlite3.connect(db, isolation_level=None, timeout=5)
        blocker.execute("BEGIN IMMEDIATE")
        async def release_later() -> None:
            await asyncio.sleep(0.15)
            blocker.execute("COMMIT")

        # ticks counted while the acquires waited ~150 ms for the lock
        async with LoopTicker(0.002) as loop:
            r = asyncio.ensure_future(release_later())
            results = await asyncio.gather(*(heart.acquire_async(run.id, f"w{i}", 60) for i in range(4)))
        await r
        blocker.close()
        return loop.ticks, list(results)

    ticks, results = asyncio.run(go())
    assert ticks >= 20, f"the event loop ticked only {ticks} times while SQLite was locked for 150 ms"
    assert sum(r.acquired for r in results) == 1
    with pytest.raises(hf.InvalidTypeError, match="_async"):
        heart.acquire("x", "w", 60)
    assert all(applied is False for _, applied in asyncio.run(store.migrate()))
    store.close()


def test_python_and_rust_migrates_at_once_apply_each_migration_once(tmp_path: Path) -> None:
    """One migration protocol (the core's plan): Python stores and `heart-fleet migrate`
    started together on a fresh file exclude each other and record each migration once."""
    db = tmp_path / "fresh.db"
    binary = cli()
    names = [n for n, _ in json.loads(hf._native.sql_migration_plan("sqlite"))["migrations"]]
    procs = [
        subprocess.Popen([binary, "--store", f"sqlite:{db}", "migrate"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    results: list[list[tuple[str, bool]]] = []
    errors: list[BaseException] = []

    def python_migrate() -> None:
        try:
            store = hf.SqliteLeaseStore(db)
            results.append(store.migrate())
            store.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=python_migrate) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = [p.communicate(timeout=120) for p in procs]
    assert not errors, errors
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr
    conn = sqlite3.connect(db)
    recorded = conn.execute("SELECT name, count(*) FROM heart_fleet_migrations GROUP BY name ORDER BY name").fetchall()
    conn.close()
    assert recorded == [(n, 1) for n in sorted(names)]
    # Applied exactly once in total: by the CLI ("NAME: applied") or by a Python store's
    # first migrate when it opened the file (then every later migrate reports it done).
    cli_applied = sum(line == f"{n}: applied" for stdout, _ in outs for line in stdout.splitlines() for n in names)
    assert cli_applied <= len(names)
    assert all(applied is False for r in results for _, applied in r)


def _sqlite_state(db: Path, run_id: str) -> tuple[tuple[object, ...], list[str]]:
    """The run's row (status, owner, retries, epoch) and its receipts' events, read apart."""
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT status, lease_owner, retries, fencing_epoch FROM agent_runs WHERE id = ?", (run_id,)).fetchone()
        events = [r[0] for r in conn.execute("SELECT event FROM heart_receipts WHERE run_id = ? ORDER BY rowid", (run_id,))]
    return tuple(row), events


def test_receipts_commit_with_their_writes_or_roll_them_back(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    store = hf.SqliteLeaseStore(db)
    heart = hf.HeartFleet(store, on_receipt=store.receipt_sink())
    run = heart.ensure_resource_run("job", "held").run
    store.connection.execute(
        f"CREATE TRIGGER refuse BEFORE INSERT ON heart_receipts WHEN NEW.run_id = '{run.id}' "
        "BEGIN SELECT RAISE(ABORT, 'receipts refused for this run'); END"
    )
    with pytest.raises(hf.StoreUnavailableError, match="rolled back with their receipts.*receipts refused"):
        heart.acquire(run.id, "w", 60)
    assert _sqlite_state(db, run.id) == (("ready", None, 0, 0), [])
    assert (heart.metrics.acquire_attempts, heart.metrics.acquire_wins) == (0, 0)

    async def go() -> tuple[object, ...]:
        astore = hf.AsyncSqliteLeaseStore(db)
        h = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())
        with pytest.raises(hf.StoreUnavailableError, match="receipts refused"):
            await h.acquire_async(run.id, "w", 60)
        refused = (_sqlite_state(db, run.id), h.metrics.acquire_attempts)
        astore.sync.connection.execute("DROP TRIGGER refuse")
        a = await h.acquire_async(run.id, "w", 60)
        assert a.fence is not None and a.fence.epoch == 1
        assert await h.release_async(a.fence, "ready") is not None
        astore.close()
        return refused + (_sqlite_state(db, run.id), h.metrics.acquire_wins)

    assert asyncio.run(go()) == ((("ready", None, 0, 0), []), 0, (("ready", None, 0, 1), ["acquired", "released"]), 1)
    # The blocking store's fleet goes on too.
    a = heart.acquire(run.id, "w2", 60)
    assert a.acquired and _sqlite_state(db, run.id)[1] == ["acquired", "released", "acquired"]


def test_a_worker_killed_between_its_write_and_its_receipt_leaves_neither(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    store = hf.SqliteLeaseStore(db)
    run = hf.HeartFleet(store).ensure_resource_run("job", "killed").run
    # Each receipt insert calls a function that only the worker defines: it says so in a file,
    # then sleeps, so the worker is killed after its acquire's UPDATE, before the COMMIT.
    store.connection.execute("CREATE TRIGGER pause BEFORE INSERT ON heart_receipts BEGIN SELECT heart_test_pause(); END")
    store.close()
    marker = tmp_path / "paused"
    script = (
        "import sys, time, pathlib, heart_fleet as hf\n"
        "store = hf.SqliteLeaseStore(sys.argv[1])\n"
        "def pause():\n"
        "    pathlib.Path(sys.argv[3]).write_text('paused')\n"
        "    time.sleep(60)\n"
        "store.connection.create_function('heart_test_pause', 0, pause)\n"
        "hf.HeartFleet(store, on_receipt=store.receipt_sink()).acquire(sys.argv[2], 'doomed', 60)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script, str(db), run.id, str(marker)])
    try:
        for _ in range(400):
            if marker.exists() or worker.poll() is not None:
                break
            threading.Event().wait(0.025)
        assert marker.exists(), "the worker never reached its receipt insert"
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    assert _sqlite_state(db, run.id) == (("ready", None, 0, 0), [])


def test_a_cancelled_held_operation_writes_nothing_and_gives_the_store_back(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    run = hf.HeartFleet(hf.SqliteLeaseStore(db)).ensure_resource_run("job", "cancelled").run

    async def go() -> tuple[object, ...]:
        astore = hf.AsyncSqliteLeaseStore(db)
        h = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())
        # Another connection holds the write lock: the held transaction waits to begin.
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        task = asyncio.ensure_future(h.acquire_async(run.id, "cancelled", 60))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        other.execute("COMMIT")
        other.close()
        # The cancelled operation's transaction is rolled back and the store given back.
        a = await asyncio.wait_for(h.acquire_async(run.id, "next", 60), 10)
        state = _sqlite_state(db, run.id)
        astore.close()
        return a.acquired, a.fence.epoch if a.fence else None, state, h.metrics.acquire_attempts

    acquired, epoch, state, attempts = asyncio.run(go())
    assert (acquired, epoch, state, attempts) == (True, 1, (("leased", "next", 0, 1), ["acquired"]), 1)


def test_held_receipts_of_concurrent_operations_and_of_effects_are_all_in_the_chain(tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    seeder = hf.HeartFleet(hf.SqliteLeaseStore(db))
    runs = [seeder.ensure_resource_run("job", f"c{i}").run.id for i in range(4)]
    cycle = ["acquired", "fence_verified", "fence_verified", "effect_committed", "released"]

    # Blocking: guard_irreversible's effect receipt records no write; it is in the table when
    # the guard returns.
    store = hf.SqliteLeaseStore(db)
    heart = hf.HeartFleet(store, on_receipt=store.receipt_sink())
    for i, rid in enumerate(runs):
        a = heart.acquire(rid, f"w{i}", 60)
        assert a.fence is not None and heart.verify_fence(a.fence)
        assert hf.guard_irreversible(heart, a.fence, hf.MemoryEffectLedger(), f"fx:{rid}:1", lambda ctx: 1).committed
        assert _sqlite_state(db, rid)[1][-1] == "effect_committed"
        assert heart.release(a.fence, "ready") is not None

    # asyncio: four cycles at once on one store, each operation's transaction on a thread.
    async def go() -> None:
        astore = hf.AsyncSqliteLeaseStore(db)
        h = hf.HeartFleet(astore, on_receipt=astore.receipt_sink())

        async def one(i: int, rid: str) -> None:
            a = await h.acquire_async(rid, f"a{i}", 60)
            assert a.fence is not None and await h.verify_fence_async(a.fence)
            g = await hf.guard_irreversible_async(h, a.fence, hf.MemoryEffectLedger(), f"fx:{rid}:2", lambda ctx: 2)
            assert g.committed
            assert await h.release_async(a.fence, "ready") is not None

        async with LoopTicker() as loop:
            await asyncio.wait_for(asyncio.gather(*(one(i, rid) for i, rid in enumerate(runs))), 60)
        assert loop.ticks > 0
        astore.close()

    asyncio.run(go())
    for rid in runs:
        assert _sqlite_state(db, rid)[1] == cycle + cycle
    with sqlite3.connect(db) as conn:
        logged = [json.loads(r[0]) for r in conn.execute("SELECT receipt FROM heart_receipts ORDER BY rowid")]
    report = hf.verify_receipts(logged, require_chain=True)
    assert (report.findings, report.chained) == ([], 40)

"""SqliteLeaseStore: a store over the standard library's ``sqlite3``.

Each store request runs the statements the core renders for SQLite
(``heart_fleet_core::sql``) in one ``BEGIN IMMEDIATE`` transaction (the write lock is taken
before the clock read, so every statement sees one ``now`` and one state), and the core
decodes the rows. The schema, the migrations and their record (``heart_fleet_migrations``)
are the Rust SQLite store's, and files are opened in WAL mode with a busy timeout, so Python
workers, Rust workers and the ``heart-fleet`` CLI can share one database file.

The answer to a request is decoded inside its transaction, so the ``COMMIT`` is the request's
last step: a request that fails (or is interrupted) before it rolls back and writes nothing.

**Cancellation** (:class:`AsyncSqliteLeaseStore`, whose requests run on a worker thread): a
cancelled operation has not written. The worker checks, under a lock shared with the awaiting
task, whether the task was cancelled right before its ``COMMIT``; if it was, it rolls back (a
request still waiting for another connection's write lock rolls back once it gets it, or
never starts), and the cancellation propagates at once. The one case a cancellation cannot
undo is a request that had passed that check when the cancellation came: its transaction
commits, and the operation records it like any other answer (receipt, counters); an
operation that ends with that write returns its result (the cancellation is absorbed, as
asyncio lets a task that finished anyway do: ``asyncio.wait_for`` then returns the result
instead of raising ``TimeoutError``), and one that would need more store work stops there
with ``CancelledError``, its earlier writes recorded and left to the recovery paths. So a
cancelled ``acquire_async`` either left the run as it was (the caller's retry can take it at
once) or returned its fence: never a lease that nobody knows about.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import _check
from . import _driver
from . import _native
from . import _receipt_table
from ._driver import CancelledAfterCommit
from ._native import StoreAnswer, StoreRequest
from ._sql_store import AsyncSqlStore, SqlStore
from .errors import InvalidInputError, InvalidTypeError, StoreProtocolError, StoreUnavailableError
from .types import HeartReceipt

__all__ = ["SqliteLeaseStore", "AsyncSqliteLeaseStore", "MIGRATIONS_TABLE", "BUSY_TIMEOUT_SECONDS"]

#: The table that records applied migrations (shared with the Rust stores).
MIGRATIONS_TABLE = "heart_fleet_migrations"
#: How long a statement waits for another process's write lock before it fails.
BUSY_TIMEOUT_SECONDS = 30.0


def split_script(script: str) -> list[str]:
    """The statements of a SQL script (``sqlite3.complete_statement`` knows triggers)."""
    out: list[str] = []
    buf = ""
    for part in script.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \t\r\n;"):
                out.append(buf.strip())
            buf = ""
    if buf.strip(" \t\r\n;"):
        out.append(buf.strip())
    return out


class _Gate:
    """The commit point of one request run on a worker thread, shared with the task awaiting
    it: either the task cancels first (the worker then rolls back, or never starts) or the
    worker passes first (its transaction commits and the task must take the answer)."""

    __slots__ = ("_lock", "_state")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "open"

    def cancel(self) -> bool:
        """Called by the task on cancellation: ``True`` when the request will not commit."""
        with self._lock:
            if self._state == "open":
                self._state = "cancelled"
            return self._state == "cancelled"

    def commit(self) -> bool:
        """Called by the worker right before ``COMMIT``: ``False`` when it must roll back."""
        with self._lock:
            if self._state == "open":
                self._state = "committing"
            return self._state == "committing"

    @property
    def cancelled(self) -> bool:
        with self._lock:
            return self._state == "cancelled"


class _NotCommitted(Exception):
    """The worker's side of a cancelled request: rolled back, nothing written."""


def _sqlite_path(path: str | os.PathLike[str]) -> str | bytes:
    """A file name sqlite3 can open, or ``InvalidInputError``: a NUL byte, or a lone surrogate
    that is not the file system's encoding of an undecodable byte (``os.fsencode``)."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        raw = text
    else:
        try:
            raw = os.fsencode(text)
        except UnicodeEncodeError:
            raise InvalidInputError(
                f"path {text.encode('utf-8', 'backslashreplace').decode('ascii', 'replace')[:200]!r} "
                "is not a file name (a lone surrogate)"
            ) from None
    if b"\0" in raw:
        raise InvalidInputError("path must not contain a NUL character")
    # A name that is valid UTF-8 is passed as text (sqlite3's own form); otherwise as bytes.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # A request abandoned by a cancelled task: its outcome (a rollback) is nobody's.
    if not fut.cancelled():
        fut.exception()


async def _uninterrupted(fut: asyncio.Future[Any]) -> Any:
    """The result of a request that committed, however often the task is cancelled meanwhile."""
    while True:
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if fut.done():
                return fut.result()


async def _on_thread(fn: Callable[[StoreRequest, _Gate], StoreAnswer], request: StoreRequest) -> StoreAnswer:
    """Runs ``fn(request, gate)`` on a worker thread with the cancellation protocol above."""
    gate = _Gate()
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    fut = loop.run_in_executor(None, ctx.run, fn, request, gate)
    fut.add_done_callback(_retrieve)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        if gate.cancel():
            raise  # the worker rolls back (or never starts): nothing is written
        # The worker was past its commit point: the write happened; hand its answer on.
        try:
            answer = await _uninterrupted(fut)
        except Exception:  # noqa: BLE001 - the COMMIT failed: nothing was written after all
            raise asyncio.CancelledError() from None
        raise CancelledAfterCommit(answer) from None


def _bind(p: Any, now: str | None) -> Any:
    if p == "now":
        if now is None:
            raise StoreProtocolError("sqlite: the now parameter before the clock read")
        return now
    if isinstance(p, dict):
        if "int" in p:
            return int(p["int"])
        if "text" in p:
            return str(p["text"])
    raise StoreProtocolError(f"sqlite: an unexpected SQL parameter {p!r}")


def _wal_mode(conn: sqlite3.Connection, timeout: float) -> str:
    """Switches ``conn``'s file to WAL and returns the journal mode it is in. The switch takes
    an exclusive lock, and SQLite answers "database is locked" at once (no busy handler) while
    another connection holds one, say a second process opening the same new file: wait for it
    within the busy timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class _Session:
    """The store's connection kept by one held transaction (``_receipt_table``): the store's
    lock is taken at ``begin`` (``BEGIN IMMEDIATE``: the write lock, so every statement sees one
    state) and given back at ``release``, so no other request joins the transaction."""

    def __init__(self, store: SqliteLeaseStore) -> None:
        self.store = store
        self.locked = False

    def begin(self) -> None:
        self.store._lock.acquire()
        self.locked = True
        try:
            self.store._conn.execute("BEGIN IMMEDIATE")
        except BaseException as e:
            self.release()
            if isinstance(e, sqlite3.Error):
                raise StoreUnavailableError(f"sqlite: {e}") from e
            raise

    def answer(self, request: StoreRequest) -> StoreAnswer:
        try:
            return self.store._answer(request)
        except sqlite3.Error as e:
            raise StoreUnavailableError(f"sqlite: {e}") from e

    def rows(self, statement: dict[str, Any]) -> list[list[list[Any]]]:
        return self.store._rows(statement)

    def commit(self) -> None:
        try:
            self.store._conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreUnavailableError(f"sqlite: {e}") from e

    def rollback(self) -> None:
        conn = self.store._conn
        try:
            if self.locked and conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # a connection that cannot roll back has lost the transaction already

    def release(self) -> None:
        if self.locked:
            self.locked = False
            self.store._lock.release()


class _ThreadSession:
    """:class:`_Session` for the asyncio store: every call runs on one thread of its own (the
    store's lock belongs to the thread that took it), which ends at ``release``. A call that
    is cancelled goes on there; the roll-back and the release queue behind it."""

    def __init__(self, store: SqliteLeaseStore) -> None:
        self.session = _Session(store)
        self.thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="heart-fleet-held")

    async def _on_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn, *args)

    async def begin(self) -> None:
        try:
            await self._on_thread(self.session.begin)
        except Exception:
            self.thread.shutdown(wait=False)  # it gave back the lock: nothing to release
            raise

    async def answer(self, request: StoreRequest) -> StoreAnswer:
        answer: StoreAnswer = await self._on_thread(self.session.answer, request)
        return answer

    async def rows(self, statement: dict[str, Any]) -> list[list[list[Any]]]:
        rows: list[list[list[Any]]] = await self._on_thread(self.session.rows, statement)
        return rows

    async def commit(self) -> None:
        await _driver.committed(self._on_thread(self.session.commit))

    async def rollback(self) -> None:
        await self._on_thread(self.session.rollback)

    def release(self) -> None:
        self.thread.submit(self.session.release)
        self.thread.shutdown(wait=False)


class SqliteLeaseStore(SqlStore):
    """A heart-fleet store over one ``sqlite3`` connection (thread-safe: requests are
    serialized by a lock, so a heartbeat thread may share it).

    ``SqliteLeaseStore(path)`` opens (and creates) the file in WAL mode with a 30 s busy
    timeout and applies the migrations (``migrate=False`` to skip). ``":memory:"`` is a
    private in-memory database. ``SqliteLeaseStore(connection=conn)`` wraps a connection
    you opened (it must be in autocommit mode: ``isolation_level=None``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        connection: sqlite3.Connection | None = None,
        migrate: bool = True,
        timeout: float = BUSY_TIMEOUT_SECONDS,
    ) -> None:
        if connection is not None:
            if not isinstance(connection, sqlite3.Connection):
                raise InvalidTypeError(f"connection must be a sqlite3.Connection, got {_check.describe(connection)}")
            if connection.isolation_level is not None:
                raise InvalidTypeError("the connection must be in autocommit mode (isolation_level=None)")
            self._conn = connection
        else:
            if path is None:
                path = "heart-fleet.db"
            if not isinstance(path, (str, os.PathLike)):
                raise InvalidTypeError(f"path must be a str or a path, got {_check.describe(path)}")
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
                raise InvalidTypeError(f"timeout must be seconds >= 0, got {_check.describe(timeout)}")
            name = _sqlite_path(path)
            try:
                self._conn = sqlite3.connect(name, timeout=timeout, isolation_level=None, check_same_thread=False)
                if str(path) != ":memory:":
                    mode = _wal_mode(self._conn, timeout)
                    if str(mode).lower() != "wal":
                        raise StoreUnavailableError(f"sqlite: the database refused WAL mode (journal mode {mode})")
                # WAL + NORMAL: a commit survives a crash of the process (not of the machine).
                self._conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as e:
                raise StoreUnavailableError(f"sqlite open {path}: {e}") from e
        self._lock = threading.RLock()
        if migrate:
            self.migrate()

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection (for seeding and inspecting rows)."""
        return self._conn

    def close(self) -> None:
        """Closes the connection."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SqliteLeaseStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def migrate(self) -> list[tuple[str, bool]]:
        """Applies every migration that ``heart_fleet_migrations`` does not record yet, each in
        one ``BEGIN IMMEDIATE`` transaction together with its record. Idempotent. Returns
        ``(name, applied_now)`` per migration."""
        # The core's migration protocol, the one every store in every language runs.
        plan = json.loads(_native.sql_migration_plan("sqlite"))
        out: list[tuple[str, bool]] = []
        with self._lock:
            conn = self._conn
            for name, script in plan["migrations"]:
                try:
                    conn.execute(plan["begin"])
                    try:
                        conn.execute(plan["createRecordTable"])
                        seen = conn.execute(plan["isApplied"], (name,)).fetchone()[0]
                        if seen == 0:
                            for stmt in split_script(script):
                                conn.execute(stmt)
                            conn.execute(plan["record"], (name,))
                        conn.execute(plan["commit"])
                    except BaseException:
                        conn.execute(plan["rollback"])
                        raise
                except sqlite3.Error as e:
                    raise StoreUnavailableError(f"migration {name} failed: {e}") from e
                out.append((name, seen == 0))
        return out

    def _answer(self, request: StoreRequest) -> StoreAnswer:
        """The statements the core renders for ``request``, run on the connection (inside the
        caller's transaction), and the answer the core reads from their rows."""
        conn = self._conn
        results: list[tuple[list[str], list[Any]]] = []
        now: str | None = None
        for sql, params in _native.sql_statements(request, "sqlite"):
            if None in params:  # SQLite's `now`: the text the clock read returned
                if now is None:
                    raise StoreProtocolError("sqlite: the now parameter before the clock read")
                params = [now if p is None else p for p in params]
            cur = conn.execute(sql, params)
            names = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchall()
            if now is None and rows and "now" in names:
                clock = rows[0][names.index("now")]
                now = clock if isinstance(clock, str) else None
            results.append((names, rows))
        return _native.sql_answer(request, "sqlite", results)

    def _execute(self, request: StoreRequest, gate: _Gate | None = None) -> StoreAnswer:
        """One request in one transaction; with ``gate``, the cancellation protocol (module docs)."""
        with self._lock:
            if gate is not None and gate.cancelled:
                raise _NotCommitted("cancelled before it started")
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Decoded before the COMMIT: an answer that cannot be decoded writes nothing,
                    # and nothing but the COMMIT is left after the commit point.
                    answer = self._answer(request)
                    if gate is not None and not gate.commit():
                        raise _NotCommitted("cancelled before its commit")
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise StoreUnavailableError(f"sqlite: {e}") from e
        return answer

    def _rows(self, st: dict[str, Any]) -> list[list[list[Any]]]:
        """One core statement (a receipt append's) on the connection: its rows."""
        cur = self._conn.execute(st["sql"], [_bind(p, None) for p in st["params"]])
        names = [d[0] for d in cur.description] if cur.description else []
        return [[[n, v] for n, v in zip(names, row)] for row in cur.fetchall()]

    def receipt_sink(
        self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None, *, signing_keys: Sequence[str] = ()
    ) -> _receipt_table.ReceiptSink:
        """An ``on_receipt`` sink that appends each receipt to the ``heart_receipts`` table
        (what ``heart-fleet metrics`` and ``verify-receipts --table`` read), chained per run
        and, with ``signing_keys`` (key file texts), signed; the core decides every statement.
        Given to a ``HeartFleet`` over this store, each operation's writes and their receipts
        commit in one transaction, and a receipt that cannot be inserted fails the operation
        (``StoreUnavailableError``, nothing written; see ``_receipt_table``). Anywhere else it
        appends right after the write, and a failure goes to ``on_error`` (default: ignored),
        never to the lease operation. A bad key raises here."""
        app = _receipt_table.appender("sqlite", signing_keys)
        keys = list(signing_keys)
        report = _receipt_table.reporter(on_error)

        def append_now(receipt: str) -> None:
            try:
                with self._lock:  # the whole append: the appender decides on each answer
                    _driver.run_sync(_receipt_table.appending(app, receipt, self._rows))
            except Exception as e:  # noqa: BLE001 - reported to on_error only
                report(e, receipt)

        return _receipt_table.ReceiptSink(
            self, append_now, lambda: _Session(self), lambda: _receipt_table.appender("sqlite", keys), report
        )


class AsyncSqliteLeaseStore(AsyncSqlStore):
    """:class:`SqliteLeaseStore` for the asyncio API: each request runs on a worker thread,
    so the event loop keeps running while SQLite works or waits for another process's write
    lock. Same arguments as :class:`SqliteLeaseStore`; ``sync`` is the blocking store
    underneath (for the blocking API, seeding and inspecting).

    A cancelled operation has not written (see the module docs): a request in flight rolls
    back, except one already past its commit point, whose write the operation records (and
    returns, when it was the operation's last)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        connection: sqlite3.Connection | None = None,
        migrate: bool = True,
        timeout: float = BUSY_TIMEOUT_SECONDS,
    ) -> None:
        self.sync = SqliteLeaseStore(path, connection=connection, migrate=migrate, timeout=timeout)

    async def _execute(self, request: StoreRequest) -> StoreAnswer:
        # On a worker thread, with the cancellation protocol (the module docs).
        return await _on_thread(self.sync._execute, request)

    async def migrate(self) -> list[tuple[str, bool]]:
        """:meth:`SqliteLeaseStore.migrate`, on a worker thread."""
        return await asyncio.to_thread(self.sync.migrate)

    def receipt_sink(
        self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None, *, signing_keys: Sequence[str] = ()
    ) -> _receipt_table.ReceiptSink:
        """:meth:`SqliteLeaseStore.receipt_sink`; a fleet over this store holds each
        operation's writes and receipts in one transaction, on a thread of its own. Called
        directly it returns an awaitable (the append, on a worker thread)."""
        sync = self.sync.receipt_sink(on_error, signing_keys=signing_keys)

        async def append_now(receipt: str) -> None:
            # On a thread: the store's lock may be a held transaction's, on a thread of its own.
            await asyncio.to_thread(sync.append_now, receipt)

        return _receipt_table.ReceiptSink(self, append_now, lambda: _ThreadSession(self.sync), sync.new_appender, sync.report)

    def close(self) -> None:
        """Closes the connection."""
        self.sync.close()

"""SqliteLeaseStore: a store over the standard library's ``sqlite3``.

Each store request runs the statements the core renders for SQLite
(``heart_fleet_core::sql``) in one ``BEGIN IMMEDIATE`` transaction (the write lock is taken
before the clock read, so every statement sees one ``now`` and one state), and the core
decodes the rows. The schema, the migrations and their record (``heart_fleet_migrations``)
are the Rust SQLite store's, and files are opened in WAL mode with a busy timeout, so Python
workers, Rust workers and the ``heart-fleet`` CLI can share one database file.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from . import _check
from . import _native
from .errors import InvalidTypeError, StoreProtocolError, StoreUnavailableError
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


class SqliteLeaseStore:
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
            try:
                self._conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
                if str(path) != ":memory:":
                    mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
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

    def _run(self, statements: list[dict[str, Any]]) -> list[list[list[list[Any]]]]:
        conn = self._conn
        results: list[list[list[list[Any]]]] = []
        now: str | None = None
        for st in statements:
            cur = conn.execute(st["sql"], [_bind(p, now) for p in st["params"]])
            names = [d[0] for d in cur.description] if cur.description else []
            rows = [[[n, v] for n, v in zip(names, row)] for row in cur.fetchall()]
            if now is None and rows:
                for n, v in rows[0]:
                    if n == "now" and isinstance(v, str):
                        now = v
                        break
            results.append(rows)
        return results

    def execute_json(self, request: str) -> str:
        """The store contract's text form: StoreRequest JSON text -> StoreAnswer JSON text."""
        if not isinstance(request, str):
            raise InvalidTypeError("execute_json: a StoreRequest as JSON text")
        statements = json.loads(_native.sql_render(request, "sqlite"))
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    results = self._run(statements)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                raise StoreUnavailableError(f"sqlite: {e}") from e
        try:
            text = json.dumps(results, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StoreProtocolError(f"sqlite: a column the core cannot read: {e}") from e
        return str(_native.sql_decode(request, "sqlite", text))

    def receipt_sink(self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None) -> Callable[[HeartReceipt], None]:
        """An ``on_receipt`` sink that appends each receipt to the ``heart_receipts`` table
        (what ``heart-fleet metrics`` and ``verify-receipts --table`` read). A failure goes
        to ``on_error`` (default: ignored), never to the lease operation."""

        def sink(receipt: HeartReceipt) -> None:
            try:
                st = json.loads(_native.sql_receipt_insert("sqlite", json.dumps(receipt.to_dict())))
                with self._lock:
                    self._conn.execute(st["sql"], [_bind(p, None) for p in st["params"]])
            except Exception as e:  # noqa: BLE001 - reported to on_error only
                if on_error is not None:
                    on_error(e, receipt)

        return sink

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """The store contract: a StoreRequest (dict) -> its StoreAnswer (dict)."""
        answer: dict[str, Any] = json.loads(self.execute_json(json.dumps(request, separators=(",", ":"))))
        return answer


class AsyncSqliteLeaseStore:
    """:class:`SqliteLeaseStore` for the asyncio API: each request runs on a worker thread
    (``asyncio.to_thread``), so the event loop keeps running while SQLite works or waits for
    another process's write lock. Same arguments as :class:`SqliteLeaseStore`; ``sync`` is the
    blocking store underneath (for the blocking API, seeding and inspecting)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        connection: sqlite3.Connection | None = None,
        migrate: bool = True,
        timeout: float = BUSY_TIMEOUT_SECONDS,
    ) -> None:
        self.sync = SqliteLeaseStore(path, connection=connection, migrate=migrate, timeout=timeout)

    async def execute_json(self, request: str) -> str:
        """The store contract's text form, on a worker thread."""
        return await asyncio.to_thread(self.sync.execute_json, request)

    async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """The store contract, on a worker thread."""
        return await asyncio.to_thread(self.sync.execute, request)

    async def migrate(self) -> list[tuple[str, bool]]:
        """:meth:`SqliteLeaseStore.migrate`, on a worker thread."""
        return await asyncio.to_thread(self.sync.migrate)

    def receipt_sink(self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None) -> Callable[[HeartReceipt], None]:
        """:meth:`SqliteLeaseStore.receipt_sink`."""
        return self.sync.receipt_sink(on_error)

    def close(self) -> None:
        """Closes the connection."""
        self.sync.close()

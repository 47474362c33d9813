"""PsycopgLeaseStore and AsyncPsycopgLeaseStore: stores over psycopg 3.

Each store request is the one statement the core renders for PostgreSQL
(``heart_fleet_core::sql``); it reads the clock inside PostgreSQL (``clock_timestamp()``), so
worker clock skew cannot break exclusion. The store holds no SQL of its own beyond the
migrations the core ships, which it applies under an advisory lock, like the Rust store.
psycopg is imported only when one of these stores is used (``pip install "psycopg[binary]"``).

Deadlines, lost connections and poolers:

* connecting (``connect()``, and again after a lost connection) waits at most
  ``connect_timeout`` (default 5 s unless the conninfo or the keyword arguments set one).
* every statement waits at most ``statement_timeout_ms`` (default 10,000) for its answer,
  on both stores and on a connection you pass as on one ``connect()`` opened. Past it the
  store asks the server to cancel the statement (at most 1 s, psycopg >= 3.2), and if the
  statement has still not returned, shuts the connection's socket down, which fails the
  driver's wait at once (libpq has no client-side timeout, and a frozen server answers
  nothing, not even the cancel). The request fails with ``StoreUnavailableError`` naming the
  deadline (``no answer within N ms (statement_timeout_ms)``), and the connection counts as
  lost. A blocking store runs one request at a time (the deadline counts the statement, not
  the wait for another thread's); one timer thread serves the deadlines of every blocking
  store. On a direct connection ``connect()`` also sets the server's ``statement_timeout`` a
  little shorter, so a statement that is merely slow (a lock wait) is abandoned by the server
  first and its error comes back: it did not happen. Otherwise a statement the client gave up
  on may still land; the recovery paths resolve it.
* a lost connection fails its request (``StoreUnavailableError``; never retried: a write
  whose outcome is unknown is left to the recovery paths), and the next request connects
  again. A connection you pass yourself is yours: it is not replaced (after a missed
  deadline it may be broken; reopen it).
* ``pgbouncer=true`` in the conninfo (a URL or a key/value string) selects the pooler mode
  for a transaction pooler (PgBouncer in transaction mode, Supabase's pooled connection
  string): the connection never prepares a statement (``prepare_threshold=None``, so the
  receipt sink and your own ``store.conn`` queries are safe too), and no session parameters
  are sent at startup (so no server-side ``statement_timeout``; the client-side deadline
  holds). A pooler cannot be detected from the client side.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import _check
from . import _driver
from . import _native
from . import _receipt_table
from ._native import StoreAnswer, StoreRequest
from ._sql_store import AsyncSqlStore, SqlStore
from .errors import InvalidTypeError, StoreProtocolError, StoreUnavailableError
from .types import HeartReceipt

__all__ = ["PsycopgLeaseStore", "AsyncPsycopgLeaseStore"]

_PLACEHOLDER = re.compile(r"\$(\d+)")
_POOLER = re.compile(r"(^|[?&\s])pgbouncer=(true|1|false|0)(?=$|[&\s])")

#: The PostgreSQL stores' deadlines, the same in every driver (from the core).
_DEADLINES: dict[str, int] = json.loads(_native.postgres_deadlines())
#: The seconds connecting may take when neither the conninfo nor the caller sets ``connect_timeout``.
DEFAULT_CONNECT_TIMEOUT_S = _DEADLINES["connectTimeoutMs"] // 1000
#: The default deadline of one statement, in milliseconds.
DEFAULT_STATEMENT_TIMEOUT_MS = _DEADLINES["statementTimeoutMs"]
#: The longest deadline a store takes, in milliseconds.
_MAX_STATEMENT_TIMEOUT_MS = _DEADLINES["maxStatementTimeoutMs"]
#: Past a deadline, the seconds the server gets to cancel the statement before the socket is
#: shut down.
_CANCEL_GRACE_S = _DEADLINES["cancelGraceMs"] / 1000

_T = TypeVar("_T")


def _deadline_s(statement_timeout_ms: object) -> float:
    """``statement_timeout_ms`` checked, in seconds."""
    if (
        isinstance(statement_timeout_ms, bool)
        or not isinstance(statement_timeout_ms, int)
        or not 1 <= statement_timeout_ms <= _MAX_STATEMENT_TIMEOUT_MS
    ):
        raise InvalidTypeError(
            f"statement_timeout_ms must be an int in 1..{_MAX_STATEMENT_TIMEOUT_MS}, got {_check.describe(statement_timeout_ms)}"
        )
    return statement_timeout_ms / 1000


def _missed(what: str, deadline_s: float, error: BaseException) -> str:
    """The message of a statement past its deadline: cancelled by the server (it did not
    happen), or cut off (it may still land)."""
    cancelled = isinstance(error, _psycopg().errors.QueryCanceled)
    how = "the server cancelled it" if cancelled else "its connection was shut down (the outcome is unknown)"
    return f"{what}: no answer within {round(deadline_s * 1000)} ms (statement_timeout_ms); {how}"


class _Connector:
    """How a store opens (and reopens) its connection: the conninfo without our
    ``pgbouncer`` parameter, the driver's keyword arguments with our defaults, the mode."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], statement_timeout_ms: int) -> None:
        if not isinstance(conninfo, str) or conninfo == "":
            raise InvalidTypeError("connect: conninfo must be a non-empty str")
        self.timeout_s = _deadline_s(statement_timeout_ms)
        m = _POOLER.search(conninfo)
        self.pooler = bool(m and m.group(2) in ("true", "1"))
        cleaned = _POOLER.sub(lambda mm: mm.group(1) if mm.group(1) == "?" else "", conninfo)
        self.conninfo = cleaned.replace("?&", "?").rstrip("?&").strip()
        self.kwargs = dict(kwargs)
        if "connect_timeout" not in self.kwargs and "connect_timeout" not in self.conninfo:
            self.kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT_S
        if self.pooler:
            # A statement prepared on one server connection is unknown on the next one.
            self.kwargs.setdefault("prepare_threshold", None)
        elif "options" not in self.kwargs and "options" not in self.conninfo:
            # A little shorter than the client's deadline, so the server's cancellation comes first.
            server_ms = _native.server_statement_timeout_ms(statement_timeout_ms)
            self.kwargs["options"] = f"-c statement_timeout={server_ms}"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - depends on the environment
        raise InvalidTypeError('the PostgreSQL stores need psycopg 3: pip install "psycopg[binary]"') from None
    return psycopg


def _shut_down(conn: Any) -> None:
    """Shuts ``conn``'s socket down (through a duplicate of its descriptor, so libpq still owns
    and closes the original): a read blocked on it fails at once."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except Exception:  # noqa: BLE001 - closed meanwhile: nothing is waiting on it
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def _interrupt(conn: Any, returned: threading.Event, done: threading.Event) -> None:
    """Past a blocking statement's deadline: asks the server to cancel it, and shuts the
    socket down unless the statement returns (``returned``) within the grace."""
    try:
        end = time.monotonic() + _CANCEL_GRACE_S
        cancel = getattr(conn, "cancel_safe", None)  # psycopg >= 3.2: bounded, unlike cancel()
        if cancel is not None:
            try:
                cancel(timeout=_CANCEL_GRACE_S)
            except Exception:  # noqa: BLE001 - best effort: the shutdown still ends the wait
                pass
        if not returned.wait(max(0.0, end - time.monotonic())):
            _shut_down(conn)
    finally:
        done.set()


async def _interrupt_async(conn: Any, task: asyncio.Future[Any]) -> None:
    """:func:`_interrupt` for the asyncio store, whose statement is ``task``. (Cancelling the
    task instead would have psycopg wait for a frozen server up to 10 s more.)"""
    loop = asyncio.get_running_loop()
    end = loop.time() + _CANCEL_GRACE_S
    cancel = getattr(conn, "cancel_safe", None)  # psycopg >= 3.2
    if cancel is not None:
        try:
            await cancel(timeout=_CANCEL_GRACE_S)
        except Exception:  # noqa: BLE001 - best effort: the shutdown still ends the wait
            pass
    finished, _ = await asyncio.wait({task}, timeout=max(0.0, end - loop.time()))
    if not finished:
        _shut_down(conn)


class _Deadline:
    """The deadline of the request a blocking store has in flight (one at a time)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._at: float | None = None
        self._conn: Any = None
        # Set while the deadline has passed and the interruption runs: the statement's return,
        # the interruption's end.
        self._fired: tuple[threading.Event, threading.Event] | None = None
        _watchdog.watch(self)

    def start(self, conn: Any) -> None:
        """Gives the next statement on ``conn`` the whole deadline (again for each statement of
        a request that runs several)."""
        with self._lock:
            if self._fired is None:
                self._conn = conn
                self._at = time.monotonic() + self.timeout_s

    def stop(self) -> bool:
        """Ends the request's deadline, after its interruption if it ran: True when it had."""
        with self._lock:
            self._at = self._conn = None
            fired, self._fired = self._fired, None
        if fired is None:
            return False
        returned, done = fired
        returned.set()
        done.wait()
        return True

    def check(self, now: float) -> float | None:
        """The watchdog's look: the pending deadline, or None (none, or it has passed: the
        interruption starts on a thread of its own)."""
        with self._lock:
            if self._at is None or now < self._at:
                return self._at
            self._at = None
            returned, done = self._fired = (threading.Event(), threading.Event())
            conn = self._conn
        threading.Thread(target=_interrupt, args=(conn, returned, done), name="heart-fleet-deadline", daemon=True).start()
        return None


class _Watchdog:
    """One thread that fires the deadlines of every blocking store. Starting a deadline wakes
    nothing (a timer thread per statement would cost more than the statement): the thread
    never sleeps longer than the shortest timeout it watches, so it looks again before any
    deadline started while it slept can pass."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watched: weakref.WeakSet[_Deadline] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        # The thread is not copied into a child process: the child's first store starts one.
        self._cond = threading.Condition()
        self._thread = None

    def watch(self, deadline: _Deadline) -> None:
        with self._cond:
            self._watched.add(deadline)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="heart-fleet-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()  # its timeout may be the shortest now

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                wake = self._look(now)
                self._cond.wait(None if wake is None else wake - now)

    def _look(self, now: float) -> float | None:
        """Fires the deadlines that have passed; when to look again (None: nothing to watch).
        Holds no deadline past its return, so a closed store's is collected."""
        wake: float | None = None
        for d in list(self._watched):
            at = d.check(now)
            wake = min(x for x in (wake, at, now + d.timeout_s) if x is not None)
        return wake


_watchdog = _Watchdog()


class _Rendered:
    """The core's statement in psycopg's placeholder style (``$n`` -> ``%s``, ``%`` -> ``%%``),
    cached by SQL text: a request shape renders the same text every time."""

    __slots__ = ("sql", "order")

    def __init__(self, sql: str) -> None:
        order: list[int] = []

        def sub(m: re.Match[str]) -> str:
            order.append(int(m.group(1)) - 1)
            return "%s"

        self.sql = _PLACEHOLDER.sub(sub, sql.replace("%", "%%"))
        self.order = order


_cache: dict[str, _Rendered] = {}


def _param(p: Any) -> Any:
    if isinstance(p, dict):
        if "int" in p:
            return int(p["int"])
        if "text" in p:
            return str(p["text"])
    raise StoreProtocolError(f"postgres: an unexpected SQL parameter {p!r}")


def _statement(request: StoreRequest) -> tuple[str, list[Any]]:
    """The one statement the core renders for ``request``, in psycopg's placeholder style."""
    statements = _native.sql_statements(request, "postgres")
    if len(statements) != 1:
        raise StoreProtocolError(f"postgres: render gave {len(statements)} statements, not one")
    sql, params = statements[0]
    if None in params:
        raise StoreProtocolError("postgres: the core rendered SQLite's now parameter")
    return _placed(sql, params)


def _decode(request: StoreRequest, names: list[str], rows: list[tuple[Any, ...]]) -> StoreAnswer:
    """The answer the core reads from the statement's rows."""
    return _native.sql_answer(request, "postgres", [(names, rows)])


def _placed(sql: str, params: list[Any]) -> tuple[str, list[Any]]:
    """A statement of the core (``$n`` placeholders) in psycopg's placeholder style."""
    rendered = _cache.get(sql)
    if rendered is None:
        if len(_cache) > 256:
            _cache.clear()
        rendered = _cache[sql] = _Rendered(sql)
    return rendered.sql, [params[i] for i in rendered.order]


def _core_statement(st: dict[str, Any]) -> tuple[str, list[Any]]:
    """A statement of the core as JSON (``{sql, params}``, a receipt append's) in psycopg's
    placeholder style."""
    return _placed(st["sql"], [_param(p) for p in st["params"]])


class _MigrationPlan:
    """The core's migration protocol (the one every store in every language runs, so that
    concurrent migrates from Rust, Node and Python exclude each other), in psycopg's style."""

    def __init__(self) -> None:
        plan = json.loads(_native.sql_migration_plan("postgres"))
        #: Statements before the check, in the transaction: the advisory lock, the record table.
        self.prelude: list[str] = [s for s in (plan["lock"], plan["createRecordTable"]) if s]
        self.is_applied = _Rendered(plan["isApplied"]).sql
        self.record = _Rendered(plan["record"]).sql
        self.migrations: list[tuple[str, str]] = [(n, s) for n, s in plan["migrations"]]


def _answer(conn: Any, sql: str, params: Any, prepare: bool | None, held: bool = False) -> tuple[list[str], list[tuple[Any, ...]]]:
    """One statement, in a transaction block of its own unless the connection autocommits
    or it belongs to a held transaction: its column names and rows."""
    # Rows as tuples, whatever row factory the connection was given.
    cur = conn.cursor(row_factory=_psycopg().rows.tuple_row)
    if conn.autocommit or held:
        cur.execute(sql, params, prepare=prepare)
    else:
        with conn.transaction():
            cur.execute(sql, params, prepare=prepare)
    if not cur.description:  # an INSERT without RETURNING (a receipt)
        return [], []
    return [c.name for c in cur.description], cur.fetchall()


def _rows(names: list[str], rows: list[tuple[Any, ...]]) -> list[list[list[Any]]]:
    """A statement's rows as the core reads them: ``[[column, value], ...]`` per row."""
    return [[[n, v] for n, v in zip(names, row)] for row in rows]


def _transaction_statement(conn: Any, autocommit_sql: str, method: str) -> Any:
    """``BEGIN``/``COMMIT``/``ROLLBACK`` on ``conn``: the statement in autocommit, else the
    connection's own method (psycopg opens a transaction at the first statement)."""
    return conn.execute(autocommit_sql) if conn.autocommit else getattr(conn, method)()


class _Session:
    """The store's connection kept by one held transaction (``_receipt_table``): the store's
    lock is taken at ``begin`` and given back at ``release``, so no other request joins it."""

    def __init__(self, store: PsycopgLeaseStore) -> None:
        self.store = store
        self.conn: Any = None
        self.locked = False

    def begin(self) -> None:
        store = self.store
        store._lock.acquire()
        self.locked = True
        try:
            self.conn = store._live()
            if self.conn.autocommit:
                store._on(self.conn, "postgres begin", lambda c: c.execute("BEGIN"))
        except BaseException:
            self.release()
            raise

    def answer(self, request: StoreRequest) -> StoreAnswer:
        return self.store._answer_on(self.conn, request, held=True)

    def rows(self, statement: dict[str, Any]) -> list[list[list[Any]]]:
        return self.store._statement_rows(self.conn, statement, held=True)

    def commit(self) -> None:
        self.store._on(self.conn, "postgres commit", lambda c: _transaction_statement(c, "COMMIT", "commit"))

    def rollback(self) -> None:
        try:
            if self.conn is not None:
                self.store._on(self.conn, "postgres rollback", lambda c: _transaction_statement(c, "ROLLBACK", "rollback"))
        except Exception:  # noqa: BLE001,S110 - a lost connection has lost the transaction already
            pass

    def release(self) -> None:
        if self.locked:
            self.locked = False
            self.store._lock.release()


class _AsyncSession:
    """:class:`_Session` for :class:`AsyncPsycopgLeaseStore`: the store's turn is taken at
    ``begin`` and given back at ``release``."""

    def __init__(self, store: AsyncPsycopgLeaseStore) -> None:
        self.store = store
        self.conn: Any = None
        self.turn = store._turn()
        self.locked = False

    async def begin(self) -> None:
        await self.turn.acquire()
        self.locked = True
        try:
            self.conn = await self.store._live()
            if self.conn.autocommit:
                await self.store._on(self.conn, "postgres begin", "BEGIN", None, None, held=True)
        except BaseException:
            await self.rollback()
            self.release()
            raise

    async def answer(self, request: StoreRequest) -> StoreAnswer:
        return await self.store._answer_on(self.conn, request, held=True)

    async def rows(self, statement: dict[str, Any]) -> list[list[list[Any]]]:
        return await self.store._statement_rows(self.conn, statement, held=True)

    async def commit(self) -> None:
        await _driver.committed(self._commit())

    async def _commit(self) -> None:
        if self.conn.autocommit:
            await self.store._on(self.conn, "postgres commit", "COMMIT", None, None, held=True)
        else:
            try:
                await self.conn.commit()
            except _psycopg().Error as e:
                raise StoreUnavailableError(f"postgres commit: {e}") from e

    async def rollback(self) -> None:
        try:
            if self.conn is None:
                return
            if self.conn.autocommit:
                await self.store._on(self.conn, "postgres rollback", "ROLLBACK", None, None, held=True)
            else:
                await asyncio.wait_for(self.conn.rollback(), self.store._timeout_s)
        except Exception:  # noqa: BLE001,S110 - a lost connection has lost the transaction already
            pass

    def release(self) -> None:
        if self.locked:
            self.locked = False
            self.turn.release()


class PsycopgLeaseStore(SqlStore):
    """A heart-fleet store over a psycopg 3 ``Connection`` (blocking).

    ``PsycopgLeaseStore(conn)`` wraps your connection (autocommit recommended: each request
    is one statement; without autocommit each runs in its own transaction block), or
    ``PsycopgLeaseStore.connect(conninfo)`` opens one in autocommit mode (``close()`` closes
    it). Either way each statement waits at most ``statement_timeout_ms`` (see the module
    docstring). The schema must be migrated: ``store.migrate()`` (idempotent). The store is
    thread-safe (one request at a time), so a heartbeat thread may share it.
    """

    def __init__(self, conn: Any, *, prepare: bool | None = None, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS) -> None:
        psycopg = _psycopg()
        if not isinstance(conn, psycopg.Connection):
            raise InvalidTypeError(f"PsycopgLeaseStore: conn must be a psycopg.Connection, got {_check.describe(conn)}")
        self._deadline = _Deadline(_deadline_s(statement_timeout_ms))
        self.conn = conn
        self._prepare = prepare
        self._connector: _Connector | None = None
        self._lock = threading.Lock()

    @classmethod
    def connect(
        cls, conninfo: str, *, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS, **kwargs: Any
    ) -> PsycopgLeaseStore:
        """Opens a connection (autocommit) to ``conninfo`` (a ``postgres://`` URL or libpq
        string; ``pgbouncer=true`` for a transaction pooler). It is reopened on the request
        after a lost connection. ``kwargs`` go to ``psycopg.connect``."""
        connector = _Connector(conninfo, kwargs, statement_timeout_ms)
        store = cls(_open_sync(connector), statement_timeout_ms=statement_timeout_ms)
        store._connector = connector
        return store

    def _live(self) -> Any:
        """The connection; a lost one this store opened is opened again."""
        if self._connector is not None and (self.conn.closed or self.conn.broken):
            self.conn = _open_sync(self._connector)
        return self.conn

    def close(self) -> None:
        """Closes the connection this store opened (a connection you passed stays yours)."""
        if self._connector is not None:
            self.conn.close()

    def __enter__(self) -> PsycopgLeaseStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, what: str, work: Callable[[Any], _T]) -> _T:
        """``work(conn)`` on the live connection, one request at a time (see :meth:`_on`)."""
        with self._lock:
            return self._on(self._live(), what, work)

    def _on(self, conn: Any, what: str, work: Callable[[Any], _T]) -> _T:
        """``work(conn)`` with its statements within the deadline (``work`` restarts it before
        each further statement). A driver error, or the deadline passing, is
        ``StoreUnavailableError`` starting with ``what``."""
        psycopg = _psycopg()
        fired = False
        try:
            self._deadline.start(conn)
            try:
                return work(conn)
            finally:
                fired = self._deadline.stop()
                if fired and self._connector is not None:
                    conn.close()  # in an unknown state: the next request connects again
        except psycopg.Error as e:
            raise StoreUnavailableError(_missed(what, self._deadline.timeout_s, e) if fired else f"{what}: {e}") from e

    def _execute(self, request: StoreRequest) -> StoreAnswer:
        with self._lock:
            return self._answer_on(self._live(), request)

    def _answer_on(self, conn: Any, request: StoreRequest, *, held: bool = False) -> StoreAnswer:
        """One request's statement on ``conn``, within the deadline: the answer the core reads
        from its rows."""
        sql, params = _statement(request)
        return _decode(request, *self._on(conn, "postgres", lambda c: _answer(c, sql, params, self._prepare, held)))

    def receipt_sink(
        self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None, *, signing_keys: Sequence[str] = ()
    ) -> _receipt_table.ReceiptSink:
        """An ``on_receipt`` sink that appends each receipt to the ``heart_receipts`` table,
        chained per run (``seq``, ``prev``, ``link``, as the CLI and the Rust stores write
        them) and, with ``signing_keys`` (key file texts), signed; the core decides every
        statement. Given to a ``HeartFleet`` over this store, each operation's writes and their
        receipts commit in one transaction, and a receipt that cannot be inserted fails the
        operation (``StoreUnavailableError``, nothing written; see ``_receipt_table``).
        Anywhere else it appends right after the write, and a failure goes to ``on_error``
        (default: ignored), never to the lease operation. A bad key raises here."""
        app = _receipt_table.appender("postgres", signing_keys)
        keys = list(signing_keys)
        report = _receipt_table.reporter(on_error)

        def append_now(receipt: str) -> None:
            try:
                with self._lock:  # the whole append: the appender decides on each answer
                    conn = self._live()
                    _driver.run_sync(_receipt_table.appending(app, receipt, lambda st: self._statement_rows(conn, st)))
            except Exception as e:  # noqa: BLE001 - reported to on_error only
                report(e, receipt)

        return _receipt_table.ReceiptSink(
            self, append_now, lambda: _Session(self), lambda: _receipt_table.appender("postgres", keys), report
        )

    def _statement_rows(self, conn: Any, statement: dict[str, Any], *, held: bool = False) -> list[list[list[Any]]]:
        """One core statement (a receipt append's) on ``conn``, within the deadline: its rows."""
        sql, params = _core_statement(statement)
        return _rows(*self._on(conn, "postgres receipt", lambda c: _answer(c, sql, params, None, held)))

    def migrate(self) -> list[tuple[str, bool]]:
        """Applies every migration that ``heart_fleet_migrations`` does not record yet, each in
        one transaction with its record, under an advisory lock (concurrent migrates apply
        each migration once). Idempotent. Returns ``(name, applied_now)`` per migration."""
        plan = _MigrationPlan()

        def apply(conn: Any, name: str, script: str) -> bool:
            def run(sql: str, *params: str) -> Any:
                self._deadline.start(conn)  # each statement gets the whole deadline
                return conn.execute(sql, params or None)

            with conn.transaction():
                for statement in plan.prelude:
                    run(statement)
                row = run(plan.is_applied, name).fetchone()
                if row is None or row[0] != 0:
                    return False
                run(script)
                run(plan.record, name)
                self._deadline.start(conn)  # the COMMIT
            return True

        return [
            (name, self._run(f"migration {name} failed", lambda conn: apply(conn, name, script)))
            for name, script in plan.migrations
        ]


class AsyncPsycopgLeaseStore(AsyncSqlStore):
    """A heart-fleet store over a psycopg 3 ``AsyncConnection``: ``execute`` (and
    ``execute_json``) is a coroutine, so the ``*_async`` API awaits PostgreSQL and the event
    loop keeps running.

    ``AsyncPsycopgLeaseStore(aconn)``, or ``await AsyncPsycopgLeaseStore.connect(conninfo)``
    (autocommit; ``await store.close()``). Each request's statement waits at most
    ``statement_timeout_ms`` (see the module docstring). ``await store.migrate()`` applies
    the migrations.
    """

    def __init__(self, conn: Any, *, prepare: bool | None = None, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS) -> None:
        psycopg = _psycopg()
        if not isinstance(conn, psycopg.AsyncConnection):
            raise InvalidTypeError(
                f"AsyncPsycopgLeaseStore: conn must be a psycopg.AsyncConnection, got {_check.describe(conn)}"
            )
        self._timeout_s = _deadline_s(statement_timeout_ms)
        self.conn = conn
        self._prepare = prepare
        self._connector: _Connector | None = None
        self._lock: asyncio.Lock | None = None

    @classmethod
    async def connect(
        cls, conninfo: str, *, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS, **kwargs: Any
    ) -> AsyncPsycopgLeaseStore:
        """Opens an async connection (autocommit) to ``conninfo`` (``pgbouncer=true`` for a
        transaction pooler), reopened on the request after a lost connection; each statement
        waits at most ``statement_timeout_ms``."""
        connector = _Connector(conninfo, kwargs, statement_timeout_ms)
        store = cls(await _open_async(connector), statement_timeout_ms=statement_timeout_ms)
        store._connector = connector
        return store

    async def _live(self) -> Any:
        """The connection; a lost one this store opened is opened again."""
        if self._connector is not None and (self.conn.closed or self.conn.broken):
            self.conn = await _open_async(self._connector)
        return self.conn

    async def close(self) -> None:
        """Closes the connection this store opened."""
        if self._connector is not None:
            await self.conn.close()

    async def __aenter__(self) -> AsyncPsycopgLeaseStore:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _turn(self) -> asyncio.Lock:
        """The connection's turn: one request, or one held transaction, at a time (a held
        transaction keeps it from its first request to its settle)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _execute(self, request: StoreRequest) -> StoreAnswer:
        async with self._turn():
            return await self._answer_on(await self._live(), request)

    async def _answer_on(self, conn: Any, request: StoreRequest, *, held: bool = False) -> StoreAnswer:
        """:meth:`PsycopgLeaseStore._answer_on`, awaited."""
        sql, params = _statement(request)
        return _decode(request, *await self._on(conn, "postgres", sql, params, self._prepare, held=held))

    async def _on(
        self, conn: Any, what: str, sql: str, params: Any, prepare: bool | None, *, held: bool = False
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """One statement on ``conn`` within the deadline (in a transaction block of its own
        unless the connection autocommits or it belongs to a held transaction): its column
        names and rows. A driver error, or the deadline passing, is ``StoreUnavailableError``."""
        psycopg = _psycopg()

        async def run() -> tuple[Any, list[tuple[Any, ...]]]:
            cur = conn.cursor(row_factory=psycopg.rows.tuple_row)  # whatever the connection's
            if conn.autocommit or held:
                await cur.execute(sql, params, prepare=prepare)
                return cur, (await cur.fetchall() if cur.description else [])
            async with conn.transaction():
                await cur.execute(sql, params, prepare=prepare)
                return cur, (await cur.fetchall() if cur.description else [])

        task = asyncio.ensure_future(run())
        missed = False
        try:
            finished, _ = await asyncio.wait({task}, timeout=self._timeout_s)
            if not finished:
                missed = True
                await _interrupt_async(conn, task)
            cur, rows = await task
        except asyncio.CancelledError:
            # Our caller was cancelled: so is the statement (psycopg asks the server to cancel it).
            task.cancel()
            await asyncio.wait({task})
            raise
        except psycopg.Error as e:
            raise StoreUnavailableError(_missed(what, self._timeout_s, e) if missed else f"{what}: {e}") from e
        finally:
            if missed and self._connector is not None:
                await conn.close()  # in an unknown state: the next request connects again
        names = [c.name for c in cur.description] if cur.description else []
        return names, rows

    def receipt_sink(
        self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None, *, signing_keys: Sequence[str] = ()
    ) -> _receipt_table.ReceiptSink:
        """:meth:`PsycopgLeaseStore.receipt_sink`: given to a fleet over this store, each
        operation's writes and receipts commit in one transaction; anywhere else it appends in
        the background, in order (the fleet schedules it on the running loop)."""
        app = _receipt_table.appender("postgres", signing_keys)
        keys = list(signing_keys)
        report = _receipt_table.reporter(on_error)

        async def append_now(receipt: str) -> None:
            try:
                async with self._turn():  # the whole append, and FIFO: inserts keep the receipts' order
                    conn = await self._live()
                    await _driver.run_async(_receipt_table.appending(app, receipt, lambda st: self._statement_rows(conn, st)))
            except Exception as e:  # noqa: BLE001 - reported to on_error only
                report(e, receipt)

        return _receipt_table.ReceiptSink(
            self, append_now, lambda: _AsyncSession(self), lambda: _receipt_table.appender("postgres", keys), report
        )

    async def _statement_rows(self, conn: Any, statement: dict[str, Any], *, held: bool = False) -> list[list[list[Any]]]:
        """One core statement (a receipt append's) on ``conn``, within the deadline: its rows."""
        sql, params = _core_statement(statement)
        return _rows(*await self._on(conn, "postgres receipt", sql, params, None, held=held))

    async def migrate(self) -> list[tuple[str, bool]]:
        """:meth:`PsycopgLeaseStore.migrate`, awaited."""
        psycopg = _psycopg()
        plan = _MigrationPlan()
        out: list[tuple[str, bool]] = []
        for name, script in plan.migrations:
            try:
                async with self.conn.transaction():
                    for statement in plan.prelude:
                        await self.conn.execute(statement)
                    row = await (await self.conn.execute(plan.is_applied, (name,))).fetchone()
                    applied = row is not None and row[0] == 0
                    if applied:
                        await self.conn.execute(script)
                        await self.conn.execute(plan.record, (name,))
            except psycopg.Error as e:
                raise StoreUnavailableError(f"migration {name} failed: {e}") from e
            out.append((name, applied))
        return out


def _open_sync(connector: _Connector) -> Any:
    psycopg = _psycopg()
    try:
        return psycopg.connect(connector.conninfo, autocommit=True, **connector.kwargs)
    except psycopg.Error as e:
        raise StoreUnavailableError(f"postgres connect: {e}") from e


async def _open_async(connector: _Connector) -> Any:
    psycopg = _psycopg()
    try:
        return await psycopg.AsyncConnection.connect(connector.conninfo, autocommit=True, **connector.kwargs)
    except psycopg.Error as e:
        raise StoreUnavailableError(f"postgres connect: {e}") from e

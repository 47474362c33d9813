"""PsycopgLeaseStore and AsyncPsycopgLeaseStore: stores over psycopg 3.

Each store request is the one statement the core renders for PostgreSQL
(``heart_fleet_core::sql``); it reads the clock inside PostgreSQL (``clock_timestamp()``), so
worker clock skew cannot break exclusion. The store holds no SQL of its own beyond the
migrations the core ships, which it applies under an advisory lock, like the Rust store.
psycopg is imported only when one of these stores is used (``pip install "psycopg[binary]"``).

Deadlines, lost connections and poolers, for the stores that ``connect()`` opens:

* connecting waits at most ``connect_timeout`` (default 5 s unless the conninfo or the
  keyword arguments set one); every statement gets the server-side ``statement_timeout``
  (``statement_timeout_ms``, default 10,000), so the server abandons a statement the client
  would wait too long for (a lock wait) instead of applying it late; the asyncio store also
  bounds each statement client-side (``asyncio.wait_for``), which holds when the server does
  not answer at all. The blocking store has no client-side bound against a server that stops
  answering (libpq has none): use the asyncio store, or a thread with a timeout, there.
* a lost connection fails its request (``StoreUnavailableError``; never retried: a write
  whose outcome is unknown is left to the recovery paths), and the next request connects
  again. A connection you pass yourself is yours: it is not replaced.
* ``pgbouncer=true`` in the conninfo (a URL or a key/value string) selects the pooler mode
  for a transaction pooler (PgBouncer in transaction mode, Supabase's pooled connection
  string): no prepared statements, no session parameters at startup (so no server-side
  ``statement_timeout``; the asyncio store's client-side bound still holds). A pooler cannot
  be detected from the client side.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from . import _check
from . import _native
from .errors import InvalidTypeError, StoreProtocolError, StoreUnavailableError
from .types import HeartReceipt

__all__ = ["PsycopgLeaseStore", "AsyncPsycopgLeaseStore"]

_PLACEHOLDER = re.compile(r"\$(\d+)")
_POOLER = re.compile(r"(^|[?&\s])pgbouncer=(true|1|false|0)(?=$|[&\s])")

#: The seconds connecting may take when neither the conninfo nor the caller sets ``connect_timeout``.
DEFAULT_CONNECT_TIMEOUT_S = 5
#: The default deadline of one statement, in milliseconds.
DEFAULT_STATEMENT_TIMEOUT_MS = 10_000


class _Connector:
    """How a store opens (and reopens) its connection: the conninfo without our
    ``pgbouncer`` parameter, the driver's keyword arguments with our defaults, the mode."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], statement_timeout_ms: int) -> None:
        if not isinstance(conninfo, str) or conninfo == "":
            raise InvalidTypeError("connect: conninfo must be a non-empty str")
        if isinstance(statement_timeout_ms, bool) or not isinstance(statement_timeout_ms, int) or not 1 <= statement_timeout_ms <= 86_400_000:
            raise InvalidTypeError(f"statement_timeout_ms must be an int in 1..86400000, got {_check.describe(statement_timeout_ms)}")
        m = _POOLER.search(conninfo)
        self.pooler = bool(m and m.group(2) in ("true", "1"))
        cleaned = _POOLER.sub(lambda mm: mm.group(1) if mm.group(1) == "?" else "", conninfo)
        self.conninfo = cleaned.replace("?&", "?").rstrip("?&").strip()
        self.timeout_s = statement_timeout_ms / 1000
        self.kwargs = dict(kwargs)
        if "connect_timeout" not in self.kwargs and "connect_timeout" not in self.conninfo:
            self.kwargs["connect_timeout"] = DEFAULT_CONNECT_TIMEOUT_S
        if not self.pooler and "options" not in self.kwargs and "options" not in self.conninfo:
            # A little shorter than the client's deadline, so the server's cancellation comes first.
            server_ms = max(1, statement_timeout_ms - min(100, statement_timeout_ms // 5))
            self.kwargs["options"] = f"-c statement_timeout={server_ms}"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - depends on the environment
        raise InvalidTypeError('the PostgreSQL stores need psycopg 3: pip install "psycopg[binary]"') from None
    return psycopg


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


def _statement(request: str) -> tuple[str, list[Any]]:
    statements = json.loads(_native.sql_render(request, "postgres"))
    if len(statements) != 1:
        raise StoreProtocolError(f"postgres: render gave {len(statements)} statements, not one")
    st = statements[0]
    rendered = _cache.get(st["sql"])
    if rendered is None:
        if len(_cache) > 256:
            _cache.clear()
        rendered = _cache[st["sql"]] = _Rendered(st["sql"])
    params = [_param(p) for p in st["params"]]
    return rendered.sql, [params[i] for i in rendered.order]


def _cell(v: Any) -> Any:
    if v is None or isinstance(v, (str, int, bool)):
        return v
    raise StoreProtocolError(f"postgres: a column of type {type(v).__name__} (the core reads text, integers, booleans)")


def _decode(request: str, names: list[str], rows: list[tuple[Any, ...]]) -> str:
    results = [[[[n, _cell(v)] for n, v in zip(names, row)] for row in rows]]
    return str(_native.sql_decode(request, "postgres", json.dumps(results, separators=(",", ":"))))


def _check_request(request: object) -> str:
    if not isinstance(request, str):
        raise InvalidTypeError(f"execute_json: a StoreRequest as JSON text, got {_check.describe(request)}")
    return request


def _receipt_statement(receipt: HeartReceipt) -> tuple[str, list[Any]]:
    st = json.loads(_native.sql_receipt_insert("postgres", json.dumps(receipt.to_dict())))
    rendered = _Rendered(st["sql"])
    params = [_param(p) for p in st["params"]]
    return rendered.sql, [params[i] for i in rendered.order]


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


class PsycopgLeaseStore:
    """A heart-fleet store over a psycopg 3 ``Connection`` (blocking).

    ``PsycopgLeaseStore(conn)`` wraps your connection (autocommit recommended: each request
    is one statement; without autocommit each runs in its own transaction block), or
    ``PsycopgLeaseStore.connect(conninfo)`` opens one in autocommit mode (``close()`` closes
    it). The schema must be migrated: ``store.migrate()`` (idempotent). psycopg connections
    are thread-safe, so a heartbeat thread may share the store.
    """

    def __init__(self, conn: Any, *, prepare: bool | None = None) -> None:
        psycopg = _psycopg()
        if not isinstance(conn, psycopg.Connection):
            raise InvalidTypeError(f"PsycopgLeaseStore: conn must be a psycopg.Connection, got {_check.describe(conn)}")
        self.conn = conn
        self._prepare = prepare
        self._owned = False
        self._connector: _Connector | None = None

    @classmethod
    def connect(
        cls, conninfo: str, *, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS, **kwargs: Any
    ) -> PsycopgLeaseStore:
        """Opens a connection (autocommit) to ``conninfo`` (a ``postgres://`` URL or libpq
        string; ``pgbouncer=true`` for a transaction pooler). It is reopened on the request
        after a lost connection. ``kwargs`` go to ``psycopg.connect``."""
        connector = _Connector(conninfo, kwargs, statement_timeout_ms)
        store = cls(_open_sync(connector), prepare=False if connector.pooler else None)
        store._owned = True
        store._connector = connector
        return store

    def _live(self) -> Any:
        """The connection; a lost one this store opened is opened again."""
        if self._connector is not None and (self.conn.closed or self.conn.broken):
            self.conn = _open_sync(self._connector)
        return self.conn

    def close(self) -> None:
        """Closes the connection this store opened (a connection you passed stays yours)."""
        if self._owned:
            self.conn.close()

    def __enter__(self) -> PsycopgLeaseStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _query(self, request: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        sql, params = _statement(request)
        psycopg = _psycopg()
        conn = self._live()
        try:
            if conn.autocommit:
                cur = conn.execute(sql, params, prepare=self._prepare)
                rows = cur.fetchall()
            else:
                with conn.transaction():
                    cur = conn.execute(sql, params, prepare=self._prepare)
                    rows = cur.fetchall()
        except psycopg.Error as e:
            raise StoreUnavailableError(f"postgres: {e}") from e
        names = [c.name for c in cur.description] if cur.description else []
        return names, rows

    def execute_json(self, request: str) -> str:
        """The store contract's text form: StoreRequest JSON text -> StoreAnswer JSON text."""
        request = _check_request(request)
        names, rows = self._query(request)
        return _decode(request, names, rows)

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """The store contract: a StoreRequest (dict) -> its StoreAnswer (dict)."""
        answer: dict[str, Any] = json.loads(self.execute_json(json.dumps(request, separators=(",", ":"))))
        return answer

    def receipt_sink(self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None) -> Callable[[HeartReceipt], None]:
        """An ``on_receipt`` sink that appends each receipt to the ``heart_receipts`` table.
        A failure goes to ``on_error`` (default: ignored), never to the lease operation."""

        def sink(receipt: HeartReceipt) -> None:
            try:
                sql, params = _receipt_statement(receipt)
                if self.conn.autocommit:
                    self.conn.execute(sql, params)
                else:
                    with self.conn.transaction():
                        self.conn.execute(sql, params)
            except Exception as e:  # noqa: BLE001 - reported to on_error only
                if on_error is not None:
                    on_error(e, receipt)

        return sink

    def migrate(self) -> list[tuple[str, bool]]:
        """Applies every migration that ``heart_fleet_migrations`` does not record yet, each in
        one transaction with its record, under an advisory lock (concurrent migrates apply
        each migration once). Idempotent. Returns ``(name, applied_now)`` per migration."""
        psycopg = _psycopg()
        plan = _MigrationPlan()
        out: list[tuple[str, bool]] = []
        for name, script in plan.migrations:
            try:
                with self.conn.transaction():
                    for statement in plan.prelude:
                        self.conn.execute(statement)
                    row = self.conn.execute(plan.is_applied, (name,)).fetchone()
                    applied = row is not None and row[0] == 0
                    if applied:
                        self.conn.execute(script)
                        self.conn.execute(plan.record, (name,))
            except psycopg.Error as e:
                raise StoreUnavailableError(f"migration {name} failed: {e}") from e
            out.append((name, applied))
        return out


class AsyncPsycopgLeaseStore:
    """A heart-fleet store over a psycopg 3 ``AsyncConnection``: ``execute_json`` is a
    coroutine, so the ``*_async`` API awaits PostgreSQL and the event loop keeps running.

    ``AsyncPsycopgLeaseStore(aconn)``, or ``await AsyncPsycopgLeaseStore.connect(conninfo)``
    (autocommit; ``await store.close()``). ``await store.migrate()`` applies the migrations.
    """

    def __init__(self, conn: Any, *, prepare: bool | None = None) -> None:
        psycopg = _psycopg()
        if not isinstance(conn, psycopg.AsyncConnection):
            raise InvalidTypeError(
                f"AsyncPsycopgLeaseStore: conn must be a psycopg.AsyncConnection, got {_check.describe(conn)}"
            )
        self.conn = conn
        self._prepare = prepare
        self._owned = False
        self._connector: _Connector | None = None
        self._timeout_s = DEFAULT_STATEMENT_TIMEOUT_MS / 1000

    @classmethod
    async def connect(
        cls, conninfo: str, *, statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS, **kwargs: Any
    ) -> AsyncPsycopgLeaseStore:
        """Opens an async connection (autocommit) to ``conninfo`` (``pgbouncer=true`` for a
        transaction pooler), reopened on the request after a lost connection; each statement
        waits at most ``statement_timeout_ms``."""
        connector = _Connector(conninfo, kwargs, statement_timeout_ms)
        store = cls(await _open_async(connector), prepare=False if connector.pooler else None)
        store._owned = True
        store._connector = connector
        store._timeout_s = connector.timeout_s
        return store

    async def _live(self) -> Any:
        """The connection; a lost one this store opened is opened again."""
        if self._connector is not None and (self.conn.closed or self.conn.broken):
            self.conn = await _open_async(self._connector)
        return self.conn

    async def close(self) -> None:
        """Closes the connection this store opened."""
        if self._owned:
            await self.conn.close()

    async def __aenter__(self) -> AsyncPsycopgLeaseStore:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def execute_json(self, request: str) -> str:
        """The store contract's text form, awaited."""
        request = _check_request(request)
        sql, params = _statement(request)
        psycopg = _psycopg()
        conn = await self._live()

        async def run() -> tuple[Any, list[tuple[Any, ...]]]:
            if conn.autocommit:
                cur = await conn.execute(sql, params, prepare=self._prepare)
                return cur, await cur.fetchall()
            async with conn.transaction():
                cur = await conn.execute(sql, params, prepare=self._prepare)
                return cur, await cur.fetchall()

        try:
            cur, rows = await asyncio.wait_for(run(), self._timeout_s)
        except TimeoutError as e:
            # The connection is in an unknown state: a store that opened it opens a new one.
            if self._connector is not None:
                await conn.close()
            raise StoreUnavailableError(f"postgres: no answer within {round(self._timeout_s * 1000)} ms") from e
        except psycopg.Error as e:
            raise StoreUnavailableError(f"postgres: {e}") from e
        names = [c.name for c in cur.description] if cur.description else []
        return _decode(request, names, rows)

    async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        """The store contract, awaited."""
        answer: dict[str, Any] = json.loads(await self.execute_json(json.dumps(request, separators=(",", ":"))))
        return answer

    def receipt_sink(
        self, on_error: Callable[[BaseException, HeartReceipt], None] | None = None
    ) -> Callable[[HeartReceipt], Awaitable[None]]:
        """An ``on_receipt`` sink that appends each receipt to ``heart_receipts`` in the
        background, in order (the fleet schedules it on the running loop)."""
        lock = asyncio.Lock()

        async def sink(receipt: HeartReceipt) -> None:
            async with lock:  # FIFO: inserts keep the receipts' order
                try:
                    sql, params = _receipt_statement(receipt)
                    await self.conn.execute(sql, params)
                except Exception as e:  # noqa: BLE001 - reported to on_error only
                    if on_error is not None:
                        on_error(e, receipt)

        return sink

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

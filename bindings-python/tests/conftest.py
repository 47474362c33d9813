"""Shared fixtures: a memory fleet, and a private PostgreSQL database per test session and route.

Every PostgreSQL test runs twice: ``[direct]`` against ``DATABASE_URL``'s server and
``[pooler]`` through PgBouncer in transaction mode (``HEART_PGBOUNCER_URL``), the way
Supabase's pooled connection string reaches a server. When a variable is unset or the
server unusable the tests are skipped on a developer's machine, but they FAIL when ``CI``
is set (CI starts both first), so a green CI run never hides a skipped PostgreSQL test.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import heart_fleet as hf  # noqa: E402

T0 = "2026-07-30T00:00:00.000Z"


@pytest.fixture
def memory() -> hf.MemoryLeaseStore:
    store = hf.MemoryLeaseStore(T0)
    for rid in ("r1", "r2", "r3"):
        store.insert({"id": rid})
    return store


@pytest.fixture
def heart(memory: hf.MemoryLeaseStore) -> hf.HeartFleet:
    return hf.HeartFleet(memory)


#: How the PostgreSQL tests reach their database: ``direct`` (``DATABASE_URL``'s server) and
#: ``pooler`` (through PgBouncer in transaction mode, ``HEART_PGBOUNCER_URL``).
PG_ROUTES = ("direct", "pooler")


@dataclass(frozen=True)
class PgDatabase:
    """A migrated database of the session and the route the stores under test take to it."""

    route: str
    #: The conninfo for ``PsycopgLeaseStore.connect`` / ``AsyncPsycopgLeaseStore.connect``
    #: (with ``pgbouncer=true`` on the pooler route).
    url: str


def _with_db(url: str, db: str, *, pooler: bool = False) -> str:
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, "pgbouncer=true" if pooler else "") if q)
    return urlunsplit((parts.scheme, parts.netloc, "/" + db, query, parts.fragment))


def _service_url(name: str, what: str) -> str:
    """The URL in the environment variable ``name``; missing, the test fails under ``CI`` and
    is skipped elsewhere."""
    url = os.environ.get(name, "")
    if not url:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but {name} is not: {what} cannot run")
        pytest.skip(f"{name} is not set")
    return url


@pytest.fixture(scope="session", params=PG_ROUTES)
def pg_database(request: pytest.FixtureRequest) -> Iterator[PgDatabase]:
    """A fresh database (``heart_py_<random>``) per route, created over a direct admin
    connection, migrated through the route, dropped afterwards. Through the pooler a
    database of its own is the only isolation (session state does not follow a client)."""
    route: str = request.param
    ci = bool(os.environ.get("CI"))
    try:
        import psycopg
    except ImportError as e:  # pragma: no cover - depends on the environment
        if ci:
            pytest.fail(f"CI is set but psycopg is not installed: {e}")
        pytest.skip("psycopg is not installed")
    admin_url = _service_url("DATABASE_URL", "the PostgreSQL tests")
    # Before the database exists, so that a missing pooler fails (or skips) only its route.
    pooler_url = _service_url("HEART_PGBOUNCER_URL", "the PostgreSQL tests through the pooler") if route == "pooler" else ""
    name = "heart_py_" + uuid.uuid4().hex[:12]
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as e:
        if ci:
            pytest.fail(f"CI is set but DATABASE_URL is unusable: {e}")
        pytest.skip(f"DATABASE_URL is unusable: {e}")
    db = PgDatabase(route, _with_db(pooler_url, name, pooler=True) if route == "pooler" else _with_db(admin_url, name))
    try:
        with hf.PsycopgLeaseStore.connect(db.url) as store:
            store.migrate()
        yield db
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_database: PgDatabase) -> str:
    """The conninfo of the session's database on each route (test ids ``[direct]``, ``[pooler]``)."""
    return pg_database.url


#: For a test of a feature a transaction pooler does not have: runs on the ``direct`` route
#: only. Say at the test which feature, and why.
direct_route_only = pytest.mark.parametrize("pg_database", ["direct"], indirect=True)


def plain_conninfo(url: str) -> tuple[str, dict[str, Any]]:
    """``url`` for a plain psycopg connection (an application's own, not a store's) on the
    same route, and the keyword arguments it needs there: through the pooler, no prepared
    statements (``prepare_threshold=None``), which a transaction pooler does not keep."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query)
    kept = [(k, v) for k, v in pairs if k != "pgbouncer"]  # the stores' parameter, not libpq's
    conninfo = urlunsplit(parts._replace(query=urlencode(kept, quote_via=quote)))
    return conninfo, ({"prepare_threshold": None} if len(kept) < len(pairs) else {})


def plain_connect(url: str, **kwargs: Any) -> Any:
    """A blocking plain psycopg connection (see :func:`plain_conninfo`)."""
    import psycopg

    conninfo, needed = plain_conninfo(url)
    return psycopg.connect(conninfo, **needed, **kwargs)


def seed_pg_run(url: str, run_id: str, key: str | None = None) -> None:
    """Inserts a ``ready`` run through plain SQL (what an app would do), on the test's route."""
    with plain_connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agent_runs (id, assignment_id, objective, status, idempotency_key, created_by) "
            "VALUES (%s, %s, 'test', 'ready', %s, 'pytest')",
            (run_id, str(uuid.uuid4()), key or f"key:{run_id}"),
        )


def pg_run_id() -> str:
    return str(uuid.uuid4())


def snapshot(store: hf.MemoryLeaseStore) -> Any:
    return (
        [r.to_dict() for r in store.runs()],
        [i.to_dict() for i in store.intents()],
        [d.to_dict() for d in store.dispatch_log()],
        [i.to_dict() for i in store.instances()],
    )


class LoopTicker:
    """Counts event-loop turns while the body of ``async with LoopTicker() as t`` runs: a
    store that blocked the loop would leave ``t.ticks`` near zero."""

    def __init__(self, interval: float = 0.0) -> None:
        self.interval = interval
        self.ticks = 0
        self._done = False
        self._task: asyncio.Future[None] | None = None

    async def _run(self) -> None:
        while not self._done:
            self.ticks += 1
            await asyncio.sleep(self.interval)

    async def __aenter__(self) -> LoopTicker:
        self._task = asyncio.ensure_future(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._done = True
        if self._task is not None:
            await self._task


def nested(n: int) -> list[Any]:
    """A list nested ``n`` levels deep: the deep-nesting value of the bad-input tests."""
    top: list[Any] = []
    x = top
    for _ in range(n - 1):
        y: list[Any] = []
        x.append(y)
        x = y
    return top


def cli() -> str:
    """The heart-fleet CLI of ``$HEART_FLEET_CLI`` (the CI script builds it): under CI a missing
    one fails the test, elsewhere it skips it."""
    path = os.environ.get("HEART_FLEET_CLI", "")
    if not path or not Path(path).is_file():
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but HEART_FLEET_CLI ({path!r}) is not the heart-fleet binary")
        pytest.skip("HEART_FLEET_CLI is not set")
    return path

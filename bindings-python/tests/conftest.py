"""Shared fixtures: a memory fleet, and a private PostgreSQL database per test session.

PostgreSQL tests use ``DATABASE_URL``. When it is unset or unusable they are skipped on a
developer's machine, but they FAIL when ``CI`` is set (CI starts the server first), so a
green CI run never hides a skipped PostgreSQL test.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _with_db(url: str, db: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + db, parts.query, parts.fragment))


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh database (``heart_py_<random>``) migrated for the session, dropped afterwards."""
    url = os.environ.get("DATABASE_URL", "")
    ci = bool(os.environ.get("CI"))
    try:
        import psycopg
    except ImportError as e:  # pragma: no cover - depends on the environment
        if ci:
            pytest.fail(f"CI is set but psycopg is not installed: {e}")
        pytest.skip("psycopg is not installed")
    if not url:
        if ci:
            pytest.fail("CI is set but DATABASE_URL is not: the PostgreSQL tests cannot run")
        pytest.skip("DATABASE_URL is not set")
    name = "heart_py_" + uuid.uuid4().hex[:12]
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as e:
        if ci:
            pytest.fail(f"CI is set but DATABASE_URL is unusable: {e}")
        pytest.skip(f"DATABASE_URL is unusable: {e}")
    db_url = _with_db(url, name)
    try:
        with hf.PsycopgLeaseStore.connect(db_url) as store:
            store.migrate()
        yield db_url
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed_pg_run(url: str, run_id: str, key: str | None = None) -> None:
    """Inserts a ``ready`` run through plain SQL (what an app would do)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
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

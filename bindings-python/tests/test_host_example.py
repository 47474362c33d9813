"""host-examples/python/lease_job.py runs its lease-guarded job on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "host-examples" / "python" / "lease_job.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=120)


def last(out: subprocess.CompletedProcess[str]) -> dict[str, object]:
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_job_on_sqlite_sends_once_and_a_second_concurrent_job_is_held(tmp_path: Path) -> None:
    db = f"sqlite:{tmp_path / 'jobs.db'}"
    first = run(db)
    assert first.returncode == 0, first.stderr
    assert last(first)["result"] == {"sent": True, "reason": None}
    events = [json.loads(line)["event"] for line in first.stdout.splitlines()[:-1]]
    assert events == ["acquired", "fence_verified", "effect_committed", "released"]
    again = run(db)
    assert again.returncode == 0 and last(again)["result"] == {"sent": False, "reason": "deduped"}
    slow = subprocess.Popen([sys.executable, str(EXAMPLE), db, "--hold-ms", "2500"], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    held = run(db)
    slow.wait(timeout=60)
    assert held.returncode == 1 and last(held)["reason"] == "lease-held", held.stdout + held.stderr
    assert slow.returncode == 0


def test_the_job_on_postgres_blocking_and_asyncio(pg_url: str) -> None:
    first = run(pg_url)
    assert first.returncode == 0, first.stderr
    assert last(first)["ran"] is True
    second = run("--async", pg_url)
    assert second.returncode == 0, second.stderr
    assert last(second)["result"] == {"sent": False, "reason": "deduped"}


def test_an_unreachable_store_exits_2() -> None:
    out = run("postgres://nobody:wrong@127.0.0.1:1/none")
    assert out.returncode == 2 and "lease_job:" in out.stderr

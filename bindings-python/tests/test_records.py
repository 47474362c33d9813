"""The lease cycle's records (FencingToken, RunRow, HeartReceipt, AcquireResult,
FencedOutcome) are classes of the native module: they keep the frozen dataclasses' contract
(construction, equality, hashing, repr, to_dict / from_json, pickling, pattern matching), and
the records the Rust memory store answers with equal the ones built from the core's JSON. The
native module's stub matches the module (``mypy.stubtest``)."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import heart_fleet as hf
from conftest import T0

T1 = "2026-07-30T00:01:00.000Z"


def test_the_native_stub_names_and_signatures_match_the_module(tmp_path: Path) -> None:
    """Every class, method, property and function of ``heart_fleet._native`` is in its stub
    with the runtime's signature, and the stub has nothing the module lacks."""
    env = {**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "heart_fleet._native"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_public_name_is_exported_and_the_records_are_the_native_classes() -> None:
    missing = [n for n in hf.__all__ if not hasattr(hf, n)]
    assert missing == []
    for name in ("FencingToken", "RunRow", "HeartReceipt", "AcquireResult", "FencedOutcome"):
        cls = getattr(hf, name)
        assert cls is getattr(hf._native, name) and issubclass(cls, hf.types.Record), name


def test_a_token_behaves_as_the_frozen_dataclass_it_replaced() -> None:
    t = hf.FencingToken("r1", "w", T1, 1)
    assert t == hf.FencingToken(run_id="r1", owner="w", lease_expires_at=T1, epoch=1)
    assert t != hf.FencingToken("r1", "w", T1, 2) and t != ("r1", "w", T1, 1)
    assert hash(t) == hash(hf.FencingToken("r1", "w", T1, 1)) and len({t, copy.copy(t)}) == 1
    assert repr(t) == "FencingToken(run_id='r1', owner='w', lease_expires_at='2026-07-30T00:01:00.000Z', epoch=1)"
    assert hf.FencingToken("r1", "w", T1).epoch is None
    assert t.to_dict() == {"runId": "r1", "owner": "w", "leaseExpiresAt": T1, "epoch": 1}
    assert hf.FencingToken("r1", "w", T1).to_dict() == {"runId": "r1", "owner": "w", "leaseExpiresAt": T1}
    assert hf.FencingToken.from_json(t.to_dict()) == t
    assert pickle.loads(pickle.dumps(t)) == t and copy.deepcopy(t) == t
    with pytest.raises(AttributeError):
        t.owner = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        hf.FencingToken("r1", "w")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        hf.FencingToken("r1", "w", T1, 1, bogus=2)  # type: ignore[call-arg]
    match t:
        case hf.FencingToken(run_id, owner, _, epoch):
            assert (run_id, owner, epoch) == ("r1", "w", 1)
        case _:
            pytest.fail("a token matches its positional pattern")


def _cycle_records(memory_answers: bool) -> list[Any]:
    """One acquire → renew → verify → release → lost renew, recorded as dicts, plus the
    results' records. ``memory_answers``: on the Rust memory store (typed records built in
    Rust); else through a store object answering the same store as JSON text (records built
    from the core's JSON)."""

    class Text:
        def __init__(self, memory: hf.MemoryLeaseStore) -> None:
            self.memory = memory

        def execute_json(self, text: str) -> str:
            return self.memory.execute_json(text)

    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1", "budget": {"usd": 1.5, "tags": ["a", None, True]}, "required_capabilities": ["gpu"]})
    sunk: list[hf.HeartReceipt] = []
    heart = hf.HeartFleet(memory if memory_answers else Text(memory), on_receipt=sunk.append)
    a = heart.acquire("r1", "w", 60)
    assert a.fence is not None
    lost = heart.acquire("r1", "other", 60)
    renewed = heart.try_renew(a.fence, 120)
    assert renewed.ok and isinstance(renewed.value, hf.FencingToken)
    live = heart.verify_fence(renewed.value)
    released = heart.try_release(renewed.value, "completed")
    rejected = heart.try_renew(renewed.value, 60)
    out = [a, lost, renewed, live, released, rejected, *sunk]
    return [x.to_dict() if isinstance(x, hf.types.Record) else x for x in out] + out


def test_records_from_the_memory_store_equal_records_from_the_cores_json() -> None:
    typed = _cycle_records(memory_answers=True)
    from_json = _cycle_records(memory_answers=False)
    n = len(typed) // 2
    assert json.dumps(typed[:n]) == json.dumps(from_json[:n])
    assert typed[n:] == from_json[n:], "the records compare equal across the two ways of making them"
    a, lost, renewed, _, released, rejected = typed[n : n + 6]
    assert isinstance(a.run, hf.RunRow) and a.run.budget == {"usd": 1.5, "tags": ["a", None, True]}
    assert a.run.required_capabilities == ["gpu"] and a.fence.epoch == 1
    assert (lost.acquired, lost.code, lost.fence) == (False, "lease-held", None)
    assert rejected.to_dict() == {"outcome": "rejected", "cause": "released", "code": "fence-rejected"}
    assert not rejected.ok and rejected.value is None and released.ok and released.value.status == "completed"
    assert [r.event for r in typed[n + 6 :]] == ["acquired", "renewed", "fence_verified", "released", "fence_rejected"]
    assert all(hf.verify_receipt(r) for r in typed[n + 6 :])


def test_a_record_reads_each_field_once() -> None:
    """A field built from the core's value on first read is kept: the same object after."""
    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1"})
    a = hf.HeartFleet(memory).acquire("r1", "w", 60)
    assert a.fence is a.fence and a.run is a.run and a.run.id is a.run.id


class _Index:
    """An int-like value that is no int (a numpy integer, say)."""

    def __index__(self) -> int:
        return 1

    def __repr__(self) -> str:
        return "Index(1)"


def _outcome(call: Any) -> Any:
    try:
        out = call()
    except Exception as e:  # noqa: BLE001 - the outcome compared is the exception itself
        return (type(e).__name__, getattr(e, "code", None), str(e))
    return out.to_dict() if isinstance(out, hf.types.Record) else out


def test_the_memory_stores_fast_path_answers_as_the_driven_path() -> None:
    """Every argument the lease cycle's fast path takes or passes on (str subclasses, mapping
    tokens, tokens made with odd fields, out-of-range ttls, bad statuses, an int-like epoch)
    gives the same result or the same error, message included, and the same counters, as a
    store object answering the same store through the driven path."""

    class Name(str):
        pass

    class Text:
        def __init__(self, m: hf.MemoryLeaseStore) -> None:
            self.m = m

        def execute_json(self, text: str) -> str:
            return self.m.execute_json(text)

    def run(memory_answers: bool) -> list[Any]:
        memory = hf.MemoryLeaseStore(T0)
        memory.insert({"id": "r1"})
        heart = hf.HeartFleet(memory if memory_answers else Text(memory))
        a = heart.acquire(Name("r1"), Name("w"), 60)
        assert a.fence is not None
        t = a.fence
        expires = t.lease_expires_at
        calls = [
            lambda: heart.acquire("r1", "w", 0),
            lambda: heart.acquire("", "w", 60),
            lambda: heart.acquire("r1", "w", 31_536_001),
            lambda: heart.acquire("r1", "other", 60),
            lambda: heart.acquire("r1", "w", True),
            lambda: heart.verify_fence(t.to_dict()),
            lambda: heart.verify_fence(hf.FencingToken("r1", "w", expires, 1)),
            lambda: heart.verify_fence(hf.FencingToken(1, "w", expires)),  # type: ignore[arg-type]
            lambda: heart.verify_fence(hf.FencingToken("r1", "w", "not a time")),
            lambda: heart.verify_fence(hf.FencingToken("r1", "w", expires, True)),  # type: ignore[arg-type]
            lambda: heart.verify_fence(hf.FencingToken("r1", "w", expires, _Index())),  # type: ignore[arg-type]
            lambda: heart.verify_fence(hf.FencingToken("", "w", expires, 1)),
            lambda: heart.verify_fence(hf.FencingToken("r1\ud800", "w", expires, 1)),
            lambda: heart.try_renew(t, 0),
            lambda: heart.try_renew(hf.FencingToken("", "w", expires, 1), 0),
            lambda: heart.try_renew(t, 31_536_001),
            lambda: heart.try_release(t, "done"),
            lambda: heart.try_release(t, Name("ready")),
            lambda: heart.try_renew(t, 30),
            lambda: heart.try_release(t, "completed"),
            lambda: heart.try_release(t, "completed"),
        ]
        return [_outcome(c) for c in calls] + [heart.metrics.to_dict()]

    fast, driven = run(memory_answers=True), run(memory_answers=False)
    for i, (a, b) in enumerate(zip(fast, driven)):
        assert a == b, f"call {i}: {a!r} != {b!r}"
    assert fast[0] == {"acquired": False, "run": None, "reason": "Invalid input", "code": "invalid-input"}
    assert fast[-1]["acquireAttempts"] == 2, "invalid input is not an attempt (the first acquire and the lost one are)"


def test_records_made_in_rust_pickle_and_hash_as_the_dataclasses_did() -> None:
    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1", "budget": {"usd": 2}})
    a = hf.HeartFleet(memory).acquire("r1", "w", 60)
    assert pickle.loads(pickle.dumps(a)) == a and copy.deepcopy(a) == a
    assert hash(a.fence) == hash(hf.FencingToken.from_json(a.fence.to_dict()))
    with pytest.raises(TypeError):
        hash(a.run)  # a row holds a list (required_capabilities), as the dataclass did
    nested = hf.FencedOutcome("ok", value=[a.fence, a.fence])
    assert nested.to_dict()["value"] == [a.fence.to_dict()] * 2


class _Stop(BaseException):
    """Not an Exception: a sink raising it is not swallowed (as KeyboardInterrupt is not)."""


@pytest.mark.parametrize("memory_answers", [True, False], ids=["memory fast path", "store object"])
def test_a_sink_is_handed_receipts_the_same_way_on_both_paths(memory_answers: bool) -> None:
    """A sink's Exception is swallowed, a BaseException goes on, and what an async sink
    returns runs on the running loop: on the memory store's fast path as through a store
    object (the driven path)."""
    import asyncio

    class Text:
        def __init__(self, m: hf.MemoryLeaseStore) -> None:
            self.m = m

        def execute_json(self, text: str) -> str:
            return self.m.execute_json(text)

    memory = hf.MemoryLeaseStore(T0)
    memory.insert({"id": "r1"})
    store: Any = memory if memory_answers else Text(memory)
    seen: list[str] = []

    def failing(r: hf.HeartReceipt) -> None:
        seen.append(r.event)
        raise RuntimeError("the sink failed")

    heart = hf.HeartFleet(store, on_receipt=failing)
    a = heart.acquire("r1", "w", 60)
    assert a.fence is not None and heart.verify_fence(a.fence) and seen == ["acquired", "fence_verified"]

    def stopping(r: hf.HeartReceipt) -> None:
        raise _Stop

    with pytest.raises(_Stop):
        hf.HeartFleet(store, on_receipt=stopping).verify_fence(a.fence)

    async def run() -> list[str]:
        got: list[str] = []

        async def later(r: hf.HeartReceipt) -> None:
            got.append(r.event)

        async_heart = hf.HeartFleet(store, on_receipt=later)
        assert a.fence is not None
        assert await async_heart.verify_fence_async(a.fence)
        assert got == [], "an async sink runs in the background, after the operation returns"
        await asyncio.sleep(0)
        return got

    assert asyncio.run(run()) == ["fence_verified"]

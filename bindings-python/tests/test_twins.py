"""HeartFleet's blocking methods and their ``*_async`` twins are generated from one definition
each (``_driver.twins``): the pairs take the same parameters, answer the same on both paths
(inside Rust on the memory store, driven through a store object otherwise), and refuse a call
that does not bind with an ``InvalidTypeError`` that names the method the caller called."""

from __future__ import annotations

import asyncio
import inspect
import typing
from typing import Any

import pytest

import heart_fleet as hf
from conftest import T0

#: Every operation of HeartFleet, by its blocking method's name.
BLOCKING = [
    name
    for name, member in vars(hf.HeartFleet).items()
    if not name.startswith("_") and not name.endswith("_async") and inspect.isfunction(member) and name != "prometheus" and name != "receipts"
]


def test_every_operation_has_a_generated_twin_with_its_signature() -> None:
    assert len(BLOCKING) == 17, BLOCKING
    for name in BLOCKING:
        sync, twin = getattr(hf.HeartFleet, name), getattr(hf.HeartFleet, f"{name}_async")
        assert getattr(sync, "__coded__", False) and getattr(twin, "__coded__", False), name
        assert not inspect.iscoroutinefunction(sync) and inspect.iscoroutinefunction(twin), name
        # The signature shown is the one definition's (the op's), and the annotations resolve.
        op = getattr(hf.HeartFleet, f"_{name}", None) or getattr(hf.HeartFleet, f"_try_{name}")
        assert list(inspect.signature(sync).parameters) == list(inspect.signature(op).parameters), name
        assert inspect.signature(sync) == inspect.signature(twin), name
        assert typing.get_type_hints(sync)["return"] is not None, name
        assert sync.__qualname__ == f"HeartFleet.{name}" and twin.__qualname__ == f"HeartFleet.{name}_async"
        assert sync.__doc__ and twin.__doc__, name
    assert "Plan" not in str(inspect.signature(hf.HeartFleet.acquire).return_annotation)
    assert typing.get_type_hints(hf.HeartFleet.release)["return"] == typing.Optional[hf.RunRow]

class TextStore:
    """A store object over a memory store: the operations are driven, not answered in Rust."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory

    def execute_json(self, text: str) -> str:
        return self.memory.execute_json(text)


def _calls(run_id: str) -> list[tuple[str, tuple[Any, ...]]]:
    """The lease cycle and its misses as (method, arguments); "TOKEN" stands for the newest token."""
    return [
        ("acquire", (run_id, "w", 60)),
        ("acquire", (run_id, "x", 60)),
        ("acquire", ("", "w", 60)),
        ("acquire", ("missing", "w", 60)),
        ("verify_fence", ("TOKEN",)),
        ("try_renew", ("TOKEN", 120)),
        ("renew", ("TOKEN", 30)),
        ("release", ("TOKEN", "ready")),
        ("try_release", ("TOKEN", "ready")),
        ("renew", ("TOKEN", 30)),
        ("verify_fence", ("TOKEN",)),
    ]


def _replay(memory_store: bool, use_async: bool, keywords: bool = False) -> list[Any]:
    memory = hf.MemoryLeaseStore(T0)
    heart = hf.HeartFleet(memory if memory_store else TextStore(memory), on_receipt=lambda r: None)
    run_id = heart.ensure_resource_run("bench", "twins").run.id
    token: Any = None
    out: list[Any] = []

    async def call(name: str, args: tuple[Any, ...]) -> Any:
        method = getattr(heart, f"{name}_async" if use_async else name)
        if keywords:  # every argument by its name, the last first
            names = list(inspect.signature(method).parameters)[: len(args)]
            result = method(**dict(reversed(list(zip(names, args)))))
        else:
            result = method(*args)
        return await result if use_async else result

    for name, args in _calls(run_id):
        args = tuple(token if a == "TOKEN" else a for a in args)
        result = asyncio.run(call(name, args))
        if isinstance(result, hf.AcquireResult) and result.fence is not None:
            token = result.fence
        if isinstance(result, hf.FencedOutcome) and isinstance(result.value, hf.FencingToken):
            token = result.value
        if isinstance(result, hf.FencingToken):
            token = result
        out.append((name, result))
    out.append(("metrics", heart.metrics))
    return out


def test_the_twins_answer_alike_on_the_memory_store_and_through_a_store_object(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lease cycle runs no plan (JSON arguments, the checked path): on the memory store it
    # is answered inside Rust, on a store object it is started with typed values and answers
    # the core's values (NativeFleet.start_*).
    planned: list[Any] = []
    for run in ("_run", "_run_async"):

        def spy(self: hf.HeartFleet, plan: Any, *rest: Any, real: Any = getattr(hf.HeartFleet, run)) -> Any:
            planned.append(plan.kind)
            return real(self, plan, *rest)

        monkeypatch.setattr(hf.HeartFleet, run, spy)
    replays = {(m, a, k): _replay(m, a, k) for m in (True, False) for a in (False, True) for k in (False, True)}
    assert planned == ["ensureResourceRun"] * 8
    first = replays[(True, False, False)]
    results = [r for _, r in first]
    assert results[0].acquired and not results[1].acquired and results[2].code == "invalid-input"
    assert results[4] is True and results[5].ok and isinstance(results[6], hf.FencingToken)
    assert isinstance(results[7], hf.RunRow) and not results[8].ok and results[9] is None and results[10] is False
    for key, replay in replays.items():
        assert replay == first, key


@pytest.mark.parametrize("use_async", [False, True])
def test_a_call_that_does_not_bind_names_the_method_called(use_async: bool) -> None:
    heart = hf.HeartFleet(hf.MemoryLeaseStore(T0))
    suffix = "_async" if use_async else ""
    for name, args, kwargs, says in (
        ("acquire", ("r", "w"), {"ttl": 60}, "unexpected keyword argument 'ttl'"),
        ("acquire", ("r", "w"), {}, "missing 1 required positional argument: 'ttl_seconds'"),
        ("acquire", (), {"owner": "w", "ttl_seconds": 60}, "missing 1 required positional argument: 'run_id'"),
        ("acquire", ("r",), {"run_id": "r", "owner": "w", "ttl_seconds": 60}, "got multiple values for argument 'run_id'"),
        ("release", (None, "ready", 1), {}, "takes from 2 to 3 positional arguments but 4 were given"),
        ("try_release", (), {"next_status": "failed"}, "missing 1 required positional argument: 'fence'"),
        ("renew", (None,), {}, "missing 1 required positional argument: 'ttl_seconds'"),
        ("register_instance", ("i", "h"), {}, "takes 2 positional arguments but 3 were given"),
        ("register_instance", ("i",), {"host": "h"}, "unexpected keyword argument 'host'"),
        ("list_instances", (), {"limit": 1}, "unexpected keyword argument 'limit'"),
    ):
        method = getattr(heart, name + suffix)
        with pytest.raises(hf.InvalidTypeError) as e:
            out = method(*args, **kwargs)
            if use_async:
                asyncio.run(out)
        assert e.value.code == "invalid-input"
        assert f"HeartFleet.{name}{suffix}() " in str(e.value) and says in str(e.value), str(e.value)

"""The driving loop over the core's sans-I/O machines, written once for sync and asyncio.

:func:`steps` is a generator that drives one operation (the core's crate docs, steps 1-5):
``NativeFleet.begin`` builds and starts the machine; every need that Python must answer
(a store request, the effect ledger, the effect, a reconcile probe) is *yielded* to a
runner as a call ``(function, *args)``, and the runner sends back ``(True, value)`` or
``(False, exception)``. :func:`run_sync` calls the function; :func:`run_async` calls it and
awaits the result when it is awaitable (an asyncio store, an async effect), so the event loop
keeps running while the store works. With the memory store attached, the store requests are
answered inside Rust and most operations finish in ``begin`` without a yield.

Cancellation (asyncio): a store call that is cancelled propagates ``CancelledError`` and the
machine is dropped. A store that runs its requests on a thread (``AsyncSqliteLeaseStore``)
rolls the cancelled request back, unless it had already passed its commit point: then it
raises :class:`CancelledAfterCommit` carrying the answer, and :func:`run_async` resumes the
machine with it, so the write is recorded (receipts, counters). If that finished the
operation, its final step is returned (marked ``"cancelled": true``; the cancellation is
absorbed because the operation completed); if the machine needs more, the cancellation
stands and ``CancelledError`` is raised before any further I/O.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Generator
from typing import Any, Protocol

from .errors import InvalidTypeError, StoreUnavailableError, error_for_code

Call = tuple[Any, ...]
Sent = tuple[bool, Any]
Steps = Generator[Call, Sent, dict[str, Any]]


class Host(Protocol):
    """What an operation may ask of its caller besides the store."""

    def record_once(self, run_id: str, effect_key: str) -> Any: ...
    def effect(self, effect_key: str, epoch: int | None) -> Any: ...
    def effect_text(self, value: Any) -> str: ...
    def probe(self, intent: dict[str, Any]) -> Any: ...


class Fleetlike(Protocol):
    _native: Any
    _store: Any
    _text_store: bool

    def _deliver(self, receipts: list[dict[str, Any]]) -> None: ...


class CancelledAfterCommit(asyncio.CancelledError):
    """Raised by a store whose request was cancelled after its write committed: ``answer`` is
    the request's answer (what the store would have returned), so the driving loop can record
    the write instead of forgetting it."""

    def __init__(self, answer: Any) -> None:
        super().__init__("cancelled after the store committed the request")
        self.answer = answer


def message_of(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


def _answer_text(ans: Any) -> str:
    if isinstance(ans, str):
        return ans
    if isinstance(ans, dict):
        return json.dumps(ans, separators=(",", ":"))
    raise TypeError(f"the store answered {type(ans).__name__}, not a StoreAnswer")


def start(fleet: Fleetlike, kind: str, args_text: str) -> Any:
    """Begins an operation: the final step (a dict) when it finished inside Rust, else the op."""
    first = fleet._native.begin(kind, args_text)
    if isinstance(first, str):
        step: dict[str, Any] = json.loads(first)
        receipts = step.get("receipts")
        if receipts:
            fleet._deliver(receipts)
        return step
    return first


def steps(fleet: Fleetlike, op: Any, host: Host | None) -> Steps:
    """Drives a started operation to its end; returns the final step. An effect that raised
    is re-raised as is after the machine finished (as the reference does)."""
    step: dict[str, Any] = json.loads(op.need())
    host_threw: BaseException | None = None
    store = fleet._store
    while True:
        receipts = step.get("receipts")
        if receipts:
            fleet._deliver(receipts)
        if step.get("done"):
            if host_threw is not None:
                raise host_threw
            return step
        need = step.get("need")
        if need == "store":
            request = op.request()
            timeout = getattr(fleet, "_store_timeout", None)
            if fleet._text_store:
                ok, v = yield (_StoreCall(store.execute_json, timeout), request)
            else:
                ok, v = yield (_StoreCall(store.execute, timeout), json.loads(request))
            if ok:
                try:
                    answer = _answer_text(v)
                except (TypeError, ValueError) as e:
                    # A store that answers nonsense ends the operation with store-protocol.
                    text = op.resume_store(json.dumps({"invalid": message_of(e)}))
                else:
                    text = op.resume_store(answer)
            else:
                text = op.resume_store_error(message_of(v))
        elif need == "recordOnce" and host is not None:
            ok, v = yield (host.record_once, step["runId"], step["effectKey"])
            text = op.resume_recorded(bool(v)) if ok else op.resume_recorded_error(message_of(v))
        elif need == "effect" and host is not None:
            ok, v = yield (host.effect, step["effectKey"], step.get("epoch"))
            if ok:
                try:
                    v = host.effect_text(v)
                except Exception as e:  # noqa: BLE001 - the effect's evidence failed: its error propagates
                    ok, v = False, e
            if ok:
                text = op.resume_effect(v)
            else:
                host_threw = v
                text = op.resume_effect_error(message_of(v))
        elif need == "probe" and host is not None:
            ok, v = yield (host.probe, step["intent"])
            if ok:
                try:
                    verdict = json.dumps(v, separators=(",", ":"))
                except (TypeError, ValueError) as e:
                    text = op.resume_probe_error(message_of(e))
                else:
                    text = op.resume_probe(verdict)
            else:
                text = op.resume_probe_error(message_of(v))
        else:
            text = op.resume_store_error(f"unknown need {need}")
        step = json.loads(text)


class _StoreCall:
    """A store method whose awaitable answer is waited for at most ``timeout`` seconds (the
    fleet's ``store_timeout``); a blocking answer is returned as it is."""

    def __init__(self, method: Callable[..., Any], timeout: float | None) -> None:
        self.method = method
        self.timeout = timeout
        # run_sync names the method when it refuses an awaitable.
        self.__qualname__ = getattr(method, "__qualname__", "the store's execute")

    def __call__(self, *args: Any) -> Any:
        v = self.method(*args)
        if self.timeout is None or not (asyncio.iscoroutine(v) or asyncio.isfuture(v)):
            return v
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return v  # the blocking loop: it refuses the awaitable itself
        return _within(v, self.timeout)


async def _within(awaitable: Any, seconds: float) -> Any:
    """``awaitable``'s result within ``seconds``, else ``StoreUnavailableError``. Unlike
    ``asyncio.wait_for``, a store whose write committed just as it was cancelled still hands
    back its answer (``CancelledAfterCommit``), so that write is recorded, not lost."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        # Our caller was cancelled: cancel the store call too, as if it had been awaited
        # directly, and pass on a write it could not undo (CancelledAfterCommit).
        task.cancel()
        try:
            answer = await task
        except asyncio.CancelledError:
            raise  # CancelledAfterCommit included: run_async records its answer
        raise CancelledAfterCommit(answer) from None
    if task in done:
        return task.result()
    task.cancel()
    try:
        await task
    except CancelledAfterCommit as c:
        return c.answer
    except BaseException:  # noqa: BLE001 - cancelled as asked, or failed on the way out
        pass
    else:
        return task.result()
    raise StoreUnavailableError(f"the store gave no answer within {seconds:g} s (store_timeout)")


def run_sync(gen: Steps) -> dict[str, Any]:
    """Runs the loop with blocking calls. A call that returns an awaitable (an asyncio store
    behind a sync method) fails the step: use the ``*_async`` method."""
    try:
        call = next(gen)
    except StopIteration as e:
        return e.value  # type: ignore[no-any-return]
    while True:
        try:
            v = call[0](*call[1:])
            if inspect.isawaitable(v):
                if inspect.iscoroutine(v):
                    v.close()
                raise InvalidTypeError(
                    f"{getattr(call[0], '__qualname__', 'a callback')} returned an awaitable: "
                    "use the *_async method of the API with an asyncio store or callback"
                )
            sent: Sent = (True, v)
        except Exception as e:  # noqa: BLE001 - handed to the machine, which decides
            sent = (False, e)
        try:
            call = gen.send(sent)
        except StopIteration as e:
            return e.value  # type: ignore[no-any-return]


async def run_async(gen: Steps) -> dict[str, Any]:
    """Runs the loop, awaiting every awaitable a call returns."""
    try:
        call = next(gen)
    except StopIteration as e:
        return e.value  # type: ignore[no-any-return]
    while True:
        try:
            v = call[0](*call[1:])
            if inspect.isawaitable(v):
                v = await v
            sent: Sent = (True, v)
        except CancelledAfterCommit as c:
            # The store wrote before the cancellation reached it: record what it wrote.
            try:
                call = gen.send((True, c.answer))
            except StopIteration as e:
                final: dict[str, Any] = e.value
                final["cancelled"] = True
                return final
            gen.close()
            raise asyncio.CancelledError() from None
        except asyncio.CancelledError:
            gen.close()
            raise
        except Exception as e:  # noqa: BLE001 - handed to the machine, which decides
            sent = (False, e)
        try:
            call = gen.send(sent)
        except StopIteration as e:
            return e.value  # type: ignore[no-any-return]


def drive_sync(fleet: Fleetlike, kind: str, args_text: str, host: Host | None = None) -> dict[str, Any]:
    """Runs an operation with blocking calls; returns the final step."""
    if getattr(fleet, "_async_store", False):
        raise InvalidTypeError(
            f"{type(fleet._store).__name__} is an asyncio store: use the *_async method (e.g. acquire_async)"
        )
    first = start(fleet, kind, args_text)
    if isinstance(first, dict):
        return first
    return run_sync(steps(fleet, first, host))


async def drive_async(fleet: Fleetlike, kind: str, args_text: str, host: Host | None = None) -> dict[str, Any]:
    """Runs an operation, awaiting the store and the callbacks; returns the final step."""
    first = start(fleet, kind, args_text)
    if isinstance(first, dict):
        return first
    return await run_async(steps(fleet, first, host))


def ok_of(step: dict[str, Any]) -> Any:
    """The value of a final step, or its coded error raised."""
    err = step.get("error")
    if err is not None:
        raise error_for_code(err.get("code", "store-protocol"), err.get("message", ""))
    return step.get("ok")


__all__ = ["CancelledAfterCommit", "Host", "drive_async", "drive_sync", "ok_of", "run_async", "run_sync", "start", "steps", "message_of"]

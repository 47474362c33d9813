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
from collections.abc import Callable, Coroutine, Generator
from types import CoroutineType
from typing import Any, Concatenate, NamedTuple, ParamSpec, Protocol, TypeVar, overload

from . import _check, _native
from ._native import StoreAnswer, StoreRequest
from .errors import InvalidTypeError, StoreUnavailableError, error_for_code

_T = TypeVar("_T")
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
    def _held(self) -> Any: ...


class Held(Protocol):
    """A held transaction (``_receipt_table.HeldTransaction``): the operation's requests and
    receipts in one transaction, settled at its end and before the caller's turn; ``execute``
    and ``settle`` yield their calls as this loop does."""

    @property
    def is_open(self) -> bool: ...
    def execute(self, request: StoreRequest, timeout: float | None) -> Generator[Call, Sent, Any]: ...
    def receipt(self, receipt: str) -> None: ...
    def settle(self) -> Generator[Call, Sent, Any]: ...
    def abandon(self) -> None: ...


class Unsettled:
    """What one operation counted since its writes were last committed, so a held transaction
    that rolls back takes it back (``NativeFleet.uncount``). The native calls that resume an
    operation are synchronous, so what the counters gained across one is that operation's."""

    __slots__ = ("native", "delta")

    def __init__(self, native: Any) -> None:
        self.native = native
        self.delta: list[int] | None = None

    def count(self, resume: Callable[[], _T]) -> _T:
        """Runs ``resume`` (a synchronous native call) and adds what it counted."""
        before = self.native.metrics()
        out = resume()
        after = self.native.metrics()
        gained = [a - b for a, b in zip(after, before)]
        self.delta = gained if self.delta is None else [d + g for d, g in zip(self.delta, gained)]
        return out

    def settled(self) -> None:
        self.delta = None

    def rolled_back(self) -> None:
        if self.delta is not None:
            self.native.uncount(self.delta)
        self.delta = None


def _call(resume: Callable[[], _T]) -> _T:
    return resume()


class CancelledAfterCommit(asyncio.CancelledError):
    """Raised by a store whose request was cancelled after its write committed: ``answer`` is
    the request's answer (what the store would have returned), so the driving loop can record
    the write instead of forgetting it."""

    def __init__(self, answer: Any) -> None:
        super().__init__("cancelled after the store committed the request")
        self.answer = answer


async def committed(commit: Any) -> None:
    """Awaits ``commit`` (a held transaction's COMMIT) to its end even when the caller is
    cancelled meanwhile: committed, the cancellation becomes :class:`CancelledAfterCommit`
    (the operation's writes stand and the driving loop records them); failed, it stays a
    plain ``CancelledError`` (nothing was written)."""
    task = asyncio.ensure_future(commit)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                continue
        if task.cancelled() or task.exception() is not None:
            raise asyncio.CancelledError() from None
        raise CancelledAfterCommit(None) from None


def message_of(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__


def _answer_text(ans: Any) -> str:
    if isinstance(ans, str):
        return ans
    if isinstance(ans, dict):
        return json.dumps(ans, separators=(",", ":"))
    raise TypeError(f"the store answered {type(ans).__name__}, not a StoreAnswer")


def _store_answer(ans: Any) -> tuple[str | None, str]:
    """A store's answer as the machine is resumed with it: ``(None, its text)``, or, for an
    answer that is not one, ``("store-protocol", why)``, which ends the operation."""
    try:
        return None, _answer_text(ans)
    except (TypeError, ValueError) as e:
        return "store-protocol", message_of(e)


def _refuse_awaitable(fn: Any, v: Any) -> None:
    """A blocking call's result may not be awaitable (an asyncio store behind a sync method)."""
    if inspect.isawaitable(v):
        if inspect.iscoroutine(v):
            v.close()
        raise InvalidTypeError(
            f"{getattr(fn, '__qualname__', 'a callback')} returned an awaitable: "
            "use the *_async method of the API with an asyncio store or callback"
        )


def _settle(method: Callable[[Any], Any], outcome: Any, raised: bool) -> tuple[str | None, Any]:
    """What ``NativeOp.drive_store`` resumes a blocking store's operation with when
    ``method`` (its ``execute`` or ``execute_json``) raised ``outcome`` (an ``Exception``) or
    answered something other than a :class:`StoreAnswer` or text: ``(None, answer text)``, or
    ``(code, why)`` when it failed or answered nonsense, as :func:`run_sync` and
    :func:`_steps` would hand it to the machine."""
    if not raised:
        try:
            _refuse_awaitable(method, outcome)
        except InvalidTypeError as e:
            return "store-unavailable", message_of(e)
    return _settle_awaited(method, outcome, raised)


def start(fleet: Fleetlike, kind: str, args_text: str, counted: Unsettled | None = None) -> Any:
    """Begins an operation: the final step (a dict) when it finished inside Rust, else the op.
    What ``begin`` counts (say acquireAttempts) goes to ``counted``."""
    native = fleet._native
    first = (counted.count if counted is not None else _call)(lambda: native.begin(kind, args_text))
    if isinstance(first, str):
        step: dict[str, Any] = json.loads(first)
        receipts = step.get("receipts")
        if receipts:
            fleet._deliver(receipts)
        return step
    return first


def steps(fleet: Fleetlike, op: Any, host: Host | None, held: Held | None = None, counted: Unsettled | None = None) -> Steps:
    """Drives a started operation to its end; returns the final step. An effect that raised
    is re-raised as is after the machine finished (as the reference does). With ``held``,
    the operation's requests and receipts go to that transaction, settled at the end and
    before the caller's turn; a rollback ends the operation with ``store-unavailable`` (an
    operation that failed already keeps its own error) and takes back what ``counted`` saw."""
    finished = False
    try:
        final = yield from _steps(fleet, op, host, held, counted)
        finished = True
        return final
    finally:
        if held is not None and not finished:
            # Left by an exception or a cancellation: what it wrote since its last settle rolls
            # back, and so do its counts.
            held.abandon()
            if counted is not None:
                counted.rolled_back()


def _rolled_back(e: BaseException) -> dict[str, Any]:
    return {"done": True, "error": {"code": getattr(e, "code", "store-unavailable"), "message": message_of(e)}}


def _steps(fleet: Fleetlike, op: Any, host: Host | None, held: Held | None, counted: Unsettled | None) -> Steps:
    resume = counted.count if counted is not None else _call
    step: dict[str, Any] = json.loads(op.need())
    host_threw: BaseException | None = None
    store = fleet._store
    while True:
        receipts = step.get("receipts")
        if receipts:
            if held is not None:
                for r in receipts:
                    held.receipt(json.dumps(r))
            else:
                fleet._deliver(receipts)
        need = step.get("need")
        if held is not None and counted is not None and (step.get("done") or need != "store"):
            # The end, or the caller's turn (an effect may take long): commit what was written.
            try:
                yield from held.settle()
            except Exception as e:  # noqa: BLE001 - the operation fails with it
                counted.rolled_back()
                if not step.get("done") or "error" not in step:
                    if host_threw is not None:
                        raise host_threw from None
                    return _rolled_back(e)
            else:
                counted.settled()
        if step.get("done"):
            if host_threw is not None:
                raise host_threw
            return step
        if need == "store":
            timeout = getattr(fleet, "_store_timeout", None)
            if held is not None:
                try:
                    ok, v = True, (yield from held.execute(op.take_store_request(), timeout))
                except Exception as e:  # noqa: BLE001 - handed to the machine, which decides
                    ok, v = False, e
            elif fleet._text_store:
                ok, v = yield (StoreCall(store.execute_json, timeout), op.request())
            else:
                ok, v = yield (StoreCall(store.execute, timeout), op.take_store_request())
            text = resume(lambda: _resume_store(op, ok, v))
        elif need == "recordOnce" and host is not None:
            ok, v = yield (host.record_once, step["runId"], step["effectKey"])
            text = resume(lambda: op.resume_recorded(bool(v)) if ok else op.resume_recorded_error(message_of(v)))
        elif need == "effect" and host is not None:
            ok, v = yield (host.effect, step["effectKey"], step.get("epoch"))
            if ok:
                try:
                    v = host.effect_text(v)
                except Exception as e:  # noqa: BLE001 - the effect's evidence failed: its error propagates
                    ok, v = False, e
            if ok:
                text = resume(lambda: op.resume_effect(v))
            else:
                host_threw = v
                text = resume(lambda: op.resume_effect_error(message_of(v)))
        elif need == "probe" and host is not None:
            ok, v = yield (host.probe, step["intent"])
            if ok:
                try:
                    verdict = json.dumps(v, separators=(",", ":"))
                except (TypeError, ValueError) as e:
                    why = message_of(e)
                    text = resume(lambda: op.resume_probe_error(why))
                else:
                    text = resume(lambda: op.resume_probe(verdict))
            else:
                text = resume(lambda: op.resume_probe_error(message_of(v)))
        else:
            text = resume(lambda: op.resume_store_error(f"unknown need {need}"))
        step = json.loads(text)


def _resume_store(op: Any, ok: bool, v: Any) -> str:
    """Resumes ``op`` with its store's outcome and gives the next step (JSON text): a
    :class:`StoreAnswer` as it is, an answer in its JSON shape or text, nonsense (which ends
    the operation with ``store-protocol``), or what the store raised (``ok`` false:
    ``store-unavailable``)."""
    if ok and type(v) is StoreAnswer:
        return str(op.resume_store_answer(v))
    if ok:
        failure, answer = _store_answer(v)
        return str(op.resume_store(answer) if failure is None else op.resume_store_failure(failure, answer))
    return str(op.resume_store_error(message_of(v)))


class StoreCall:
    """A store method whose awaitable answer is waited for at most ``timeout`` seconds (the
    fleet's ``store_timeout``, counted from the call: :func:`_within`); a blocking answer is
    returned as it is."""

    def __init__(self, method: Callable[..., Any], timeout: float | None) -> None:
        self.method = method
        self.timeout = timeout
        # run_sync names the method when it refuses an awaitable.
        self.__qualname__ = getattr(method, "__qualname__", "the store's execute")

    def __call__(self, *args: Any) -> Any:
        v = self.method(*args)
        if self.timeout is None or not (type(v) is CoroutineType or asyncio.iscoroutine(v) or asyncio.isfuture(v)):
            return v
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return v  # the blocking loop: it refuses the awaitable itself
        return _within(v, self.timeout, loop.time() + self.timeout)


class _Started:
    """A coroutine already run to its first suspension, which gave ``signal`` (for the task
    that runs it), awaited from there: what ``await`` on the coroutine would have gone on to
    do (PEP 380), sends, throws (a cancellation) and closing passed through."""

    __slots__ = ("coro", "signal")

    def __init__(self, coro: Coroutine[Any, Any, Any], signal: Any) -> None:
        self.coro = coro
        self.signal = signal

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, signal = self.coro, self.signal
        self.signal = None
        while True:
            try:
                sent = yield signal
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # noqa: BLE001 - the task's throw, passed on as is
                try:
                    signal = coro.throw(e)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    signal = coro.send(sent)
                except StopIteration as done:
                    return done.value


async def _within(awaitable: Any, seconds: float, when: float) -> Any:
    """``awaitable``'s result by the loop time ``when`` (``seconds`` after the call), else
    ``StoreUnavailableError``. The store call runs in the caller's task under
    ``asyncio.timeout_at`` (no task of its own: that cost more than the rest of an operation's
    loop), and is cancelled at the deadline as ``wait_for`` would. Unlike ``wait_for``, a store
    whose write committed just as the deadline cancelled it still hands back its answer
    (``CancelledAfterCommit``), so that write is recorded, not lost; a cancellation of the
    caller reaches the store as if it had been awaited directly.

    A coroutine is first run up to its first suspension, as ``await`` would run it: one that
    answers without suspending gives its answer (whatever it is) with no timer armed; nothing
    can overrun a deadline without suspending, since the loop could not have cancelled it."""
    if type(awaitable) is CoroutineType:
        try:
            signal = awaitable.send(None)
        except StopIteration as done:
            return done.value
        awaitable = _Started(awaitable, signal)
    task = asyncio.current_task()
    cancelling = task.cancelling() if task is not None else 0
    deadline = asyncio.timeout_at(when)

    def deadline_cancelled() -> bool:  # the deadline's cancellation, not the caller's
        return deadline.expired() and (task is None or task.cancelling() == cancelling)

    try:
        async with deadline:
            return await awaitable
    except CancelledAfterCommit as c:
        if deadline_cancelled():
            return c.answer  # after the write: keep the write
        raise  # the caller's cancellation: run_async records the write and decides
    except Exception as e:  # noqa: BLE001 - the deadline's TimeoutError, or what the store raised
        if not deadline.expired():
            raise
        # Python 3.13's timeout turns a CancelledError subclass into TimeoutError: the write
        # the store committed as the deadline cancelled it is still kept.
        if isinstance(e.__cause__, CancelledAfterCommit) and deadline_cancelled():
            return e.__cause__.answer
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
            _refuse_awaitable(call[0], v)
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


def _blocking(fleet: Fleetlike) -> None:
    if getattr(fleet, "_async_store", False):
        raise InvalidTypeError(
            f"{type(fleet._store).__name__} is an asyncio store: use the *_async method (e.g. acquire_async)"
        )


def drive_sync(fleet: Fleetlike, kind: str, args_text: str, host: Host | None = None) -> dict[str, Any]:
    """Runs an operation with blocking calls; returns the final step."""
    _blocking(fleet)
    held, counted = _holding(fleet)
    first = start(fleet, kind, args_text, counted)
    if isinstance(first, dict):
        return first
    if held is None:
        _drive_store(fleet, first)
    return run_sync(steps(fleet, first, host, held, counted))


def _store_method(fleet: Fleetlike) -> Callable[[Any], Any]:
    """The store's method the native operation calls: ``execute``, handed a
    :class:`StoreRequest`, or, for a store that has only ``execute_json``, that, handed the
    request's text."""
    return fleet._store.execute_json if fleet._text_store else fleet._store.execute  # type: ignore[no-any-return]


def _drive_store(fleet: Fleetlike, op: Any) -> None:
    """Answers a blocking operation's store requests inside Rust while it needs only the store;
    :func:`steps` takes over from the step that leaves."""
    op.drive_store(_store_method(fleet), _settle, not fleet._text_store)


async def drive_async(fleet: Fleetlike, kind: str, args_text: str, host: Host | None = None) -> dict[str, Any]:
    """Runs an operation, awaiting the store and the callbacks; returns the final step."""
    held, counted = _holding(fleet)
    first = start(fleet, kind, args_text, counted)
    if isinstance(first, dict):
        return first
    return await run_async(steps(fleet, first, host, held, counted))


def finish_sync(fleet: Fleetlike, op: Any) -> Any:
    """Finishes, with blocking calls, an operation the native fleet's ``acquire`` (or a
    sibling) started with its result kept and gave back because it needs more than the store
    (whose requests it answered already): its value, built in Rust, or its coded error
    raised."""
    ok_of(run_sync(steps(fleet, op, None)))
    return op.result()


async def finish_async(fleet: Fleetlike, op: Any) -> Any:
    """Finishes, awaiting the store, an operation a ``start_`` method gave back (its store
    call suspended, it raised, or it needs more than the store): its value, or its coded
    error raised, as :func:`finish_sync` gives it. Its requests
    are answered inside Rust while the store answers without suspending
    (``NativeOp.drive_store_async``, which first gives what the start left); one that suspends
    is awaited here within its deadline, counted from the call, as :func:`run_async` awaits
    it (a store's ``CancelledAfterCommit`` included); a need other than the store goes
    through :func:`steps`."""
    text = fleet._text_store
    method = _store_method(fleet)
    timeout = getattr(fleet, "_store_timeout", None)
    while True:
        try:
            left = op.drive_store_async(method, _settle_awaited, not text)
            if left is None:
                break
            try:
                v, ok = await _suspended(left, timeout), True
            except Exception as e:  # noqa: BLE001 - handed to the machine, which decides
                v, ok = e, False
        except CancelledAfterCommit as c:
            # The store wrote before the cancellation reached it: record what it wrote. An
            # operation that this finished absorbs the cancellation; one that needs more stops.
            _resume_store(op, True, c.answer)
            if op.is_done():
                return op.result()
            raise asyncio.CancelledError() from None
        _resume_store(op, ok, v)
    result = op.finished()
    if result is None:  # it needs more than the store
        ok_of(await run_async(steps(fleet, op, None)))
        result = op.result()
    return result


async def _suspended(left: tuple[Any, Any, float], timeout: float | None) -> Any:
    """The answer of a store call that suspended (``drive_store_async``'s
    ``(awaitable, signal, seconds since the call)``), within its deadline."""
    awaitable, signal, elapsed = left
    if type(awaitable) is CoroutineType:
        awaitable = _Started(awaitable, signal)
    if timeout is None:
        return await awaitable
    return await _within(awaitable, timeout, asyncio.get_running_loop().time() - elapsed + timeout)


def _settle_awaited(method: Callable[[Any], Any], outcome: Any, raised: bool) -> tuple[str | None, Any]:
    """What a store's outcome resumes its operation with (see :func:`_settle`, which refuses
    a blocking store's awaitable first). For an asyncio store's answer, given without
    suspending, an awaitable it answers is not a StoreAnswer: ``store-protocol``, as
    :func:`run_async` has it."""
    return ("store-unavailable", message_of(outcome)) if raised else _store_answer(outcome)


def _holding(fleet: Fleetlike) -> tuple[Held | None, Unsettled | None]:
    """The held transaction of one operation, when the fleet's sink is its store's receipt
    sink (``_receipt_table``), and what the operation counts."""
    held = fleet._held()
    return (held, Unsettled(fleet._native)) if held is not None else (None, None)


def ok_of(step: dict[str, Any]) -> Any:
    """The value of a final step, or its coded error raised."""
    err = step.get("error")
    if err is not None:
        raise error_for_code(err.get("code", "store-protocol"), err.get("message", ""))
    return step.get("ok")


class Plan(NamedTuple):
    """An operation for the core to run through the store: its kind (the API's name), its
    arguments as JSON text, and what makes the caller's value of the final one."""

    kind: str
    args: str
    post: Callable[[Any], Any]


_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


@overload
def twins(
    op: Callable[Concatenate[_S, _P], _R | Plan], *, fast: str | None = None
) -> tuple[Callable[Concatenate[_S, _P], _R], Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]]: ...


@overload
def twins(
    op: Callable[Concatenate[_S, _P], _R | Plan], *, fast: str | None = None, then: Callable[[_R], _T], name: str, doc: str
) -> tuple[Callable[Concatenate[_S, _P], _T], Callable[Concatenate[_S, _P], Coroutine[Any, Any, _T]]]: ...


def twins(
    op: Callable[..., Any],
    *,
    fast: str | None = None,
    then: Callable[[Any], Any] | None = None,
    name: str | None = None,
    doc: str | None = None,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """A blocking method and its ``*_async`` twin generated from one definition, so the two
    cannot drift apart and neither needs a wrapper frame.

    ``op(self, ...)`` (named ``_<method>``) checks its arguments and returns the answer when it
    has one without the store (a bad value's documented shape), or a :class:`Plan`: the
    blocking method runs it with ``self._run(plan)``, the twin with ``await
    self._run_async(plan)``. ``fast`` names the native fleet's method that answers the
    operation inside Rust on the memory store, checking its arguments there (it answers None
    when it cannot, for a store object or arguments it does not take as plain values: ``op``
    then checks and plans); with it, an operation on the memory store is one Python frame, or
    one coroutine, around the native call. ``then`` maps the answer (``release`` is
    ``try_release``'s value), under ``name`` with ``doc``. Both methods take ``op``'s
    parameters, signature and annotations, and a call that does not bind is an
    ``InvalidTypeError`` with Python's own message naming the method called
    (:func:`_check.binding`)."""
    name = name or op.__name__.lstrip("_")
    owner = op.__qualname__.rpartition(".")[0]
    bound = _check.binding(op, skip=1)
    if bound is None:
        raise TypeError(f"twins: {op.__qualname__} has *args, **kwargs, a required keyword-only parameter or a parameter with a leading underscore")
    this, _, args = bound.call.partition(", ")
    out = "_then(_r)" if then else "_r"
    body = bound.prologue
    if fast is not None:
        # The native method answers inside Rust: the blocking API's on the memory store or a
        # blocking store object (the fleet is _direct), the asyncio API's on the memory store;
        # the asyncio API's start_ twin on a store object whose receipts are not held
        # (_kept), driven through it while it answers without suspending. What is left (a
        # store call that suspended, a need other than the store) is finished here.
        body += "    _r = {dispatch}\n    if _r is not None:\n"
        body += f"        if _type(_r) is _NativeOp:\n            _o = _r\n            _r = {{finish}}\n        return {out}\n"

    def planned(run: str) -> str:
        """The rest of the body: the op's answer, its plan run by ``run`` (an expression)."""
        return f"    _r = _op({bound.call})\n    if _type(_r) is _Plan:\n        _r = {run}\n    return {out}\n"

    signature = inspect.signature(op)
    returns = inspect.signature(then).return_annotation if then is not None else signature.return_annotation
    if isinstance(returns, str):
        returns = returns.replace(" | Plan", "")
    made = []
    native = f"{this}._native.{fast}({args})"
    direct = f"{native} if {this}._direct else None"
    memory_or_kept = f"{native} if {this}._memory else {this}._native.start_{fast}({args}) if {this}._kept else None"
    for called, define, run, finish, dispatch, text in (
        (name, "def", f"{this}._run(_r)", f"_finish({this}, _o)", direct, doc or op.__doc__),
        (
            f"{name}_async",
            "async def",
            f"await {this}._run_async(_r)",
            f"await _finish_async({this}, _o)",
            memory_or_kept,
            f":meth:`{name}`, awaiting the store.",
        ),
    ):
        qualname = f"{owner}.{called}"
        source = f"{define} {called}({bound.header}):\n" + body.replace("{dispatch}", dispatch).replace("{finish}", finish) + planned(run)
        namespace = {**bound.namespace, "_op": op, "_Plan": Plan, "_then": then, "_type": type, "_NativeOp": _native.NativeOp}
        namespace |= {"_finish": finish_sync, "_finish_async": finish_async}
        namespace["_fb"] = _check.binder(op, qualname, skip=1)
        fn = _check.generated(source, called, namespace, qualname)
        fn.__qualname__ = qualname
        fn.__module__ = op.__module__
        fn.__doc__ = text
        fn.__signature__ = signature.replace(return_annotation=returns)
        fn.__annotations__ = {**op.__annotations__, "return": returns}
        fn.__wrapped__ = op  # typing.get_type_hints resolves the annotations in op's module
        fn.__coded__ = True  # _check.coded_methods leaves it as it is
        made.append(fn)
    return made[0], made[1]


__all__ = ["CancelledAfterCommit", "Plan", "twins", "Host", "drive_async", "drive_sync", "ok_of", "run_async", "run_sync", "start", "steps", "message_of"]

"""execute_with_lease (a function, a context manager and a decorator), guard_irreversible
and the in-process effect ledger.

``execute_with_lease`` acquires a run, runs the work while a heartbeat renews the lease,
then releases it with the newest token. The blocking form runs its heartbeat on a thread
of its own; the asyncio form runs it as a task. Renews and the release are serialized. The
core's lease session (``heart_fleet_core::session``) makes every decision: when to renew,
which token is newest, when the lease is lost and why. The **lease-lost signal** is the
lease's ``signal`` (a ``threading.Event`` / ``asyncio.Event``) plus ``lease.lost`` (the
cause) and ``lease.lost_error`` (a :class:`LeaseLostError`); the work is not stopped, and
the result reports ``lost``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from . import _check, _driver
from . import _native
from .errors import (
    FenceRejectedError,
    HeartFleetError,
    InvalidInputError,
    InvalidTypeError,
    LeaseHeldError,
    LeaseLostError,
    error_for_code,
)
from .fleet import HeartFleet
from .types import AcquireResult, EffectContext, ExecuteResult, FencingToken, GuardResult

__all__ = [
    "MemoryEffectLedger",
    "guard_irreversible",
    "guard_irreversible_async",
    "execute_with_lease",
    "execute_with_lease_async",
    "Lease",
    "AsyncLease",
    "LeaseScope",
    "heartbeat_interval_ms",
]

T = TypeVar("T")

#: Why the work did not run: after an acquire that did not win, by whether the run was found,
#: and when the options were bad (the contract's ``notRunReasons``, from the core).
_NOT_RUN: dict[str, str] = _check.CONTRACT["notRunReasons"]


class MemoryEffectLedger:
    """The reference's in-process ledger, a set of (run_id, effect_key): the core's. Lost on
    restart; safe to share between threads."""

    __slots__ = ("_ledger",)

    def __init__(self) -> None:
        self._ledger = _native.MemoryEffectLedger()

    def record_once(self, run_id: str, effect_key: str) -> bool:
        """``True`` the first time (run_id, effect_key) is recorded, ``False`` afterwards."""
        return self._ledger.record_once(run_id, effect_key)


def _check_ledger(ledger: object) -> None:
    if not callable(getattr(ledger, "record_once", None)):
        raise InvalidTypeError(f"ledger must have record_once(run_id, effect_key), got {_check.describe(ledger)}")


class _GuardHost:
    """Answers guard's needs: the ledger, the effect (its result is kept, the core gets null)."""

    __slots__ = ("record", "fn", "result")

    def __init__(self, ledger: Any, fn: Callable[[EffectContext], Any], is_async: bool) -> None:
        # An asyncio caller uses the ledger's asyncio twin when it has one (DurableEffectLedger).
        twin = getattr(ledger, "record_once_async", None) if is_async else None
        self.record = twin if callable(twin) else ledger.record_once
        self.fn = fn
        self.result: Any = None

    def record_once(self, run_id: str, effect_key: str) -> Any:
        return self.record(run_id, effect_key)

    def effect(self, effect_key: str, epoch: int | None) -> Any:
        return self.fn(EffectContext(epoch=epoch, effect_key=effect_key))

    def effect_text(self, value: Any) -> str:
        self.result = value
        return "null"

    def probe(self, intent: dict[str, Any]) -> Any:  # pragma: no cover - guard has no probe
        return {"status": "unknown"}


def _guard_plan(
    heart: object, fence: object, ledger: object, effect_key: object, effect: object, is_async: bool
) -> tuple[str, _GuardHost]:
    if not isinstance(heart, HeartFleet):
        raise InvalidTypeError(f"guard_irreversible: heart must be a HeartFleet, got {_check.describe(heart)}")
    f = _check.fence("fence", fence)
    _check_ledger(ledger)
    key = _check.text("effect_key", effect_key)
    _check.callable_("effect", effect)
    if not is_async and inspect.iscoroutinefunction(effect):
        # Checked before any I/O: a coroutine effect run blocking would burn its key.
        raise InvalidTypeError("guard_irreversible: effect is a coroutine function: use guard_irreversible_async")
    args = json.dumps({"fence": f, "effectKey": key}, separators=(",", ":"))
    return args, _GuardHost(ledger, effect, is_async)  # type: ignore[arg-type]


def _guard_result(step: dict[str, Any], host: _GuardHost) -> GuardResult:
    r = _driver.ok_of(step)
    out = GuardResult.from_json(r)
    if out.committed:
        return GuardResult(committed=True, result=host.result)
    return out


def guard_irreversible(
    heart: HeartFleet, fence: FencingToken, ledger: Any, effect_key: str, effect: Callable[[EffectContext], T]
) -> GuardResult:
    """Verifies the fence, records the key once in the ledger, then runs
    ``effect(EffectContext(epoch, effect_key))`` once. Returns ``GuardResult(committed=True,
    result=...)``, or ``committed=False`` with ``reason`` ``fence-rejected`` / ``already-committed``
    (code ``deduped``). An effect that raises propagates its exception; the key stays
    recorded (at most once)."""
    args, host = _guard_plan(heart, fence, ledger, effect_key, effect, False)
    return _guard_result(_driver.drive_sync(heart, "guardIrreversible", args, host), host)


async def guard_irreversible_async(
    heart: HeartFleet,
    fence: FencingToken,
    ledger: Any,
    effect_key: str,
    effect: Callable[[EffectContext], T | Awaitable[T]],
) -> GuardResult:
    """:func:`guard_irreversible`, awaiting the store, the ledger and the effect."""
    args, host = _guard_plan(heart, fence, ledger, effect_key, effect, True)
    return _guard_result(await _driver.drive_async(heart, "guardIrreversible", args, host), host)


def heartbeat_interval_ms(ttl_seconds: int, renew_every_ms: int | None = None) -> int:
    """The heartbeat cadence: ``renew_every_ms`` or ``max(1000, ttl_seconds * 1000 // 2)``."""
    _check.integer("ttl_seconds", ttl_seconds, -(2**63), 2**63 - 1)
    if renew_every_ms is not None:
        return _check.integer("renew_every_ms", renew_every_ms, -(2**63), 2**63 - 1)
    return int(_native.heartbeat_interval(ttl_seconds, None))


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class _Session:
    """The host half of one lease: the core's session plus the lost signal."""

    def __init__(self, heart: HeartFleet, run_id: str, ttl_seconds: int, clock: Callable[[], float]) -> None:
        self.heart = heart
        self.run_id = run_id
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.native: Any = None
        self.fence: FencingToken | None = None
        self.last_beat = 0
        self.finished = False
        self.lost_error: LeaseLostError | None = None
        self.on_lost: Callable[[], None] = lambda: None

    def tick(self) -> int:
        t = self.clock()
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or t in (float("inf"), float("-inf")):
            raise InvalidTypeError("execute_with_lease: clock() must return finite milliseconds")
        return int(t // 1)

    def lose(self, cause: str | None) -> None:
        if cause and self.lost_error is None:
            self.lost_error = LeaseLostError(cause, self.run_id)
            self.on_lost()

    def renew_args(self) -> str:
        assert self.fence is not None
        return json.dumps({"fence": self.fence.to_dict(), "ttlSeconds": self.ttl_seconds}, separators=(",", ":"))

    def on_renewed(self, done: dict[str, Any], at: int) -> None:
        payload = {"ok": done.get("ok"), "error": done.get("error")}
        cause = self.native.on_renewed(json.dumps(payload, separators=(",", ":")), at)
        ok = done.get("ok")
        if isinstance(ok, dict) and ok.get("outcome") == "ok":
            self.fence = FencingToken.from_json(ok["value"])
        self.lose(cause)

    def due(self, at: int, cooperative: bool) -> bool:
        """Whether a beat at ``at`` should renew (else the expiry is checked)."""
        if self.finished:
            return False
        if (cooperative and at - self.last_beat < self.native.interval_ms()) or not self.native.should_renew():
            self.lose(self.native.check_expiry(at))
            return False
        self.last_beat = at
        return True

    @property
    def lost(self) -> str | None:
        cause = self.native.lost() if self.native is not None else None
        return None if cause is None else str(cause)


def _store_failure(e: BaseException) -> dict[str, Any]:
    return {"done": True, "error": {"code": "store-unavailable", "message": _driver.message_of(e)}}


class _LeaseView:
    """What every lease shows the work: the newest token and the lost signal's state."""

    _s: _Session

    @property
    def fence(self) -> FencingToken:
        """The newest token (use it for every fenced write)."""
        assert self._s.fence is not None
        return self._s.fence

    @property
    def run_id(self) -> str:
        """The run."""
        return self._s.run_id

    @property
    def lost(self) -> str | None:
        """Why the lease was lost (``superseded``, ``expired``, ``released``, ``not-found``,
        ``store-unavailable``), or ``None`` while it holds."""
        return self._s.lost

    @property
    def lost_error(self) -> LeaseLostError | None:
        """The lease-lost signal's error (with ``.cause``), or ``None``."""
        return self._s.lost_error

    def raise_if_lost(self) -> None:
        """Raises the :class:`LeaseLostError` once the lease is lost."""
        if self._s.lost_error is not None:
            raise self._s.lost_error


class Lease(_LeaseView):
    """What the work sees under a blocking ``execute_with_lease``."""

    def __init__(self, session: _Session, lock: threading.Lock) -> None:
        self._s = session
        self._lock = lock
        #: Set when the lease is lost (the lease-lost signal).
        self.signal = threading.Event()

    def _beat(self, cooperative: bool) -> str | None:
        with self._lock:
            at = self._s.tick()
            if not self._s.due(at, cooperative):
                return self.lost
            try:
                done = _driver.drive_sync(self._s.heart, "renew", self._s.renew_args())
            except Exception as e:  # noqa: BLE001 - a failed beat is retried on the next one
                done = _store_failure(e)
            self._s.on_renewed(done, at)
            return self.lost

    def heartbeat(self) -> str | None:
        """A cooperative heartbeat: renews when a period has passed since the last beat (by
        the clock). Returns the lost cause, or ``None``."""
        return self._beat(True)


class AsyncLease(_LeaseView):
    """What the work sees under ``execute_with_lease_async`` / ``async with``."""

    def __init__(self, session: _Session, lock: asyncio.Lock) -> None:
        self._s = session
        self._lock = lock
        #: Set when the lease is lost (the lease-lost signal).
        self.signal = asyncio.Event()

    async def _beat(self, cooperative: bool) -> str | None:
        async with self._lock:
            at = self._s.tick()
            if not self._s.due(at, cooperative):
                return self.lost
            try:
                done = await _driver.drive_async(self._s.heart, "renew", self._s.renew_args())
            except Exception as e:  # noqa: BLE001 - a failed beat is retried on the next one
                done = _store_failure(e)
            self._s.on_renewed(done, at)
            return self.lost

    async def heartbeat(self) -> str | None:
        """A cooperative heartbeat (see :meth:`Lease.heartbeat`)."""
        return await self._beat(True)


class LeaseScope(Generic[T]):
    """``execute_with_lease(heart, run_id, owner, ttl_seconds)`` without work: a context
    manager (``with`` / ``async with``) and a decorator.

    * ``with scope as lease:`` acquires (raising :class:`LeaseHeldError` or the acquire's
      coded error when it cannot), heartbeats on a thread, and on exit releases to
      ``completed`` (``ready`` with ``release_to_ready``), or ``failed`` when the block raised.
      ``scope.result`` is then the :class:`ExecuteResult` (``released``, ``lost``).
    * ``async with scope as lease:`` the same with a heartbeat task.
    * ``@scope`` on ``def job(lease, ...)`` / ``async def job(lease, ...)``: each call runs
      the function under the lease and returns the :class:`ExecuteResult`.
    """

    def __init__(
        self,
        heart: HeartFleet,
        run_id: str,
        owner: str,
        ttl_seconds: int,
        *,
        renew_every_ms: int | None = None,
        release_to_ready: bool = False,
        auto_heartbeat: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(heart, HeartFleet):
            raise InvalidTypeError(f"execute_with_lease: heart must be a HeartFleet, got {_check.describe(heart)}")
        for name, v in (("run_id", run_id), ("owner", owner)):
            if not isinstance(v, str):
                _check.type_error(f"{name} must be a str, got {_check.describe(v)}")
        if not _check.is_int(ttl_seconds):
            _check.type_error(f"ttl_seconds must be an int, got {_check.describe(ttl_seconds)}")
        if renew_every_ms is not None and not _check.is_int(renew_every_ms):
            _check.type_error(f"renew_every_ms must be an int, got {_check.describe(renew_every_ms)}")
        _check.flag("release_to_ready", release_to_ready)
        _check.flag("auto_heartbeat", auto_heartbeat)
        if clock is not None:
            _check.callable_("clock", clock)
        self.heart = heart
        self.run_id = run_id
        self.owner = owner
        self.ttl_seconds = ttl_seconds
        self.renew_every_ms = renew_every_ms
        self.release_to_ready = release_to_ready
        self.auto_heartbeat = auto_heartbeat
        self.clock: Callable[[], float] = clock or _monotonic_ms
        #: The outcome, once the scope exited.
        self.result: ExecuteResult | None = None
        self._state: Any = None

    # -- shared steps ----------------------------------------------------------------------

    def _session(self) -> _Session | ExecuteResult:
        s = _Session(self.heart, self.run_id, self.ttl_seconds, self.clock)
        try:
            s.native = _native.NativeLeaseSession.create(self.ttl_seconds, self.renew_every_ms)
        except (HeartFleetError, OverflowError):
            # OverflowError: a ttl or period beyond 64 bits is a bad value like any other.
            return ExecuteResult(ran=False, reason=_NOT_RUN["invalidInput"], code="invalid-input")
        return s

    @staticmethod
    def _not_run(acq: Any) -> ExecuteResult:
        return ExecuteResult(ran=False, reason=_NOT_RUN["runMissing" if acq.run is None else "runFound"], code=acq.code)

    def _on_acquired(self, s: _Session, fence: FencingToken, started: int) -> None:
        s.fence = fence
        s.last_beat = started
        s.native.on_acquired(json.dumps(fence.to_dict(), separators=(",", ":")), started)

    def _release_to(self, ok: bool) -> str:
        return str(_native.release_status(ok, self.release_to_ready))

    @staticmethod
    def _newest(s: _Session) -> FencingToken | None:
        text = s.native.fence_json()
        return None if text is None else FencingToken.from_json(json.loads(text))

    def _outcome(self, s: _Session, released: bool, result: Any) -> ExecuteResult:
        return ExecuteResult(ran=True, result=result, released=released, lost=s.lost)

    # -- blocking --------------------------------------------------------------------------

    def _enter(self) -> tuple[_Session, Lease] | ExecuteResult:
        s = self._session()
        if isinstance(s, ExecuteResult):
            return s
        started = s.tick()
        acq = self.heart.acquire(self.run_id, self.owner, self.ttl_seconds)
        if not acq.acquired or acq.fence is None:
            return self._not_run(acq)
        self._on_acquired(s, acq.fence, started)
        lease = Lease(s, threading.Lock())
        s.on_lost = lease.signal.set
        stop = threading.Event()
        thread = None
        if self.auto_heartbeat:
            interval = s.native.interval_ms() / 1000.0

            def beat() -> None:
                # A heartbeat must never raise out of its thread.
                while not stop.wait(interval):
                    try:
                        lease._beat(False)
                    except Exception:  # noqa: BLE001,S110
                        pass

            thread = threading.Thread(target=beat, name=f"heart-fleet-heartbeat-{self.run_id}", daemon=True)
            thread.start()
        self._state = (s, lease, stop, thread)
        return s, lease

    def _exit(self, ok: bool, result: Any) -> ExecuteResult:
        s, lease, stop, thread = self._state
        self._state = None
        stop.set()
        s.finished = True
        if thread is not None:
            thread.join()
        released = False
        with lease._lock:
            if s.native.should_release():
                newest = self._newest(s)
                if newest is not None:
                    try:
                        released = self.heart.release(newest, self._release_to(ok)) is not None
                    except HeartFleetError:
                        pass  # the reference swallows release errors; released=False reports it
        self.result = self._outcome(s, released, result)
        return self.result

    def run(self, work: Callable[[Lease], T]) -> ExecuteResult:
        """Runs ``work(lease)`` under the lease (blocking); see :func:`execute_with_lease`."""
        entered = self._enter()
        if isinstance(entered, ExecuteResult):
            self.result = entered
            return entered
        _, lease = entered
        try:
            result = work(lease)
        except BaseException:
            self._exit(False, None)
            raise
        return self._exit(True, result)

    def __enter__(self) -> Lease:
        entered = self._enter()
        if isinstance(entered, ExecuteResult):
            self.result = entered
            raise _not_acquired(entered, self.run_id)
        return entered[1]

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._exit(exc_type is None, None)

    # -- asyncio ---------------------------------------------------------------------------

    async def _aenter(self) -> tuple[_Session, AsyncLease] | ExecuteResult:
        s = self._session()
        if isinstance(s, ExecuteResult):
            return s
        started = s.tick()
        # The acquire's plan run here, not through acquire_async, to see its final step's
        # cancellation mark.
        answer = self.heart._acquire(self.run_id, self.owner, self.ttl_seconds)
        step: dict[str, Any] = {}
        if isinstance(answer, _driver.Plan):
            step = await _driver.drive_async(self.heart, answer.kind, answer.args)
            answer = answer.post(_driver.ok_of(step))
        acq: AcquireResult = answer
        if not acq.acquired or acq.fence is None:
            return self._not_run(acq)
        self._on_acquired(s, acq.fence, started)
        if step.get("cancelled"):
            # Cancelled while the acquire committed: the lease is ours and recorded, but the work
            # must not start. Release it as a cancelled work's lease is released, then re-raise.
            try:
                await self.heart.release_async(acq.fence, self._release_to(False))
            except HeartFleetError:
                pass
            raise asyncio.CancelledError()
        lease = AsyncLease(s, asyncio.Lock())
        s.on_lost = lease.signal.set
        task = None
        stop = asyncio.Event()
        if self.auto_heartbeat:
            interval = s.native.interval_ms() / 1000.0

            async def beat() -> None:
                while True:
                    try:
                        await asyncio.wait_for(stop.wait(), interval)
                        return
                    except asyncio.TimeoutError:
                        pass
                    if s.finished:
                        return
                    try:
                        await lease._beat(False)
                    except Exception:  # noqa: BLE001,S110 - a heartbeat never raises
                        pass

            task = asyncio.ensure_future(beat())
        self._state = (s, lease, stop, task)
        return s, lease

    async def _aexit(self, ok: bool, result: Any) -> ExecuteResult:
        s, lease, stop, task = self._state
        self._state = None
        s.finished = True
        stop.set()
        if task is not None:
            # Not cancelled: a beat in flight finishes first, so the release uses its token.
            await task
        released = False
        async with lease._lock:
            if s.native.should_release():
                newest = self._newest(s)
                if newest is not None:
                    try:
                        released = await self.heart.release_async(newest, self._release_to(ok)) is not None
                    except HeartFleetError:
                        pass
        self.result = self._outcome(s, released, result)
        return self.result

    async def run_async(self, work: Callable[[AsyncLease], Awaitable[T] | T]) -> ExecuteResult:
        """Runs ``work(lease)`` under the lease, awaiting it when it is a coroutine."""
        entered = await self._aenter()
        if isinstance(entered, ExecuteResult):
            self.result = entered
            return entered
        _, lease = entered
        try:
            result = work(lease)
            if inspect.isawaitable(result):
                result = await result
        except BaseException:
            await self._aexit(False, None)
            raise
        return await self._aexit(True, result)

    async def __aenter__(self) -> AsyncLease:
        entered = await self._aenter()
        if isinstance(entered, ExecuteResult):
            self.result = entered
            raise _not_acquired(entered, self.run_id)
        return entered[1]

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self._aexit(exc_type is None, None)

    # -- decorator -------------------------------------------------------------------------

    def _fresh(self) -> LeaseScope[T]:
        return LeaseScope(
            self.heart,
            self.run_id,
            self.owner,
            self.ttl_seconds,
            renew_every_ms=self.renew_every_ms,
            release_to_ready=self.release_to_ready,
            auto_heartbeat=self.auto_heartbeat,
            clock=self.clock,
        )

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        _check.callable_("the decorated function", fn)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async_wrapper(*args: Any, **kwargs: Any) -> ExecuteResult:
                return await self._fresh().run_async(lambda lease: fn(lease, *args, **kwargs))

            return run_async_wrapper

        @functools.wraps(fn)
        def run_wrapper(*args: Any, **kwargs: Any) -> ExecuteResult:
            return self._fresh().run(lambda lease: fn(lease, *args, **kwargs))

        return run_wrapper


def _not_acquired(r: ExecuteResult, run_id: str) -> HeartFleetError:
    if r.reason == _NOT_RUN["runFound"] and r.code in (None, "lease-held"):
        return LeaseHeldError(f"run {run_id} is held by another owner")
    if r.code is None:
        return FenceRejectedError(f"could not lease run {run_id}")
    if r.code == "invalid-input":
        return InvalidInputError(f"could not lease run {run_id}: invalid input")
    return error_for_code(r.code, f"could not lease run {run_id}: {r.reason}")


def execute_with_lease(
    heart: HeartFleet,
    run_id: str,
    owner: str,
    ttl_seconds: int,
    work: Callable[[Lease], T] | None = None,
    *,
    renew_every_ms: int | None = None,
    release_to_ready: bool = False,
    auto_heartbeat: bool = True,
    clock: Callable[[], float] | None = None,
) -> Any:
    """Runs ``work(lease)`` under a lease on ``run_id``, or returns a :class:`LeaseScope`
    (a context manager and decorator) when ``work`` is omitted.

    Acquires the run, runs the work while a heartbeat thread renews the lease every
    ``renew_every_ms`` (default ``max(1000, ttl_seconds * 1000 // 2)``), then releases it with
    the newest token: ``completed`` (``ready`` for resource runs with ``release_to_ready``)
    when the work returns, ``failed`` when it raises (the exception propagates). Returns
    ``ExecuteResult(ran=True, result, released, lost?)`` or ``ExecuteResult(ran=False,
    reason="lease-held"|"lease-error", code)``.

    ``auto_heartbeat=False`` runs no thread (the work calls ``lease.heartbeat()``);
    ``clock`` is a monotonic millisecond clock (default ``time.monotonic``).
    """
    scope: LeaseScope[T] = LeaseScope(
        heart,
        run_id,
        owner,
        ttl_seconds,
        renew_every_ms=renew_every_ms,
        release_to_ready=release_to_ready,
        auto_heartbeat=auto_heartbeat,
        clock=clock,
    )
    if work is None:
        return scope
    _check.callable_("work", work)
    if inspect.iscoroutinefunction(work):
        raise InvalidTypeError("execute_with_lease: work is a coroutine function: use execute_with_lease_async")
    return scope.run(work)


async def execute_with_lease_async(
    heart: HeartFleet,
    run_id: str,
    owner: str,
    ttl_seconds: int,
    work: Callable[[AsyncLease], Awaitable[T] | T],
    *,
    renew_every_ms: int | None = None,
    release_to_ready: bool = False,
    auto_heartbeat: bool = True,
    clock: Callable[[], float] | None = None,
) -> ExecuteResult:
    """:func:`execute_with_lease` on the event loop: the store is awaited and the heartbeat is
    an asyncio task (``async with execute_with_lease(...)`` is the context-manager form).

    Cancelled while acquiring, it has not written (the run is as it was), or, when the
    acquire had already committed, it releases that lease (to ``failed``, as for work that
    raised) and re-raises the cancellation: the work never starts after a cancellation."""
    scope: LeaseScope[T] = LeaseScope(
        heart,
        run_id,
        owner,
        ttl_seconds,
        renew_every_ms=renew_every_ms,
        release_to_ready=release_to_ready,
        auto_heartbeat=auto_heartbeat,
        clock=clock,
    )
    _check.callable_("work", work)
    return await scope.run_async(work)

"""HeartFleet: the lease layer over one store, with a blocking and an asyncio method for
every operation (``acquire`` / ``acquire_async``, ...)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from . import _check, _driver, _native, _receipt_table, _sql_store
from ._contract import CONTRACT
from ._driver import Plan, twins
from .errors import InvalidTypeError
from .memory import MemoryLeaseStore
from .types import (
    AcquireResult,
    EnsuredRun,
    FencedOutcome,
    FencingToken,
    HeartReceipt,
    InstanceRow,
    LivenessResult,
    Metrics,
    ReclaimResult,
    RunRow,
)

__all__ = ["HeartFleet", "ensure_resource_run", "ensure_resource_run_async", "check_store"]

#: How long (seconds) an ``*_async`` operation waits for one answer of an asyncio store: the
#: core's default (``defaults.storeTimeoutMs`` of its contract).
DEFAULT_STORE_TIMEOUT: float = _check.DEFAULT_STORE_TIMEOUT_MS / 1000

_INVALID_ACQUIRE = AcquireResult(acquired=False, run=None, reason=CONTRACT["invalidAcquireReason"], code="invalid-input")


def check_store(store: object) -> None:
    """A store is a :class:`MemoryLeaseStore` or an object with ``execute(request) ->
    answer`` or ``execute_json(text) -> text`` (either may be a coroutine function)."""
    if isinstance(store, MemoryLeaseStore):
        return
    if not (callable(getattr(store, "execute_json", None)) or callable(getattr(store, "execute", None))):
        raise InvalidTypeError(
            "HeartFleet: store must be a MemoryLeaseStore or an object with execute(request) -> "
            f"StoreAnswer or execute_json(text) -> text, got {_check.describe(store)}"
        )


def _args(**kw: Any) -> str:
    return json.dumps(kw, separators=(",", ":"))


def _fenced_token(v: Any) -> FencedOutcome:
    if v.get("outcome") == "ok":
        return FencedOutcome("ok", value=FencingToken.from_json(v["value"]))
    return FencedOutcome("rejected", cause=v["cause"], code=_check.CONTRACT["lostCodes"][v["cause"]])


def _fenced_row(v: Any) -> FencedOutcome:
    if v.get("outcome") == "ok":
        return FencedOutcome("ok", value=RunRow.from_json(v["value"]))
    return FencedOutcome("rejected", cause=v["cause"], code=_check.CONTRACT["lostCodes"][v["cause"]])


def _run_or_none(v: Any) -> RunRow | None:
    return None if v is None else RunRow.from_json(v)


def _runs(v: Any) -> list[RunRow]:
    return [RunRow.from_json(r) for r in v]


def _instances(v: Any) -> list[InstanceRow]:
    return [InstanceRow.from_json(r) for r in v]


def _token(outcome: FencedOutcome) -> FencingToken | None:
    """A renewal's new token, or ``None`` when it was rejected."""
    return outcome.value if outcome.ok else None


def _row(outcome: FencedOutcome) -> RunRow | None:
    """A release's row, or ``None`` when it was rejected."""
    return outcome.value if outcome.ok else None


class HeartFleet:
    """The lease layer over one store (the reference's ``HeartFleet``).

    ``HeartFleet(store, *, on_receipt=None, max_retries=5, store_timeout=30.0)``:
    ``max_retries=None`` never quarantines. Without ``on_receipt`` receipts are kept and
    :meth:`receipts` returns them; with it each receipt goes to the sink (its errors are
    swallowed, as in the reference) and :meth:`receipts` is empty. ``store_timeout``
    (seconds) bounds every awaited answer of an asyncio store in the ``*_async`` methods:
    past it the operation fails with ``StoreUnavailableError`` naming the step. (A blocking
    store's call cannot be interrupted from Python; give it deadlines of its own, as the
    psycopg and SQLite stores have.)

    Every operation has a blocking method and an ``*_async`` twin. The blocking methods
    call the store's methods directly (a sync store); the ``*_async`` methods await them
    when they return awaitables (an asyncio store), so the event loop keeps running. A
    fleet over a :class:`MemoryLeaseStore` runs each operation inside Rust.
    """

    __slots__ = (
        "_native",
        "_store",
        "_text_store",
        "_async_store",
        "_on_receipt",
        "_holds_receipts",
        "_memory",
        "_kept",
        "_direct",
        "_store_timeout",
        "max_retries",
        "__weakref__",
    )

    def __init__(
        self,
        store: Any,
        *,
        on_receipt: Callable[[HeartReceipt], Any] | None = None,
        max_retries: int | None = _check.DEFAULT_MAX_RETRIES,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
    ) -> None:
        check_store(store)
        if isinstance(store_timeout, bool) or not isinstance(store_timeout, (int, float)) or not 0 < store_timeout <= 86_400:
            raise InvalidTypeError(f"HeartFleet: store_timeout must be seconds in (0, 86400], got {_check.describe(store_timeout)}")
        self._store_timeout = float(store_timeout)
        if on_receipt is not None and not callable(on_receipt):
            raise InvalidTypeError(f"HeartFleet: on_receipt must be callable, got {_check.describe(on_receipt)}")
        if max_retries is not None:
            _check.integer("max_retries", max_retries, 0, _check.U32)
        self._store = store
        self.max_retries = max_retries
        self._on_receipt = on_receipt
        # The sink is this store's receipt sink: receipts commit with their writes (_receipt_table).
        self._holds_receipts = isinstance(on_receipt, _receipt_table.ReceiptSink) and on_receipt.store is store
        # A store with execute_json takes text, unless it is the SQL stores' own: their execute
        # takes the core's StoreRequest as it is (no JSON either way).
        self._text_store = callable(getattr(store, "execute_json", None)) and not _sql_store.typed(store)
        method = getattr(store, "execute_json" if self._text_store else "execute", None)
        self._async_store = inspect.iscoroutinefunction(method)
        self._native = _native.NativeFleet(max_retries, on_receipt is not None)
        if on_receipt is not None and not self._holds_receipts:
            # The native fleet hands every receipt to the sink itself, as a record.
            self._native.set_sink(on_receipt, _schedule)
        # On the Rust memory store the lease cycle runs inside Rust and answers typed values.
        self._memory = isinstance(store, MemoryLeaseStore)
        if self._memory:
            self._native.attach_memory_store(store._native)
        # On a store object the lease cycle is started with typed values and answers the
        # core's values, unless its receipts commit with its writes (the checked path).
        self._kept = not self._memory and not self._holds_receipts
        # A store object's lease cycle is answered inside Rust, through the store bound to the
        # native fleet: one native call an operation of the blocking API (a blocking store's),
        # and of the asyncio API while the store answers without suspending.
        self._direct = self._memory or (self._kept and not self._async_store)
        if self._kept:
            self._native.bind_store(
                _driver._store_method(self),
                None if self._async_store else _driver._settle,
                _driver._settle_awaited,
                not self._text_store,
            )

    @property
    def store(self) -> Any:
        """The store."""
        return self._store

    # -- counters and receipts -------------------------------------------------------------

    @property
    def metrics(self) -> Metrics:
        """The 13 counters (a snapshot)."""
        return Metrics(*self._native.metrics())

    def prometheus(self) -> str:
        """The counters in the Prometheus text exposition format."""
        return str(self._native.prometheus())

    def receipts(self) -> list[HeartReceipt]:
        """The receipts kept so far (empty when ``on_receipt`` was given)."""
        if self._native.receipt_count() == 0:
            return []
        return [HeartReceipt.from_json(r) for r in json.loads(self._native.receipts_json())]

    def _deliver(self, receipts: list[dict[str, Any]]) -> None:
        # The core's delivery: in order, a sink's errors swallowed (as in the reference), an
        # awaitable it returns run in the background.
        if self._on_receipt is not None:
            records = [HeartReceipt.from_json(r) for r in receipts]
            _native.deliver_receipts(self._on_receipt, _schedule, records)

    def _held(self) -> _receipt_table.HeldTransaction | None:
        """A held transaction for one operation, when receipts commit with their writes."""
        if not self._holds_receipts:
            return None
        assert isinstance(self._on_receipt, _receipt_table.ReceiptSink)
        return self._on_receipt.hold()

    # -- running plans ---------------------------------------------------------------------
    #
    # Each operation is written once, as ``_<name>(self, ...)``: it checks its arguments and
    # returns the answer when it has one without the store, or a Plan for the core to run.
    # ``twins`` makes the blocking method and its ``*_async`` twin from it.

    def _run(self, plan: Plan, host: Any = None) -> Any:
        kind, args, post = plan
        return post(_driver.ok_of(_driver.drive_sync(self, kind, args, host)))

    async def _run_async(self, plan: Plan, host: Any = None) -> Any:
        kind, args, post = plan
        return post(_driver.ok_of(await _driver.drive_async(self, kind, args, host)))

    # -- acquire ---------------------------------------------------------------------------

    def _acquire(self, run_id: str, owner: str, ttl_seconds: int) -> AcquireResult | Plan:
        """Acquires a fenced lease on a run: ``AcquireResult(acquired, run, fence?, reason?, code?)``.

        A held run, a quarantined run or a missing run answer ``acquired=False`` with the
        reference's reason and a code. Bad values (an empty id, a ttl outside
        ``1..=31_536_000``) give the reference's ``reason="Invalid input"``,
        ``code="invalid-input"``; a value of the wrong type raises ``InvalidTypeError``. A
        store failure raises ``StoreUnavailableError``.
        """
        for name, v in (("run_id", run_id), ("owner", owner)):
            if not isinstance(v, str):
                _check.type_error(f"{name} must be a str, got {_check.describe(v)}")
        if not _check.is_int(ttl_seconds):
            _check.type_error(f"ttl_seconds must be an int, got {_check.describe(ttl_seconds)}")
        if run_id == "" or owner == "" or not 1 <= ttl_seconds <= _check.MAX_TTL_SECONDS:
            return _INVALID_ACQUIRE
        if not _check.wellformed(run_id) or not _check.wellformed(owner):
            return _INVALID_ACQUIRE  # a lone surrogate: the reference's shape for a bad value
        return Plan("acquire", _args(runId=run_id, owner=owner, ttlSeconds=ttl_seconds), AcquireResult.from_json)

    acquire, acquire_async = twins(_acquire, fast="acquire")

    # -- renew / release / verify ------------------------------------------------------------

    def _try_renew(self, fence: FencingToken, ttl_seconds: int) -> FencedOutcome | Plan:
        """Renews the lease: ``FencedOutcome("ok", value=<new token>)`` or ``("rejected", cause=...)``."""
        f = _check.fence("fence", fence)
        ttl = _check.integer("ttl_seconds", ttl_seconds, 1, _check.MAX_TTL_SECONDS)
        return Plan("renew", _args(fence=f, ttlSeconds=ttl), _fenced_token)

    try_renew, try_renew_async = twins(_try_renew, fast="renew")
    renew, renew_async = twins(
        _try_renew,
        fast="renew",
        then=_token,
        name="renew",
        doc="The new token, or ``None`` when the token no longer holds the lease.",
    )

    def _try_release(self, fence: FencingToken, next_status: str = "completed") -> FencedOutcome | Plan:
        """Releases the lease: ``FencedOutcome("ok", value=<row>)`` or ``("rejected", cause=...)``."""
        f = _check.fence("fence", fence)
        to = _check.status("next_status", next_status, _check.NEXT_STATUSES)
        return Plan("release", _args(fence=f, nextStatus=to), _fenced_row)

    try_release, try_release_async = twins(_try_release, fast="release")
    release, release_async = twins(
        _try_release,
        fast="release",
        then=_row,
        name="release",
        doc="""Releases the lease to ``next_status`` (``completed``, ``failed``, ``cancelled``, or
        ``ready`` for resource runs: back to ``ready`` with ``retries = 0``). Returns the row,
        or ``None`` when the token no longer holds the lease.""",
    )

    def _verify_fence(self, fence: FencingToken) -> bool | Plan:
        """Whether the token holds a live lease (one conditional write)."""
        return Plan("verifyFence", _args(fence=_check.fence("fence", fence)), bool)

    verify_fence, verify_fence_async = twins(_verify_fence, fast="verify_fence")

    # -- recovery --------------------------------------------------------------------------

    def _reclaim_expired(self, limit: int = _check.DEFAULT_SWEEP_LIMIT) -> ReclaimResult | Plan:
        """The sweeper: expired leases back to ``ready`` (``quarantined`` at the retry ceiling)."""
        return Plan("reclaimExpired", _args(limit=_check.integer("limit", limit, 0, _check.U32)), ReclaimResult.from_json)

    reclaim_expired, reclaim_expired_async = twins(_reclaim_expired)

    def _reclaim_dead_instance_runs(
        self, ttl_ms: int = _check.DEFAULT_LIVENESS_TTL_MS, max_reclaims_per_cycle: int = _check.DEFAULT_LIVENESS_LIMIT
    ) -> LivenessResult | Plan:
        """The liveness pass: instances silent for more than ``ttl_ms`` are declared dead and
        the runs they hold are recovered (retry ceiling, receipts and counters included)."""
        ttl = _check.integer("ttl_ms", ttl_ms, 0, _check.I53)
        limit = _check.integer("max_reclaims_per_cycle", max_reclaims_per_cycle, 0, _check.U32)
        return Plan("reclaimDeadInstanceRuns", _args(ttlMs=ttl, limit=limit), LivenessResult.from_json)

    reclaim_dead_instance_runs, reclaim_dead_instance_runs_async = twins(_reclaim_dead_instance_runs)

    # -- instances -------------------------------------------------------------------------

    def _register_instance(
        self, instance_id: str, *, hostname: str | None = None, pid: int | None = None, metadata: Any = None
    ) -> InstanceRow | Plan:
        """Registers (or re-registers) an instance as ``alive``; returns its row."""
        iid = _check.text("instance_id", instance_id)
        host = _check.opt_text("hostname", hostname)
        p = _check.opt_integer("pid", pid, 0, _check.I53, None)
        meta = json.loads(_check.to_json(metadata, "metadata"))
        return Plan("registerInstance", _args(instanceId=iid, hostname=host, pid=p, metadata=meta), InstanceRow.from_json)

    register_instance, register_instance_async = twins(_register_instance)

    def _heartbeat_instance(self, instance_id: str) -> bool | Plan:
        """Heartbeats an instance; ``False`` when it is unknown or dead (it must re-register)."""
        return Plan("heartbeatInstance", _args(instanceId=_check.text("instance_id", instance_id)), bool)

    heartbeat_instance, heartbeat_instance_async = twins(_heartbeat_instance)

    def _drain_instance(self, instance_id: str) -> bool | Plan:
        """Marks an instance ``draining`` (live until it goes silent)."""
        return Plan("drainInstance", _args(instanceId=_check.text("instance_id", instance_id)), bool)

    drain_instance, drain_instance_async = twins(_drain_instance)

    def _list_instances(self) -> list[InstanceRow] | Plan:
        """Every instance."""
        return Plan("listInstances", "{}", _instances)

    list_instances, list_instances_async = twins(_list_instances)

    # -- resource runs ---------------------------------------------------------------------

    def _ensure_resource_run(
        self, kind: str, key: str, *, objective: str | None = None, created_by: str | None = None
    ) -> EnsuredRun | Plan:
        """Find-or-create the run of a resource by ``deterministic_resource_id(kind, key)`` as
        its idempotency key (race-safe; the store supplies the row id)."""
        k = _check.text("kind", kind)
        y = _check.text("key", key)
        # None: the core's defaults (``resource <kind>:<key>``, ``heart-fleet:<kind>``).
        obj = None if objective is None else _check.text("objective", objective)
        by = None if created_by is None else _check.text("created_by", created_by)
        return Plan("ensureResourceRun", _args(kind=k, key=y, objective=obj, createdBy=by), EnsuredRun.from_json)

    ensure_resource_run, ensure_resource_run_async = twins(_ensure_resource_run)

    # -- operator actions ------------------------------------------------------------------

    def _list_runs(self, status: str | None = None, limit: int = _check.DEFAULT_SWEEP_LIMIT) -> list[RunRow] | Plan:
        """Operator: runs, optionally of one status, most recently updated first."""
        st = None if status is None else _check.status("status", status, _check.RUN_STATUSES)
        return Plan("listRuns", _args(status=st, limit=_check.integer("limit", limit, 0, _check.U32)), _runs)

    list_runs, list_runs_async = twins(_list_runs)

    def _get_run(self, run_id: str) -> RunRow | None | Plan:
        """Operator: one run, or ``None``."""
        return Plan("getRun", _args(runId=_check.text("run_id", run_id)), _run_or_none)

    get_run, get_run_async = twins(_get_run)

    def _requeue_run(self, run_id: str, operator: str) -> RunRow | Plan:
        """Operator: a quarantined run back to ``ready`` with ``retries = 0`` (receipt ``requeued``)."""
        args = _args(runId=_check.text("run_id", run_id), operator=_check.text("operator", operator))
        return Plan("requeueRun", args, RunRow.from_json)

    requeue_run, requeue_run_async = twins(_requeue_run)

    def _force_release(self, run_id: str) -> RunRow | Plan:
        """Operator: removes a lease by force, back to ``ready`` (receipt ``force_released``)."""
        return Plan("forceRelease", _args(runId=_check.text("run_id", run_id)), RunRow.from_json)

    force_release, force_release_async = twins(_force_release)


def ensure_resource_run(
    heart: HeartFleet, kind: str, key: str, *, objective: str | None = None, created_by: str | None = None
) -> EnsuredRun:
    """:meth:`HeartFleet.ensure_resource_run` as a function (the reference's helper)."""
    if not isinstance(heart, HeartFleet):
        raise InvalidTypeError(f"ensure_resource_run: heart must be a HeartFleet, got {_check.describe(heart)}")
    return heart.ensure_resource_run(kind, key, objective=objective, created_by=created_by)


async def ensure_resource_run_async(
    heart: HeartFleet, kind: str, key: str, *, objective: str | None = None, created_by: str | None = None
) -> EnsuredRun:
    """:func:`ensure_resource_run`, awaiting the store."""
    if not isinstance(heart, HeartFleet):
        raise InvalidTypeError(f"ensure_resource_run_async: heart must be a HeartFleet, got {_check.describe(heart)}")
    return await heart.ensure_resource_run_async(kind, key, objective=objective, created_by=created_by)


def _schedule(out: Any) -> None:
    """Runs what a sink returned in the background when it is awaitable."""
    if inspect.isawaitable(out):
        _receipt_table.in_background(out)

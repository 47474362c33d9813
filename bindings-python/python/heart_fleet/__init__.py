"""heart-fleet for Python: fenced leases, at-most-once effects and tamper-evident receipts
for a fleet of workers, over the Rust heart-fleet core.

Every operation has a blocking function or method and an asyncio twin (``*_async``). Stores:
:class:`MemoryLeaseStore` (Rust, with an injectable clock), :class:`SqliteLeaseStore` /
:class:`AsyncSqliteLeaseStore` (``sqlite3``), :class:`PsycopgLeaseStore` / :class:`AsyncPsycopgLeaseStore` (psycopg 3),
or any object with ``execute(request) -> answer`` / ``execute_json(text) -> text`` (plain
or coroutine methods).
"""

from __future__ import annotations

from ._check import CHANNELS, MAX_TTL_SECONDS, NEXT_STATUSES, RUN_STATUSES
from .canonical import (
    DIGEST_PREFIX,
    RECEIPT_SCHEMA_VERSION,
    canonical_sha256,
    canonicalize,
    deterministic_resource_id,
    digest,
    effect_key,
    sha256_hex,
    verify_receipt,
    verify_receipts,
)
from .errors import (
    ERROR_CODES,
    CollisionError,
    DedupedError,
    EffectFailedError,
    FenceRejectedError,
    HeartFleetError,
    InvalidInputError,
    InvalidStateError,
    InvalidTypeError,
    LeaseHeldError,
    LeaseLostError,
    QuarantinedError,
    ReceiptTamperedError,
    RunNotFoundError,
    StoreProtocolError,
    StoreUnavailableError,
)
from .execute import (
    AsyncLease,
    Lease,
    LeaseScope,
    MemoryEffectLedger,
    execute_with_lease,
    execute_with_lease_async,
    guard_irreversible,
    guard_irreversible_async,
    heartbeat_interval_ms,
)
from .fleet import HeartFleet, ensure_resource_run, ensure_resource_run_async
from .liveness import (
    DEFAULT_LIVENESS_TTL_MS,
    LivenessReclaimer,
    can_acquire,
    dead_instance_ids,
    is_instance_expired,
    is_lease_expired,
    runs_leased_to_dead_instances,
)
from .memory import MemoryLeaseStore
from .outbox import (
    DurableEffectLedger,
    reconcile_outbox,
    reconcile_outbox_async,
    send_once,
    send_once_async,
)
from .postgres import AsyncPsycopgLeaseStore, PsycopgLeaseStore
from .sqlite import AsyncSqliteLeaseStore, SqliteLeaseStore
from .types import (
    AcquireResult,
    DispatchLogEntry,
    EffectContext,
    EffectError,
    EnsuredRun,
    ExecuteResult,
    FencedOutcome,
    FencingToken,
    Finding,
    GuardResult,
    HeartReceipt,
    InstanceRow,
    IntentRow,
    LivenessResult,
    LogReport,
    Metrics,
    ReclaimResult,
    ReconcileResult,
    RunChain,
    RunError,
    RunRow,
    SendOnceResult,
    StoreAnswer,
    StoreRequest,
)

from . import _check as _checks

__version__ = "0.1.0"

__all__ = [
    "AcquireResult",
    "AsyncLease",
    "AsyncPsycopgLeaseStore",
    "AsyncSqliteLeaseStore",
    "CHANNELS",
    "CollisionError",
    "DEFAULT_LIVENESS_TTL_MS",
    "DIGEST_PREFIX",
    "DedupedError",
    "DispatchLogEntry",
    "DurableEffectLedger",
    "ERROR_CODES",
    "EffectContext",
    "EffectError",
    "EffectFailedError",
    "EnsuredRun",
    "ExecuteResult",
    "FenceRejectedError",
    "FencedOutcome",
    "FencingToken",
    "Finding",
    "GuardResult",
    "HeartFleet",
    "HeartFleetError",
    "HeartReceipt",
    "InstanceRow",
    "IntentRow",
    "InvalidInputError",
    "InvalidStateError",
    "InvalidTypeError",
    "Lease",
    "LeaseHeldError",
    "LeaseLostError",
    "LeaseScope",
    "LivenessReclaimer",
    "LivenessResult",
    "LogReport",
    "MAX_TTL_SECONDS",
    "MemoryEffectLedger",
    "MemoryLeaseStore",
    "Metrics",
    "NEXT_STATUSES",
    "PsycopgLeaseStore",
    "QuarantinedError",
    "RECEIPT_SCHEMA_VERSION",
    "RUN_STATUSES",
    "ReceiptTamperedError",
    "ReclaimResult",
    "ReconcileResult",
    "RunChain",
    "RunError",
    "RunNotFoundError",
    "RunRow",
    "SendOnceResult",
    "SqliteLeaseStore",
    "StoreAnswer",
    "StoreProtocolError",
    "StoreRequest",
    "StoreUnavailableError",
    "can_acquire",
    "canonical_sha256",
    "dead_instance_ids",
    "is_instance_expired",
    "is_lease_expired",
    "runs_leased_to_dead_instances",
    "canonicalize",
    "deterministic_resource_id",
    "digest",
    "effect_key",
    "ensure_resource_run",
    "ensure_resource_run_async",
    "execute_with_lease",
    "execute_with_lease_async",
    "guard_irreversible",
    "guard_irreversible_async",
    "heartbeat_interval_ms",
    "reconcile_outbox",
    "reconcile_outbox_async",
    "send_once",
    "send_once_async",
    "sha256_hex",
    "verify_receipt",
    "verify_receipts",
]


def _coded_api() -> None:
    """A misspelt keyword (``HeartFleet(store, maxRetry=3)``) or a missing argument is an
    ``InvalidTypeError`` (code ``invalid-input``, still a ``TypeError``) at every public
    function and method, like every other bad input, instead of Python's uncoded TypeError."""
    import inspect

    g = globals()
    for name in __all__:
        if inspect.isfunction(g[name]):
            g[name] = _checks.coded_call(g[name])
    for cls in (
        HeartFleet,
        MemoryLeaseStore,
        SqliteLeaseStore,
        AsyncSqliteLeaseStore,
        PsycopgLeaseStore,
        AsyncPsycopgLeaseStore,
        DurableEffectLedger,
        MemoryEffectLedger,
        LivenessReclaimer,
        LeaseScope,
        Lease,
        AsyncLease,
    ):
        _checks.coded_methods(cls)


_coded_api()

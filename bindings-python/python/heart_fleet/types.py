"""Typed results with the reference's field names in snake_case: the lease cycle's values
are classes of the native module (built in Rust, immutable), the others frozen dataclasses.

Each class converts from the JSON the core produces (``from_json``) and back to the
reference's JSON shape (``to_dict``: camelCase keys for results, tokens, receipts and
counters; the tables' own snake_case column names for rows), so a value can be logged,
stored or handed to a runtime in another language unchanged.
"""

from __future__ import annotations

import dataclasses
from abc import ABCMeta
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, ClassVar, Mapping, TypeVar

from . import _native

__all__ = [
    "Record",
    "FencingToken",
    "RunRow",
    "StoreRequest",
    "StoreAnswer",
    "IntentRow",
    "DispatchLogEntry",
    "InstanceRow",
    "HeartReceipt",
    "Metrics",
    "AcquireResult",
    "FencedOutcome",
    "RunError",
    "ReclaimResult",
    "EffectError",
    "ReconcileResult",
    "LivenessResult",
    "EnsuredRun",
    "GuardResult",
    "SendOnceResult",
    "ExecuteResult",
    "EffectContext",
    "Finding",
    "RunChain",
    "LogReport",
    "parse_iso",
]

R = TypeVar("R", bound="Record")


def parse_iso(text: str) -> datetime:
    """A ``toISOString()`` timestamp (``2026-07-30T00:00:00.000Z``) as an aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


class Record(metaclass=ABCMeta):
    """Shared JSON conversion of the result classes.

    The lease cycle's values (:class:`FencingToken`, :class:`RunRow`, :class:`HeartReceipt`,
    :class:`AcquireResult`, :class:`FencedOutcome`) are classes of the native module, built
    in Rust with the same fields, ``to_dict`` and ``from_json``; they are registered here, so
    ``isinstance(x, Record)`` holds for every result.
    """

    __slots__ = ()

    #: Whether the JSON keys are camelCase (results) or the snake_case column names (rows).
    _camel_keys: ClassVar[bool] = True
    #: Fields left out of ``to_dict`` when they are ``None`` (the core omits them too).
    _optional: ClassVar[frozenset[str]] = frozenset()
    #: Nested record fields: field name -> (class, is_list).
    _nested: ClassVar[dict[str, tuple[type[Any], bool]]] = {}
    _keys: ClassVar[tuple[tuple[str, str], ...]]

    @classmethod
    def _key_map(cls) -> tuple[tuple[str, str], ...]:
        keys = cls.__dict__.get("_keys_cache")
        if keys is None:
            names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
            keys = tuple((n, _camel(n) if cls._camel_keys else n) for n in names)
            setattr(cls, "_keys_cache", keys)
        return keys

    @classmethod
    def _json_keys(cls) -> tuple[str, ...]:
        keys = cls.__dict__.get("_json_keys_cache")
        if keys is None:
            keys = tuple(k for _, k in cls._key_map())
            setattr(cls, "_json_keys_cache", keys)
        return keys

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        """Builds the record from the core's JSON object (missing keys become ``None``)."""
        nested = cls._nested
        if not nested:
            # The hot path (rows, tokens, receipts): one positional call.
            return cls(*map(data.get, cls._json_keys()))
        kwargs: dict[str, Any] = {}
        for name, key in cls._key_map():
            v = data.get(key)
            if v is not None and name in nested:
                sub, many = nested[name]
                v = [sub.from_json(x) for x in v] if many else sub.from_json(v)
            kwargs[name] = v
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The reference's JSON shape of this value (nested records converted too)."""
        out: dict[str, Any] = {}
        optional = self._optional
        for name, key in self._key_map():
            v = getattr(self, name)
            if v is None and name in optional:
                continue
            if isinstance(v, Record):
                v = v.to_dict()
            elif isinstance(v, list) and v and isinstance(v[0], Record):
                v = [x.to_dict() for x in v]
            out[key] = v
        return out


#: The lease cycle's records, built in Rust (``bindings-python/src/records.rs``).
FencingToken = _native.FencingToken
RunRow = _native.RunRow
HeartReceipt = _native.HeartReceipt
AcquireResult = _native.AcquireResult
FencedOutcome = _native.FencedOutcome
for _native_record in (FencingToken, RunRow, HeartReceipt, AcquireResult, FencedOutcome):
    Record.register(_native_record)
del _native_record

#: The store contract's values, built in Rust (``bindings-python/src/store.rs``): what a store
#: object's ``execute`` is handed, and what the memory store's ``execute`` answers. Each is an
#: immutable mapping in the request language's JSON shape.
StoreRequest = _native.StoreRequest
StoreAnswer = _native.StoreAnswer


@dataclass(frozen=True, slots=True)
class IntentRow(Record):
    """An ``effect_intents`` row."""

    run_id: str
    effect_key: str
    state: str
    channel: str
    payload_digest: str
    fence_owner: str | None
    fence_expires_at: str | None
    fence_epoch: int | None
    external_ref: Any
    attempts: int
    last_error: str | None
    created_at: str
    committed_at: str | None
    _camel_keys: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class DispatchLogEntry(Record):
    """An ``outbox_dispatch_log`` entry."""

    run_id: str
    effect_key: str
    attempt: int
    outcome: str
    at: str | None
    detail: Any
    _camel_keys: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class InstanceRow(Record):
    """An ``agent_instances`` row."""

    instance_id: str
    hostname: str | None
    pid: int | None
    status: str
    started_at: str
    last_heartbeat: str
    metadata: Any
    _camel_keys: ClassVar[bool] = False



@dataclass(frozen=True, slots=True)
class Metrics(Record):
    """The 13 counters of a fleet."""

    acquire_attempts: int = 0
    acquire_wins: int = 0
    acquire_collisions: int = 0
    renews: int = 0
    renew_failures: int = 0
    releases: int = 0
    release_failures: int = 0
    reclaims: int = 0
    quarantines: int = 0
    fence_verifications: int = 0
    fence_rejections: int = 0
    effect_commits: int = 0
    effect_dedupes: int = 0




@dataclass(frozen=True, slots=True)
class RunError(Record):
    """A per-run note in a summary."""

    run_id: str
    error: str


@dataclass(frozen=True, slots=True)
class ReclaimResult(Record):
    """``reclaim_expired``'s summary."""

    reclaimed_count: int
    reclaimed_ids: list[str]
    quarantined_ids: list[str]
    errors: list[RunError]
    _nested: ClassVar[dict[str, tuple[type[Any], bool]]] = {"errors": (RunError, True)}


@dataclass(frozen=True, slots=True)
class EffectError(Record):
    """A per-intent note in a reconcile summary."""

    effect_key: str
    error: str


@dataclass(frozen=True, slots=True)
class ReconcileResult(Record):
    """``reconcile_outbox``'s summary (only transitions that happened are counted)."""

    scanned: int
    committed: int
    reopened: int
    abandoned: int
    left: int
    errors: list[EffectError]
    _nested: ClassVar[dict[str, tuple[type[Any], bool]]] = {"errors": (EffectError, True)}


@dataclass(frozen=True, slots=True)
class LivenessResult(Record):
    """The liveness pass's summary."""

    dead_instance_ids: list[str]
    reclaimed_count: int
    reclaimed_ids: list[str]
    quarantined_ids: list[str]
    errors: list[RunError]
    _nested: ClassVar[dict[str, tuple[type[Any], bool]]] = {"errors": (RunError, True)}


@dataclass(frozen=True, slots=True)
class Finding(Record):
    """One thing ``verify_receipts`` found wrong: at a line of the log (``position``, from 1),
    or about a whole run (``position`` is ``None``: a truncation). ``code`` is stable:
    ``receipt-tampered``, ``invalid-input``, ``chain-gap``, ``chain-reorder``,
    ``chain-duplicate``, ``chain-fork``, ``chain-broken``, ``chain-truncated``,
    ``signature-missing``, ``signature-invalid``, ``receipt-unchained``."""

    position: int | None
    run_id: str | None
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class RunChain(Record):
    """One run's chain, as the log holds it."""

    receipts: int
    chained: int
    unchained: int
    last_seq: int | None


@dataclass(frozen=True, slots=True)
class LogReport(Record):
    """``verify_receipts``'s result (``heart-fleet verify-receipts --json``): counts, each run's
    chain, and every finding in log order (empty when the log verified)."""

    receipts: int
    ok: int
    tampered: int
    malformed: int
    chained: int
    unchained: int
    signed: int
    runs: dict[str, RunChain]
    findings: list[Finding]

    @property
    def passed(self) -> bool:
        """Whether nothing was found."""
        return not self.findings

    @staticmethod
    def from_report(data: Mapping[str, Any]) -> LogReport:
        """Builds the report from the core's JSON object."""
        counts = {k: data[k] for k in ("receipts", "ok", "tampered", "malformed", "chained", "unchained", "signed")}
        runs = {run: RunChain.from_json(c) for run, c in data["runs"].items()}
        return LogReport(**counts, runs=runs, findings=[Finding.from_json(f) for f in data["findings"]])

    def to_dict(self) -> dict[str, Any]:
        """The core's JSON shape of the report."""
        out = Record.to_dict(self)
        out["runs"] = {run: c.to_dict() for run, c in self.runs.items()}
        return out


@dataclass(frozen=True, slots=True)
class EnsuredRun(Record):
    """``ensure_resource_run``'s result: the resource's run and whether this call created it."""

    run: RunRow
    created: bool
    _nested: ClassVar[dict[str, tuple[type[Any], bool]]] = {"run": (RunRow, False)}


@dataclass(frozen=True, slots=True)
class GuardResult(Record):
    """``guard_irreversible``'s result: ``committed`` with the effect's ``result``, or
    ``reason`` ``fence-rejected`` / ``already-committed`` with its ``code``."""

    committed: bool
    result: Any = None
    reason: str | None = None
    code: str | None = None
    _optional: ClassVar[frozenset[str]] = frozenset({"result", "reason", "code"})


@dataclass(frozen=True, slots=True)
class SendOnceResult(Record):
    """``send_once``'s result: ``sent`` with the send's ``result``, the committed
    ``external_ref`` and ``committed``, or ``reason`` (``fence-rejected``, ``deduped``,
    ``lost-dispatch-race``) with its ``code``."""

    sent: bool
    result: Any = None
    external_ref: Any = None
    committed: bool | None = None
    reason: str | None = None
    code: str | None = None
    _optional: ClassVar[frozenset[str]] = frozenset({"result", "external_ref", "committed", "reason", "code"})


@dataclass(frozen=True, slots=True)
class ExecuteResult(Record):
    """``execute_with_lease``'s result: ``ran`` with the work's ``result``, whether the final
    release went through, and ``lost`` (the cause) when the lease was lost while the work
    ran; or ``ran=False`` with ``reason`` (``lease-held`` / ``lease-error``) and ``code``."""

    ran: bool
    result: Any = None
    released: bool = False
    lost: str | None = None
    reason: str | None = None
    code: str | None = None
    _optional: ClassVar[frozenset[str]] = frozenset({"result", "lost", "reason", "code"})


@dataclass(frozen=True, slots=True)
class EffectContext:
    """What an effect (``guard_irreversible``) or a send (``send_once``) is called with: the
    run's fencing ``epoch`` (hand it to the receiving system) and the ``effect_key``."""

    epoch: int | None
    effect_key: str

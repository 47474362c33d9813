"""Instance liveness: the proactive dead-instance reclaimer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from . import _check, _native
from .errors import InvalidTypeError
from .fleet import HeartFleet
from .memory import to_ms
from .types import InstanceRow, LivenessResult, RunRow

__all__ = [
    "DEFAULT_LIVENESS_TTL_MS",
    "LivenessReclaimer",
    "is_lease_expired",
    "can_acquire",
    "is_instance_expired",
    "dead_instance_ids",
    "runs_leased_to_dead_instances",
]

DEFAULT_LIVENESS_TTL_MS = _check.DEFAULT_LIVENESS_TTL_MS

Instant = datetime | str | int
Row = TypeVar("Row", RunRow, Mapping[str, Any])


def _field(row: object, name: str) -> Any:
    if isinstance(row, Mapping):
        return row.get(name)
    if isinstance(row, (RunRow, InstanceRow)):
        return getattr(row, name)
    raise InvalidTypeError(f"a row must be a RunRow, an InstanceRow or a mapping, got {_check.describe(row)}")


def _expiry_ms(run: object) -> int | None:
    expires = _field(run, "lease_expires_at")
    return None if expires is None or expires == "" else to_ms("lease_expires_at", expires)


def is_lease_expired(run: RunRow | Mapping[str, Any], now: Instant) -> bool:
    """No expiry, or expiry <= ``now`` (the core's one expiry rule)."""
    return _native.lease_expired_ms(_expiry_ms(run), to_ms("now", now))


def _status(row: object) -> str:
    """A row's status as the core reads it: a value that is no well-formed ``str`` is no status."""
    status = _field(row, "status")
    return status if isinstance(status, str) and _check.wellformed(status) else ""


def can_acquire(run: RunRow | Mapping[str, Any], now: Instant) -> bool:
    """``ready``, or ``leased`` / ``running`` with an expired lease (the core's rule). A
    timestamp that is not one is ``InvalidInputError`` whatever the status."""
    return _native.can_acquire_ms(_status(run), _expiry_ms(run), to_ms("now", now))


def is_instance_expired(
    instance: InstanceRow | Mapping[str, Any], now: Instant, ttl_ms: int = DEFAULT_LIVENESS_TTL_MS
) -> bool:
    """Dead, or silent for strictly more than ``ttl_ms`` (the core's rule). A timestamp that
    is not one is ``InvalidInputError`` whatever the status."""
    heartbeat = to_ms("last_heartbeat", _field(instance, "last_heartbeat"))
    return _native.instance_expired_ms(_status(instance), heartbeat, to_ms("now", now), ttl_ms)


def dead_instance_ids(
    instances: Iterable[InstanceRow | Mapping[str, Any]], now: Instant, ttl_ms: int = DEFAULT_LIVENESS_TTL_MS
) -> list[str]:
    """The ids of expired instances, in input order."""
    return [str(_field(i, "instance_id")) for i in instances if is_instance_expired(i, now, ttl_ms)]


def runs_leased_to_dead_instances(runs: Iterable[Row], dead_ids: Iterable[str]) -> list[Row]:
    """Runs held (``leased`` / ``running``) by one of ``dead_ids``."""
    dead = set(dead_ids)
    return [
        r
        for r in runs
        if _field(r, "lease_owner") in dead and _field(r, "status") in _check.HELD_STATUSES
    ]


class LivenessReclaimer:
    """The proactive dead-instance reclaimer over a fleet.

    ``LivenessReclaimer(heart, ttl_ms=90_000)``. Instances silent for strictly more than
    ``ttl_ms`` are declared dead, and the runs they hold are recovered with the retry
    ceiling, receipts and counters (every recovery counts). Instances declared dead earlier
    are still swept.
    """

    __slots__ = ("heart", "ttl_ms")

    def __init__(self, heart: HeartFleet, ttl_ms: int = DEFAULT_LIVENESS_TTL_MS) -> None:
        if not isinstance(heart, HeartFleet):
            raise InvalidTypeError(f"LivenessReclaimer: heart must be a HeartFleet, got {_check.describe(heart)}")
        self.heart = heart
        self.ttl_ms = _check.integer("ttl_ms", ttl_ms, 0, _check.I53)

    def reclaim_dead_instance_runs(self, max_reclaims_per_cycle: int = _check.DEFAULT_LIVENESS_LIMIT) -> LivenessResult:
        """One liveness pass."""
        return self.heart.reclaim_dead_instance_runs(self.ttl_ms, max_reclaims_per_cycle)

    async def reclaim_dead_instance_runs_async(self, max_reclaims_per_cycle: int = _check.DEFAULT_LIVENESS_LIMIT) -> LivenessResult:
        """:meth:`reclaim_dead_instance_runs`, awaiting the store."""
        return await self.heart.reclaim_dead_instance_runs_async(self.ttl_ms, max_reclaims_per_cycle)

    def register_instance(
        self, instance_id: str, *, hostname: str | None = None, pid: int | None = None, metadata: Any = None
    ) -> InstanceRow:
        """Registers (or re-registers) an instance as ``alive``."""
        return self.heart.register_instance(instance_id, hostname=hostname, pid=pid, metadata=metadata)

    async def register_instance_async(
        self, instance_id: str, *, hostname: str | None = None, pid: int | None = None, metadata: Any = None
    ) -> InstanceRow:
        """:meth:`register_instance`, awaiting the store."""
        return await self.heart.register_instance_async(instance_id, hostname=hostname, pid=pid, metadata=metadata)

    def heartbeat(self, instance_id: str) -> bool:
        """Heartbeats an instance; ``False`` when it is unknown or dead."""
        return self.heart.heartbeat_instance(instance_id)

    async def heartbeat_async(self, instance_id: str) -> bool:
        """:meth:`heartbeat`, awaiting the store."""
        return await self.heart.heartbeat_instance_async(instance_id)

    def drain_instance(self, instance_id: str) -> bool:
        """Marks an instance ``draining``."""
        return self.heart.drain_instance(instance_id)

    async def drain_instance_async(self, instance_id: str) -> bool:
        """:meth:`drain_instance`, awaiting the store."""
        return await self.heart.drain_instance_async(instance_id)

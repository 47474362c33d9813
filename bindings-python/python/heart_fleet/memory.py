"""MemoryLeaseStore: the core's deterministic memory store (Rust) with an injectable clock."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, overload

from . import _check
from . import _native
from .errors import InvalidInputError, InvalidTypeError
from .types import DispatchLogEntry, InstanceRow, IntentRow, RunRow, StoreAnswer, StoreRequest, parse_iso

__all__ = ["MemoryLeaseStore", "to_ms", "iso_of"]

_MAX_MS = 8_640_000_000_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_ISO = "1970-01-01T00:00:00.000Z"


def to_ms(name: str, v: object) -> int:
    """Milliseconds since the Unix epoch from a datetime (aware, or naive UTC), ISO text or an int."""
    if isinstance(v, datetime):
        aware = v if v.tzinfo is not None else v.replace(tzinfo=timezone.utc)
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    if isinstance(v, str):
        try:
            return to_ms(name, parse_iso(v))
        except ValueError:
            raise InvalidInputError(f"{name} must be an ISO timestamp, got {v!r}") from None
    return _check.integer(name, v, -_MAX_MS, _MAX_MS)


def iso_of(ms: int) -> str:
    """The ``toISOString()`` text of milliseconds since the epoch."""
    d = _EPOCH + timedelta(milliseconds=ms)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _full_row(run: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(run, Mapping):
        raise InvalidTypeError(f"insert: a run must be a mapping, got {_check.describe(run)}")
    rid = _check.text("run.id", run.get("id"))
    # The columns the run leaves out take the core's defaults (RunRow::seeded).
    row: dict[str, Any] = json.loads(_native.seeded_row_json("agent_runs", rid, _EPOCH_ISO))
    for k, v in run.items():
        if not isinstance(k, str):
            raise InvalidTypeError(f"insert: column names are str, got {_check.describe(k)}")
        row[k] = iso_of(to_ms(f"run.{k}", v)) if isinstance(v, datetime) else v
    # insert() stamps both with the clock, as the reference does.
    row["created_at"] = row["updated_at"] = _EPOCH_ISO
    return row


class MemoryLeaseStore:
    """The deterministic in-memory store. Its clock starts at the Unix epoch unless given
    (a datetime, ISO text or milliseconds); :meth:`set_now` and :meth:`advance` move it. A
    :class:`~heart_fleet.HeartFleet` over it runs every operation inside Rust.

    The store is safe to share between threads (a heartbeat thread, for one).
    """

    __slots__ = ("_native",)

    def __init__(self, now: datetime | str | int | None = None) -> None:
        self._native = _native.NativeMemoryStore(0 if now is None else to_ms("now", now))

    @classmethod
    def from_scenario(cls, scenario: str) -> MemoryLeaseStore:
        """A store seeded by a conformance scenario (JSON text)."""
        if not isinstance(scenario, str):
            raise InvalidTypeError("from_scenario: the scenario must be JSON text")
        if not _check.wellformed(scenario):
            raise _check.ill_formed("from_scenario: the scenario")
        store = cls.__new__(cls)
        store._native = _native.NativeMemoryStore.from_scenario(scenario)
        return store

    def now_ms(self) -> int:
        """The clock, in milliseconds since the Unix epoch."""
        return int(self._native.now_ms())

    def now(self) -> datetime:
        """The clock."""
        return _EPOCH + timedelta(milliseconds=self.now_ms())

    def now_iso(self) -> str:
        """The clock as ``toISOString()`` text."""
        return iso_of(self.now_ms())

    def set_now(self, now: datetime | str | int) -> None:
        """Sets the clock."""
        self._native.set_now(to_ms("set_now", now))

    def advance(self, ms: int) -> None:
        """Moves the clock by ``ms`` milliseconds (may be negative)."""
        self._native.advance(_check.integer("advance: ms", ms, -_MAX_MS, _MAX_MS))

    def insert(self, run: Mapping[str, Any]) -> RunRow:
        """Inserts a run; missing columns take the schema's defaults (status ``ready``,
        idempotency key ``key:<id>``); ``created_at`` and ``updated_at`` are the clock. A
        reused idempotency key raises ``InvalidInputError``. Returns the stored row."""
        row = _full_row(run)
        self._native.insert(_check.to_json(row, "insert: the run"))
        got = self.get_run(row["id"])
        assert got is not None
        return got

    def get_run(self, run_id: str) -> RunRow | None:
        """One run (a snapshot), or ``None``."""
        v = json.loads(self._native.run_json(_check.text("run_id", run_id)))
        return None if v is None else RunRow.from_json(v)

    def runs(self) -> list[RunRow]:
        """Every run in insertion order."""
        return [RunRow.from_json(r) for r in json.loads(self._native.runs_json())]

    def intents(self) -> list[IntentRow]:
        """Every effect intent."""
        return [IntentRow.from_json(r) for r in json.loads(self._native.intents_json())]

    def dispatch_log(self) -> list[DispatchLogEntry]:
        """The outbox dispatch log, in order."""
        return [DispatchLogEntry.from_json(r) for r in json.loads(self._native.dispatch_log_json())]

    def instances(self) -> list[InstanceRow]:
        """Every ``agent_instances`` row."""
        return [InstanceRow.from_json(r) for r in json.loads(self._native.instances_json())]

    def insert_instance(self, row: Mapping[str, Any]) -> None:
        """Inserts an ``agent_instances`` row (``started_at`` / ``last_heartbeat`` default to the clock)."""
        if not isinstance(row, Mapping):
            raise InvalidTypeError("insert_instance: a row must be a mapping")
        now = self.now_iso()
        # What the row leaves out: as registering the instance now leaves it (the core's
        # InstanceRow::registered).
        defaults: dict[str, Any] = json.loads(_native.seeded_row_json("agent_instances", "-", now))
        del defaults["instance_id"]
        full: dict[str, Any] = {**defaults, **row}
        for k in ("started_at", "last_heartbeat"):
            v = row.get(k)
            full[k] = now if v is None else iso_of(to_ms(k, v))
        self._native.insert_instance(_check.to_json(full, "insert_instance: the row"))

    def insert_intent(self, row: Mapping[str, Any]) -> None:
        """Inserts an ``effect_intents`` row as given (tests seed crash states this way)."""
        if not isinstance(row, Mapping):
            raise InvalidTypeError("insert_intent: a row must be a mapping")
        self._native.insert_intent(_check.to_json(dict(row), "insert_intent: the row"))

    def fail_next(self, request: str = "*", times: int = 1) -> None:
        """Makes the next ``times`` store requests named ``request`` (or ``*``) fail, changing nothing."""
        self.fail_after(request, 0, times)

    def fail_after(self, request: str, after: int, times: int) -> None:
        """Lets ``after`` matching requests through, then fails the next ``times``."""
        self._native.fail_after(
            _check.text("request", request),
            _check.integer("after", after, 0, _check.U32),
            _check.integer("times", times, 0, _check.U32),
        )

    def request_count(self) -> int:
        """How many store requests were answered (or failed)."""
        return int(self._native.request_count())

    def execute_json(self, request: str) -> str:
        """The store contract's text form: StoreRequest JSON text -> StoreAnswer JSON text. An
        injected failure raises ``StoreUnavailableError``."""
        if not isinstance(request, str):
            raise InvalidTypeError("execute_json: a StoreRequest as JSON text")
        if not _check.wellformed(request):
            raise _check.ill_formed("execute_json: the request")
        return str(self._native.execute_json(request))

    @overload
    def execute(self, request: StoreRequest) -> StoreAnswer: ...  # type: ignore[overload-overlap]
    @overload
    def execute(self, request: Mapping[str, Any] | str) -> dict[str, Any]: ...
    def execute(self, request: StoreRequest | Mapping[str, Any] | str) -> StoreAnswer | dict[str, Any]:
        """The store contract: one :class:`StoreRequest` -> its :class:`StoreAnswer`, both as
        they are (no JSON: a store object forwarding its requests here); a request in its JSON
        shape (a mapping or its text) -> the answer's JSON shape (a dict)."""
        if type(request) is StoreRequest:
            return self._native.execute(request)
        if isinstance(request, str):
            text = request
        elif isinstance(request, Mapping):
            text = _check.to_json(dict(request), "the StoreRequest")
        else:
            raise InvalidTypeError(f"execute: a StoreRequest is a mapping, got {_check.describe(request)}")
        answer: dict[str, Any] = json.loads(self._native.execute_json(text))
        return answer

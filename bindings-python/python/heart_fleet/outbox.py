"""The durable effect ledger (``effect_intents`` + ``outbox_dispatch_log``), send_once and the
reconciler, over the heart's store through the core's machines."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import _check, _driver
from . import _native
from .errors import HeartFleetError, InvalidInputError, InvalidTypeError, StoreProtocolError, StoreUnavailableError
from .fleet import HeartFleet
from .memory import MemoryLeaseStore
from .types import DispatchLogEntry, EffectContext, FencingToken, IntentRow, ReconcileResult, SendOnceResult

__all__ = [
    "DurableEffectLedger",
    "send_once",
    "send_once_async",
    "reconcile_outbox",
    "reconcile_outbox_async",
]

CHANNELS = _check.CHANNELS


class DurableEffectLedger:
    """The durable effect ledger over the heart's store: ``record_once`` claims an intent
    (channel ``internal``), ``find_stale_dispatched`` and ``dispatch_log`` read the outbox.
    Effect receipts and counters go to ``heart``."""

    __slots__ = ("heart",)

    def __init__(self, heart: HeartFleet) -> None:
        if not isinstance(heart, HeartFleet):
            raise InvalidTypeError(f"DurableEffectLedger: heart must be a HeartFleet, got {_check.describe(heart)}")
        self.heart = heart

    @property
    def store(self) -> Any:
        """The heart's store."""
        return self.heart.store

    def _record(self, run_id: object, effect_key: object) -> str:
        return json.dumps(
            {"runId": _check.text("run_id", run_id), "effectKey": _check.text("effect_key", effect_key)},
            separators=(",", ":"),
        )

    def record_once(self, run_id: str, effect_key: str) -> bool:
        """Claims the intent; ``True`` the first time."""
        return bool(_driver.ok_of(_driver.drive_sync(self.heart, "recordOnce", self._record(run_id, effect_key))))

    async def record_once_async(self, run_id: str, effect_key: str) -> bool:
        """:meth:`record_once`, awaiting the store."""
        step = await _driver.drive_async(self.heart, "recordOnce", self._record(run_id, effect_key))
        return bool(_driver.ok_of(step))

    def _request(self, kind: str, args: dict[str, Any]) -> str:
        return str(_native.store_request(kind, json.dumps(args, separators=(",", ":"))))

    def _call(self, request: str) -> Any:
        store = self.store
        if isinstance(store, MemoryLeaseStore) or callable(getattr(store, "execute_json", None)):
            return store.execute_json(request)
        return store.execute(json.loads(request))

    @staticmethod
    def _reply(kind: str, answer: Any, want: str) -> dict[str, Any]:
        if isinstance(answer, str):
            try:
                answer = json.loads(answer)
            except ValueError:
                raise StoreProtocolError(f"{kind}: the store's answer is not JSON") from None
        reply = answer.get("reply") if isinstance(answer, dict) else None
        if not isinstance(reply, dict) or reply.get("kind") != want:
            # One line naming what came, never the rows the store sent.
            got = reply.get("kind") if isinstance(reply, dict) else None
            what = f"a reply of kind {str(got)[:40]!r}" if isinstance(got, str) else f"a {type(answer).__name__}"
            raise StoreProtocolError(f"{kind}: the store answered {what}, not a {want} reply")
        return reply

    def _run(self, kind: str, args: dict[str, Any], want: str) -> dict[str, Any]:
        try:
            answer = self._call(self._request(kind, args))
            if inspect.isawaitable(answer):
                if inspect.iscoroutine(answer):
                    answer.close()
                raise InvalidTypeError("the store is asyncio: use the *_async method")
        except HeartFleetError:
            raise
        except Exception as e:
            raise StoreUnavailableError(f"store failed at {kind}: {_driver.message_of(e)}") from e
        return self._reply(kind, answer, want)

    async def _run_async(self, kind: str, args: dict[str, Any], want: str) -> dict[str, Any]:
        try:
            answer = self._call(self._request(kind, args))
            if inspect.isawaitable(answer):
                answer = await answer
        except HeartFleetError:
            raise
        except Exception as e:
            raise StoreUnavailableError(f"store failed at {kind}: {_driver.message_of(e)}") from e
        return self._reply(kind, answer, want)

    def find_stale_dispatched(self, limit: int = _check.DEFAULT_RECONCILE_LIMIT) -> list[IntentRow]:
        """Dispatched intents whose fence expired by the store's clock, oldest first."""
        r = self._run("staleIntents", {"limit": _check.integer("limit", limit, 0, _check.U32)}, "intents")
        return [IntentRow.from_json(i) for i in r["intents"]]

    async def find_stale_dispatched_async(self, limit: int = _check.DEFAULT_RECONCILE_LIMIT) -> list[IntentRow]:
        """:meth:`find_stale_dispatched`, awaiting the store."""
        r = await self._run_async("staleIntents", {"limit": _check.integer("limit", limit, 0, _check.U32)}, "intents")
        return [IntentRow.from_json(i) for i in r["intents"]]

    def _log_args(self, run_id: object, effect_key: object) -> dict[str, Any]:
        return {"runId": _check.text("run_id", run_id), "effectKey": _check.text("effect_key", effect_key)}

    def dispatch_log(self, run_id: str, effect_key: str) -> list[DispatchLogEntry]:
        """The dispatch log entries of one effect, oldest first."""
        r = self._run("readLog", self._log_args(run_id, effect_key), "log")
        return [DispatchLogEntry.from_json(e) for e in r["entries"]]

    async def dispatch_log_async(self, run_id: str, effect_key: str) -> list[DispatchLogEntry]:
        """:meth:`dispatch_log`, awaiting the store."""
        r = await self._run_async("readLog", self._log_args(run_id, effect_key), "log")
        return [DispatchLogEntry.from_json(e) for e in r["entries"]]


def _check_durable(heart: object, ledger: object) -> HeartFleet:
    if not isinstance(heart, HeartFleet):
        raise InvalidTypeError(f"heart must be a HeartFleet, got {_check.describe(heart)}")
    if not isinstance(ledger, DurableEffectLedger):
        raise InvalidTypeError(f"the ledger must be a DurableEffectLedger, got {_check.describe(ledger)}")
    if ledger.store is not heart.store:
        raise InvalidTypeError("the ledger must be over the heart's store")
    return heart


#: How deep the evidence of a send may nest to be stored (the core's limit): it travels inside
#: store requests and answers that every store, in every runtime, parses with a recursion limit.
MAX_EVIDENCE_DEPTH: int = json.loads(_native.contract())["maxEvidenceDepth"]


def unstorable_evidence(kind: str, reason: str) -> str:
    """What a send records as evidence when its result cannot be stored as JSON:
    ``{"unstorable": {"type": ..., "reason": ...}}``, built by the core (the same form in every
    runtime: the reason's first line, at most 200 UTF-16 code units)."""
    # A lone surrogate has no UTF-8 form: it becomes U+FFFD, as it does from JavaScript.
    clean = [t.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for t in (kind, reason)]
    return str(_native.unstorable_evidence(clean[0], clean[1]))


def _type_name(v: Any) -> str:
    if isinstance(v, float):
        return f"float {v!r}"
    return type(v).__name__


def evidence_text(value: Any) -> str:
    """The evidence of a send as JSON text the core stores, or the unstorable form: a value
    JSON cannot hold (NaN, bytes, an object), or nested deeper than MAX_EVIDENCE_DEPTH."""
    if _check.deeper_than(value, MAX_EVIDENCE_DEPTH):
        return unstorable_evidence(_type_name(value), f"nested deeper than {MAX_EVIDENCE_DEPTH} levels")
    try:
        return _check.to_json(value, "the external_ref")
    except HeartFleetError as e:
        return unstorable_evidence(_type_name(value), e.message)


class _SendHost:
    __slots__ = ("send", "to_external_ref", "result", "ref_error")

    def __init__(self, send: Callable[[EffectContext], Any], to_external_ref: Callable[[Any], Any] | None) -> None:
        self.send = send
        self.to_external_ref = to_external_ref
        self.result: Any = None
        #: What to_external_ref raised (re-raised once the evidence is committed).
        self.ref_error: BaseException | None = None

    def record_once(self, run_id: str, effect_key: str) -> Any:  # pragma: no cover - not asked
        raise StoreProtocolError("send_once does not use a ledger callback")

    def effect(self, effect_key: str, epoch: int | None) -> Any:
        return self.send(EffectContext(epoch=epoch, effect_key=effect_key))

    def effect_text(self, value: Any) -> str:
        # The send went out: from here on nothing is bad input, and the evidence is stored.
        self.result = value
        if self.to_external_ref is None:
            return evidence_text(value)
        try:
            evidence = self.to_external_ref(value)
        except Exception as e:  # noqa: BLE001 - committed as unstorable evidence, then re-raised
            self.ref_error = e
            return unstorable_evidence("to_external_ref", f"to_external_ref raised {type(e).__name__}: {_driver.message_of(e)}")
        if inspect.iscoroutine(evidence):
            evidence.close()
            return unstorable_evidence("coroutine", "to_external_ref returned a coroutine (it must return the evidence)")
        return evidence_text(evidence)

    def probe(self, intent: dict[str, Any]) -> Any:  # pragma: no cover - not asked
        return {"status": "unknown"}


def _send_plan(
    heart: object,
    ledger: object,
    fence: object,
    channel: object,
    effect_key_: object,
    payload: object,
    send: object,
    to_external_ref: object,
) -> tuple[HeartFleet, str, _SendHost]:
    h = _check_durable(heart, ledger)
    f = _check.fence("fence", fence)
    ch = _check.status("channel", channel, CHANNELS)
    key = _check.text("effect_key", effect_key_)
    _check.callable_("send", send)
    if to_external_ref is not None:
        _check.callable_("to_external_ref", to_external_ref)
    # The payload is checked first: a non-finite number fails before any I/O.
    payload_text = _check.to_json(payload, "payload")
    args = (
        '{"fence":'
        + json.dumps(f, separators=(",", ":"))
        + ',"channel":'
        + json.dumps(ch)
        + ',"effectKey":'
        + json.dumps(key)
        + ',"payload":'
        + payload_text
        + "}"
    )
    return h, args, _SendHost(send, to_external_ref)  # type: ignore[arg-type]


def _send_result(step: dict[str, Any], host: _SendHost) -> SendOnceResult:
    r = _driver.ok_of(step)
    if host.ref_error is not None:
        raise host.ref_error
    if r.get("sent"):
        return SendOnceResult(sent=True, result=host.result, external_ref=r.get("externalRef"), committed=r.get("committed"))
    return SendOnceResult.from_json(r)


def send_once(
    heart: HeartFleet,
    ledger: DurableEffectLedger,
    *,
    fence: FencingToken,
    channel: str,
    effect_key: str,
    payload: Any,
    send: Callable[[EffectContext], Any],
    to_external_ref: Callable[[Any], Any] | None = None,
) -> SendOnceResult:
    """Sends at most once, in the documented order: verify the fence, claim the intent, mark
    it dispatched (conditioned on the run still holding the live token),
    ``send(EffectContext(epoch, effect_key))``, then commit the evidence
    ``to_external_ref(result)`` (default: the result) in the same write as the state change.
    Returns ``SendOnceResult(sent=True, result, external_ref, committed)`` or ``sent=False``
    with ``reason`` ``fence-rejected`` / ``deduped`` / ``lost-dispatch-race``. A send that
    raises propagates its exception; the intent stays dispatched for the reconciler.

    Everything that can be checked is checked before any I/O (the arguments, the payload).
    What the send returns can only be checked after it went out, so it is never reported as
    bad input: evidence that JSON cannot hold (NaN, bytes, an object, nesting deeper than 100
    levels) is committed as ``{"unstorable": {"type": ..., "reason": ...}}``; a
    ``to_external_ref`` that raises commits that form too, then its exception propagates (the
    intent is committed, so a retry dedupes)."""
    if inspect.iscoroutinefunction(send):
        # Checked before any I/O: a coroutine send run blocking would leave the intent dispatched.
        raise InvalidTypeError("send_once: send is a coroutine function: use send_once_async")
    h, args, host = _send_plan(heart, ledger, fence, channel, effect_key, payload, send, to_external_ref)
    return _send_result(_driver.drive_sync(h, "sendOnce", args, host), host)


async def send_once_async(
    heart: HeartFleet,
    ledger: DurableEffectLedger,
    *,
    fence: FencingToken,
    channel: str,
    effect_key: str,
    payload: Any,
    send: Callable[[EffectContext], Any | Awaitable[Any]],
    to_external_ref: Callable[[Any], Any] | None = None,
) -> SendOnceResult:
    """:func:`send_once`, awaiting the store and the send."""
    h, args, host = _send_plan(heart, ledger, fence, channel, effect_key, payload, send, to_external_ref)
    return _send_result(await _driver.drive_async(h, "sendOnce", args, host), host)


def _verdict(v: Any) -> Any:
    if isinstance(v, str):
        return {"status": v}
    if v is None:
        return {"status": "unknown"}
    if isinstance(v, Mapping):
        out = dict(v)
        if "external_ref" in out and "externalRef" not in out:
            out["externalRef"] = out.pop("external_ref")
        return out
    return v


class _ProbeHost:
    __slots__ = ("probes",)

    def __init__(self, probes: Mapping[str, Callable[[IntentRow], Any]]) -> None:
        self.probes = probes

    def record_once(self, run_id: str, effect_key: str) -> Any:  # pragma: no cover - not asked
        raise StoreProtocolError("reconcile does not use a ledger callback")

    def effect(self, effect_key: str, epoch: int | None) -> Any:  # pragma: no cover - not asked
        raise StoreProtocolError("reconcile runs no effect")

    def effect_text(self, value: Any) -> str:  # pragma: no cover - not asked
        return "null"

    def probe(self, intent: dict[str, Any]) -> Any:
        p = self.probes.get(intent.get("channel", ""))
        if p is None:
            return {"status": "unknown"}
        out = p(IntentRow.from_json(intent))
        if inspect.isawaitable(out):
            return _await_verdict(out)
        return _verdict(out)


async def _await_verdict(aw: Awaitable[Any]) -> Any:
    return _verdict(await aw)


def _reconcile_plan(ledger: object, probes: object, max_attempts: object, limit: object) -> tuple[HeartFleet, str, _ProbeHost]:
    if not isinstance(ledger, DurableEffectLedger):
        raise InvalidTypeError(f"reconcile_outbox: ledger must be a DurableEffectLedger, got {_check.describe(ledger)}")
    if not isinstance(probes, Mapping):
        raise InvalidTypeError(f"probes must be a mapping of channel -> probe, got {_check.describe(probes)}")
    for ch, p in probes.items():
        if not isinstance(ch, str):
            raise InvalidTypeError(f"probe channels are str, got {_check.describe(ch)}")
        if ch not in CHANNELS:
            # A probe under a misspelt channel would never be asked.
            raise InvalidInputError(f"probes: unknown channel {ch!r} (the channels are {', '.join(CHANNELS)})")
        _check.callable_(f"probes[{ch!r}]", p)
    args = json.dumps(
        {
            "maxAttempts": _check.integer("max_attempts", max_attempts, 0, _check.I53),
            "limit": _check.integer("limit", limit, 0, _check.U32),
        }
    )
    return ledger.heart, args, _ProbeHost(probes)


def reconcile_outbox(
    ledger: DurableEffectLedger,
    probes: Mapping[str, Callable[[IntentRow], Any]],
    *,
    max_attempts: int = _check.DEFAULT_RECONCILE_MAX_ATTEMPTS,
    limit: int = _check.DEFAULT_RECONCILE_LIMIT,
) -> ReconcileResult:
    """For each dispatched intent whose fence expired, asks ``probes[channel](intent)``:
    ``{"status": "sent", "external_ref": ...}`` commits the evidence, ``"not-sent"`` reopens
    it for the run's holder, ``"unknown"`` (or no probe) leaves it and abandons it past
    ``max_attempts``. Counts only writes that happened. A probe that raises is reported in
    ``errors``. ``not-sent`` must be final (see the README's probe contract)."""
    if isinstance(probes, Mapping) and any(inspect.iscoroutinefunction(p) for p in probes.values()):
        raise InvalidTypeError("reconcile_outbox: a probe is a coroutine function: use reconcile_outbox_async")
    heart, args, host = _reconcile_plan(ledger, probes, max_attempts, limit)
    return ReconcileResult.from_json(_driver.ok_of(_driver.drive_sync(heart, "reconcileOutbox", args, host)))


async def reconcile_outbox_async(
    ledger: DurableEffectLedger,
    probes: Mapping[str, Callable[[IntentRow], Any]],
    *,
    max_attempts: int = _check.DEFAULT_RECONCILE_MAX_ATTEMPTS,
    limit: int = _check.DEFAULT_RECONCILE_LIMIT,
) -> ReconcileResult:
    """:func:`reconcile_outbox`, awaiting the store and the probes."""
    heart, args, host = _reconcile_plan(ledger, probes, max_attempts, limit)
    return ReconcileResult.from_json(_driver.ok_of(await _driver.drive_async(heart, "reconcileOutbox", args, host)))

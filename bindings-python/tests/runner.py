"""The conformance scenario runner for the Python binding: a port of the semantics of
``core/src/conformance.rs`` (``replay``), driving every op through the package's public API.

Store modes:

* ``memory``: HeartFleet over MemoryLeaseStore (answered inside Rust), blocking API;
* ``memory-async``: the same through the ``*_async`` API;
* ``py-store`` / ``py-text-store``: a pure-Python store object whose blocking ``execute``
  (dicts) / ``execute_json`` (text) forwards to the same memory store, blocking API: every
  store request goes through the Python driving loop;
* ``async-store`` / ``async-text-store``: the same with coroutine methods that yield to the
  event loop before answering, through the ``*_async`` API.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import heart_fleet as hf

MODES = ("memory", "memory-async", "py-store", "py-text-store", "async-store", "async-text-store")


class SyncObjStore:
    """A blocking store object over a memory store (requests and answers as dicts)."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory
        self.calls = 0

    def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        return self.memory.execute(request)


class SyncTextStore(SyncObjStore):
    """A blocking store object that takes and returns JSON text."""

    def execute_json(self, text: str) -> str:  # type: ignore[override]
        self.calls += 1
        return self.memory.execute_json(text)


class AsyncObjStore:
    """An asyncio store object: every call yields to the loop before answering."""

    def __init__(self, memory: hf.MemoryLeaseStore) -> None:
        self.memory = memory
        self.calls = 0

    async def execute(self, request: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        await asyncio.sleep(0)
        return self.memory.execute(request)


class AsyncTextStore(AsyncObjStore):
    async def execute_json(self, text: str) -> str:
        self.calls += 1
        await asyncio.sleep(0)
        return self.memory.execute_json(text)


class EffectThrew(Exception):
    """An error from a host callback of the scenario (the effect, the send)."""


def matches(want: Any, got: Any, path: str) -> None:
    """Partial match: objects on the keys ``want`` names, arrays elementwise with equal length."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            raise AssertionError(f"{path}: expected {json.dumps(want)}, got {json.dumps(got, default=str)}")
        for k, w in want.items():
            matches(w, got.get(k), f"{path}.{k}")
        return
    if isinstance(want, list):
        if not isinstance(got, list):
            raise AssertionError(f"{path}: expected an array, got {json.dumps(got, default=str)}")
        if len(want) != len(got):
            raise AssertionError(f"{path}: expected {len(want)} items, got {len(got)}: {json.dumps(got, default=str)}")
        for i, w in enumerate(want):
            matches(w, got[i], f"{path}[{i}]")
        return
    if isinstance(want, bool) or isinstance(got, bool):
        if want is got:
            return
    elif want == got:
        return
    raise AssertionError(f"{path}: expected {json.dumps(want)}, got {json.dumps(got, default=str)}")


def err_json(e: BaseException) -> dict[str, Any]:
    if isinstance(e, hf.HeartFleetError) and e.code in hf.ERROR_CODES:
        return {"error": e.code, "message": str(e)}
    raise e


def effect_outcome(spec: Any) -> Any:
    if isinstance(spec, dict) and isinstance(spec.get("throws"), str):
        raise EffectThrew(spec["throws"])
    return spec.get("returns") if isinstance(spec, dict) else None


def effect_err(e: BaseException, prefix: str = "") -> dict[str, Any]:
    if isinstance(e, EffectThrew):
        return {"error": "effect-failed", "message": prefix + str(e)}
    return err_json(e)


def probe_fns(probes: Any, is_async: bool) -> dict[str, Callable[[hf.IntentRow], Any]]:
    out: dict[str, Callable[[hf.IntentRow], Any]] = {}
    for channel, p in (probes or {}).items():

        def verdict(_intent: hf.IntentRow, p: Any = p) -> Any:
            if p == "not-sent":
                return {"status": "not-sent"}
            if isinstance(p, str):
                return {"status": "unknown"}
            if isinstance(p, dict):
                if "sent" in p:
                    return {"status": "sent", "external_ref": p["sent"]}
                raise RuntimeError(p["throws"] if isinstance(p.get("throws"), str) else "probe failed")
            return {"status": "unknown"}

        if is_async:

            async def averdict(intent: hf.IntentRow, verdict: Any = verdict) -> Any:
                await asyncio.sleep(0)
                return verdict(intent)

            out[channel] = averdict
        else:
            out[channel] = verdict
    return out


def _dicts(xs: list[Any]) -> list[dict[str, Any]]:
    return [x.to_dict() for x in xs]


async def replay(text: str, mode: str) -> dict[str, Any]:
    """Replays one scenario (JSON text) in ``mode``; returns the replay in the Rust runner's shape."""
    sc = json.loads(text)
    memory = hf.MemoryLeaseStore.from_scenario(text)
    from heart_fleet import _native  # the scenario's fleet configuration

    max_retries = json.loads(_native.scenario_config(text))["maxRetries"]
    is_async = mode.endswith("async") or mode.startswith("async")
    store: Any
    if mode.startswith("memory"):
        store = memory
    else:
        store = {
            "py-store": SyncObjStore,
            "py-text-store": SyncTextStore,
            "async-store": AsyncObjStore,
            "async-text-store": AsyncTextStore,
        }[mode](memory)
    heart = hf.HeartFleet(store, max_retries=max_retries)
    ledger = hf.MemoryEffectLedger()
    durable = hf.DurableEffectLedger(heart)
    fired: dict[str, int] = {}
    saved: dict[str, Any] = {}

    def fire(key: str) -> None:
        fired[key] = fired.get(key, 0) + 1

    def resolve(v: Any) -> Any:
        if isinstance(v, str) and v.startswith("$"):
            if v[1:] not in saved:
                raise RuntimeError(f"unknown variable {v}")
            return saved[v[1:]]
        if isinstance(v, list):
            return [resolve(x) for x in v]
        if isinstance(v, dict):
            return {k: resolve(x) for k, x in v.items()}
        return v

    async def call(name: str, *args: Any, **kwargs: Any) -> Any:
        """``heart.<name>`` or its ``_async`` twin, by mode."""
        if is_async:
            return await getattr(heart, name + "_async")(*args, **kwargs)
        return getattr(heart, name)(*args, **kwargs)

    async def try_json(f: Callable[[], Any]) -> Any:
        try:
            v = f()
            if asyncio.iscoroutine(v):
                v = await v
            return v
        except hf.HeartFleetError as e:
            return err_json(e)

    def to_d(v: Any) -> Any:
        return v.to_dict() if isinstance(v, hf.types.Record) else v

    async def run(op: str, a: dict[str, Any]) -> tuple[Any, Any]:
        if op == "advance":
            memory.advance(a.get("ms", 0))
            return None, None
        if op == "setClock":
            memory.set_now(a["at"])
            return None, None
        if op == "failNext":
            memory.fail_after(a["request"], a.get("after", 0), a.get("times", 1))
            return None, None
        if op == "acquire":
            v = to_d(await try_json(lambda: call("acquire", a.get("runId", ""), a.get("owner", ""), a.get("ttlSeconds", 0))))
            return v, v.get("fence")
        if op == "renew":
            v = to_d(await try_json(lambda: call("renew", a.get("fence"), a.get("ttlSeconds", 0))))
            return v, v
        if op == "release":
            return to_d(await try_json(lambda: call("release", a.get("fence"), a.get("nextStatus")))), None
        if op == "verifyFence":
            return await try_json(lambda: call("verify_fence", a.get("fence"))), None
        if op == "reclaimExpired":
            return to_d(await try_json(lambda: call("reclaim_expired", a.get("limit", 100)))), None
        if op == "guardIrreversible":
            key = a.get("effectKey", "")
            led = durable if a.get("ledger") == "durable" else ledger

            def effect(_ctx: hf.EffectContext) -> Any:
                fire(key)
                return effect_outcome(a.get("effect"))

            try:
                if is_async:

                    async def aeffect(ctx: hf.EffectContext) -> Any:
                        await asyncio.sleep(0)
                        return effect(ctx)

                    g = await hf.guard_irreversible_async(heart, a.get("fence"), led, key, aeffect)
                else:
                    g = hf.guard_irreversible(heart, a.get("fence"), led, key, effect)
                return g.to_dict(), None
            except Exception as e:  # noqa: BLE001
                return effect_err(e), None
        if op == "sendOnce":
            key = a.get("effectKey", "")

            def send(_ctx: hf.EffectContext) -> Any:
                fire(key)
                return effect_outcome(a.get("send"))

            try:
                kw = dict(fence=a.get("fence"), channel=a.get("channel"), effect_key=key, payload=a.get("payload"))
                if is_async:

                    async def asend(ctx: hf.EffectContext) -> Any:
                        await asyncio.sleep(0)
                        return send(ctx)

                    s = await hf.send_once_async(heart, durable, send=asend, **kw)
                else:
                    s = hf.send_once(heart, durable, send=send, **kw)
                return s.to_dict(), None
            except Exception as e:  # noqa: BLE001
                return effect_err(e, "send failed; the intent stays dispatched for the reconciler: "), None
        if op == "reconcileOutbox":
            probes = probe_fns(a.get("probes"), is_async)
            kw = dict(max_attempts=a.get("maxAttempts", 5), limit=a.get("limit", 50))
            if is_async:
                return to_d(await try_json(lambda: hf.reconcile_outbox_async(durable, probes, **kw))), None
            return to_d(await try_json(lambda: hf.reconcile_outbox(durable, probes, **kw))), None
        if op == "executeWithLease":
            return await execute(a), None
        if op == "registerInstance":
            return to_d(await try_json(lambda: call("register_instance", a.get("instanceId")))), None
        if op == "heartbeatInstance":
            return await try_json(lambda: call("heartbeat_instance", a.get("instanceId"))), None
        if op == "drainInstance":
            return await try_json(lambda: call("drain_instance", a.get("instanceId"))), None
        if op == "livenessSweep":
            v = await try_json(
                lambda: call("reclaim_dead_instance_runs", a.get("ttlMs", 90_000), a.get("limit", 200))
            )
            return to_d(v), None
        if op == "ensureResourceRun":
            v = to_d(
                await try_json(
                    lambda: call(
                        "ensure_resource_run",
                        a.get("kind"),
                        a.get("key"),
                        objective=a.get("objective"),
                        created_by=a.get("createdBy"),
                    )
                )
            )
            return v, (v.get("run") or {}).get("id")
        if op == "requeue":
            return to_d(await try_json(lambda: call("requeue_run", a.get("runId"), a.get("operator")))), None
        if op == "forceRelease":
            return to_d(await try_json(lambda: call("force_release", a.get("runId")))), None
        if op == "listRuns":
            v = await try_json(lambda: call("list_runs", a.get("status"), a.get("limit", 100)))
            return ([r.to_dict() for r in v] if isinstance(v, list) else v), None
        if op == "canonicalize":
            return await try_json(lambda: hf.canonicalize(parse_json(a.get("json")))), None
        if op == "digest":
            return await try_json(lambda: hf.digest(parse_json(a.get("json")))), None
        if op == "deterministicResourceId":
            return await try_json(lambda: hf.deterministic_resource_id(a.get("kind", ""), a.get("key", ""))), None
        if op == "effectKey":
            return await try_json(lambda: hf.effect_key(a.get("prefix", ""), a.get("identity"))), None
        if op == "verifyReceipt":
            return await try_json(lambda: hf.verify_receipt(a.get("receipt"))), None
        if op == "verifyReceipts":
            # The scenario's options in Python's keyword names (an unknown one stays as it is,
            # and is refused like a misspelt keyword).
            names = {"publicKey": "public_key", "finalSeq": "final_seq", "requireChain": "require_chain"}
            kwargs = {names.get(k, k): v for k, v in (a.get("options") or {}).items()}
            return to_d(await try_json(lambda: hf.verify_receipts(a.get("log"), **kwargs))), None
        if op == "expectFired":
            for k, n in a.items():
                got = fired.get(k, 0)
                if got != n:
                    raise AssertionError(f"fired[{k}]: expected {n}, got {got}")
            return None, None
        raise RuntimeError(f"unknown op {op} (this runner cannot run it)")

    def parse_json(text: Any) -> Any:
        try:
            return json.loads(text)
        except (TypeError, ValueError) as e:
            raise hf.InvalidInputError(f"invalid JSON: {e}") from None

    async def execute(a: dict[str, Any]) -> Any:
        work = a.get("work") or {}
        problem: list[str] = []

        def guard_in_work(lease: Any) -> None:
            g = work.get("guard")
            if not g:
                return
            key = g.get("effectKey", "")

            def eff(_ctx: hf.EffectContext) -> str:
                fire(key)
                return "fired"

            try:
                hf.guard_irreversible(heart, lease.fence, ledger, key, eff)
            except Exception as e:  # noqa: BLE001
                problem.append(f"the guard inside the work failed: {e}")

        async def aguard_in_work(lease: Any) -> None:
            g = work.get("guard")
            if not g:
                return
            key = g.get("effectKey", "")

            def eff(_ctx: hf.EffectContext) -> str:
                fire(key)
                return "fired"

            try:
                await hf.guard_irreversible_async(heart, lease.fence, ledger, key, eff)
            except Exception as e:  # noqa: BLE001
                problem.append(f"the guard inside the work failed: {e}")

        def body(lease: hf.Lease) -> Any:
            for beat in work.get("beats") or []:
                memory.advance(beat)
                lease.heartbeat()
            guard_in_work(lease)
            return effect_outcome(work)

        async def abody(lease: hf.AsyncLease) -> Any:
            for beat in work.get("beats") or []:
                memory.advance(beat)
                await lease.heartbeat()
            await aguard_in_work(lease)
            return effect_outcome(work)

        opts = dict(
            renew_every_ms=a.get("renewEveryMs"),
            release_to_ready=a.get("releaseToReady", False),
            clock=lambda: memory.now_ms(),
            auto_heartbeat=False,
        )
        try:
            if is_async:
                r = await hf.execute_with_lease_async(
                    heart, a.get("runId", ""), a.get("owner", ""), a.get("ttlSeconds", 0), abody, **opts
                )
            else:
                r = hf.execute_with_lease(heart, a.get("runId", ""), a.get("owner", ""), a.get("ttlSeconds", 0), body, **opts)
            v: Any = r.to_dict()
        except EffectThrew as e:
            v = {"threw": str(e)}
        except hf.HeartFleetError as e:
            v = err_json(e)
        if problem:
            raise AssertionError(problem[0])
        return v

    steps: list[dict[str, Any]] = []
    failure: str | None = None
    for n, step in enumerate(sc.get("steps") or []):
        op = step.get("op", "")
        try:
            result, saveable = await run(op, resolve(step.get("args") or {}))
        except Exception as e:  # noqa: BLE001 - the runner reports it
            failure = f"step {n} ({op}): {type(e).__name__}: {e}"
            break
        steps.append({"op": op, "result": result})
        if "expect" in step:
            try:
                matches(resolve(step["expect"]), result, f"step {n} ({op})")
            except AssertionError as e:
                failure = f"{e}\n  full result: {json.dumps(result, default=str)}"
                break
        if isinstance(step.get("save"), str):
            saved[step["save"]] = result if saveable is None and op not in ("acquire", "renew", "ensureResourceRun") else saveable
    out: dict[str, Any] = {
        "name": sc.get("name"),
        "steps": steps,
        "receipts": _dicts(heart.receipts()),
        "metrics": heart.metrics.to_dict(),
        "runs": _dicts(memory.runs()),
        "intents": _dicts(memory.intents()),
        "dispatch_log": _dicts(memory.dispatch_log()),
        "instances": _dicts(memory.instances()),
        "fired": fired,
        "failure": failure,
        "store_calls": None if mode.startswith("memory") else store.calls,
        "memory_requests": memory.request_count(),
    }
    if out["failure"] is None:
        try:
            check_final(sc, out)
        except AssertionError as e:
            out["failure"] = str(e)
    return out


def check_final(sc: dict[str, Any], r: dict[str, Any]) -> None:
    for n, receipt in enumerate(r["receipts"]):
        try:
            hf.verify_receipt(receipt)
        except hf.HeartFleetError as e:
            raise AssertionError(f"receipt {n} does not verify: {e}") from None
    expect = sc.get("expect")
    if not expect:
        return
    if "receipts" in expect:
        matches(expect["receipts"], r["receipts"], "receipts")
    if "metrics" in expect:
        matches(expect["metrics"], r["metrics"], "metrics")
    for w in expect.get("runs") or []:
        got = next((row for row in r["runs"] if row["id"] == w["id"]), None)
        matches(w, got, f"runs[{w['id']}]")
    if "intents" in expect:
        matches(expect["intents"], r["intents"], "intents")
    if "dispatchLog" in expect:
        matches(expect["dispatchLog"], r["dispatch_log"], "dispatchLog")
    if "instances" in expect:
        matches(expect["instances"], r["instances"], "instances")

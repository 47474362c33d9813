//! The conformance scenario runner, generic over the engine that runs the operations.
//!
//! The scenarios in `tests/conformance/` (format in its `README.md`) are replayed by
//! [`replay`]: it takes a scenario's JSON *text* and a constructor for an [`Engine`] (the
//! native [`HeartFleet`] over the memory store implements it here; the wasmtime host
//! implements it for the component), runs every step, matches every `expect`, and returns a
//! [`Replay`]: the result of every step, the receipts, the counters and the final rows. Two
//! engines are identical on a scenario when their replays are equal.
//!
//! Pure like the rest of the crate: no files, no clock. The callers read the files.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Value, json};

use crate::api::{FleetApi, LeaseWork};
use crate::canonical;
use crate::driver::{Ledger, MemoryEffectLedger};
use crate::error::HeartError;
use crate::fleet::{ExecuteOutcome, HeartFleet, LeaseContext, LeaseOptions};
use crate::machine::ProbeVerdict;
use crate::memory::MemoryStore;
use crate::model::{DispatchLogEntry, FencingToken, InstanceRow, IntentRow, RunRow, RunStatus};
use crate::ops::{
    DEFAULT_LIVENESS_LIMIT, DEFAULT_LIVENESS_TTL_MS, DEFAULT_RECONCILE_LIMIT, DEFAULT_RECONCILE_MAX_ATTEMPTS,
    DEFAULT_SWEEP_LIMIT, Fenced, FleetConfig, ReleaseTo,
};
use crate::receipt::verify_receipt;
use crate::time::Timestamp;

/// A value deserialized through its JSON text: the types are then read by the one
/// deserializer the stores' hot path compiles in (`from_value` would compile each a second
/// time into the .wasm).
fn from_json_text<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, serde_json::Error> {
    serde_json::from_str(&v.to_string())
}

/// The scenario format this runner understands.
pub const FORMAT: u64 = 1;

/// What the work of an `executeWithLease` step can do while it holds the lease: the lease
/// itself ([`LeaseWork`]) and the store's clock.
pub trait ScenarioWork: LeaseWork {
    /// Moves the store's clock by `ms` (a beat of the scenario).
    fn advance(&mut self, ms: i64);
}

/// The work of an `executeWithLease` step.
pub type WorkFn<'a> = dyn FnMut(&mut dyn ScenarioWork) -> Result<Value, String> + 'a;

/// Everything a scenario does to a fleet and its store: the fleet operations
/// ([`FleetApi`]), and the memory store's controls and snapshots. The canonical functions
/// default to the core's own.
pub trait Engine: FleetApi {
    /// The memory store the engine runs on (its clock, injected failures and rows).
    fn memory(&mut self) -> &mut MemoryStore;

    /// Moves the store's clock by `ms` (may be negative).
    fn advance(&mut self, ms: i64) {
        self.memory().advance(ms);
    }
    /// Sets the store's clock.
    fn set_clock(&mut self, at: Timestamp) {
        self.memory().set_now(at);
    }
    /// Lets `after` store requests named `request` (or `*`) through, then fails the next `times`.
    fn fail_after(&mut self, request: &str, after: u32, times: u32) {
        self.memory().fail_after(request, after, times);
    }
    /// `executeWithLease` with work that may move the store's clock.
    fn execute_scenario_work(
        &mut self,
        opts: &LeaseOptions,
        work: &mut WorkFn<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError>;

    /// `canonicalize` of JSON text.
    fn canonicalize(&mut self, json: &str) -> Result<String, HeartError> {
        canonical::canonicalize_json(json).map_err(|e| HeartError::invalid(e.to_string()))
    }
    /// The digest of JSON text.
    fn digest(&mut self, json: &str) -> Result<String, HeartError> {
        canonical::digest_json(json).map_err(|e| HeartError::invalid(e.to_string()))
    }
    /// `deterministicResourceId`.
    fn deterministic_resource_id(&mut self, kind: &str, key: &str) -> Result<String, HeartError> {
        canonical::deterministic_resource_id(kind, key).map_err(|e| HeartError::invalid(e.to_string()))
    }
    /// `effectKey`.
    fn effect_key(&mut self, prefix: &str, identity: &Value) -> Result<String, HeartError> {
        Ok(canonical::effect_key(prefix, identity))
    }
    /// `verifyReceipt`.
    fn verify_receipt(&mut self, receipt: &Value) -> Result<(), HeartError> {
        verify_receipt(receipt)
    }
    /// `verifyReceipts(log, options)`: the report as JSON (the core's
    /// [`crate::chain::verify_receipts_json`]; without the `chain` feature, `invalid-state`).
    fn verify_receipts(&mut self, log: &[u8], options: &str) -> Result<Value, HeartError> {
        #[cfg(feature = "chain")]
        {
            let text = crate::chain::verify_receipts_json(log, options)?;
            serde_json::from_str(&text).map_err(|e| HeartError::invalid(format!("the report: {e}")))
        }
        #[cfg(not(feature = "chain"))]
        {
            let _ = (log, options);
            Err(HeartError::new(
                crate::error::ErrorCode::InvalidState,
                "verifyReceipts is not in this build (the core's chain feature is off)",
            ))
        }
    }

    /// Every run, in insertion order.
    fn runs(&mut self) -> Vec<RunRow> {
        self.memory().runs().to_vec()
    }
    /// Every intent, by key.
    fn intents(&mut self) -> Vec<IntentRow> {
        self.memory().intents().cloned().collect()
    }
    /// The dispatch log, in order.
    fn dispatch_log(&mut self) -> Vec<DispatchLogEntry> {
        self.memory().dispatch_log().to_vec()
    }
    /// Every instance, by id.
    fn instances(&mut self) -> Vec<InstanceRow> {
        self.memory().instances().cloned().collect()
    }
}

/// One replayed step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepLog {
    /// The op.
    pub op: String,
    /// Its result in the scenario's JSON shape (`{"error": code, "message": …}` on an error).
    pub result: Value,
}

/// The outcome of a replay: what every step returned and the final state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replay {
    /// The scenario's name.
    pub name: String,
    /// The steps replayed, in order (up to and including the first that failed).
    pub steps: Vec<StepLog>,
    /// Every receipt, as JSON.
    pub receipts: Vec<Value>,
    /// The counters, as JSON.
    pub metrics: Value,
    /// Every run at the end.
    pub runs: Vec<Value>,
    /// Every intent at the end.
    pub intents: Vec<Value>,
    /// The dispatch log at the end.
    pub dispatch_log: Vec<Value>,
    /// Every instance at the end.
    pub instances: Vec<Value>,
    /// How often each effect really fired.
    pub fired: BTreeMap<String, u64>,
    /// The first mismatch, or `None` when the scenario passed.
    pub failure: Option<String>,
}

impl Replay {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }
}

/// Partial match: objects match on the keys `want` names, arrays elementwise with equal length.
pub fn matches(want: &Value, got: &Value, path: &str) -> Result<(), String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let gv = g.get(k).unwrap_or(&Value::Null);
                matches(wv, gv, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(w), Value::Array(g)) => {
            if w.len() != g.len() {
                return Err(format!("{path}: expected {} items, got {}: {}", w.len(), g.len(), got));
            }
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                matches(wv, gv, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => Ok(()),
        (w, g) if w == g => Ok(()),
        (w, g) => Err(format!("{path}: expected {w}, got {g}")),
    }
}

fn arg<'a>(args: &'a Value, k: &str) -> &'a Value {
    args.get(k).unwrap_or(&Value::Null)
}

fn s<'a>(args: &'a Value, k: &str) -> &'a str {
    arg(args, k).as_str().unwrap_or("")
}

fn i(args: &Value, k: &str, default: i64) -> i64 {
    arg(args, k).as_i64().unwrap_or(default)
}

fn u(args: &Value, k: &str, default: u32) -> u32 {
    u32::try_from(i(args, k, i64::from(default))).unwrap_or(default)
}

fn to_value<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn err_json(e: &HeartError) -> Value {
    json!({ "error": e.code.as_str(), "message": e.message })
}

fn fenced_to_json<T: Serialize>(r: Result<Fenced<T>, HeartError>) -> Value {
    match r {
        Ok(Fenced::Ok { value }) => to_value(&value),
        Ok(Fenced::Rejected { .. }) => Value::Null,
        Err(e) => err_json(&e),
    }
}

fn to_json<T: Serialize>(r: Result<T, HeartError>) -> Value {
    match r {
        Ok(v) => to_value(&v),
        Err(e) => err_json(&e),
    }
}

fn effect_outcome(spec: &Value) -> Result<Value, String> {
    match spec.get("throws").and_then(Value::as_str) {
        Some(msg) => Err(msg.to_owned()),
        None => Ok(spec.get("returns").cloned().unwrap_or(Value::Null)),
    }
}

fn probe_answer(probes: &Value, intent: &IntentRow) -> Option<Result<ProbeVerdict, String>> {
    let p = probes.get(&intent.channel)?;
    Some(match p {
        Value::String(t) if t == "not-sent" => Ok(ProbeVerdict::NotSent),
        Value::String(_) => Ok(ProbeVerdict::Unknown),
        Value::Object(m) => match m.get("sent") {
            Some(evidence) => Ok(ProbeVerdict::Sent(evidence.clone())),
            None => Err(m.get("throws").and_then(Value::as_str).unwrap_or("probe failed").to_owned()),
        },
        _ => Ok(ProbeVerdict::Unknown),
    })
}

struct Runner {
    saved: HashMap<String, Value>,
    ledger: MemoryEffectLedger,
    fired: BTreeMap<String, u64>,
}

impl Runner {
    fn resolve(&self, v: &Value) -> Result<Value, String> {
        Ok(match v {
            Value::String(t) if t.starts_with('$') => {
                self.saved.get(&t[1..]).cloned().ok_or_else(|| format!("unknown variable {t}"))?
            }
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| Ok((k.clone(), self.resolve(v)?))).collect::<Result<_, String>>()?)
            }
            Value::Array(a) => Value::Array(a.iter().map(|v| self.resolve(v)).collect::<Result<_, String>>()?),
            other => other.clone(),
        })
    }

    /// Runs one op: its result and the value a `save` keeps (the result when `None`).
    fn step<E: Engine>(&mut self, engine: &mut E, op: &str, args: &Value) -> Result<(Value, Option<Value>), String> {
        let fence = || -> Result<FencingToken, String> {
            serde_json::from_str(&arg(args, "fence").to_string()).map_err(|e| format!("args.fence is not a token: {e}"))
        };
        let out = match op {
            "advance" => {
                engine.advance(i(args, "ms", 0));
                Value::Null
            }
            "setClock" => {
                let at = Timestamp::parse_iso(s(args, "at")).map_err(|e| format!("setClock: {e}"))?;
                engine.set_clock(at);
                Value::Null
            }
            "failNext" => {
                engine.fail_after(s(args, "request"), u(args, "after", 0), u(args, "times", 1));
                Value::Null
            }
            "acquire" => {
                let v = to_json(engine.acquire(s(args, "runId"), s(args, "owner"), i(args, "ttlSeconds", 0)));
                let fence = v.get("fence").cloned();
                return Ok((v, fence));
            }
            "renew" => {
                let v = fenced_to_json(engine.renew(&fence()?, i(args, "ttlSeconds", 0)));
                return Ok((v.clone(), Some(v)));
            }
            "release" => {
                let to = match ReleaseTo::parse(s(args, "nextStatus")) {
                    Ok(t) => t,
                    Err(e) => return Ok((err_json(&e), None)),
                };
                fenced_to_json(engine.release(&fence()?, to))
            }
            "verifyFence" => to_json(engine.verify_fence(&fence()?)),
            "reclaimExpired" => to_json(engine.reclaim_expired(u(args, "limit", DEFAULT_SWEEP_LIMIT))),
            "guardIrreversible" => {
                let key = s(args, "effectKey").to_owned();
                let fence = fence()?;
                let ledger =
                    if s(args, "ledger") == "durable" { Ledger::Durable } else { Ledger::Memory(&mut self.ledger) };
                let spec = arg(args, "effect").clone();
                let fired = &mut self.fired;
                let mut effect = |_: Option<i64>| {
                    *fired.entry(key.clone()).or_default() += 1;
                    effect_outcome(&spec)
                };
                to_json(engine.guard_irreversible(&fence, ledger, &key, &mut effect))
            }
            "sendOnce" => {
                let key = s(args, "effectKey").to_owned();
                let spec = arg(args, "send").clone();
                let fired = &mut self.fired;
                let mut send = |_: Option<i64>| {
                    *fired.entry(key.clone()).or_default() += 1;
                    effect_outcome(&spec)
                };
                to_json(engine.send_once(&fence()?, s(args, "channel"), &key, arg(args, "payload"), &mut send))
            }
            "reconcileOutbox" => {
                let probes = arg(args, "probes").clone();
                let mut probe = |intent: &IntentRow| probe_answer(&probes, intent);
                to_json(engine.reconcile_outbox(
                    &mut probe,
                    i(args, "maxAttempts", DEFAULT_RECONCILE_MAX_ATTEMPTS),
                    u(args, "limit", DEFAULT_RECONCILE_LIMIT),
                ))
            }
            "executeWithLease" => return Ok((self.execute(engine, args)?, None)),
            "registerInstance" => to_json(engine.register_instance(s(args, "instanceId"), None, None)),
            "heartbeatInstance" => to_json(engine.heartbeat_instance(s(args, "instanceId"))),
            "drainInstance" => to_json(engine.drain_instance(s(args, "instanceId"))),
            "livenessSweep" => to_json(engine.reclaim_dead_instance_runs(
                i(args, "ttlMs", DEFAULT_LIVENESS_TTL_MS),
                u(args, "limit", DEFAULT_LIVENESS_LIMIT),
            )),
            "ensureResourceRun" => {
                let r = engine.ensure_resource_run(
                    s(args, "kind"),
                    s(args, "key"),
                    s(args, "objective"),
                    s(args, "createdBy"),
                );
                let v = to_json(r.map(|(run, created)| json!({ "run": run, "created": created })));
                let id = v.pointer("/run/id").cloned();
                return Ok((v, id));
            }
            "requeue" => to_json(engine.requeue_run(s(args, "runId"), s(args, "operator"))),
            "forceRelease" => to_json(engine.force_release(s(args, "runId"))),
            "listRuns" => match arg(args, "status").as_str().map(RunStatus::parse).transpose() {
                Ok(status) => to_json(engine.list_runs(status, u(args, "limit", 100))),
                Err(e) => err_json(&e),
            },
            "canonicalize" => match engine.canonicalize(s(args, "json")) {
                Ok(t) => Value::String(t),
                Err(e) => err_json(&e),
            },
            "digest" => match engine.digest(s(args, "json")) {
                Ok(t) => Value::String(t),
                Err(e) => err_json(&e),
            },
            "deterministicResourceId" => match engine.deterministic_resource_id(s(args, "kind"), s(args, "key")) {
                Ok(t) => Value::String(t),
                Err(e) => err_json(&e),
            },
            "effectKey" => match engine.effect_key(s(args, "prefix"), arg(args, "identity")) {
                Ok(t) => Value::String(t),
                Err(e) => err_json(&e),
            },
            "verifyReceipt" => match engine.verify_receipt(arg(args, "receipt")) {
                Ok(()) => Value::Bool(true),
                Err(e) => err_json(&e),
            },
            "verifyReceipts" => {
                // The log: JSON Lines text as it is, or receipts, one JSON line each.
                let log = match arg(args, "log") {
                    Value::String(text) => text.clone().into_bytes(),
                    Value::Array(items) => items.iter().map(|v| format!("{v}\n")).collect::<String>().into_bytes(),
                    other => return Err(format!("verifyReceipts: the log is text or an array, got {other}")),
                };
                match engine.verify_receipts(&log, &arg(args, "options").to_string()) {
                    Ok(report) => report,
                    Err(e) => err_json(&e),
                }
            }
            "expectFired" => {
                let want = args.as_object().ok_or("expectFired takes an object")?;
                for (k, n) in want {
                    let got = self.fired.get(k).copied().unwrap_or(0);
                    if Some(got) != n.as_u64() {
                        return Err(format!("fired[{k}]: expected {n}, got {got}"));
                    }
                }
                Value::Null
            }
            other => return Err(format!("unknown op {other} (this runner cannot run it)")),
        };
        Ok((out, None))
    }

    fn execute<E: Engine>(&mut self, engine: &mut E, args: &Value) -> Result<Value, String> {
        let opts = LeaseOptions {
            run_id: s(args, "runId").to_owned(),
            owner: s(args, "owner").to_owned(),
            ttl_seconds: i(args, "ttlSeconds", 0),
            renew_every_ms: arg(args, "renewEveryMs").as_i64(),
            release_to_ready: arg(args, "releaseToReady").as_bool().unwrap_or(false),
        };
        let work = arg(args, "work").clone();
        let ledger = &mut self.ledger;
        let fired = &mut self.fired;
        let mut problem: Option<String> = None;
        let mut body = |cx: &mut dyn ScenarioWork| -> Result<Value, String> {
            for beat in work.get("beats").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                cx.advance(beat.as_i64().unwrap_or(0));
                cx.heartbeat();
            }
            if let Some(g) = work.get("guard") {
                let key = g.get("effectKey").and_then(Value::as_str).unwrap_or("").to_owned();
                match cx.fence() {
                    Some(fence) => {
                        let mut effect = |_: Option<i64>| {
                            *fired.entry(key.clone()).or_default() += 1;
                            Ok(json!("fired"))
                        };
                        if let Err(e) = cx.fleet().guard_irreversible(&fence, Ledger::Memory(ledger), &key, &mut effect)
                        {
                            problem = Some(format!("the guard inside the work failed: {e}"));
                        }
                    }
                    None => problem = Some("the work holds no fence".into()),
                }
            }
            effect_outcome(&work)
        };
        let r = engine.execute_scenario_work(&opts, &mut body);
        if let Some(p) = problem {
            return Err(p);
        }
        Ok(match r {
            Ok(Ok(outcome)) => to_value(&outcome),
            Ok(Err(thrown)) => json!({ "threw": thrown }),
            Err(e) => err_json(&e),
        })
    }
}

fn build_run(partial: &Value, at: Timestamp) -> Result<RunRow, String> {
    let mut base = to_value(&RunRow::ready("x", "x", at));
    let obj = base.as_object_mut().ok_or("a run row serializes to an object")?;
    let fields = partial.as_object().ok_or("runs[] must be objects")?;
    for (k, v) in fields {
        obj.insert(k.clone(), v.clone());
    }
    if !partial.get("idempotency_key").is_some_and(Value::is_string) {
        let id = partial.get("id").and_then(Value::as_str).ok_or("runs[].id must be a string")?;
        obj.insert("idempotency_key".into(), json!(format!("key:{id}")));
    }
    from_json_text(&base).map_err(|e| format!("runs[]: {e}"))
}

/// The starting state of a scenario: its memory store (clock, runs, instances, intents)
/// and its fleet configuration. Engines that use another store copy the rows out of it.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The seeded memory store.
    pub store: MemoryStore,
    /// The fleet configuration (`config.maxRetries`, default 5, `null` = unlimited).
    pub config: FleetConfig,
}

/// Parses a scenario and seeds its store.
pub fn setup(sc: &Value) -> Result<Setup, String> {
    if sc.get("format").and_then(Value::as_u64) != Some(FORMAT) {
        return Err(format!("unsupported scenario format (this runner reads format {FORMAT})"));
    }
    let clock = sc.get("clock").and_then(Value::as_str).ok_or("clock")?;
    let t0 = Timestamp::parse_iso(clock).map_err(|e| e.to_string())?;
    let mut store = MemoryStore::new(t0);
    let list = |k: &str| sc.get(k).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for r in list("runs") {
        let row = build_run(r, t0)?;
        // insert() stamps created_at/updated_at with the clock: seed an explicit created_at
        // by moving the clock there for the insert.
        if let Some(c) = r.get("created_at").and_then(Value::as_str) {
            store.set_now(Timestamp::parse_iso(c).map_err(|e| e.to_string())?);
        }
        store.insert(row).map_err(|e| e.0)?;
        store.set_now(t0);
    }
    for inst in list("instances") {
        let mut base = json!({ "hostname": null, "pid": null, "status": "alive", "started_at": t0, "last_heartbeat": t0, "metadata": null });
        for (k, v) in inst.as_object().ok_or("instances[] must be objects")? {
            base[k] = v.clone();
        }
        store.insert_instance(from_json_text::<InstanceRow>(&base).map_err(|e| format!("instances[]: {e}"))?);
    }
    for intent in list("intents") {
        store.insert_intent(from_json_text(intent).map_err(|e| format!("intents[]: {e}"))?);
    }
    let max_retries = match sc.pointer("/config/maxRetries") {
        None => FleetConfig::default().max_retries,
        Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or("config.maxRetries")?),
    };
    Ok(Setup { store, config: FleetConfig { max_retries } })
}

/// Replays one scenario (its JSON text) on the engine `new_engine` builds from the
/// scenario's [`Setup`]. `Err` when the scenario cannot be read or the engine not built;
/// otherwise the [`Replay`], whose `failure` names the first expectation that did not hold.
pub fn replay<E: Engine>(
    scenario: &str,
    new_engine: impl FnOnce(Setup) -> Result<E, String>,
) -> Result<Replay, String> {
    let sc: Value = serde_json::from_str(scenario).map_err(|e| format!("bad JSON: {e}"))?;
    let name = sc.get("name").and_then(Value::as_str).ok_or("name")?.to_owned();
    let steps = sc.get("steps").and_then(Value::as_array).ok_or("steps")?;
    let mut engine = new_engine(setup(&sc)?)?;
    let mut runner = Runner { saved: HashMap::new(), ledger: MemoryEffectLedger::default(), fired: BTreeMap::new() };
    let mut log = Vec::with_capacity(steps.len());
    let mut failure = None;
    for (n, step) in steps.iter().enumerate() {
        let op = step.get("op").and_then(Value::as_str).unwrap_or("");
        let outcome = runner
            .resolve(step.get("args").unwrap_or(&Value::Null))
            .and_then(|args| runner.step(&mut engine, op, &args));
        let (result, saveable) = match outcome {
            Ok(r) => r,
            Err(e) => {
                failure = Some(format!("step {n} ({op}): {e}"));
                break;
            }
        };
        log.push(StepLog { op: op.to_owned(), result: result.clone() });
        let checked = step.get("expect").map(|w| runner.resolve(w)).transpose().and_then(|want| match want {
            Some(want) => matches(&want, &result, &format!("step {n} ({op})"))
                .map_err(|e| format!("{e}\n  full result: {result}")),
            None => Ok(()),
        });
        if let Err(e) = checked {
            failure = Some(e);
            break;
        }
        if let Some(name) = step.get("save").and_then(Value::as_str) {
            runner.saved.insert(name.to_owned(), saveable.unwrap_or(result));
        }
    }
    let mut replay = Replay {
        name,
        steps: log,
        receipts: engine.receipts().iter().map(to_value).collect(),
        metrics: to_value(&engine.metrics()),
        runs: engine.runs().iter().map(to_value).collect(),
        intents: engine.intents().iter().map(to_value).collect(),
        dispatch_log: engine.dispatch_log().iter().map(to_value).collect(),
        instances: engine.instances().iter().map(to_value).collect(),
        fired: runner.fired,
        failure,
    };
    if replay.failure.is_none() {
        replay.failure = check_final(&sc, &replay).err();
    }
    Ok(replay)
}

fn check_final(sc: &Value, r: &Replay) -> Result<(), String> {
    for (n, receipt) in r.receipts.iter().enumerate() {
        verify_receipt(receipt).map_err(|e| format!("receipt {n} does not verify: {e}"))?;
    }
    let Some(expect) = sc.get("expect") else {
        return Ok(());
    };
    if let Some(want) = expect.get("receipts") {
        let got = Value::Array(r.receipts.clone());
        matches(want, &got, "receipts").map_err(|e| format!("{e}\n  receipts: {got}"))?;
    }
    if let Some(want) = expect.get("metrics") {
        matches(want, &r.metrics, "metrics")?;
    }
    if let Some(want) = expect.get("runs").and_then(Value::as_array) {
        for w in want {
            let id = w.get("id").and_then(Value::as_str).ok_or("expect.runs[].id")?;
            let got = r.runs.iter().find(|row| row.get("id").and_then(Value::as_str) == Some(id));
            matches(w, got.unwrap_or(&Value::Null), &format!("runs[{id}]"))?;
        }
    }
    if let Some(want) = expect.get("intents") {
        matches(want, &Value::Array(r.intents.clone()), "intents")?;
    }
    if let Some(want) = expect.get("dispatchLog") {
        matches(want, &Value::Array(r.dispatch_log.clone()), "dispatchLog")?;
    }
    if let Some(want) = expect.get("instances") {
        matches(want, &Value::Array(r.instances.clone()), "instances")?;
    }
    Ok(())
}

/// The native engine: [`HeartFleet`] over the memory store.
impl Engine for HeartFleet<MemoryStore> {
    fn memory(&mut self) -> &mut MemoryStore {
        self.store_mut()
    }
    fn execute_scenario_work(
        &mut self,
        opts: &LeaseOptions,
        work: &mut WorkFn<'_>,
    ) -> Result<Result<ExecuteOutcome<Value>, String>, HeartError> {
        HeartFleet::execute_with_lease(self, opts, |cx| work(cx))
    }
}

impl ScenarioWork for LeaseContext<'_, MemoryStore> {
    fn advance(&mut self, ms: i64) {
        self.fleet().store_mut().advance(ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(setup: Setup) -> Result<HeartFleet<MemoryStore>, String> {
        Ok(HeartFleet::new(setup.store).with_max_retries(setup.config.max_retries))
    }

    fn scenario(steps: Value, expect: Value) -> String {
        json!({
            "format": 1,
            "name": "unit",
            "clock": "2026-07-30T00:00:00.000Z",
            "runs": [{ "id": "R1" }],
            "steps": steps,
            "expect": expect,
        })
        .to_string()
    }

    #[test]
    fn a_passing_scenario_logs_every_step_and_the_final_state() {
        let text = scenario(
            json!([
                { "op": "acquire", "args": { "runId": "R1", "owner": "w", "ttlSeconds": 60 }, "save": "f",
                  "expect": { "acquired": true } },
                { "op": "release", "args": { "fence": "$f", "nextStatus": "completed" }, "expect": { "status": "completed" } },
            ]),
            json!({ "metrics": { "acquireWins": 1, "releases": 1 }, "runs": [{ "id": "R1", "status": "completed" }] }),
        );
        let r = replay(&text, native).unwrap();
        assert!(r.passed(), "{:?}", r.failure);
        assert_eq!(r.steps.len(), 2);
        assert_eq!(r.receipts.len(), 2);
        assert_eq!(r.metrics["acquireWins"], 1);
    }

    #[test]
    fn a_wrong_expectation_an_unknown_op_and_an_unknown_variable_fail_by_name() {
        let wrong = scenario(
            json!([{ "op": "acquire", "args": { "runId": "R1", "owner": "w", "ttlSeconds": 60 }, "expect": { "acquired": false } }]),
            json!({}),
        );
        let r = replay(&wrong, native).unwrap();
        assert!(
            r.failure.as_deref().is_some_and(|f| f.contains("step 0 (acquire).acquired: expected false, got true")),
            "{:?}",
            r.failure
        );
        let unknown = scenario(json!([{ "op": "teleport" }]), json!({}));
        assert!(replay(&unknown, native).unwrap().failure.unwrap().contains("unknown op teleport"));
        let var = scenario(json!([{ "op": "verifyFence", "args": { "fence": "$nope" } }]), json!({}));
        assert!(replay(&var, native).unwrap().failure.unwrap().contains("unknown variable $nope"));
        let final_state = scenario(json!([]), json!({ "runs": [{ "id": "R1", "status": "leased" }] }));
        assert!(replay(&final_state, native).unwrap().failure.unwrap().contains("runs[R1].status"));
        assert!(replay("{\"format\": 2, \"name\": \"x\", \"steps\": []}", native).is_err());
    }
}

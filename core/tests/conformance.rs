//! Replays every scenario in `tests/conformance/` against the core on the memory store.
//! The format is documented in `tests/conformance/README.md`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use heart_fleet_core::driver::MemoryEffectLedger;
use heart_fleet_core::fleet::LeaseOptions;
use heart_fleet_core::ops::{
    DEFAULT_LIVENESS_LIMIT, DEFAULT_LIVENESS_TTL_MS, DEFAULT_RECONCILE_LIMIT, DEFAULT_RECONCILE_MAX_ATTEMPTS,
    DEFAULT_SWEEP_LIMIT, Fenced, ReleaseTo,
};
use heart_fleet_core::{
    FencingToken, HeartError, HeartFleet, InstanceRow, IntentRow, Ledger, MemoryStore, ProbeVerdict, RunRow, RunStatus,
    Timestamp, canonical, verify_receipt,
};
use serde_json::{Map, Value, json};

fn scenario_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

/// Partial match: objects match on the keys `want` names, arrays elementwise with equal length.
fn matches(want: &Value, got: &Value, path: &str) -> Result<(), String> {
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

struct Run {
    fleet: HeartFleet<MemoryStore>,
    saved: HashMap<String, Value>,
    ledger: MemoryEffectLedger,
    fired: BTreeMap<String, u64>,
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

fn err_json(e: &HeartError) -> Value {
    json!({ "error": e.code.as_str(), "message": e.message })
}

fn fenced_to_json<T: serde::Serialize>(r: Result<Fenced<T>, HeartError>) -> Value {
    match r {
        Ok(Fenced::Ok { value }) => serde_json::to_value(value).unwrap(),
        Ok(Fenced::Rejected { .. }) => Value::Null,
        Err(e) => err_json(&e),
    }
}

fn to_json<T: serde::Serialize>(r: Result<T, HeartError>) -> Value {
    match r {
        Ok(v) => serde_json::to_value(v).unwrap(),
        Err(e) => err_json(&e),
    }
}

fn effect_outcome(spec: &Value) -> Result<Value, String> {
    match spec.get("throws").and_then(Value::as_str) {
        Some(msg) => Err(msg.to_owned()),
        None => Ok(spec.get("returns").cloned().unwrap_or(Value::Null)),
    }
}

impl Run {
    fn resolve(&self, v: &Value) -> Value {
        match v {
            Value::String(t) if t.starts_with('$') => {
                self.saved.get(&t[1..]).cloned().unwrap_or_else(|| panic!("unknown variable {t}"))
            }
            Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), self.resolve(v))).collect()),
            Value::Array(a) => Value::Array(a.iter().map(|v| self.resolve(v)).collect()),
            other => other.clone(),
        }
    }

    fn step(&mut self, op: &str, args: &Value) -> (Value, Option<Value>) {
        let fleet = &mut self.fleet;
        let fence =
            || -> FencingToken { serde_json::from_value(arg(args, "fence").clone()).expect("args.fence is a token") };
        let out = match op {
            "advance" => {
                fleet.store_mut().advance(i(args, "ms", 0));
                Value::Null
            }
            "setClock" => {
                fleet.store_mut().set_now(Timestamp::parse_iso(s(args, "at")).unwrap());
                Value::Null
            }
            "failNext" => {
                fleet.store_mut().fail_after(
                    s(args, "request"),
                    i(args, "after", 0) as u32,
                    i(args, "times", 1) as u32,
                );
                Value::Null
            }
            "acquire" => {
                let ttl = i(args, "ttlSeconds", 0);
                let r = fleet.acquire(s(args, "runId"), s(args, "owner"), ttl);
                let v = to_json(r);
                return (v.clone(), v.get("fence").cloned());
            }
            "renew" => {
                let v = fenced_to_json(fleet.renew(&fence(), i(args, "ttlSeconds", 0)));
                return (v.clone(), Some(v));
            }
            "release" => {
                let to = match ReleaseTo::parse(s(args, "nextStatus")) {
                    Ok(t) => t,
                    Err(e) => return (err_json(&e), None),
                };
                fenced_to_json(fleet.release(&fence(), to))
            }
            "verifyFence" => to_json(fleet.verify_fence(&fence())),
            "reclaimExpired" => to_json(fleet.reclaim_expired(i(args, "limit", DEFAULT_SWEEP_LIMIT.into()) as u32)),
            "guardIrreversible" => {
                let key = s(args, "effectKey").to_owned();
                let fence = fence();
                let ledger =
                    if s(args, "ledger") == "durable" { Ledger::Durable } else { Ledger::Memory(&mut self.ledger) };
                let spec = arg(args, "effect").clone();
                let fired = &mut self.fired;
                let r = fleet.guard_irreversible(&fence, ledger, &key, |_| {
                    *fired.entry(key.clone()).or_default() += 1;
                    effect_outcome(&spec)
                });
                to_json(r)
            }
            "sendOnce" => {
                let key = s(args, "effectKey").to_owned();
                let spec = arg(args, "send").clone();
                let fired = &mut self.fired;
                let r = fleet.send_once(&fence(), s(args, "channel"), &key, arg(args, "payload"), |_| {
                    *fired.entry(key.clone()).or_default() += 1;
                    effect_outcome(&spec)
                });
                to_json(r)
            }
            "reconcileOutbox" => {
                let probes = arg(args, "probes").clone();
                let mut probe = |intent: &IntentRow| -> Option<Result<ProbeVerdict, String>> {
                    let p = probes.get(&intent.channel)?;
                    Some(match p {
                        Value::String(t) if t == "not-sent" => Ok(ProbeVerdict::NotSent),
                        Value::String(_) => Ok(ProbeVerdict::Unknown),
                        Value::Object(m) if m.contains_key("sent") => Ok(ProbeVerdict::Sent(m["sent"].clone())),
                        Value::Object(m) => {
                            Err(m.get("throws").and_then(Value::as_str).unwrap_or("probe failed").to_owned())
                        }
                        _ => Ok(ProbeVerdict::Unknown),
                    })
                };
                let r = fleet.reconcile_outbox(
                    &mut probe,
                    i(args, "maxAttempts", DEFAULT_RECONCILE_MAX_ATTEMPTS),
                    i(args, "limit", DEFAULT_RECONCILE_LIMIT.into()) as u32,
                );
                to_json(r)
            }
            "executeWithLease" => return (self.execute(args), None),
            "registerInstance" => to_json(fleet.register_instance(s(args, "instanceId"), None, None)),
            "heartbeatInstance" => to_json(fleet.heartbeat_instance(s(args, "instanceId"))),
            "drainInstance" => to_json(fleet.drain_instance(s(args, "instanceId"))),
            "livenessSweep" => to_json(fleet.reclaim_dead_instance_runs(
                i(args, "ttlMs", DEFAULT_LIVENESS_TTL_MS),
                i(args, "limit", DEFAULT_LIVENESS_LIMIT.into()) as u32,
            )),
            "ensureResourceRun" => {
                let r = fleet.ensure_resource_run(
                    s(args, "kind"),
                    s(args, "key"),
                    s(args, "objective"),
                    s(args, "createdBy"),
                );
                let v = to_json(r.map(|(run, created)| json!({ "run": run, "created": created })));
                return (v.clone(), v.pointer("/run/id").cloned());
            }
            "requeue" => to_json(fleet.requeue_run(s(args, "runId"), s(args, "operator"))),
            "forceRelease" => to_json(fleet.force_release(s(args, "runId"))),
            "listRuns" => {
                let status = arg(args, "status").as_str().map(|t| RunStatus::parse(t).unwrap());
                to_json(fleet.list_runs(status, i(args, "limit", 100) as u32))
            }
            "canonicalize" => match canonical::canonicalize_json(s(args, "json")) {
                Ok(t) => Value::String(t),
                Err(e) => json!({ "error": "invalid-input", "message": e.to_string() }),
            },
            "digest" => match canonical::digest_json(s(args, "json")) {
                Ok(t) => Value::String(t),
                Err(e) => json!({ "error": "invalid-input", "message": e.to_string() }),
            },
            "deterministicResourceId" => match canonical::deterministic_resource_id(s(args, "kind"), s(args, "key")) {
                Ok(t) => Value::String(t),
                Err(e) => json!({ "error": "invalid-input", "message": e.to_string() }),
            },
            "effectKey" => Value::String(canonical::effect_key(s(args, "prefix"), arg(args, "identity"))),
            "verifyReceipt" => match verify_receipt(arg(args, "receipt")) {
                Ok(()) => Value::Bool(true),
                Err(e) => err_json(&e),
            },
            "expectFired" => {
                let want = args.as_object().expect("expectFired takes an object");
                for (k, n) in want {
                    assert_eq!(self.fired.get(k).copied().unwrap_or(0), n.as_u64().unwrap(), "fired[{k}]");
                }
                Value::Null
            }
            other => panic!("unknown op {other}"),
        };
        (out, None)
    }

    fn execute(&mut self, args: &Value) -> Value {
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
        let r = self.fleet.execute_with_lease(&opts, |cx| -> Result<Value, String> {
            for beat in work.get("beats").and_then(Value::as_array).cloned().unwrap_or_default() {
                cx.fleet().store_mut().advance(beat.as_i64().unwrap());
                cx.heartbeat();
            }
            if let Some(g) = work.get("guard") {
                let key = g["effectKey"].as_str().unwrap().to_owned();
                let fence = cx.fence().cloned().unwrap();
                let out = cx.fleet().guard_irreversible(&fence, Ledger::Memory(ledger), &key, |_| {
                    *fired.entry(key.clone()).or_default() += 1;
                    Ok(json!("fired"))
                });
                assert!(out.is_ok());
            }
            match work.get("throws").and_then(Value::as_str) {
                Some(msg) => Err(msg.to_owned()),
                None => Ok(work.get("returns").cloned().unwrap_or(Value::Null)),
            }
        });
        match r {
            Ok(Ok(outcome)) => serde_json::to_value(outcome).unwrap(),
            Ok(Err(thrown)) => json!({ "threw": thrown }),
            Err(e) => err_json(&e),
        }
    }
}

fn build_run(partial: &Value, at: Timestamp) -> RunRow {
    let mut base = serde_json::to_value(RunRow::ready("x", "x", at)).unwrap();
    let obj = base.as_object_mut().unwrap();
    for (k, v) in partial.as_object().expect("run is an object") {
        obj.insert(k.clone(), v.clone());
    }
    if !partial.get("idempotency_key").is_some_and(Value::is_string) {
        obj.insert("idempotency_key".into(), json!(format!("key:{}", partial["id"].as_str().unwrap())));
    }
    serde_json::from_value(base).unwrap()
}

fn replay(path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let sc: Value = serde_json::from_str(&text).map_err(|e| format!("bad JSON: {e}"))?;
    assert_eq!(sc["format"], 1, "format version");
    let name = sc["name"].as_str().ok_or("name")?;
    assert_eq!(path.file_stem().unwrap().to_str().unwrap(), name, "file name = scenario name");
    let t0 = Timestamp::parse_iso(sc["clock"].as_str().ok_or("clock")?).map_err(|e| e.to_string())?;
    let mut store = MemoryStore::new(t0);
    for r in sc["runs"].as_array().cloned().unwrap_or_default() {
        let created = r.get("created_at").and_then(Value::as_str).map(|t| Timestamp::parse_iso(t).unwrap());
        let row = build_run(&r, t0);
        if let Some(c) = created {
            store.set_now(c);
        }
        store.insert(row).map_err(|e| e.0)?;
        store.set_now(t0);
        // insert() stamps created_at/updated_at with the clock; re-apply explicit fields.
    }
    for inst in sc["instances"].as_array().cloned().unwrap_or_default() {
        let mut base = json!({ "hostname": null, "pid": null, "status": "alive", "started_at": t0, "last_heartbeat": t0, "metadata": null });
        for (k, v) in inst.as_object().unwrap() {
            base[k] = v.clone();
        }
        store.insert_instance(serde_json::from_value::<InstanceRow>(base).map_err(|e| e.to_string())?);
    }
    for intent in sc["intents"].as_array().cloned().unwrap_or_default() {
        store.insert_intent(serde_json::from_value(intent).map_err(|e| e.to_string())?);
    }
    let max_retries = match sc.pointer("/config/maxRetries") {
        None => Some(5),
        Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or("maxRetries")? as u32),
    };
    let fleet = HeartFleet::new(store).with_max_retries(max_retries);
    let mut run = Run { fleet, saved: HashMap::new(), ledger: MemoryEffectLedger::default(), fired: BTreeMap::new() };
    for (n, step) in sc["steps"].as_array().ok_or("steps")?.iter().enumerate() {
        let op = step["op"].as_str().ok_or("op")?;
        let args = run.resolve(step.get("args").unwrap_or(&Value::Null));
        let (result, saveable) = run.step(op, &args);
        if let Some(want) = step.get("expect").map(|w| run.resolve(w)) {
            matches(&want, &result, &format!("step {n} ({op})"))
                .map_err(|e| format!("{e}\n  full result: {result}"))?;
        }
        if let Some(name) = step.get("save").and_then(Value::as_str) {
            run.saved.insert(name.to_owned(), saveable.unwrap_or(result));
        }
    }
    let receipts: Vec<Value> = run.fleet.receipts().iter().map(|r| serde_json::to_value(r).unwrap()).collect();
    for (n, r) in receipts.iter().enumerate() {
        verify_receipt(r).map_err(|e| format!("receipt {n} does not verify: {e}"))?;
    }
    let expect = &sc["expect"];
    if let Some(want) = expect.get("receipts") {
        matches(want, &Value::Array(receipts.clone()), "receipts")
            .map_err(|e| format!("{e}\n  receipts: {}", Value::Array(receipts.clone())))?;
    }
    if let Some(want) = expect.get("metrics") {
        matches(want, &serde_json::to_value(run.fleet.metrics()).unwrap(), "metrics")?;
    }
    let store = run.fleet.store();
    if let Some(want) = expect.get("runs").and_then(Value::as_array) {
        for w in want {
            let id = w["id"].as_str().ok_or("expect.runs[].id")?;
            let got = store.run(id).map(|r| serde_json::to_value(r).unwrap()).unwrap_or(Value::Null);
            matches(w, &got, &format!("runs[{id}]"))?;
        }
    }
    if let Some(want) = expect.get("intents") {
        let got: Vec<Value> = store.intents().map(|r| serde_json::to_value(r).unwrap()).collect();
        matches(want, &Value::Array(got), "intents")?;
    }
    if let Some(want) = expect.get("dispatchLog") {
        let got: Vec<Value> = store.dispatch_log().iter().map(|r| serde_json::to_value(r).unwrap()).collect();
        matches(want, &Value::Array(got), "dispatchLog")?;
    }
    if let Some(want) = expect.get("instances") {
        let got: Vec<Value> = store.instances().map(|r| serde_json::to_value(r).unwrap()).collect();
        matches(want, &Value::Array(got), "instances")?;
    }
    let _ = Map::<String, Value>::new();
    Ok(())
}

#[test]
fn every_conformance_scenario_replays() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(scenario_dir())
        .expect("tests/conformance exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 40, "expected the full scenario set, found {}", paths.len());
    let mut failures = Vec::new();
    for p in &paths {
        if let Err(e) = replay(p) {
            failures.push(format!("{}: {e}", p.file_name().unwrap().to_string_lossy()));
        }
    }
    println!("replayed {} scenarios, {} failed", paths.len(), failures.len());
    assert!(failures.is_empty(), "{} scenario(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}

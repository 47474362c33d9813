//! The component against the native crate: every conformance scenario replays through
//! `ComponentFleet<MemoryStore>` and through `HeartFleet<MemoryStore>`, and the two replays
//! (every step's result, the receipts, the counters, the final rows) must be identical.
//! Plus trap containment, fuel, the import allowlist and the effect hooks.
//!
//! Needs the component: `cargo run -p xtask -- component` (or `$HEART_FLEET_COMPONENT`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::OnceLock;

use heart_fleet_core::conformance::{self, Setup};
use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::{
    ErrorCode, HeartFleet, LeaseStore, Ledger, MemoryEffectLedger, MemoryStore, RunRow, RunStatus, StoreAnswer,
    StoreError, StoreReply, StoreRequest, Timestamp,
};
use heart_fleet_wasmtime_host::{ComponentFleet, FleetComponent};
use serde_json::json;

/// Compiled once per test process (cranelift in a debug host takes over a second).
fn component() -> &'static FleetComponent {
    static COMPONENT: OnceLock<FleetComponent> = OnceLock::new();
    COMPONENT.get_or_init(|| match FleetComponent::locate() {
        Ok(c) => c,
        Err(e) => panic!("{e}\n(build it first: cargo run -p xtask -- component)"),
    })
}

fn scenario_paths() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("tests/conformance exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
}

fn native(setup: Setup) -> Result<HeartFleet<MemoryStore>, String> {
    Ok(HeartFleet::new(setup.store).with_max_retries(setup.config.max_retries))
}

#[test]
fn every_scenario_replays_through_the_component_identically_to_the_native_crate() {
    let component = component();
    let paths = scenario_paths();
    assert!(paths.len() >= 40, "expected the full scenario set, found {}", paths.len());
    let (mut failures, mut steps, mut executes) = (Vec::new(), 0, 0);
    for p in &paths {
        let file = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(p).unwrap();
        let want = conformance::replay(&text, native).unwrap_or_else(|e| panic!("{file}: native: {e}"));
        let got = conformance::replay(&text, |s| heart_fleet_wasmtime_host::conformance::engine(component, s))
            .unwrap_or_else(|e| panic!("{file}: component: {e}"));
        if let Some(f) = &got.failure {
            failures.push(format!("{file}: the component fails the scenario: {f}"));
        }
        if let Some(f) = &want.failure {
            failures.push(format!("{file}: the native crate fails the scenario: {f}"));
        }
        for (n, (w, g)) in want.steps.iter().zip(&got.steps).enumerate() {
            if w != g {
                failures.push(format!(
                    "{file}: step {n} ({}) differs:\n  native:    {}\n  component: {}",
                    w.op, w.result, g.result
                ));
            }
        }
        let parts = [
            ("steps", json!(want.steps.len()), json!(got.steps.len())),
            ("receipts", json!(want.receipts), json!(got.receipts)),
            ("metrics", want.metrics.clone(), got.metrics.clone()),
            ("runs", json!(want.runs), json!(got.runs)),
            ("intents", json!(want.intents), json!(got.intents)),
            ("dispatchLog", json!(want.dispatch_log), json!(got.dispatch_log)),
            ("instances", json!(want.instances), json!(got.instances)),
            ("fired", json!(want.fired), json!(got.fired)),
        ];
        for (what, w, g) in parts {
            if w != g {
                failures.push(format!("{file}: {what} differ:\n  native:    {w}\n  component: {g}"));
            }
        }
        assert_eq!(want, got, "{file}: the replays differ");
        steps += got.steps.len();
        executes += got.steps.iter().filter(|s| s.op == "executeWithLease").count();
    }
    println!(
        "replayed {} scenarios ({steps} steps, {executes} executeWithLease) through the component: {} failed, \
         every result identical to the native crate",
        paths.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n\n"));
}

fn seeded() -> MemoryStore {
    let t0 = Timestamp::parse_iso("2026-07-30T00:00:00.000Z").unwrap();
    let mut store = MemoryStore::new(t0);
    store.insert(RunRow::ready("run-1", "job:1", t0)).unwrap();
    store.insert(RunRow::ready("run-2", "job:2", t0)).unwrap();
    store
}

#[test]
fn the_component_imports_only_heart_fleet_interfaces() {
    let imports = component().imports();
    assert!(!imports.is_empty());
    for name in &imports {
        assert!(name.starts_with("heart:fleet/"), "unexpected import {name}");
    }
    let exports = component().exports();
    assert!(exports.iter().any(|e| e.starts_with("heart:fleet/fleet@")), "{exports:?}");
    assert!(exports.iter().any(|e| e.starts_with("heart:fleet/canonical@")), "{exports:?}");
}

#[test]
fn bytes_that_are_not_a_component_are_an_error_not_a_panic() {
    let e = FleetComponent::from_bytes(b"\0asm\x01\0\0\0").unwrap_err();
    assert_eq!(e.code, ErrorCode::StoreProtocol);
    let e = FleetComponent::from_file(std::path::Path::new("/nonexistent/heart_fleet.wasm")).unwrap_err();
    assert!(e.message.contains("xtask"), "{e}");
}

#[test]
fn a_trap_is_contained_the_instance_discarded_and_the_next_call_works() {
    let mut heart = ComponentFleet::new(component(), seeded()).unwrap();
    let acq = heart.acquire("run-1", "worker-A", 60).unwrap();
    assert!(acq.acquired);
    assert_eq!(heart.metrics().acquire_wins, 1);
    assert_eq!(heart.receipts().len(), 1);

    // Starve the guest of fuel: the call traps inside the component.
    heart.set_fuel_per_call(1_000);
    let e = heart.acquire("run-2", "worker-A", 60).unwrap_err();
    assert_eq!(e.code, ErrorCode::StoreProtocol, "{e}");
    assert!(e.message.contains("trapped"), "{e}");
    assert_eq!(heart.discarded_instances(), 1);
    // The Rust store moved on to the fresh wasmtime store with every acknowledged write.
    assert_eq!(heart.store().run("run-1").unwrap().lease_owner.as_deref(), Some("worker-A"));

    // A fresh instance serves the next call; counters and receipts carry over.
    heart.set_fuel_per_call(heart_fleet_wasmtime_host::DEFAULT_FUEL_PER_CALL);
    let fence = acq.fence.unwrap();
    assert!(heart.verify_fence(&fence).unwrap());
    assert_eq!(heart.metrics().acquire_wins, 1);
    assert_eq!(heart.metrics().fence_verifications, 1);
    assert_eq!(heart.receipts().len(), 2);
    assert!(matches!(heart.release(&fence, ReleaseTo::Completed).unwrap(), Fenced::Ok { .. }));
}

#[test]
fn store_failures_are_results_naming_the_step_not_traps() {
    let mut heart = ComponentFleet::new(component(), seeded()).unwrap();
    heart.store_mut().fail_next("update_run", 1);
    let e = heart.acquire("run-1", "worker-A", 60).unwrap_err();
    assert_eq!(e.code, ErrorCode::StoreUnavailable);
    assert_eq!(e.message, "store failed at acquire: conditional write: injected failure on update_run");
    assert_eq!(heart.discarded_instances(), 0);
    assert!(heart.acquire("run-1", "worker-A", 60).unwrap().acquired);
}

/// The memory store, answering every scan with a first row whose `created_at` lies past year
/// 9999 (which no store can hold): a store answer the component must refuse.
struct FarFutureScans(MemoryStore);

impl LeaseStore for FarFutureScans {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let mut answer = self.0.execute(req)?;
        if let StoreReply::Runs { runs } = &mut answer.reply
            && let Some(first) = runs.first_mut()
        {
            first.created_at = Timestamp(i64::MAX);
        }
        Ok(answer)
    }
}

#[test]
fn a_store_answer_out_of_range_is_store_protocol_and_the_operation_writes_nothing() {
    let mut store = seeded();
    let t0 = store.now();
    let mut expired = RunRow::ready("run-3", "job:3", t0);
    expired.status = RunStatus::Leased;
    expired.lease_owner = Some("worker-gone".into());
    expired.lease_expires_at = Some(Timestamp(t0.0 - 1));
    store.insert(expired.clone()).unwrap();
    let mut heart = ComponentFleet::new(component(), FarFutureScans(store)).unwrap();
    let e = heart.reclaim_expired(10).unwrap_err();
    assert_eq!(e.code, ErrorCode::StoreProtocol, "{e}");
    assert!(e.message.contains("created_at is 9223372036854775807 ms, outside years 0000-9999"), "{e}");
    // The sweep stopped at its scan: the expired lease was not reclaimed, nothing was emitted.
    assert_eq!(heart.store().0.run("run-3"), Some(&expired));
    assert_eq!(heart.metrics().reclaims, 0);
    assert!(heart.receipts().is_empty());
    assert_eq!(heart.discarded_instances(), 0, "a refused answer is a result, not a trap");
}

#[test]
fn each_operation_hands_back_its_receipts_and_counters_with_its_result() {
    let mut heart = ComponentFleet::new(component(), seeded()).unwrap();
    let fence = heart.acquire("run-1", "worker-A", 60).unwrap().fence.unwrap();
    assert_eq!((heart.receipts().len(), heart.metrics().acquire_attempts, heart.metrics().acquire_wins), (1, 1, 1));
    let lost = heart.acquire("run-1", "worker-B", 60).unwrap();
    assert!(!lost.acquired);
    assert_eq!((heart.metrics().acquire_attempts, heart.metrics().acquire_collisions), (2, 1));
    assert!(heart.verify_fence(&fence).unwrap());
    assert!(matches!(heart.release(&fence, ReleaseTo::Completed).unwrap(), Fenced::Ok { .. }));
    let events: Vec<String> = heart.receipts().iter().map(|r| r.event.as_str().to_owned()).collect();
    assert_eq!(events, ["acquired", "fence_verified", "released"]);
    assert_eq!((heart.metrics().fence_verifications, heart.metrics().releases), (1, 1));
}

#[test]
fn effects_run_once_through_the_handle_with_the_epoch() {
    let mut heart = ComponentFleet::new(component(), seeded()).unwrap();
    let fence = heart.acquire("run-1", "worker-A", 60).unwrap().fence.unwrap();
    let mut ledger = MemoryEffectLedger::default();
    let mut seen = Vec::new();
    let r = heart
        .guard_irreversible(&fence, Ledger::Memory(&mut ledger), "pay:1", |epoch| {
            seen.push(epoch);
            Ok(json!({"paid": true}))
        })
        .unwrap();
    assert!(r.committed);
    assert_eq!(r.result, Some(json!({"paid": true})));
    assert_eq!(seen, vec![Some(1)]);
    let again = heart.guard_irreversible(&fence, Ledger::Memory(&mut ledger), "pay:1", |_| Ok(json!(1))).unwrap();
    assert_eq!(again.code, Some(ErrorCode::Deduped));
    let failed = heart.guard_irreversible(&fence, Ledger::Durable, "pay:2", |_| Err("card declined".into()));
    assert_eq!(failed.unwrap_err().code, ErrorCode::EffectFailed);
    let sent = heart.send_once(&fence, "mail", "mail:1", &json!({"to": "a"}), |_| Ok(json!("msg-1"))).unwrap();
    assert!(sent.sent);
    assert_eq!(sent.external_ref, Some(json!("msg-1")));
    assert_eq!(
        heart.digest("{\"b\":1,\"a\":[1,2]}").unwrap(),
        heart_fleet_core::canonical::digest_json("{\"b\":1,\"a\":[1,2]}").unwrap()
    );
    assert!(heart.prometheus().contains("heart_fleet_effect_commits_total 2"));
}

#[test]
fn a_component_fleet_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<ComponentFleet<MemoryStore>>();
    assert_send::<FleetComponent>();
}

#[test]
fn a_trap_message_is_flattened_to_one_line() {
    let trap = "the component trapped during acquire; its instance was discarded: error while executing at \
                wasm backtrace:\n    0:  0x46b71 - <unknown>!<wasm function 1183>\n    1:  0x20319 - \
                <unknown>!<wasm function 548>: wasm trap: all fuel consumed by WebAssembly\n";
    assert_eq!(
        heart_fleet_wasmtime_host::one_line(trap),
        "the component trapped during acquire; its instance was discarded: error while executing at wasm \
         backtrace: 0:  0x46b71 - <unknown>!<wasm function 1183>; 1:  0x20319 - <unknown>!<wasm function 548>: \
         wasm trap: all fuel consumed by WebAssembly"
    );
    assert_eq!(heart_fleet_wasmtime_host::one_line("no newline"), "no newline");
}

/// The receipt-log verifier component gives the native verifier's report, signatures (HMAC and
/// Ed25519) included, for intact, tampered and bad logs and options.
#[test]
fn the_receipt_verifier_component_reports_what_the_native_verifier_does() {
    use heart_fleet_core::chain::{ChainHeads, FleetKey, Signer, VerifyOptions, chained_json, verify_receipts_json};
    use heart_fleet_core::{HeartEvent, HeartReceipt, Timestamp};
    use heart_fleet_wasmtime_host::ReceiptVerifier;

    let verifier =
        ReceiptVerifier::locate().unwrap_or_else(|e| panic!("{e}\n(build it first: cargo run -p xtask -- component)"));
    let signer = Signer::unsigned()
        .with_key(FleetKey::hmac_from_random([5; 32]))
        .unwrap()
        .with_key(FleetKey::ed25519_from_seed([6; 32]))
        .unwrap();
    let mut heads = ChainHeads::new();
    let lines: Vec<String> = (0..8)
        .map(|i| {
            let run = if i % 3 == 0 { "run-b" } else { "run-a" };
            let r = HeartReceipt::new(
                HeartEvent::Renewed,
                run,
                "worker-A",
                Some(Timestamp(60_000 + i)),
                None,
                Timestamp(i),
            );
            chained_json(&r, &heads.append(&signer, &r)).to_string()
        })
        .collect();
    let log = |ls: &[String]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
    let hmac = FleetKey::hmac_from_random([5; 32]).to_key_file_text();
    let public = FleetKey::ed25519_from_seed([6; 32]).public_key().unwrap().to_key_file_text();
    let other = FleetKey::ed25519_from_seed([7; 32]).public_key().unwrap().to_key_file_text();
    let mut dropped = lines.clone();
    dropped.remove(2);
    let mut doubled = lines.clone();
    doubled.push(lines[1].clone());
    let edited = {
        let mut ls = lines.clone();
        ls[4] = ls[4].replace("worker-A", "mallory");
        ls
    };
    let options = |json: serde_json::Value| json.to_string();
    let cases = [
        (log(&lines), options(serde_json::json!({}))),
        (log(&lines), options(serde_json::json!({"key": hmac, "publicKey": public}))),
        (log(&lines), options(serde_json::json!({"publicKey": other}))),
        (log(&dropped), options(serde_json::json!({"finalSeq": {"run-a": 6}}))),
        (log(&doubled), options(serde_json::json!({"requireChain": true}))),
        (log(&edited) + "{\"torn", options(serde_json::json!({"key": hmac}))),
        (log(&lines), options(serde_json::json!({"run": "run-b"}))),
        ("[]\nnot json\n".to_owned(), options(serde_json::json!({}))),
        (log(&lines), options(serde_json::json!({"key": public}))),
        (log(&lines), options(serde_json::json!({"finalSeq": {"run-a": 0}}))),
    ];
    let mut found = 0;
    for (text, opts) in &cases {
        let native =
            verify_receipts_json(text.as_bytes(), opts).map(|t| serde_json::from_str::<serde_json::Value>(&t).unwrap());
        let component = VerifyOptions::parse(opts)
            .and_then(|o| verifier.verify_receipts(text.as_bytes(), &o))
            .map(|r| serde_json::to_value(r).unwrap());
        assert_eq!(component, native, "{opts}");
        found += native.as_ref().map_or(0, |r| r["findings"].as_array().unwrap().len());
    }
    assert!(found > 10, "the cases find things: {found}");
}

//! `--engine component`: the `heart-fleet` commands through the WebAssembly component, on
//! temporary SQLite stores, checked against the native crate wherever the output is
//! deterministic (`canary`, `reclaim`, `runs list`, and the in-process `simulate --json`,
//! which must give the same report for the same seed), plus both engines sharing one store,
//! a trap inside the component (one line, exit 2), and a missing component.
//!
//! These tests need the component: `cargo run -p xtask -- component` builds it into
//! `target/component/heart_fleet.wasm` (or name one with `$HEART_FLEET_COMPONENT`);
//! `scripts/test-all.sh` builds it before `cargo test`. Without it they fail, saying so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::io::Cursor;
use std::path::Path;
use std::process::Output;
use std::sync::OnceLock;

use clap::Parser;
mod common;

use common::{cmd, fails, hf, json_lines, now_ms, ok, run_row, sqlite_store, temp_dir, text, uuid};
use heart_fleet_core::{InstanceRow, InstanceStatus, RunStatus, Timestamp};
use heart_fleet_host::Exit;
use heart_fleet_host::cli::Cli;
use heart_fleet_host::commands;
use heart_fleet_wasmtime_host::FleetComponent;
use serde_json::{Value, json};

/// Fails the test, with the command that fixes it, when the component is not built.
fn require_component() {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| FleetComponent::locate().map(|_| ()).map_err(|e| e.to_string()));
    if let Err(e) = found {
        panic!(
            "these tests run the heart:fleet component, which is missing or broken: {e}\n\
             build it first with `cargo run -p xtask -- component` (scripts/test-all.sh does), \
             or name one with $HEART_FLEET_COMPONENT"
        );
    }
}

/// `heart-fleet --engine ENGINE --store URL ARGS…`.
fn on(engine: &str, dir: &Path, url: &str, args: &[&str]) -> Output {
    let mut all = vec!["--engine", engine, "--store", url];
    all.extend_from_slice(args);
    hf(dir, &all)
}

/// A row without what differs between two stores that did the same thing at different
/// moments: the store clock's `created_at` / `updated_at`, and the store-drawn `id` and
/// `assignment_id` of a row the store created.
fn settled(mut row: Value) -> Value {
    if let Some(o) = row.as_object_mut() {
        for k in ["id", "created_at", "updated_at", "assignment_id"] {
            o.remove(k);
        }
    }
    row
}

/// Receipts without their moment and the store-drawn run id: event, owner, effect key (the
/// digest covers the expiry, which comes from the store clock, and the run id).
fn receipt_shape(r: &Value) -> Value {
    json!([r["event"], r["owner"], r["effectKey"]])
}

#[test]
fn canary_through_the_component_matches_the_native_crate() {
    require_component();
    let dir = temp_dir("heart-component-cli");
    let (native, component) = (sqlite_store(&dir, "native.db"), sqlite_store(&dir, "component.db"));
    for _ in 0..2 {
        let n_text = ok(&on("native", &dir, &native, &["canary", "--owner", "ops:canary"]));
        let c_text = ok(&on("component", &dir, &component, &["canary", "--owner", "ops:canary"]));
        let (n, c) = (json_lines(&n_text), json_lines(&c_text));
        assert_eq!(c.len(), 3, "acquired, released, beat: {c:?}");
        assert_eq!(c[0]["runId"], c[1]["runId"]);
        assert_eq!(n.iter().map(receipt_shape).collect::<Vec<_>>(), c.iter().map(receipt_shape).collect::<Vec<_>>());
        // The reference's beat line, byte for byte.
        assert_eq!(n_text.lines().last(), c_text.lines().last());
        assert_eq!(
            c_text.lines().last().unwrap(),
            r#"{"ran":true,"metrics":{"acquireWins":1,"acquireCollisions":0,"renews":0,"releases":1,"fenceRejections":0,"effectCommits":0,"effectDedupes":0}}"#
        );
    }
    let rows = |url: &str, engine: &str| -> Vec<Value> {
        json_lines(&ok(&on(engine, &dir, url, &["runs", "list", "--json"]))).into_iter().map(settled).collect()
    };
    let c = rows(&component, "component");
    assert_eq!(rows(&native, "native"), c);
    assert_eq!((c[0]["status"].as_str(), c[0]["fencing_epoch"].as_i64()), (Some("ready"), Some(2)), "{c:?}");
    // The component's receipts verify with the native verifier.
    let v = ok(&hf(&dir, &["--store", &component, "verify-receipts", "--table"]));
    assert!(v.ends_with(" 4 chained, 0 unchained, 0 signed, 0 chain findings\n"), "{v}");
    assert!(v.contains("4 receipts, 4 ok, 0 tampered, 0 malformed; "), "{v}");
}

/// Waits until the canary run of `url` is leased (its holder is inside the no-op).
fn wait_until_leased(dir: &Path, url: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let rows = json_lines(&ok(&hf(dir, &["--store", url, "runs", "list", "--json"])));
        if rows.first().is_some_and(|r| r["status"] == "leased") {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the canary never took its lease: {rows:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_component_canary_and_a_native_canary_on_one_store_exclude_each_other() {
    require_component();
    let dir = temp_dir("heart-component-cli");
    let url = sqlite_store(&dir, "shared.db");
    // The row first (through the component), so the race is about the lease.
    ok(&on("component", &dir, &url, &["canary"]));
    // Each engine holds the lease while the other tries: the other skips with lease-held.
    for (holder, other) in [("component", "native"), ("native", "component")] {
        let held = cmd(&dir, &["--engine", holder, "--store", &url, "canary", "--hold-ms", "3000"]).spawn().unwrap();
        wait_until_leased(&dir, &url);
        let skipped = json_lines(&ok(&on(other, &dir, &url, &["canary"]))).pop().unwrap();
        let held = json_lines(&ok(&held.wait_with_output().unwrap())).pop().unwrap();
        assert_eq!((held["ran"].as_bool(), skipped["ran"].as_bool()), (Some(true), Some(false)), "{holder}");
        assert_eq!(skipped["reason"], "lease-held", "{skipped}");
        assert_eq!(skipped["metrics"]["acquireCollisions"], 1, "{skipped}");
    }
    // The epoch rose once per successful acquire, whichever engine made it.
    let run: Value = json_lines(&ok(&on("component", &dir, &url, &["runs", "list", "--json"]))).remove(0);
    assert_eq!((run["status"].as_str(), run["fencing_epoch"].as_i64()), (Some("ready"), Some(3)), "{run}");
}

/// Seeds `url` with an expired lease, a live one, a run of a silent instance, and a run at
/// the retry ceiling whose lease expired (all timestamps relative to `now`).
fn seed_recovery(url: &str, now: i64) {
    let mut store = heart_fleet_stores::open(url).unwrap();
    store.insert_run(&run_row(1, RunStatus::Leased, Some("dead-worker"), Some(now - 5_000), now - 60_000)).unwrap();
    store.insert_run(&run_row(2, RunStatus::Leased, Some("live-worker"), Some(now + 600_000), now - 60_000)).unwrap();
    store
        .insert_run(&run_row(3, RunStatus::Running, Some("silent-instance"), Some(now + 600_000), now - 60_000))
        .unwrap();
    let mut tired = run_row(4, RunStatus::Leased, Some("dead-worker"), Some(now - 5_000), now - 60_000);
    tired.retries = 5;
    store.insert_run(&tired).unwrap();
    store
        .insert_instance(&InstanceRow {
            instance_id: "silent-instance".into(),
            hostname: Some("h".into()),
            pid: Some(1),
            status: InstanceStatus::Alive,
            started_at: Timestamp(now - 600_000),
            last_heartbeat: Timestamp(now - 300_000),
            metadata: None,
        })
        .unwrap();
}

#[test]
fn reclaim_and_runs_list_through_the_component_match_the_native_crate() {
    require_component();
    let dir = temp_dir("heart-component-cli");
    let (native, component) = (sqlite_store(&dir, "native.db"), sqlite_store(&dir, "component.db"));
    let now = now_ms();
    seed_recovery(&native, now);
    seed_recovery(&component, now);
    // `runs list` on one store: the same bytes through either engine, text and JSON.
    for args in [&["runs", "list"][..], &["runs", "list", "--json"], &["runs", "list", "--status", "leased"]] {
        let n = ok(&on("native", &dir, &component, args));
        assert_eq!(n, ok(&on("component", &dir, &component, args)), "{args:?}");
        assert!(!n.is_empty());
    }
    let n = ok(&on("native", &dir, &native, &["reclaim", "--json"]));
    let c = ok(&on("component", &dir, &component, &["reclaim", "--json"]));
    assert_eq!(n, c);
    let r: Value = serde_json::from_str(&c).unwrap();
    assert_eq!(r["ttlSweep"]["reclaimedIds"], json!([uuid(1)]), "{r}");
    assert_eq!(r["ttlSweep"]["quarantinedIds"], json!([uuid(4)]), "{r}");
    assert_eq!(r["liveness"]["deadInstanceIds"], json!(["silent-instance"]), "{r}");
    assert_eq!(r["liveness"]["reclaimedIds"], json!([uuid(3)]), "{r}");
    // The rows the two engines left behind are the same (the store clock aside). `runs list`
    // orders by `updated_at`, which each store's own clock set during its reclaim, so the rows
    // are compared in key order.
    let rows = |url: &str, engine: &str| -> Vec<Value> {
        let mut rows: Vec<Value> =
            json_lines(&ok(&on(engine, &dir, url, &["runs", "list", "--json"]))).into_iter().map(settled).collect();
        rows.sort_by(|a, b| a["idempotency_key"].as_str().cmp(&b["idempotency_key"].as_str()));
        rows
    };
    let c = rows(&component, "component");
    assert_eq!(rows(&native, "native"), c);
    assert_eq!(c.len(), 4);
    // A second pass finds nothing; the human summary is the same.
    let n = ok(&on("native", &dir, &native, &["reclaim"]));
    assert_eq!(n, ok(&on("component", &dir, &component, &["reclaim"])));
    assert!(n.starts_with("ttl sweep: 0 reclaimed, 0 quarantined"), "{n}");
    // The operator requeues the quarantined run through the component.
    let row: Value = serde_json::from_str(&ok(&on(
        "component",
        &dir,
        &component,
        &["runs", "requeue", &uuid(4), "--operator", "alice"],
    )))
    .unwrap();
    assert_eq!((row["status"].as_str(), row["retries"].as_i64()), (Some("ready"), Some(0)));
    let v = ok(&hf(&dir, &["--store", &component, "verify-receipts", "--table"]));
    assert!(v.ends_with(" 4 chained, 0 unchained, 0 signed, 0 chain findings\n"), "{v}");
    assert!(v.contains("4 receipts, 4 ok, 0 tampered, 0 malformed; "), "{v}");
}

/// `heart-fleet ARGS…` in this process: exit status, stdout, stderr.
fn in_process(args: &[&str]) -> (Exit, String, String) {
    let cli = Cli::try_parse_from(std::iter::once("heart-fleet").chain(args.iter().copied())).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = commands::run(cli, &mut Cursor::new(Vec::new()), &mut out, &mut err);
    (exit, text(&out), text(&err))
}

#[test]
fn simulate_json_through_the_component_gives_the_native_report() {
    require_component();
    for args in [
        &["simulate", "--json", "--seed", "7", "--crash-rate", "0.2"][..],
        &["simulate", "--json", "--seed", "3", "--crash-rate", "0.4", "--pause-rate", "0.1", "--max-retries", "1"],
    ] {
        let (n_exit, native, n_err) = in_process(&[&["--engine", "native"][..], args].concat());
        let (c_exit, component, c_err) = in_process(&[&["--engine", "component"][..], args].concat());
        assert_eq!((n_exit, c_exit), (Exit::Success, Exit::Success), "{n_err}{c_err}");
        assert!(c_err.is_empty(), "{c_err}");
        // The same seed, the same report: safety counts, faults, counts, counters, clock.
        assert_eq!(native, component, "{args:?}");
        let r: Value = serde_json::from_str(&component).unwrap();
        assert_eq!((r["safe"].as_bool(), r["quiescent"].as_bool()), (Some(true), Some(true)), "{r:#}");
        assert!(r["crashes"].as_u64().unwrap() > 0 && r["leases"].as_u64().unwrap() > 0, "{r:#}");
        assert_eq!(r["effects_fired"], r["effects_expected"], "{r:#}");
    }
}

#[test]
fn simulate_processes_through_the_component_is_safe() {
    require_component();
    let dir = temp_dir("heart-component-cli");
    let url = sqlite_store(&dir, "procs.db");
    let out = on(
        "component",
        &dir,
        &url,
        &["simulate", "--processes", "2", "--runs", "3", "--ttl", "2", "--kills", "1", "--seed", "4", "--json"],
    );
    let r: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!((r["safe"].as_bool(), r["quiescent"].as_bool()), (Some(true), Some(true)), "{r:#}");
    assert_eq!(r["effects_fired"], r["effects_expected"], "{r:#}");
    assert_eq!(r["worker_failures"], 0, "{r:#}");
}

#[test]
fn a_trap_inside_the_component_is_a_one_line_error() {
    require_component();
    let dir = temp_dir("heart-component-cli");
    let url = sqlite_store(&dir, "trap.db");
    // Starved of fuel, the component traps in its first call; the instance is discarded and
    // the command reports it: one line, exit 2, no panic.
    for args in [&["runs", "list"][..], &["canary"], &["reclaim"]] {
        let mut all = vec!["--component-fuel", "1000"];
        all.extend_from_slice(args);
        let e = fails(&on("component", &dir, &url, &all), 2);
        assert!(e.starts_with("heart-fleet: ") && e.contains("trapped"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    let (exit, out, err) = in_process(&["--engine", "component", "--component-fuel", "1000", "simulate", "--json"]);
    assert_eq!(exit, Exit::Error, "{out}");
    assert!(err.contains("trapped") && err.lines().count() == 1, "{err}");
    // The store is untouched and the next command works.
    ok(&on("component", &dir, &url, &["canary"]));
}

#[test]
fn a_missing_component_says_how_to_build_it() {
    let dir = temp_dir("heart-component-cli");
    let url = sqlite_store(&dir, "none.db");
    let missing = dir.join("no-such-component.wasm");
    let store = ["--store", url.as_str()];
    for args in [
        &[&store[..], &["canary"]].concat()[..],
        &[&store[..], &["runs", "list"]].concat(),
        &[&store[..], &["reclaim"]].concat(),
        &[&store[..], &["instances", "list"]].concat(),
        &[&store[..], &["simulate", "--processes", "2"]].concat(),
        &["simulate", "--json"],
    ] {
        let out = cmd(&dir, &[&["--engine", "component"][..], args].concat())
            .env("HEART_FLEET_COMPONENT", &missing)
            .output()
            .unwrap();
        let e = fails(&out, 2);
        assert!(e.contains("no-such-component.wasm is missing"), "{args:?}: {e}");
        assert!(e.contains("`cargo run -p xtask -- component`"), "{args:?}: {e}");
    }
    // Not a component at all: named, one line.
    let junk = dir.join("junk.wasm");
    std::fs::write(&junk, b"not wasm").unwrap();
    let out = cmd(&dir, &["--engine", "component", "--store", &url, "runs", "list"])
        .env("HEART_FLEET_COMPONENT", &junk)
        .output()
        .unwrap();
    let e = fails(&out, 2);
    assert!(e.contains("cannot compile the component"), "{e}");
}

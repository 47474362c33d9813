//! End-to-end tests of the store commands of the `heart-fleet` binary (`migrate`, `canary`,
//! `reclaim`, `runs`, `instances`, `metrics`, `verify-receipts --table`, `simulate
//! --processes`) on a temporary SQLite file each, the error cases, and the key commands on
//! PostgreSQL when `DATABASE_URL` is set (each test in a schema of its own, chosen with the
//! URL's `options=-csearch_path=…`). Without `DATABASE_URL` the PostgreSQL tests print
//! SKIPPED and pass, unless `CI` is set, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;

mod common;
// The PostgreSQL routes (direct, through the transaction pooler) and their namespaces, shared
// with the store crates' tests.
#[path = "../../tests/sql-exec/tests/pg_route/mod.rs"]
mod pg_route;

use common::{check_safe_report, cmd, fails, hf, json_lines, now_ms, ok, run_row, sqlite_store, temp_dir, text, uuid};
use heart_fleet_core::{InstanceRow, InstanceStatus, RunStatus, Timestamp};
use pg_route::{Namespace, Route, env, terminate};
use serde_json::Value;

fn t(ms: i64) -> Timestamp {
    Timestamp(ms)
}

// ------------------------------------------------------------------------------------------
// The shared scenarios (SQLite and PostgreSQL)
// ------------------------------------------------------------------------------------------

fn beat(stdout: &str) -> Value {
    json_lines(stdout).pop().unwrap()
}

fn canary_twice_reuses_the_row(dir: &Path, url: &str) {
    let first = ok(&hf(dir, &["--store", url, "canary"]));
    let second = ok(&hf(dir, &["--store", url, "canary", "--owner", "ops:manual"]));
    let (a, b) = (json_lines(&first), json_lines(&second));
    assert_eq!(a.len(), 3, "acquired, released, beat: {first}");
    assert_eq!(a[0]["event"], "acquired");
    assert_eq!(a[1]["event"], "released");
    assert!(a[0]["owner"].as_str().unwrap().starts_with("heart-fleet:"), "{}", a[0]);
    assert_eq!(b[0]["owner"], "ops:manual");
    assert_eq!(a[0]["runId"], b[0]["runId"], "the second canary reuses the row");
    // The reference's beat line: keys and order.
    let line = first.lines().last().unwrap();
    assert_eq!(
        line,
        r#"{"ran":true,"metrics":{"acquireWins":1,"acquireCollisions":0,"renews":0,"releases":1,"fenceRejections":0,"effectCommits":0,"effectDedupes":0}}"#
    );
    let runs = json_lines(&ok(&hf(dir, &["--store", url, "runs", "list", "--json"])));
    let canaries: Vec<&Value> =
        runs.iter().filter(|r| r["idempotency_key"].as_str().unwrap().starts_with("heart:resource:")).collect();
    assert_eq!(canaries.len(), 1);
    assert_eq!(canaries[0]["status"], "ready", "released back to ready");
    assert_eq!(canaries[0]["fencing_epoch"], 2);
    assert_eq!(
        canaries[0]["idempotency_key"],
        "heart:resource:feafc855c8ea80bff32ad3d81a37a199ae66bc65d256288bd91683ffd8438bed"
    );
    let v = ok(&hf(dir, &["--store", url, "verify-receipts", "--table"]));
    assert!(
        v.ends_with(
            "4 receipts, 4 ok, 0 tampered, 0 malformed; 1 runs, 4 chained, 0 unchained, 0 signed, 0 chain findings\n"
        ),
        "{v}"
    );
}

fn racing_canaries_give_one_lease_held(dir: &Path, url: &str) {
    // Create the row first, so the race is about the lease.
    ok(&hf(dir, &["--store", url, "canary"]));
    let a = cmd(dir, &["--store", url, "canary", "--hold-ms", "1500"]).spawn().unwrap();
    let b = cmd(dir, &["--store", url, "canary", "--hold-ms", "1500"]).spawn().unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let beats = [beat(&ok(&a)), beat(&ok(&b))];
    let held: Vec<&Value> = beats.iter().filter(|b| b["ran"] == false).collect();
    assert_eq!(held.len(), 1, "{beats:?}");
    assert_eq!(held[0]["reason"], "lease-held");
    assert_eq!(held[0]["metrics"]["acquireCollisions"], 1);
    assert_eq!(beats.iter().filter(|b| b["ran"] == true).count(), 1);
}

fn reclaim_recovers_expired_and_dead_holders(dir: &Path, url: &str) {
    let mut store = heart_fleet_stores::open(url).unwrap();
    let now = now_ms();
    store.insert_run(&run_row(1, RunStatus::Leased, Some("dead-worker"), Some(now - 5_000), now - 60_000)).unwrap();
    store.insert_run(&run_row(2, RunStatus::Leased, Some("live-worker"), Some(now + 600_000), now - 60_000)).unwrap();
    store
        .insert_run(&run_row(3, RunStatus::Running, Some("silent-instance"), Some(now + 600_000), now - 60_000))
        .unwrap();
    let silent = InstanceRow {
        instance_id: "silent-instance".into(),
        hostname: Some("h".into()),
        pid: Some(1),
        status: InstanceStatus::Alive,
        started_at: t(now - 600_000),
        last_heartbeat: t(now - 300_000),
        metadata: None,
    };
    store.insert_instance(&silent).unwrap();
    drop(store);
    let out = ok(&hf(dir, &["--store", url, "reclaim", "--json"]));
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["ttlSweep"]["reclaimedIds"], serde_json::json!([uuid(1)]), "{r}");
    assert_eq!(r["liveness"]["deadInstanceIds"], serde_json::json!(["silent-instance"]), "{r}");
    assert_eq!(r["liveness"]["reclaimedIds"], serde_json::json!([uuid(3)]), "{r}");
    let one: Value = serde_json::from_str(&ok(&hf(dir, &["--store", url, "runs", "show", &uuid(1)]))).unwrap();
    assert_eq!((one["status"].as_str(), one["retries"].as_i64()), (Some("ready"), Some(1)));
    let two: Value = serde_json::from_str(&ok(&hf(dir, &["--store", url, "runs", "show", &uuid(2)]))).unwrap();
    assert_eq!(two["status"], "leased", "a live lease is left alone");
    // Nothing left to do: a human summary with zeros.
    let again = ok(&hf(dir, &["--store", url, "reclaim"]));
    assert!(again.starts_with("ttl sweep: 0 reclaimed, 0 quarantined"), "{again}");
    let counts = ok(&hf(dir, &["--store", url, "metrics"]));
    assert!(counts.contains("heart_fleet_receipts_total{event=\"reclaimed\"} 2\n"), "{counts}");
}

fn operator_actions(dir: &Path, url: &str) {
    let mut store = heart_fleet_stores::open(url).unwrap();
    store.insert_run(&run_row(11, RunStatus::Quarantined, None, None, now_ms() - 60_000)).unwrap();
    store
        .insert_run(&run_row(12, RunStatus::Leased, Some("stuck-worker"), Some(now_ms() + 600_000), now_ms() - 60_000))
        .unwrap();
    drop(store);
    let receipts = dir.join("ops.jsonl");
    let rf = receipts.to_str().unwrap();
    let listed = ok(&hf(dir, &["--store", url, "runs", "list", "--status", "quarantined"]));
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.starts_with(&uuid(11)) && listed.contains("quarantined"), "{listed}");
    let row: Value = serde_json::from_str(&ok(&hf(
        dir,
        &["--store", url, "runs", "requeue", &uuid(11), "--operator", "alice", "--receipts", rf],
    )))
    .unwrap();
    assert_eq!((row["status"].as_str(), row["retries"].as_i64()), (Some("ready"), Some(0)));
    let e = fails(&hf(dir, &["--store", url, "runs", "requeue", &uuid(11), "--operator", "alice"]), 1);
    assert!(e.contains("invalid-state") && e.contains("not quarantined"), "{e}");
    let row: Value =
        serde_json::from_str(&ok(&hf(dir, &["--store", url, "runs", "force-release", &uuid(12), "--receipts", rf])))
            .unwrap();
    assert_eq!(row["status"], "ready");
    assert_eq!(row["lease_owner"], Value::Null);
    fails(&hf(dir, &["--store", url, "runs", "force-release", &uuid(12)]), 1);
    let e = fails(&hf(dir, &["--store", url, "runs", "show", &uuid(99)]), 1);
    assert!(e.contains("run-not-found"), "{e}");
    let lines = json_lines(&std::fs::read_to_string(&receipts).unwrap());
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["requeued", "force_released"]);
    assert_eq!(lines[0]["owner"], "alice");
    assert_eq!(lines[1]["owner"], "stuck-worker");
    let v = ok(&hf(dir, &["verify-receipts", rf]));
    assert_eq!(
        v,
        "2 receipts, 2 ok, 0 tampered, 0 malformed; 2 runs, 2 chained, 0 unchained, 0 signed, 0 chain findings\n"
    );
    let created: Value = serde_json::from_str(&ok(&hf(dir, &["--store", url, "runs", "create", "job:42"]))).unwrap();
    assert_eq!((created["created"].as_bool(), created["run"]["status"].as_str()), (Some(true), Some("ready")));
    let again: Value = serde_json::from_str(&ok(&hf(dir, &["--store", url, "runs", "create", "job:42"]))).unwrap();
    assert_eq!((again["created"].as_bool(), &again["run"]["id"]), (Some(false), &created["run"]["id"]));
}

// ------------------------------------------------------------------------------------------
// SQLite
// ------------------------------------------------------------------------------------------

#[test]
fn migrate_twice_and_canary_twice_on_sqlite() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    let again = ok(&hf(&dir, &["--store", &url, "migrate"]));
    assert!(again.contains("0001_schema: already applied") && again.contains("(0 applied now)"), "{again}");
    canary_twice_reuses_the_row(&dir, &url);
}

#[test]
fn canary_on_the_embedded_default_creates_it() {
    let dir = temp_dir("heart-store-cli");
    let out = hf(&dir, &["canary"]);
    assert_eq!(beat(&ok(&out))["ran"], true);
    assert!(text(&out.stderr).contains("created the tables of the embedded store sqlite:heart-fleet.db"));
    assert!(dir.join("heart-fleet.db").exists());
    let out = hf(&dir, &["canary"]);
    assert_eq!(beat(&ok(&out))["ran"], true);
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn racing_canaries_on_sqlite() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    racing_canaries_give_one_lease_held(&dir, &url);
}

#[test]
fn reclaim_on_sqlite() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    reclaim_recovers_expired_and_dead_holders(&dir, &url);
}

#[test]
fn runs_commands_on_sqlite() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    operator_actions(&dir, &url);
}

#[test]
fn instances_commands() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    let row: Value =
        serde_json::from_str(&ok(&hf(&dir, &["--store", &url, "instances", "register", "w-1", "--pid", "42"])))
            .unwrap();
    assert_eq!(
        (row["instance_id"].as_str(), row["status"].as_str(), row["pid"].as_i64()),
        (Some("w-1"), Some("alive"), Some(42))
    );
    ok(&hf(&dir, &["--store", &url, "instances", "heartbeat", "w-1"]));
    ok(&hf(&dir, &["--store", &url, "instances", "drain", "w-1"]));
    let listed = json_lines(&ok(&hf(&dir, &["--store", &url, "instances", "list", "--json"])));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["status"], "draining");
    let human = ok(&hf(&dir, &["--store", &url, "instances", "list"]));
    assert!(human.starts_with("w-1  draining"), "{human}");
    let e = fails(&hf(&dir, &["--store", &url, "instances", "heartbeat", "nobody"]), 1);
    assert!(e.contains("unknown or dead"), "{e}");
    let m = ok(&hf(&dir, &["--store", &url, "metrics"]));
    assert!(m.contains("heart_fleet_instances{status=\"draining\"} 1\n"), "{m}");
}

#[test]
fn metrics_are_prometheus_text_from_the_store() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    ok(&hf(&dir, &["--store", &url, "canary"]));
    let m = ok(&hf(&dir, &["--store", &url, "metrics"]));
    assert!(m.contains("# TYPE heart_fleet_receipts_total counter\n"), "{m}");
    assert!(m.contains("heart_fleet_receipts_total{event=\"acquired\"} 1\n"), "{m}");
    assert!(m.contains("heart_fleet_receipts_total{event=\"released\"} 1\n"), "{m}");
    assert!(m.contains("heart_fleet_runs{status=\"ready\"} 1\n"), "{m}");
    assert!(m.contains("heart_fleet_runs{status=\"quarantined\"} 0\n"), "{m}");
    for line in m.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(name.starts_with("heart_fleet_") && value.parse::<u64>().is_ok(), "{line}");
    }
    let help = text(&hf(&dir, &["metrics", "--help"]).stdout);
    assert!(help.contains("per process"), "{help}");
}

/// A new HMAC fleet key in `dir` (`keygen`); its path.
fn fleet_key(dir: &Path) -> String {
    ok(&hf(dir, &["keygen", "--kind", "hmac", "--out", "fleet.key"]));
    dir.join("fleet.key").to_str().unwrap().to_owned()
}

/// After processes that each wrote receipts to one table, some killed mid-run: every receipt
/// sits at its own position of its run's chain (no fork, no gap: a process that found its
/// position taken chained again), each signed with the fleet key.
fn table_is_chained_and_signed(dir: &Path, url: &str, key: &str) {
    let out = hf(dir, &["--store", url, "verify-receipts", "--table", "--key", key, "--json"]);
    let r: Value = serde_json::from_str(&ok(&out)).unwrap();
    let n = r["receipts"].as_u64().unwrap();
    assert!(n > 20, "{r}");
    assert_eq!((r["ok"].as_u64(), r["chained"].as_u64(), r["signed"].as_u64()), (Some(n), Some(n), Some(n)), "{r}");
    assert_eq!(r["findings"], Value::Array(vec![]));
    // One row deleted: the gap is named by the row after it.
    let mut store = heart_fleet_stores::open(url).unwrap();
    let rows = store.read_receipts(0, 100_000).unwrap();
    let run = rows[0].receipt["runId"].as_str().unwrap().to_owned();
    let of_run: Vec<i64> = rows.iter().filter(|row| row.receipt["runId"] == run.as_str()).map(|row| row.id).collect();
    assert!(of_run.len() >= 3, "{of_run:?}");
    let delete = heart_fleet_core::sql::Statement {
        sql: format!("DELETE FROM heart_receipts WHERE id = {}", of_run[1]),
        params: vec![],
    };
    store.query(&delete).unwrap();
    let out = hf(dir, &["--store", url, "verify-receipts", "--table", "--run", &run]);
    assert_eq!(out.status.code(), Some(1));
    let v = text(&out.stdout);
    assert!(v.starts_with(&format!("row {}: chain-gap: ", of_run[2])), "{v}");
    assert!(v.ends_with(&format!("{} receipts, {0} ok, 0 tampered, 0 malformed; 1 runs, {0} chained, 0 unchained, 0 signed, 1 chain findings\n", of_run.len() - 1)), "{v}");
}

#[test]
fn simulate_processes_with_kills_on_sqlite() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    let key = fleet_key(&dir);
    let out = hf(
        &dir,
        &[
            "--store",
            &url,
            "simulate",
            "--processes",
            "3",
            "--ttl",
            "2",
            "--seed",
            "5",
            "--json",
            "--signing-key",
            &key,
        ],
    );
    let r = check_safe_report(&out);
    assert_eq!(r["mode"], "processes");
    table_is_chained_and_signed(&dir, &url, &key);
    // The shared store holds the simulation's rows afterwards.
    let runs = json_lines(&ok(&hf(&dir, &["--store", &url, "runs", "list", "--status", "completed", "--json"])));
    assert_eq!(runs.len(), 8);
}

#[test]
fn simulate_processes_defaults_to_a_temporary_store() {
    let dir = temp_dir("heart-store-cli");
    let out = hf(&dir, &["simulate", "--processes", "2", "--runs", "3", "--ttl", "2", "--kills", "1", "--quiet"]);
    let stdout = ok(&out);
    assert!(stdout.starts_with("== heart-fleet simulate report (processes) =="), "{stdout}");
    assert!(stdout.contains("result: SAFE"), "{stdout}");
    assert!(!dir.join("heart-fleet.db").exists(), "the embedded store is not touched");
}

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

#[test]
fn bad_stores_are_one_line_errors() {
    let dir = temp_dir("heart-store-cli");
    let e = fails(&hf(&dir, &["--store", "mysql://u:secret@h/db", "canary"]), 2);
    assert!(e.starts_with("heart-fleet: unknown store URL \"mysql://u:****@h/db\""), "{e}");
    let e = fails(&hf(&dir, &["--store", "postgres://heart:secret@127.0.0.1:1/nowhere", "runs", "list"]), 2);
    assert!(e.starts_with("heart-fleet: cannot open store postgres://heart:****@127.0.0.1:1/nowhere: "), "{e}");
    let missing = format!("sqlite:{}", dir.join("missing.db").display());
    let e = fails(&hf(&dir, &["--store", &missing, "reclaim"]), 2);
    assert!(e.contains("has no database file") && e.contains("heart-fleet migrate"), "{e}");
    assert!(!dir.join("missing.db").exists());
    // An empty database file: the missing table is named.
    std::fs::write(dir.join("empty.db"), b"").unwrap();
    let empty = format!("sqlite:{}", dir.join("empty.db").display());
    let e = fails(&hf(&dir, &["--store", &empty, "metrics"]), 2);
    assert!(e.contains("has no table agent_runs") && e.contains("heart-fleet migrate"), "{e}");
    // Not a database at all.
    std::fs::write(dir.join("junk.db"), b"this is not a database, just some text that is long enough").unwrap();
    let junk = format!("sqlite:{}", dir.join("junk.db").display());
    let e = fails(&hf(&dir, &["--store", &junk, "canary"]), 2);
    assert!(e.contains("not a database"), "{e}");
    let e = fails(&hf(&dir, &["--store", "sqlite:/no/such/dir/x.db", "migrate"]), 2);
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn bad_input_is_named() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    // Receipts that are JSON but not receipts: verify names the lines and exits 1.
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, b"{\"schemaVersion\":\"zao.heart.receipt.v1\"}\n[]\n").unwrap();
    let out = hf(&dir, &["verify-receipts", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("line 1: invalid-input: ") && stdout.contains("\nline 2: invalid-input: "), "{stdout}");
    assert!(
        stdout.ends_with(
            "2 receipts, 0 ok, 0 tampered, 2 malformed; 0 runs, 0 chained, 0 unchained, 0 signed, 0 chain findings\n"
        ),
        "{stdout}"
    );
    // A file that is not JSON Lines (a line that is not JSON, or not UTF-8): one line naming it, exit 2.
    for (body, line) in [
        (&b"{\"schemaVersion\":\"zao.heart.receipt.v1\"\n[]\n"[..], "line 1: not JSON"),
        (&b"[]\n\xff\xfe\n"[..], "line 2: not UTF-8"),
    ] {
        std::fs::write(&bad, body).unwrap();
        let out = hf(&dir, &["verify-receipts", bad.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let e = text(&out.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with(&format!("heart-fleet: verify-receipts {}: invalid-input: {line}", bad.display())),
            "{e}"
        );
    }
    // An unwritable receipts file.
    let e = fails(&hf(&dir, &["--store", &url, "canary", "--receipts", dir.to_str().unwrap()]), 2);
    assert!(e.starts_with("heart-fleet: cannot open "), "{e}");
    // simulate --store without --processes.
    let e = fails(&hf(&dir, &["--store", &url, "simulate"]), 2);
    assert!(e.contains("--processes"), "{e}");
    let e = fails(&hf(&dir, &["--store", "sqlite::memory:", "simulate", "--processes", "2"]), 2);
    assert!(e.contains("share"), "{e}");
    // A missing component names the file and the command that builds it.
    let missing = dir.join("missing.wasm");
    let out = cmd(&dir, &["--engine", "component", "--store", &url, "canary"])
        .env("HEART_FLEET_COMPONENT", &missing)
        .output()
        .unwrap();
    let e = fails(&out, 2);
    assert!(e.contains("missing.wasm is missing") && e.contains("`cargo run -p xtask -- component`"), "{e}");
    // Wrong arguments: clap's error and usage, exit 2.
    for args in [
        &["runs", "requeue", "x"][..],
        &["canary", "--ttl", "0"],
        &["runs", "frobnicate"],
        &["instances"],
        &["--engine", "quantum", "canary"],
        &["verify-receipts", "f", "--table"],
        &["simulate", "--kills", "2"],
    ] {
        let out = hf(&dir, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.starts_with("error: ") || err.contains("Usage:"), "{args:?}: {err}");
    }
    let help = text(&hf(&dir, &["--help"]).stdout);
    assert!(help.contains("sqlite:heart-fleet.db"), "{help}");
}

// ------------------------------------------------------------------------------------------
// PostgreSQL
// ------------------------------------------------------------------------------------------

/// Migrates a fresh namespace on `route` through the CLI (checking first that a command on the
/// unmigrated store names the fix), twice: the second run applies nothing.
fn pg_migrated(route: Route, dir: &Path) -> Option<Namespace> {
    let ns = Namespace::new(route, "heart-fleet CLI PostgreSQL tests")?;
    let e = fails(&hf(dir, &["--store", &ns.url, "canary"]), 2);
    assert!(e.contains("has no table agent_runs") && e.contains("heart-fleet migrate"), "{e}");
    assert!(!e.contains(":heart@"), "the password is redacted: {e}");
    let first = ok(&hf(dir, &["--store", &ns.url, "migrate"]));
    assert!(first.contains("0001_reference_schema: applied") && first.contains("0002_heart_fleet: applied"), "{first}");
    let again = ok(&hf(dir, &["--store", &ns.url, "migrate"]));
    assert!(again.contains("(0 applied now)"), "{again}");
    Some(ns)
}

/// The same command tests on both routes: directly and through the transaction pooler.
macro_rules! on_both_routes {
    ($($name:ident => $body:path;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn direct() {
                $body(Route::Direct);
            }
            #[test]
            fn through_the_pooler() {
                $body(Route::Pooler);
            }
        }
    )*};
}

on_both_routes! {
    postgres_migrate_canary_and_race => migrate_canary_and_race;
    postgres_reclaim_and_runs => reclaim_and_runs;
    postgres_simulate_processes_with_kills => simulate_processes_with_kills;
}

fn migrate_canary_and_race(route: Route) {
    let dir = temp_dir("heart-store-cli");
    let Some(s) = pg_migrated(route, &dir) else { return };
    canary_twice_reuses_the_row(&dir, &s.url);
    racing_canaries_give_one_lease_held(&dir, &s.url);
}

fn reclaim_and_runs(route: Route) {
    let dir = temp_dir("heart-store-cli");
    let Some(s) = pg_migrated(route, &dir) else { return };
    reclaim_recovers_expired_and_dead_holders(&dir, &s.url);
    operator_actions(&dir, &s.url);
}

fn simulate_processes_with_kills(route: Route) {
    let dir = temp_dir("heart-store-cli");
    let Some(s) = pg_migrated(route, &dir) else { return };
    let key = fleet_key(&dir);
    let out = hf(
        &dir,
        &[
            "--store",
            &s.url,
            "simulate",
            "--processes",
            "3",
            "--ttl",
            "2",
            "--seed",
            "7",
            "--json",
            "--signing-key",
            &key,
        ],
    );
    let r = check_safe_report(&out);
    assert!(r["store"].as_str().unwrap().starts_with("postgres://"), "{r}");
    table_is_chained_and_signed(&dir, &s.url, &key);
}

/// Killed database connections under a running multi-process simulation: each failed request
/// is a store failure the worker or the sweeper rides through (the store reconnects on the
/// next request), and the run still ends with its report, safe.
#[test]
fn postgres_simulate_processes_rides_through_killed_connections() {
    let dir = temp_dir("heart-store-cli");
    let Some(s) = pg_migrated(Route::Direct, &dir) else { return };
    let Some(base) = env("DATABASE_URL", "heart-fleet CLI PostgreSQL tests") else { return };
    let app = format!("heart-ride-{}", std::process::id());
    let url = format!("{}&application_name={app}", s.url);
    let mut child = cmd(
        &dir,
        &[
            "--store",
            &url,
            "simulate",
            "--processes",
            "3",
            "--runs",
            "6",
            "--ttl",
            "2",
            "--seed",
            "9",
            "--json",
            "--max-seconds",
            "90",
        ],
    )
    .spawn()
    .unwrap();
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let mut terminated = 0;
    for _ in 0..40 {
        std::thread::sleep(std::time::Duration::from_millis(250));
        if child.try_wait().unwrap().is_some() {
            break;
        }
        terminated += terminate(&mut admin, &app);
        if terminated >= 12 {
            break;
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(terminated >= 3, "only {terminated} connections were killed: the simulation ended too soon for the test");
    // Safe, with its report. A connection killed while idle costs no request (the store sees it
    // closed before sending and connects again), so `store_errors` counts only the kills that
    // caught a request in flight, and may be 0; pg_outages.rs makes them certain.
    let r = check_safe_report(&out);
    assert_eq!(r["worker_failures"], 0, "{r}");
}

// ------------------------------------------------------------------------------------------
// Hardening (issue 12): flags, foreign files, credentials, error texts
// ------------------------------------------------------------------------------------------

/// The safety counts a stop at the time bound cannot explain.
const HARD_COUNTS: [&str; 5] =
    ["exclusion_violations", "duplicate_effects", "stale_commits", "zombie_writes", "receipt_mismatches"];

#[test]
fn every_injected_fault_makes_both_simulations_unsafe() {
    use clap::ValueEnum;
    use heart_fleet_host::sim::Fault;
    let dir = temp_dir("heart-store-cli");
    let faults: Vec<Fault> = Fault::value_variants().iter().copied().filter(|f| *f != Fault::None).collect();
    assert!(faults.len() >= 2, "{faults:?}");
    for fault in faults {
        let name = fault.as_str();
        // In process.
        let out =
            hf(&dir, &["simulate", "--inject-fault", name, "--crash-rate", "0.3", "--pause-rate", "0.2", "--json"]);
        assert_eq!(out.status.code(), Some(1), "{name} in process: {}", text(&out.stdout));
        let r: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        assert_eq!(
            (r["safe"].as_bool(), r["verdict"].as_str(), r["fault"].as_str()),
            (Some(false), Some("unsafe"), Some(name))
        );
        // Real processes on a shared SQLite file: every worker and the sweeper run over the broken store.
        let out = hf(
            &dir,
            &[
                "simulate",
                "--processes",
                "3",
                "--ttl",
                "2",
                "--kills",
                "5",
                "--seed",
                "3",
                "--inject-fault",
                name,
                "--json",
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{name} with processes: {}{}", text(&out.stdout), text(&out.stderr));
        let r: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        assert_eq!(
            (r["safe"].as_bool(), r["verdict"].as_str(), r["fault"].as_str()),
            (Some(false), Some("unsafe"), Some(name))
        );
        let caught: u64 = HARD_COUNTS.iter().map(|k| r[k].as_u64().unwrap()).sum();
        assert!(caught > 0, "{name}: a count a broken store explains, not only an unfinished run: {r:#}");
        let human = hf(
            &dir,
            &["simulate", "--processes", "3", "--ttl", "2", "--kills", "5", "--inject-fault", name, "--quiet"],
        );
        assert_eq!(human.status.code(), Some(1));
        let human = text(&human.stdout);
        assert!(human.contains(&format!("INJECTED FAULT: {name}")) && human.contains("result: UNSAFE"), "{human}");
    }
}

#[test]
fn simulate_processes_honours_the_retry_ceiling() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    let out =
        hf(&dir, &["--store", &url, "simulate", "--processes", "3", "--ttl", "2", "--max-retries", "0", "--json"]);
    let r = check_safe_report(&out);
    assert_eq!(r["max_retries"], 0, "{r:#}");
    // Every recovery of a killed holder's run quarantines it; the sweeper requeues it.
    let quarantined = r["receipts_by_event"]["quarantined"].as_u64().unwrap_or(0);
    assert!(quarantined > 0, "{r:#}");
    assert_eq!(r["requeued"].as_u64(), Some(quarantined), "{r:#}");
    assert_eq!(r["receipts_by_event"]["requeued"].as_u64(), Some(quarantined), "{r:#}");
}

#[test]
fn simulate_processes_out_of_time_did_not_finish() {
    let dir = temp_dir("heart-store-cli");
    // 40 runs of 2 effects take two workers far longer than 2 s.
    let args = ["simulate", "--processes", "2", "--runs", "40", "--ttl", "2", "--max-seconds", "2", "--seed", "4"];
    let mut json = args.to_vec();
    json.push("--json");
    let out = hf(&dir, &json);
    assert_eq!(out.status.code(), Some(3), "{}{}", text(&out.stdout), text(&out.stderr));
    let r: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(
        (r["verdict"].as_str(), r["quiescent"].as_bool(), r["safe"].as_bool()),
        (Some("did-not-finish"), Some(false), Some(false))
    );
    assert!(r["unfinished_runs"].as_u64().unwrap() > 0, "{r:#}");
    for k in HARD_COUNTS {
        assert_eq!(r[k], 0, "{k}: {r:#}");
    }
    let mut quiet = args.to_vec();
    quiet.push("--quiet");
    let out = hf(&dir, &quiet);
    assert_eq!(out.status.code(), Some(3));
    let human = text(&out.stdout);
    assert!(human.contains("result: DID NOT FINISH (the --max-seconds bound of 2 s came first"), "{human}");
    assert!(!human.contains("UNSAFE"), "{human}");
}

/// A SQLite file of another application at `path`: a table of its own (and `extra`), in
/// rollback-journal mode (`journal_mode delete`; header bytes 18 and 19 are 1, WAL makes them 2).
fn foreign_sqlite_file(path: &Path, extra: &str) {
    let s = heart_fleet_stores::SqliteStore::open_in_memory().unwrap();
    s.batch(&format!(
        "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes (body) VALUES ('keep me'); {extra} \
         VACUUM INTO '{}'",
        path.display()
    ))
    .unwrap();
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes.get(18..20), Some(&[1u8, 1][..]), "a rollback-journal file");
}

#[test]
fn a_failed_command_leaves_a_foreign_sqlite_file_as_it_was() {
    let dir = temp_dir("heart-store-cli");
    let path = dir.join("other.db");
    foreign_sqlite_file(&path, "");
    let before = std::fs::read(&path).unwrap();
    let url = format!("sqlite:{}", path.display());
    for args in [
        &["runs", "list"][..],
        &["runs", "show", "x"],
        &["instances", "list"],
        &["metrics"],
        &["verify-receipts", "--table"],
        &["reclaim"],
        &["canary"],
        &["runs", "create", "k"],
        &["runs", "requeue", "x", "--operator", "o"],
        &["runs", "force-release", "x"],
        &["instances", "register", "i"],
        &["instances", "heartbeat", "i"],
        &["instances", "drain", "i"],
        &["simulate", "--processes", "2"],
    ] {
        let mut full = vec!["--store", url.as_str()];
        full.extend_from_slice(args);
        let e = fails(&hf(&dir, &full), 2);
        assert!(e.contains("has no table agent_runs") && e.contains("heart-fleet migrate"), "{args:?}: {e}");
        assert!(std::fs::read(&path).unwrap() == before, "{args:?} changed the file (journal mode or content)");
        for side in ["-wal", "-shm", "-journal"] {
            assert!(!dir.join(format!("other.db{side}")).exists(), "{args:?} left other.db{side}");
        }
    }
    // migrate is asked to change the file: it adds the tables, and the file is ours from then on.
    ok(&hf(&dir, &["--store", &url, "migrate"]));
    assert_eq!(ok(&hf(&dir, &["--store", &url, "runs", "list"])), "");
}

#[test]
fn migrate_on_a_foreign_agent_runs_table_is_one_line() {
    let dir = temp_dir("heart-store-cli");
    let path = dir.join("other.db");
    foreign_sqlite_file(&path, "CREATE TABLE agent_runs (x INTEGER);");
    let url = format!("sqlite:{}", path.display());
    let e = fails(&hf(&dir, &["--store", &url, "migrate"]), 2);
    assert!(e.starts_with(&format!("heart-fleet: migrate {url}: migration 0001_schema: ")), "{e}");
    assert!(e.contains("no such column"), "the database's message: {e}");
    assert!(!e.contains("CREATE") && e.len() < 300, "not the script: {e}");
}

#[test]
fn credentials_never_appear_in_errors() {
    let dir = temp_dir("heart-store-cli");
    // Port 1 on 127.0.0.1: closed, so every PostgreSQL form fails fast at connect.
    for url in [
        "postgres://u@127.0.0.1:1/db?password=hunter2",
        "postgres://u:hunter2@127.0.0.1:1/db",
        "postgresql://u:hunter2@127.0.0.1:1/db?sslmode=disable&password=hunter2",
        "postgres://u@127.0.0.1:1/db?sslpassword=hunter2&connect_timeout=3",
        "postgres://u:hun%40ter2@127.0.0.1:1/db",
        "postgres://u:hunter2@127.0.0.1:1/db?PASSWORD=hunter2",
        "host=127.0.0.1 port=1 user=u password=hunter2",
        "host=127.0.0.1 port=1 password='hunter2 in quotes' dbname=db",
        "host=127.0.0.1 port=1 password = hunter2",
        "host=127.0.0.1 port=1 sslpassword=hunter2",
    ] {
        for cmd in [&["runs", "list"][..], &["migrate"], &["canary"], &["simulate", "--processes", "2"]] {
            let mut full = vec!["--store", url];
            full.extend_from_slice(cmd);
            let out = hf(&dir, &full);
            let e = fails(&out, 2);
            assert!(!e.contains("hunter") && !e.contains("ter2"), "{cmd:?} {url}: {e}");
            assert!(e.contains("****"), "{cmd:?} {url}: the store is named, its secret masked: {e}");
            assert!(out.stdout.is_empty(), "{cmd:?} {url}");
        }
    }
}

#[test]
fn empty_names_and_ids_are_wrong_arguments() {
    let dir = temp_dir("heart-store-cli");
    let url = sqlite_store(&dir, "fleet.db");
    for args in [
        &["canary", "--owner", ""][..],
        &["runs", "create", ""],
        &["runs", "create", "k", "--created-by", ""],
        &["runs", "show", ""],
        &["runs", "requeue", "", "--operator", "o"],
        &["runs", "requeue", "x", "--operator", ""],
        &["runs", "force-release", ""],
        &["instances", "register", ""],
        &["instances", "heartbeat", ""],
        &["instances", "drain", ""],
    ] {
        for store in [Some(url.as_str()), None] {
            let mut full = store.map_or_else(Vec::new, |u| vec!["--store", u]);
            full.extend_from_slice(args);
            let out = hf(&dir, &full);
            assert_eq!(out.status.code(), Some(2), "{full:?}: {}{}", text(&out.stdout), text(&out.stderr));
            let err = text(&out.stderr);
            assert!(err.starts_with("error: ") && err.contains("must be a non-empty string"), "{full:?}: {err}");
            assert!(out.stdout.is_empty(), "{full:?}");
        }
    }
    // Refused before any store was touched: nothing created, no receipt, no embedded store.
    assert_eq!(ok(&hf(&dir, &["--store", &url, "runs", "list"])), "");
    assert_eq!(ok(&hf(&dir, &["--store", &url, "instances", "list"])), "");
    assert!(ok(&hf(&dir, &["--store", &url, "verify-receipts", "--table"])).starts_with("0 receipts"));
    assert!(!dir.join("heart-fleet.db").exists());
}

#[test]
fn postgres_errors_say_what_failed() {
    let Some(base) = env("DATABASE_URL", "heart-fleet CLI PostgreSQL tests") else { return };
    let dir = temp_dir("heart-store-cli");
    let sep = if base.contains('?') { '&' } else { '?' };
    // A search_path naming no schema that exists: nowhere to create the tables.
    let nowhere = format!("{base}{sep}options=-csearch_path%3Dheart_cli_no_such_schema_{}", std::process::id());
    let e = fails(&hf(&dir, &["--store", &nowhere, "migrate"]), 2);
    assert!(e.contains("no schema has been selected to create in"), "the server's message: {e}");
    assert!(!e.trim_end().ends_with("db error"), "{e}");
    // A foreign agent_runs table: one line naming the migration and the server's message.
    let Some(s) = Namespace::new(Route::Direct, "heart-fleet CLI PostgreSQL tests") else { return };
    s.instrument().batch_execute("CREATE TABLE agent_runs (x integer)").unwrap();
    let e = fails(&hf(&dir, &["--store", &s.url, "migrate"]), 2);
    assert!(e.contains("migration 0001_reference_schema") && e.contains("does not exist"), "{e}");
    assert!(!e.contains("CREATE") && !e.contains(":heart@"), "{e}");
}

#[test]
fn postgres_a_password_parameter_is_masked_in_output() {
    let dir = temp_dir("heart-store-cli");
    let Some(s) = Namespace::new(Route::Direct, "heart-fleet CLI PostgreSQL tests") else { return };
    // postgres://user:password@rest -> postgres://user@rest&password=password
    let (scheme, rest) = s.url.split_once("://").unwrap();
    let (userinfo, after) = rest.rsplit_once('@').unwrap();
    let Some((user, password)) = userinfo.split_once(':') else { return };
    let url = format!("{scheme}://{user}@{after}&password={password}");
    let out = ok(&hf(&dir, &["--store", &url, "migrate"]));
    assert!(out.contains("password=****") && !out.contains(&format!("password={password}")), "{out}");
    let out = hf(&dir, &["--store", &url, "simulate", "--processes", "2", "--runs", "2", "--ttl", "2", "--json"]);
    let r = check_safe_report(&out);
    let shown = r["store"].as_str().unwrap();
    assert!(shown.contains("password=****") && !shown.contains(&format!("password={password}")), "{shown}");
}

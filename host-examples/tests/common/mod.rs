//! Helpers shared by the end-to-end tests of the `heart-fleet` binary: a temporary
//! directory per test, running the binary there, reading its output, and seeding rows.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use heart_fleet_core::{RunRow, RunStatus, Timestamp};
use serde_json::Value;

/// The safety counts of a simulation report; each must be 0.
pub const SAFETY_COUNTS: [&str; 7] = [
    "exclusion_violations",
    "duplicate_effects",
    "stale_commits",
    "unfinished_runs",
    "missing_effects",
    "zombie_writes",
    "receipt_mismatches",
];

static N: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory for one test (the binary runs there, so the embedded default stays in it).
pub fn temp_dir(prefix: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `heart-fleet ARGS…` in `dir`, output captured.
pub fn cmd(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_heart-fleet"));
    c.current_dir(dir).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Runs `heart-fleet ARGS…` in `dir` to the end.
pub fn hf(dir: &Path, args: &[&str]) -> Output {
    cmd(dir, args).output().unwrap()
}

/// Output bytes as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// The standard output of a run that must have succeeded.
#[track_caller]
pub fn ok(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// Exit status and the one-line error.
#[track_caller]
pub fn fails(out: &Output, code: i32) -> String {
    assert_eq!(out.status.code(), Some(code), "stdout: {}\nstderr: {}", text(&out.stdout), text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

/// One JSON value per line.
pub fn json_lines(s: &str) -> Vec<Value> {
    s.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The wall clock in milliseconds (the SQL stores' clock).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A UUID numbered `n` (PostgreSQL wants UUID ids).
pub fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// A run in `status` created at `created`, held by `owner` until `expires` when given.
pub fn run_row(n: u32, status: RunStatus, owner: Option<&str>, expires: Option<i64>, created: i64) -> RunRow {
    let mut r = RunRow::ready(uuid(n), format!("test:{n}"), Timestamp(created));
    r.assignment_id = uuid(1000 + n);
    r.status = status;
    r.lease_owner = owner.map(str::to_owned);
    r.lease_expires_at = expires.map(Timestamp);
    r
}

/// A SQLite store URL for `dir/name`, migrated with the CLI.
pub fn sqlite_store(dir: &Path, name: &str) -> String {
    let url = format!("sqlite:{}", dir.join(name).display());
    let out = ok(&hf(dir, &["--store", &url, "migrate"]));
    assert!(out.contains("0001_schema: applied"), "{out}");
    url
}

/// The JSON report of a multi-process simulation that must have come out safe: every safety
/// count 0, quiescent, every effect fired, no worker failed, every recovery with its receipt.
#[track_caller]
pub fn check_safe_report(out: &Output) -> Value {
    let stdout = ok(out);
    let r: Value = serde_json::from_str(&stdout).unwrap();
    for k in SAFETY_COUNTS {
        assert_eq!(r[k], 0, "{k}: {r:#}");
    }
    assert_eq!(r["safe"], true, "{r:#}");
    assert_eq!(r["quiescent"], true, "{r:#}");
    assert!(r["kills"].as_u64().unwrap() > 0, "{r:#}");
    assert_eq!(r["effects_fired"], r["effects_expected"], "{r:#}");
    assert_eq!(r["worker_failures"], 0, "{r:#}");
    assert_eq!(r["verdict"], "safe", "{r:#}");
    // Every recovery is counted: the sweeps' and the takeovers in acquire, one receipt each
    // (in the table, or journaled as lost to a store failure).
    let recovered: u64 = ["reclaimed", "liveness_reclaimed", "takeovers"].iter().map(|k| r[k].as_u64().unwrap()).sum();
    let receipts = |table: &str| r[table]["reclaimed"].as_u64().unwrap_or(0);
    assert_eq!(receipts("receipts_by_event") + receipts("receipts_lost_by_event"), recovered, "{r:#}");
    let lost: u64 = r["receipts_lost_by_event"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(lost, r["receipts_lost_to_store_errors"].as_u64().unwrap(), "{r:#}");
    r
}

//! Every statement of a `/metrics` scrape of `heart-fleet serve` is served from an index on
//! SQLite: the plans of a store seeded through the CLI (runs, instances, a reclaim, the
//! canary's receipts) read no growing table whole; and the check sees a scan once an index
//! the statements need is gone. (PostgreSQL's planner prefers a scan on small tables: its
//! check runs on 1,000,000 runs, `scripts/console-load.sh`.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{hf, ok, sqlite_store, temp_dir};
use heart_fleet_host::store_reading::{self, StatementPlan};

fn plans(url: &str) -> Vec<StatementPlan> {
    let mut store = heart_fleet_stores::open(url).unwrap();
    store_reading::plans(&mut store).unwrap()
}

#[test]
fn a_scrape_reads_no_growing_table_whole_on_sqlite() {
    let dir = temp_dir("console-plans");
    let url = sqlite_store(&dir, "store.db");
    for key in ["console/a", "console/b", "console/c"] {
        ok(&hf(&dir, &["--store", &url, "runs", "create", key]));
    }
    ok(&hf(&dir, &["--store", &url, "instances", "register", "worker-a"]));
    ok(&hf(&dir, &["--store", &url, "canary"]));
    ok(&hf(&dir, &["--store", &url, "reclaim"]));

    let plans = plans(&url);
    let whats: Vec<_> = plans.iter().map(|p| p.what).collect();
    assert_eq!(whats, ["runs by status", "instances by status", "receipts by event", "lease gauges"]);
    for plan in &plans {
        assert!(!plan.lines.is_empty(), "{}: no plan", plan.what);
        assert!(plan.scans.is_empty(), "{}: scans {:?}\n{}", plan.what, plan.scans, plan.lines.join("\n"));
    }

    // Without the index the run counts are served from, the check reports the scan.
    let mut store = heart_fleet_stores::open(&url).unwrap();
    store.batch("DROP INDEX idx_agent_runs_status").unwrap();
    let runs = store_reading::plans(&mut store).unwrap().into_iter().find(|p| p.what == "runs by status").unwrap();
    assert_eq!(runs.scans, ["agent_runs"], "{}", runs.lines.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

//! The store's plan of each statement one `/metrics` scrape of `heart-fleet serve` runs, and a
//! check that none of them reads a whole table: the console's load test
//! (`scripts/console-load.sh`) runs it on a 1,000,000-run PostgreSQL table; the workspace's
//! tests check the same on SQLite (`host-examples/tests/console_plans.rs`).
//!
//! ```text
//! cargo run --release -p heart-fleet-host --example console_plans -- postgres://…
//! ```
//!
//! Prints `EXPLAIN (ANALYZE, BUFFERS)` of each statement (PostgreSQL) or `EXPLAIN QUERY PLAN`
//! (SQLite). Exit 0 when every statement is served from an index, 1 when a plan scans
//! `agent_runs` or `heart_receipts` sequentially, 2 when the store cannot be read.

use std::process::ExitCode;

use heart_fleet_host::store_reading;

fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: console_plans STORE_URL");
        return ExitCode::from(2);
    };
    let plans = match heart_fleet_stores::open(&url)
        .map_err(|e| e.to_string())
        .and_then(|mut store| store_reading::plans(&mut store).map_err(|e| e.to_string()))
    {
        Ok(plans) => plans,
        Err(e) => {
            eprintln!("console_plans: {e}");
            return ExitCode::from(2);
        }
    };
    let mut scans = Vec::new();
    for plan in &plans {
        println!("-- {}\n{}", plan.what, plan.sql);
        for line in &plan.lines {
            println!("  {line}");
        }
        println!();
        scans.extend(plan.scans.iter().map(|table| format!("{}: {table}", plan.what)));
    }
    if scans.is_empty() {
        println!("every statement of a scrape is served from an index");
        ExitCode::SUCCESS
    } else {
        println!("sequential scans of growing tables: {}", scans.join(", "));
        ExitCode::from(1)
    }
}

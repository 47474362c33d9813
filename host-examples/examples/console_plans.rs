//! The store's plan of each statement one `/metrics` scrape of `heart-fleet serve` runs, and a
//! check that none of them reads a whole table: the console's load test
//! (`scripts/console-load.sh`) runs it on a 1,000,000-run PostgreSQL table.
//!
//! ```text
//! cargo run --release -p heart-fleet-host --example console_plans -- postgres://…
//! ```
//!
//! Prints `EXPLAIN (ANALYZE, BUFFERS)` of each statement (PostgreSQL) or `EXPLAIN QUERY PLAN`
//! (SQLite). Exit 0 when every statement is served from an index, 1 when a plan scans
//! `agent_runs` or `heart_receipts` sequentially, 2 when the store cannot be read.

use std::process::ExitCode;

use heart_fleet_core::sql::{Dialect, SqlValue, Statement};
use heart_fleet_host::store_reading::StoreReading;

/// Tables that grow with the fleet's work: a scan of either makes a scrape's cost grow with them.
const GROWING_TABLES: [&str; 2] = ["agent_runs", "heart_receipts"];

fn main() -> ExitCode {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: console_plans STORE_URL");
        return ExitCode::from(2);
    };
    let mut store = match heart_fleet_stores::open(&url) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("console_plans: {e}");
            return ExitCode::from(2);
        }
    };
    let dialect = store.dialect();
    let mut scans = Vec::new();
    for (what, stmt) in StoreReading::statements(dialect) {
        let prefix = match dialect {
            Dialect::Postgres => "EXPLAIN (ANALYZE, BUFFERS) ",
            Dialect::Sqlite => "EXPLAIN QUERY PLAN ",
        };
        let explain = Statement { sql: format!("{prefix}{}", stmt.sql), params: stmt.params };
        let rows = match store.query(&explain) {
            Ok(rows) => rows,
            Err(e) => {
                eprintln!("console_plans: {what}: {e}");
                return ExitCode::from(2);
            }
        };
        println!("-- {what}\n{}", stmt.sql);
        for row in &rows {
            // PostgreSQL: one text column per plan line. SQLite: (id, parent, notused, detail).
            let Some((_, SqlValue::Text(line))) = row.last() else { continue };
            println!("  {line}");
            // SQLite's `SCAN t USING COVERING INDEX i` reads an index, `SCAN t` the table.
            let sequential = line.contains("Seq Scan on ") || (line.starts_with("SCAN ") && !line.contains(" USING "));
            if let Some(table) = GROWING_TABLES.iter().find(|t| sequential && line.contains(*t)) {
                scans.push(format!("{what}: {table}"));
            }
        }
        println!();
    }
    if scans.is_empty() {
        println!("every statement of a scrape is served from an index");
        ExitCode::SUCCESS
    } else {
        println!("sequential scans of growing tables: {}", scans.join(", "));
        ExitCode::from(1)
    }
}

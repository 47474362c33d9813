//! The core's store conformance suite (`heart_fleet_core::store_suite`) against the
//! library's two SQL stores: [`SqliteStore`] over a fresh in-memory SQLite database per
//! fixture call, and [`PgStore`] over a fresh PostgreSQL namespace per fixture call, on both
//! routes (`pg_route`): directly (a schema) and through PgBouncer in transaction mode (a
//! database). Namespaces are named with the process id and a counter, so parallel tests and
//! test runs never share tables, and dropped with the fixture.
//!
//! Seeding is the stores' own `insert_run` / `insert_instance` / `insert_intent` (every column
//! exactly as given, timestamps as ISO text, JSON as text).
//!
//! The PostgreSQL tests need `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`),
//! the pooler test also `HEART_PGBOUNCER_URL`. Without them they print a SKIPPED line and
//! pass, unless `CI` is set, where they fail.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod pg_route;

use heart_fleet_core::sql::{Dialect, migrations};
use heart_fleet_core::store_suite::{StoreFixture, SuiteReport, run_store_suite};
use heart_fleet_core::{InstanceRow, IntentRow, RunRow, StoreError};
use heart_fleet_sql_exec::{PgStore, SqliteStore};
use pg_route::{Namespace, Route};
use rusqlite::Connection;

fn err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("{what}: {e}"))
}

fn check(store: &str, report: &SuiteReport) {
    println!("{store}: {report:#?}");
    assert!(report.ok(), "{store}: {:#?}", report.failed);
    assert_eq!(report.passed.len(), 10, "{store}: {:#?}", report.passed);
}

// ------------------------------------------------------------------------------------------
// SQLite
// ------------------------------------------------------------------------------------------

struct SqliteFixture;

impl StoreFixture for SqliteFixture {
    type Store = SqliteStore;

    fn fresh(&mut self) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open_in_memory().map_err(|e| err("sqlite open", e))?;
        for (name, sql) in migrations(Dialect::Sqlite) {
            conn.execute_batch(&format!("BEGIN; {sql}\n; COMMIT;")).map_err(|e| err(name, e))?;
        }
        Ok(SqliteStore::new(conn))
    }

    fn seed_run(&mut self, store: &mut SqliteStore, r: &RunRow) -> Result<(), StoreError> {
        store.insert_run(r)
    }

    fn seed_instance(&mut self, store: &mut SqliteStore, i: &InstanceRow) -> Result<(), StoreError> {
        store.insert_instance(i)
    }

    fn seed_intent(&mut self, store: &mut SqliteStore, i: &IntentRow) -> Result<(), StoreError> {
        store.insert_intent(i)
    }
}

#[test]
fn the_sqlite_store_passes_the_store_suite() {
    check("sqlite", &run_store_suite(&mut SqliteFixture));
}

// ------------------------------------------------------------------------------------------
// PostgreSQL, on both routes (directly and through the transaction pooler)
// ------------------------------------------------------------------------------------------

/// Each `fresh` store works in a new namespace (a schema directly, a database through the
/// pooler), migrated through the route; the namespaces are dropped with the fixture.
struct PgFixture {
    route: Route,
    namespaces: Vec<Namespace>,
}

impl StoreFixture for PgFixture {
    type Store = PgStore;

    fn fresh(&mut self) -> Result<PgStore, StoreError> {
        let ns = Namespace::migrated(self.route, "heart-fleet-sql-exec PostgreSQL store suite")
            .ok_or_else(|| StoreError("the PostgreSQL route is not configured".into()))?;
        let store = PgStore::connect(&ns.url);
        self.namespaces.push(ns);
        store
    }

    fn seed_run(&mut self, store: &mut PgStore, r: &RunRow) -> Result<(), StoreError> {
        store.insert_run(r)
    }

    fn seed_instance(&mut self, store: &mut PgStore, i: &InstanceRow) -> Result<(), StoreError> {
        store.insert_instance(i)
    }

    fn seed_intent(&mut self, store: &mut PgStore, i: &IntentRow) -> Result<(), StoreError> {
        store.insert_intent(i)
    }
}

fn postgres_suite(route: Route) {
    // Checked once, so an unconfigured route outside CI is one SKIPPED line, not ten failures.
    if !pg_route::configured(route, "heart-fleet-sql-exec PostgreSQL store suite") {
        return;
    }
    let mut fixture = PgFixture { route, namespaces: Vec::new() };
    let report = run_store_suite(&mut fixture);
    drop(fixture);
    check(&format!("postgres ({route:?})"), &report);
}

#[test]
fn the_postgres_store_passes_the_store_suite() {
    postgres_suite(Route::Direct);
}

#[test]
fn the_postgres_store_passes_the_store_suite_through_a_transaction_pooler() {
    postgres_suite(Route::Pooler);
}

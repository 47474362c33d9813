//! The core's store conformance suite (`heart_fleet_core::store_suite`) against the
//! library's two SQL stores: [`SqliteStore`] over a fresh in-memory SQLite database per
//! fixture call, and [`PgStore`] over a fresh PostgreSQL schema per fixture call (named with
//! the process id and a counter, so parallel tests and test runs never share tables; every
//! schema is dropped when the fixture is).
//!
//! Seeding is the stores' own `insert_run` / `insert_instance` / `insert_intent` (every column
//! exactly as given, timestamps as ISO text, JSON as text).
//!
//! The PostgreSQL test needs `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`).
//! Without it it prints a SKIPPED line and passes, unless `CI` is set, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};

use heart_fleet_core::sql::{Dialect, migrations};
use heart_fleet_core::store_suite::{StoreFixture, SuiteReport, run_store_suite};
use heart_fleet_core::{InstanceRow, IntentRow, RunRow, StoreError};
use heart_fleet_sql_exec::{PgStore, SqliteStore};
use postgres::{Client, NoTls};
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
// PostgreSQL
// ------------------------------------------------------------------------------------------

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL is not set, and CI is: the PostgreSQL store suite must run in CI"
            );
            eprintln!("SKIPPED: heart-fleet-sql-exec PostgreSQL store suite (set DATABASE_URL to run it)");
            None
        }
    }
}

/// Each `fresh` store is a new connection working in a new schema with the migrations
/// applied; the fixture drops every schema it made when it is dropped.
struct PgFixture {
    url: String,
    admin: Client,
    schemas: Vec<String>,
}

impl PgFixture {
    fn connect(url: String) -> PgFixture {
        let admin = Client::connect(&url, NoTls).unwrap_or_else(|e| panic!("connect {url}: {e}"));
        PgFixture { url, admin, schemas: Vec::new() }
    }
}

impl Drop for PgFixture {
    fn drop(&mut self) {
        for schema in &self.schemas {
            if let Err(e) = self.admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")) {
                eprintln!("could not drop schema {schema}: {e}");
            }
        }
    }
}

impl StoreFixture for PgFixture {
    type Store = PgStore;

    fn fresh(&mut self) -> Result<PgStore, StoreError> {
        let schema = format!("heart_suite_{}_{}", std::process::id(), SCHEMAS.fetch_add(1, Ordering::SeqCst));
        let mut client = Client::connect(&self.url, NoTls).map_err(|e| err("postgres connect", e))?;
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"))
            .map_err(|e| err("postgres create schema", e))?;
        self.schemas.push(schema.clone());
        client.batch_execute(&format!("SET search_path TO {schema}")).map_err(|e| err("postgres search_path", e))?;
        for (name, sql) in migrations(Dialect::Postgres) {
            client.batch_execute(&format!("BEGIN; {sql}\n; COMMIT;")).map_err(|e| err(name, e))?;
        }
        // The store's own connection: the schema comes with the URL, so a reconnect keeps it.
        let sep = if self.url.contains('?') { '&' } else { '?' };
        PgStore::connect(&format!("{}{sep}options=-csearch_path%3D{schema}", self.url))
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

#[test]
fn the_postgres_store_passes_the_store_suite() {
    let Some(url) = database_url() else { return };
    let mut fixture = PgFixture::connect(url);
    let report = run_store_suite(&mut fixture);
    drop(fixture);
    check("postgres", &report);
}

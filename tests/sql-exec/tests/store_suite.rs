//! The core's store conformance suite (`heart_fleet_core::store_suite`) against the
//! library's two SQL stores: [`SqliteStore`] over a fresh in-memory SQLite database per
//! fixture call, and [`PgStore`] over a fresh PostgreSQL schema per fixture call (named with
//! the process id and a counter, so parallel tests and test runs never share tables; every
//! schema is dropped when the fixture is).
//!
//! Seeding is plain INSERTs written here, with timestamps as ISO text and JSON as text.
//!
//! The PostgreSQL test needs `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`).
//! Without it it prints a SKIPPED line and passes, unless `CI` is set, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicUsize, Ordering};

use heart_fleet_core::sql::{Dialect, migrations};
use heart_fleet_core::store_suite::{StoreFixture, SuiteReport, run_store_suite};
use heart_fleet_core::{InstanceRow, IntentRow, RunRow, StoreError, Timestamp};
use heart_fleet_sql_exec::{PgStore, SqliteStore};
use postgres::{Client, NoTls};
use rusqlite::Connection;

fn err(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("{what}: {e}"))
}

fn iso(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.to_iso())
}

fn json_text(v: Option<&serde_json::Value>) -> Option<String> {
    v.map(|v| v.to_string())
}

fn capabilities(row: &RunRow) -> String {
    serde_json::Value::from(row.required_capabilities.clone()).to_string()
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
        store
            .connection()
            .execute(
                "INSERT INTO agent_runs (id, task_id, assignment_id, objective, required_capabilities, status, \
                 assigned_agent, lease_owner, lease_expires_at, retries, budget, approval_state, visibility, \
                 idempotency_key, created_by, created_at, updated_at, fencing_epoch) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                rusqlite::params![
                    r.id,
                    r.task_id,
                    r.assignment_id,
                    r.objective,
                    capabilities(r),
                    r.status.as_str(),
                    r.assigned_agent,
                    r.lease_owner,
                    iso(r.lease_expires_at),
                    r.retries,
                    json_text(r.budget.as_ref()),
                    r.approval_state,
                    r.visibility,
                    r.idempotency_key,
                    r.created_by,
                    r.created_at.to_iso(),
                    r.updated_at.to_iso(),
                    r.fencing_epoch,
                ],
            )
            .map_err(|e| err("sqlite insert run", e))?;
        Ok(())
    }

    fn seed_instance(&mut self, store: &mut SqliteStore, i: &InstanceRow) -> Result<(), StoreError> {
        store
            .connection()
            .execute(
                "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![
                    i.instance_id,
                    i.hostname,
                    i.pid,
                    i.status.as_str(),
                    i.started_at.to_iso(),
                    i.last_heartbeat.to_iso(),
                    json_text(i.metadata.as_ref()),
                ],
            )
            .map_err(|e| err("sqlite insert instance", e))?;
        Ok(())
    }

    fn seed_intent(&mut self, store: &mut SqliteStore, i: &IntentRow) -> Result<(), StoreError> {
        store
            .connection()
            .execute(
                "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, \
                 fence_expires_at, fence_epoch, external_ref, attempts, last_error, created_at, committed_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                rusqlite::params![
                    i.run_id,
                    i.effect_key,
                    i.state.as_str(),
                    i.channel,
                    i.payload_digest,
                    i.fence_owner,
                    iso(i.fence_expires_at),
                    i.fence_epoch,
                    json_text(i.external_ref.as_ref()),
                    i.attempts,
                    i.last_error,
                    i.created_at.to_iso(),
                    iso(i.committed_at),
                ],
            )
            .map_err(|e| err("sqlite insert intent", e))?;
        Ok(())
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
        Ok(PgStore::new(client))
    }

    fn seed_run(&mut self, store: &mut PgStore, r: &RunRow) -> Result<(), StoreError> {
        store
            .client()
            .execute(
                "INSERT INTO agent_runs (id, task_id, assignment_id, objective, required_capabilities, status, \
                 assigned_agent, lease_owner, lease_expires_at, retries, budget, approval_state, visibility, \
                 idempotency_key, created_by, created_at, updated_at, fencing_epoch) \
                 VALUES ($1::text::uuid, $2::text, $3::text::uuid, $4::text, \
                 ARRAY(SELECT json_array_elements_text($5::text::json)), $6::text, $7::text, $8::text, \
                 $9::text::timestamptz, $10::bigint, $11::text::jsonb, $12::text, $13::text, $14::text, $15::text, \
                 $16::text::timestamptz, $17::text::timestamptz, $18::bigint)",
                &[
                    &r.id,
                    &r.task_id,
                    &r.assignment_id,
                    &r.objective,
                    &capabilities(r),
                    &r.status.as_str(),
                    &r.assigned_agent,
                    &r.lease_owner,
                    &iso(r.lease_expires_at),
                    &r.retries,
                    &json_text(r.budget.as_ref()),
                    &r.approval_state,
                    &r.visibility,
                    &r.idempotency_key,
                    &r.created_by,
                    &r.created_at.to_iso(),
                    &r.updated_at.to_iso(),
                    &r.fencing_epoch,
                ],
            )
            .map_err(|e| err("postgres insert run", e))?;
        Ok(())
    }

    fn seed_instance(&mut self, store: &mut PgStore, i: &InstanceRow) -> Result<(), StoreError> {
        store
            .client()
            .execute(
                "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                 VALUES ($1::text, $2::text, $3::bigint, $4::text, $5::text::timestamptz, $6::text::timestamptz, \
                 $7::text::jsonb)",
                &[
                    &i.instance_id,
                    &i.hostname,
                    &i.pid,
                    &i.status.as_str(),
                    &i.started_at.to_iso(),
                    &i.last_heartbeat.to_iso(),
                    &json_text(i.metadata.as_ref()),
                ],
            )
            .map_err(|e| err("postgres insert instance", e))?;
        Ok(())
    }

    fn seed_intent(&mut self, store: &mut PgStore, i: &IntentRow) -> Result<(), StoreError> {
        store
            .client()
            .execute(
                "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, \
                 fence_expires_at, fence_epoch, external_ref, attempts, last_error, created_at, committed_at) \
                 VALUES ($1::text::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text::timestamptz, \
                 $8::bigint, $9::text::jsonb, $10::bigint, $11::text, $12::text::timestamptz, $13::text::timestamptz)",
                &[
                    &i.run_id,
                    &i.effect_key,
                    &i.state.as_str(),
                    &i.channel,
                    &i.payload_digest,
                    &i.fence_owner,
                    &iso(i.fence_expires_at),
                    &i.fence_epoch,
                    &json_text(i.external_ref.as_ref()),
                    &i.attempts,
                    &i.last_error,
                    &i.created_at.to_iso(),
                    &iso(i.committed_at),
                ],
            )
            .map_err(|e| err("postgres insert intent", e))?;
        Ok(())
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

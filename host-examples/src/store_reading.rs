//! [`StoreReading`]: the fleet-wide numbers `heart-fleet metrics` prints once and
//! `heart-fleet serve` exposes on every `/metrics` scrape, read from the store by four
//! index-served statements ([`heart_fleet_core::sql::readout`]), and their Prometheus text
//! exposition (with the small text helpers the console's own counters use too).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use heart_fleet_core::receipt::HeartEvent;
use heart_fleet_core::sql::readout::{self, LeaseGauges, StatusTable};
use heart_fleet_core::sql::{Dialect, SqlValue, Statement};
use heart_fleet_core::{ErrorCode, HeartError, InstanceStatus, RunStatus};
use heart_fleet_stores::AnyStore;

/// Fleet-wide numbers read from the store at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreReading {
    /// Runs by status.
    pub runs: BTreeMap<String, u64>,
    /// Instances by status.
    pub instances: BTreeMap<String, u64>,
    /// Receipts by event.
    pub receipts: BTreeMap<String, u64>,
    /// Live and expired leases.
    pub leases: LeaseGauges,
}

fn store_err(what: &str, e: &heart_fleet_core::StoreError) -> HeartError {
    HeartError::store(what, e)
}

fn counts(store: &mut AnyStore, stmt: &Statement, what: &str) -> Result<BTreeMap<String, u64>, HeartError> {
    let rows = store.query(stmt).map_err(|e| store_err(what, &e))?;
    rows.iter()
        .map(|row| match (row.first().map(|c| &c.1), row.get(1).map(|c| &c.1)) {
            (Some(SqlValue::Text(k)), Some(SqlValue::Int(n))) => Ok((k.clone(), u64::try_from(*n).unwrap_or(0))),
            _ => Err(HeartError::new(ErrorCode::StoreProtocol, format!("{what}: a row without a text and a count"))),
        })
        .collect()
}

/// Tables that grow with the fleet's work: a scan of either makes a scrape's cost grow with them.
pub const GROWING_TABLES: [&str; 2] = ["agent_runs", "heart_receipts"];

/// The store's plan of one statement of a reading.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementPlan {
    /// What the statement reads.
    pub what: &'static str,
    /// Its SQL.
    pub sql: String,
    /// The plan's lines, as the store prints them.
    pub lines: Vec<String>,
    /// The growing tables ([`GROWING_TABLES`]) the plan reads sequentially, whole.
    pub scans: Vec<&'static str>,
}

/// The store's plan of each statement of a reading (one `/metrics` scrape of `heart-fleet
/// serve`): `EXPLAIN (ANALYZE, BUFFERS)` on PostgreSQL (so the statements run), `EXPLAIN QUERY
/// PLAN` on SQLite. A scrape stays cheap as the fleet's tables grow only while no plan has a
/// scan. (`cargo run --release -p heart-fleet-host --example console_plans -- URL` prints them;
/// the console's load test runs it on 1,000,000 PostgreSQL runs.)
pub fn plans(store: &mut AnyStore) -> Result<Vec<StatementPlan>, HeartError> {
    let dialect = store.dialect();
    let prefix = match dialect {
        Dialect::Postgres => "EXPLAIN (ANALYZE, BUFFERS) ",
        Dialect::Sqlite => "EXPLAIN QUERY PLAN ",
    };
    let mut out = Vec::new();
    for (what, stmt) in StoreReading::statements(dialect) {
        let explain = Statement { sql: format!("{prefix}{}", stmt.sql), params: stmt.params };
        let rows = store.query(&explain).map_err(|e| store_err(what, &e))?;
        let mut plan = StatementPlan { what, sql: stmt.sql, lines: Vec::new(), scans: Vec::new() };
        for row in &rows {
            // PostgreSQL: one text column per plan line. SQLite: (id, parent, notused, detail).
            let Some((_, SqlValue::Text(line))) = row.last() else { continue };
            // SQLite's `SCAN t USING COVERING INDEX i` reads an index, `SCAN t` the table.
            let sequential = line.contains("Seq Scan on ") || (line.starts_with("SCAN ") && !line.contains(" USING "));
            if let Some(table) = GROWING_TABLES.iter().find(|t| sequential && line.contains(*t)) {
                plan.scans.push(table);
            }
            plan.lines.push(line.clone());
        }
        out.push(plan);
    }
    Ok(out)
}

impl StoreReading {
    /// The statements one reading runs, in order, each with what it reads ([`plans`] shows the
    /// store's plan of each).
    pub fn statements(dialect: Dialect) -> [(&'static str, Statement); 4] {
        [
            ("runs by status", readout::status_counts(StatusTable::Runs)),
            ("instances by status", readout::status_counts(StatusTable::Instances)),
            ("receipts by event", readout::receipt_counts()),
            ("lease gauges", readout::lease_gauges(dialect)),
        ]
    }

    /// Reads the store.
    pub fn read(store: &mut AnyStore) -> Result<StoreReading, HeartError> {
        let [(runs_what, runs), (instances_what, instances), (receipts_what, receipts), (leases_what, leases)] =
            Self::statements(store.dialect());
        let runs = counts(store, &runs, runs_what)?;
        let instances = counts(store, &instances, instances_what)?;
        let receipts = counts(store, &receipts, receipts_what)?;
        let rows = store.query(&leases).map_err(|e| store_err(leases_what, &e))?;
        let leases = readout::decode_lease_gauges(&rows)?;
        Ok(StoreReading { runs, instances, receipts, leases })
    }

    /// The exposition of the store's families.
    pub fn render(&self, out: &mut String) {
        family(
            out,
            "heart_fleet_receipts_total",
            "counter",
            "Receipts in the store's heart_receipts table by event, from every process that wrote to this store. \
             acquired/renewed/released/reclaimed/quarantined/fence_verified/effect_committed/effect_deduped equal the \
             fleet-wide sums of the acquireWins/renews/releases/reclaims/quarantines/fenceVerifications/effectCommits/\
             effectDedupes counters.",
        );
        let mut events: Vec<&str> = HeartEvent::ALL.iter().map(|e| e.as_str()).collect();
        events.extend(
            self.receipts.keys().map(String::as_str).filter(|k| !HeartEvent::ALL.iter().any(|e| e.as_str() == *k)),
        );
        for event in events {
            sample(
                out,
                "heart_fleet_receipts_total",
                &[("event", event)],
                self.receipts.get(event).copied().unwrap_or(0),
            );
        }
        family(out, "heart_fleet_runs", "gauge", "Runs in agent_runs by status.");
        for status in RunStatus::ALL {
            let n = self.runs.get(status.as_str()).copied().unwrap_or(0);
            sample(out, "heart_fleet_runs", &[("status", status.as_str())], n);
        }
        family(out, "heart_fleet_instances", "gauge", "Instances in agent_instances by status.");
        for status in [InstanceStatus::Alive, InstanceStatus::Draining, InstanceStatus::Dead] {
            let n = self.instances.get(status.as_str()).copied().unwrap_or(0);
            sample(out, "heart_fleet_instances", &[("status", status.as_str())], n);
        }
        family(
            out,
            "heart_fleet_leases",
            "gauge",
            "Held runs (leased or running) by lease state at the store's clock: live, or expired (null or past its \
             expiry: waiting for the sweep).",
        );
        sample(out, "heart_fleet_leases", &[("state", "live")], self.leases.live);
        sample(out, "heart_fleet_leases", &[("state", "expired")], self.leases.expired);
        family(out, "heart_fleet_quarantined_runs", "gauge", "Runs in quarantine, waiting for an operator's requeue.");
        sample(
            out,
            "heart_fleet_quarantined_runs",
            &[],
            self.runs.get(RunStatus::Quarantined.as_str()).copied().unwrap_or(0),
        );
        family(
            out,
            "heart_fleet_oldest_expired_lease_age_seconds",
            "gauge",
            "Seconds since the longest-expired lease ended (0 when no lease is expired): how far the sweep is behind.",
        );
        let age = self.leases.oldest_expired_ms.map_or(0.0, |ms| ms as f64 / 1000.0);
        sample_f(out, "heart_fleet_oldest_expired_lease_age_seconds", &[], age);
    }
}

pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")))
        .collect();
    format!("{{{}}}", inner.join(","))
}

pub(crate) fn sample(out: &mut String, name: &str, pairs: &[(&str, &str)], value: u64) {
    let _ = writeln!(out, "{name}{} {value}", labels(pairs));
}

pub(crate) fn sample_f(out: &mut String, name: &str, pairs: &[(&str, &str)], value: f64) {
    let _ = writeln!(out, "{name}{} {value}", labels(pairs));
}

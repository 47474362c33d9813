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

impl StoreReading {
    /// The statements one reading runs, in order, each with what it reads (the console's load
    /// test shows the store's plan of each: `cargo run -p heart-fleet-host --example
    /// console_plans`).
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

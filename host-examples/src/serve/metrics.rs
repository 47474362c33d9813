//! `/metrics` (and the one-shot `heart-fleet metrics`): Prometheus text exposition of what the
//! store holds, plus the serving process's own counters.
//!
//! The store's part ([`StoreReading`]) is read live on each scrape by four index-served
//! statements ([`heart_fleet_core::sql::readout`]). Concurrent scrapes share reads
//! ([`Scraper`]): a scrape waits for a read that *started after it arrived*, so every
//! answer is fresh, yet 200 scrapers cost the store one read at a time, not 200.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heart_fleet_core::receipt::HeartEvent;
use heart_fleet_core::sql::readout::{self, LeaseGauges, StatusTable};
use heart_fleet_core::sql::{Dialect, SqlValue, Statement};
use heart_fleet_core::{ErrorCode, HeartError, InstanceStatus, RunStatus};
use heart_fleet_stores::AnyStore;

use super::pool::StorePool;

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

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn sample(out: &mut String, name: &str, pairs: &[(&str, &str)], value: u64) {
    let _ = writeln!(out, "{name}{} {value}", labels(pairs));
}

fn sample_f(out: &mut String, name: &str, pairs: &[(&str, &str)], value: f64) {
    let _ = writeln!(out, "{name}{} {value}", labels(pairs));
}

/// The serving process's own counters.
#[derive(Debug)]
pub struct ProcessCounters {
    started: SystemTime,
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    requests: BTreeMap<(String, String, u16), u64>,
    scrapes: u64,
    scrape_errors: u64,
    last_scrape: Duration,
}

impl Default for ProcessCounters {
    fn default() -> ProcessCounters {
        ProcessCounters { started: SystemTime::now(), inner: Mutex::new(Counts::default()) }
    }
}

impl ProcessCounters {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts one answered request by route (the matched pattern, or `unmatched`), method and
    /// status code.
    pub fn request(&self, route: &str, method: &str, code: u16) {
        *self.counts().requests.entry((route.to_owned(), method.to_owned(), code)).or_insert(0) += 1;
    }

    fn render(&self, out: &mut String, store_up: bool) {
        let c = self.counts();
        family(out, "heart_fleet_store_up", "gauge", "1 if the last read of the store succeeded, else 0.");
        sample(out, "heart_fleet_store_up", &[], u64::from(store_up));
        family(
            out,
            "heart_fleet_console_http_requests_total",
            "counter",
            "HTTP requests this console answered, by route, method and status code.",
        );
        for ((route, method, code), n) in &c.requests {
            let code = code.to_string();
            sample(
                out,
                "heart_fleet_console_http_requests_total",
                &[("route", route), ("method", method), ("code", &code)],
                *n,
            );
        }
        family(out, "heart_fleet_console_store_reads_total", "counter", "Reads of the store for /metrics.");
        sample(out, "heart_fleet_console_store_reads_total", &[], c.scrapes);
        family(
            out,
            "heart_fleet_console_store_read_errors_total",
            "counter",
            "Reads of the store for /metrics that failed.",
        );
        sample(out, "heart_fleet_console_store_read_errors_total", &[], c.scrape_errors);
        family(
            out,
            "heart_fleet_console_store_read_duration_seconds",
            "gauge",
            "How long the last read of the store for /metrics took.",
        );
        sample_f(out, "heart_fleet_console_store_read_duration_seconds", &[], c.last_scrape.as_secs_f64());
        family(out, "heart_fleet_console_start_time_seconds", "gauge", "When this console started, in Unix seconds.");
        let start = self.started.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        sample_f(out, "heart_fleet_console_start_time_seconds", &[], start);
    }
}

/// One read of the store and when it started.
#[derive(Debug, Clone)]
struct Read {
    started: Instant,
    result: Result<Arc<StoreReading>, String>,
}

/// Shares store reads among concurrent scrapes (see the module docs).
#[derive(Debug, Default)]
pub struct Scraper {
    /// One read at a time; tokio's mutex is fair, so waiters are served in arrival order.
    turn: tokio::sync::Mutex<()>,
    last: Mutex<Option<Read>>,
}

impl Scraper {
    /// The exposition: a store read that started after this call, and the process's counters.
    pub async fn scrape(&self, pool: &Arc<StorePool>, counters: &ProcessCounters) -> String {
        let arrived = Instant::now();
        let read = {
            let _turn = self.turn.lock().await;
            let fresh =
                self.last.lock().unwrap_or_else(PoisonError::into_inner).clone().filter(|r| r.started >= arrived);
            match fresh {
                Some(read) => read,
                None => {
                    let started = Instant::now();
                    let result = pool.run("metrics", StoreReading::read).await.map(Arc::new).map_err(|e| e.message);
                    let mut c = counters.counts();
                    c.scrapes += 1;
                    c.scrape_errors += u64::from(result.is_err());
                    c.last_scrape = started.elapsed();
                    drop(c);
                    let read = Read { started, result };
                    *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(read.clone());
                    read
                }
            }
        };
        let mut out = String::new();
        if let Ok(reading) = &read.result {
            reading.render(&mut out);
        }
        counters.render(&mut out, read.result.is_ok());
        out
    }
}

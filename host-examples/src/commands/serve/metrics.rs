//! `/metrics` of `heart-fleet serve`: the store's families ([`StoreReading`]), read live on
//! each scrape, plus the serving process's own counters.
//!
//! Concurrent scrapes share reads ([`Scraper`]): a scrape waits for a read that *started
//! after it arrived*, so every answer is fresh, yet 200 scrapers cost the store one read at a
//! time, not 200.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::ApiError;
use super::pool::StorePool;
use crate::store_reading::{StoreReading, family, sample, sample_f};

/// The serving process's own counters.
#[derive(Debug)]
pub struct ProcessCounters {
    started: SystemTime,
    inner: Arc<Mutex<Counts>>,
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
        ProcessCounters { started: SystemTime::now(), inner: Arc::new(Mutex::new(Counts::default())) }
    }
}

impl ProcessCounters {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        lock(&self.inner)
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
        family(
            out,
            "heart_fleet_console_store_reads_total",
            "counter",
            "Reads of the store for /metrics and /api/summary (concurrent requests share one).",
        );
        sample(out, "heart_fleet_console_store_reads_total", &[], c.scrapes);
        family(
            out,
            "heart_fleet_console_store_read_errors_total",
            "counter",
            "Reads of the store for /metrics and /api/summary that failed.",
        );
        sample(out, "heart_fleet_console_store_read_errors_total", &[], c.scrape_errors);
        family(
            out,
            "heart_fleet_console_store_read_duration_seconds",
            "gauge",
            "How long the last read of the store for /metrics and /api/summary took.",
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
    result: Result<Arc<StoreReading>, ApiError>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Shares store reads among concurrent scrapes (see the module docs).
#[derive(Debug, Default)]
pub struct Scraper {
    /// One read at a time; tokio's mutex is fair, so waiters are served in arrival order.
    turn: Arc<tokio::sync::Mutex<()>>,
    last: Arc<Mutex<Option<Read>>>,
}

impl Scraper {
    /// A store reading that started after this call: the last one if it did, else a new one
    /// (one at a time; the scrapes and summaries waiting meanwhile share it).
    pub async fn reading(
        &self,
        pool: &Arc<StorePool>,
        counters: &ProcessCounters,
    ) -> Result<Arc<StoreReading>, ApiError> {
        let arrived = Instant::now();
        let turn = Arc::clone(&self.turn).lock_owned().await;
        let fresh = lock(&self.last).clone().filter(|r| r.started >= arrived);
        if let Some(read) = fresh {
            return read.result;
        }
        // The read is a task of its own that holds the turn until it has stored its result: a
        // waiter that goes away (a client that hung up) neither cancels it nor lets a second
        // read overlap it.
        let (pool, last, counts) = (Arc::clone(pool), Arc::clone(&self.last), Arc::clone(&counters.inner));
        let read = tokio::spawn(async move {
            let _turn = turn;
            let started = Instant::now();
            let result = pool.run("metrics", StoreReading::read).await.map(Arc::new);
            let mut c = lock(&counts);
            c.scrapes += 1;
            c.scrape_errors += u64::from(result.is_err());
            c.last_scrape = started.elapsed();
            drop(c);
            *lock(&last) = Some(Read { started, result: result.clone() });
            result
        });
        read.await.unwrap_or_else(|e| Err(ApiError::internal(format!("the store read stopped: {e}"))))
    }

    /// The exposition: a shared store reading (see [`Scraper::reading`]) and the process's counters.
    pub async fn scrape(&self, pool: &Arc<StorePool>, counters: &ProcessCounters) -> String {
        let result = self.reading(pool, counters).await;
        let mut out = String::new();
        if let Ok(reading) = &result {
            reading.render(&mut out);
        }
        counters.render(&mut out, result.is_ok());
        out
    }
}

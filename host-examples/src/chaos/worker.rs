//! The Rust worker of `fleet-chaos` (`heart-fleet chaos-worker`, native or `--engine
//! component`). The Node (`scripts/chaos/worker.mjs`) and Python (`scripts/chaos/worker.py`)
//! workers do exactly the same, through their bindings:
//!
//! ```text
//! until the stop file exists (or the harness is gone):
//!   heartbeat (registering the instance NAME:PID when it is unknown or dead)
//!   pick a run at random; acquire it (ttl)                     -- lost: pause, next
//!   for unit u in [epoch - 1, epoch] (u >= 1):
//!     work WORK_MS; heartbeat; renew                           -- refused: the lease is lost
//!     sendOnce(key "chaos:RUN:u"), the send a POST to the receiver with the token's epoch
//!   release to ready
//!   a store failure or a refused send: pause 200 ms, next round
//! ```
//!
//! Unit `epoch - 1` is the previous holder's second unit: after a clean release it is deduped,
//! after a holder died before sending it, it is sent now, and after a holder died in the middle
//! of sending it, the intent waits for the reconciler. Everything comes from the environment
//! (`HEART_CHAOS_*`, see [`WorkerEnv`]), the same variables for every runtime; the Rust
//! worker's store deadline is in its URL (`heart_statement_timeout_ms`), the others read
//! `HEART_CHAOS_TIMEOUT_MS`.

use std::path::PathBuf;
use std::time::Duration;

use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::{FencingToken, FleetApi};
use heart_fleet_stores::receipts::ReceiptTableSink;
use serde_json::json;

use super::receiver::post_delivery;
use crate::engine::Prepared;
use crate::rng::SplitMix64;

/// How long a worker waits after a store failure or a lost lease.
const PAUSE_AFTER_FAILURE: Duration = Duration::from_millis(200);

/// A worker's settings, from `HEART_CHAOS_*`.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    /// `HEART_CHAOS_STORE`: the store URL.
    pub store: String,
    /// `HEART_CHAOS_RUNS`: the run ids, comma-separated.
    pub runs: Vec<String>,
    /// `HEART_CHAOS_RECEIVER`: `http://127.0.0.1:PORT`.
    pub receiver: String,
    /// `HEART_CHAOS_NAME`: the worker's name; the owner is `NAME:PID`.
    pub name: String,
    /// `HEART_CHAOS_TTL`: lease seconds.
    pub ttl_seconds: i64,
    /// `HEART_CHAOS_WORK_MS`: the work of one unit.
    pub work_ms: u64,
    /// `HEART_CHAOS_STOP`: the worker exits once this file exists.
    pub stop_file: PathBuf,
    /// `HEART_CHAOS_SEED`.
    pub seed: u64,
}

impl WorkerEnv {
    /// Reads the environment; a missing or malformed variable is named.
    pub fn from_env() -> Result<WorkerEnv, String> {
        let var = |k: &str| std::env::var(k).map_err(|_| format!("{k} is not set"));
        let num = |k: &str| -> Result<u64, String> { var(k)?.parse().map_err(|_| format!("{k} is not a number")) };
        let runs: Vec<String> = var("HEART_CHAOS_RUNS")?.split(',').filter(|s| !s.is_empty()).map(Into::into).collect();
        if runs.is_empty() {
            return Err("HEART_CHAOS_RUNS names no run".into());
        }
        Ok(WorkerEnv {
            store: var("HEART_CHAOS_STORE")?,
            runs,
            receiver: var("HEART_CHAOS_RECEIVER")?,
            name: var("HEART_CHAOS_NAME")?,
            ttl_seconds: i64::try_from(num("HEART_CHAOS_TTL")?).map_err(|_| "HEART_CHAOS_TTL is too large")?,
            work_ms: num("HEART_CHAOS_WORK_MS")?,
            stop_file: PathBuf::from(var("HEART_CHAOS_STOP")?),
            seed: num("HEART_CHAOS_SEED")?,
        })
    }
}

/// Runs the worker until the stop file appears.
pub fn run(engine: &Prepared, env: &WorkerEnv) -> Result<(), String> {
    let store = open_until_stopped(env)?;
    let (sink, _health) = ReceiptTableSink::new(&store);
    let mut fleet = engine.build(store, None, Box::new(sink)).map_err(|e| e.to_string())?;
    let owner = format!("{}:{}", env.name, std::process::id());
    let mut rng = SplitMix64::new(env.seed);
    let parent = std::os::unix::process::parent_id();
    // A harness that died cannot create the stop file: a new parent means it is gone.
    while !env.stop_file.exists() && std::os::unix::process::parent_id() == parent {
        if let Err(e) = round(fleet.as_mut(), env, &owner, &mut rng) {
            eprintln!("{owner}: {e}");
            std::thread::sleep(PAUSE_AFTER_FAILURE);
        }
    }
    Ok(())
}

/// Opens the store, trying again while it cannot be reached (a restart in progress).
fn open_until_stopped(env: &WorkerEnv) -> Result<heart_fleet_stores::AnyStore, String> {
    loop {
        match heart_fleet_stores::open(&env.store) {
            Ok(s) => return Ok(s),
            Err(heart_fleet_stores::StoreOpenError::Unreachable { .. }) if !env.stop_file.exists() => {
                std::thread::sleep(PAUSE_AFTER_FAILURE);
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn heartbeat(fleet: &mut dyn FleetApi, owner: &str) -> Result<(), String> {
    if !fleet.heartbeat_instance(owner).map_err(|e| e.to_string())? {
        fleet.register_instance(owner, None, Some(i64::from(std::process::id()))).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn round(fleet: &mut dyn FleetApi, env: &WorkerEnv, owner: &str, rng: &mut SplitMix64) -> Result<(), String> {
    heartbeat(fleet, owner)?;
    let run = &env.runs[rng.index(env.runs.len())];
    let acq = fleet.acquire(run, owner, env.ttl_seconds).map_err(|e| e.to_string())?;
    let Some(mut fence) = acq.fence.filter(|_| acq.acquired) else {
        std::thread::sleep(Duration::from_millis(20 + rng.below(60)));
        return Ok(());
    };
    let epoch = fence.epoch.unwrap_or(0);
    for unit in [epoch - 1, epoch].into_iter().filter(|u| *u >= 1) {
        std::thread::sleep(Duration::from_millis(env.work_ms));
        if env.stop_file.exists() {
            break;
        }
        heartbeat(fleet, owner)?;
        fence = match fleet.renew(&fence, env.ttl_seconds).map_err(|e| e.to_string())? {
            Fenced::Ok { value } => value,
            Fenced::Rejected { .. } => return Ok(()),
        };
        if !send(fleet, env, &fence, unit)? {
            return Ok(());
        }
    }
    fleet.release(&fence, ReleaseTo::Ready).map_err(|e| e.to_string())?;
    Ok(())
}

/// One unit's effect; `false`: the lease is lost.
fn send(fleet: &mut dyn FleetApi, env: &WorkerEnv, fence: &FencingToken, unit: i64) -> Result<bool, String> {
    let key = format!("chaos:{}:{unit}", fence.run_id);
    let payload = json!({ "run": fence.run_id, "unit": unit });
    let mut deliver = |epoch: Option<i64>| {
        let body = json!({ "run": fence.run_id, "key": key, "owner": fence.owner, "epoch": epoch.unwrap_or(-1) });
        post_delivery(&env.receiver, &body)
    };
    let r = fleet.send_once(fence, "internal", &key, &payload, &mut deliver).map_err(|e| e.to_string())?;
    Ok(r.sent || r.reason.as_deref() == Some("deduped"))
}

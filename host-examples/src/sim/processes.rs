//! `simulate --processes N`: real worker processes (copies of this binary, started with the
//! hidden `worker` subcommand) against one shared store (a SQLite file or PostgreSQL), some
//! killed with SIGKILL while they hold a lease, ending in the same safety report as the
//! in-process simulation, computed from bookkeeping that does not trust the library.
//!
//! # The fleet
//!
//! The parent creates `runs` runs (idempotency keys `sim:<sim id>:run:<n>`), each with
//! `effects` effects sent through `send_once` (the durable outbox) on the `telegram` or
//! `mail` channel, and starts `processes` workers. A worker registers an instance named like
//! its lease owner (`w<k>:<pid>`), picks a run that is not completed, acquires it (ttl
//! `--ttl`), and for each effect: works `--work-ms`, renews when a third of the lease is
//! gone, and sends. It then releases the run `completed`. When `send_once` answers `deduped`
//! and the intent is still dispatched (a killed holder dispatched it), it keeps its lease and
//! waits for the reconciler. It exits once every run of the simulation is completed.
//!
//! The parent is the sweeper: every few hundred milliseconds the TTL sweep, the liveness
//! sweep (instances silent for more than the ttl are dead) and the reconciler, whose probe
//! asks the receiving system (below). During the run it kills `--kills` workers (default:
//! one per process) with SIGKILL (`Child::kill`), each at a moment its journal shows it
//! holding a lease, and starts a replacement. It stops when the fleet is quiescent: every
//! run completed, no intent open, every worker exited. The run is bounded by
//! `--max-seconds` (workers get the same deadline); past it the remaining workers are
//! killed and the report says `quiescent: false`, with the verdict `did-not-finish` (exit 3)
//! when no safety count is non-zero but the unfinished runs and their undelivered effects
//! (a stop explains those, and proves nothing either way), `unsafe` otherwise.
//!
//! With `--max-retries` every process runs with that retry ceiling and the sweeper requeues
//! the simulation's quarantined runs as an operator would. With `--inject-fault` every
//! process runs over the same deliberately broken store as the in-process simulation
//! ([`FaultyStore`]): the report must then come out unsafe. The in-process fleet's knobs
//! (`--workers`, `--crash-rate`, `--pause-rate`, `--steps`, `--sweep-every`) have no meaning
//! here and are refused by the command line.
//!
//! # The receiving system
//!
//! An effect is a delivery to a receiving system that lives in two tables of the shared
//! store, written through a connection of its own:
//!
//! * `sim_effects`: one row per delivery, append-only (no unique constraint: a duplicate
//!   must be recorded to be counted, not refused). The row is inserted by one statement that
//!   also reads the run's row at that instant and stores whether the firing token was the
//!   run's live lease (`live`: status held, owner, expiry and epoch equal, expiry after the
//!   store's `now`). The delivery and its witness are one atomic write.
//! * `sim_refused`, primary key `(sim id, effect key, epoch)`: the fencing the receiving
//!   side does with the epoch handed to the effect. The reconciler's probe, for a dispatched
//!   intent whose fence expired, looks for a delivery with the intent's epoch: found means
//!   `sent` (with the delivery as evidence), else it inserts a refusal of that epoch and
//!   answers `not-sent`. A delivery first checks for a refusal of its epoch. Both run in one
//!   transaction per effect key (SQLite `BEGIN IMMEDIATE`; PostgreSQL an advisory lock on
//!   the key), so `not-sent` is final, as the probe contract requires: a worker stalled past
//!   its lease cannot land a send after the reconciler reopened the intent.
//!
//! # Bookkeeping
//!
//! * **Journals.** Each worker appends JSON lines to a journal of its own, each line
//!   `fsync`ed before the worker goes on: `lease` (run, expiry, epoch) after an acquire,
//!   `renew`, `before` (run, effect key, epoch) *before* each delivery, `after` (its outcome)
//!   once `send_once` returned, `released` / `dropped`. The parent reads them to kill workers
//!   that hold a lease, and to know which kills landed between a `before` and its `after`.
//! * **Receipts.** Every process (workers and the parent's sweeper) appends its receipts to
//!   the store's `heart_receipts` table, in the same transaction as the write it records, so
//!   a kill takes both or neither.
//!
//! # The safety report
//!
//! * `exclusion_violations`: per run, the lease intervals rebuilt from the receipts
//!   (`acquired` at its `at` until the latest expiry granted by `acquired`/`renewed`, cut
//!   short by `released` or `force_released`; a `reclaimed` or `quarantined` recovery ends it
//!   without cutting it, as a recovery must come after the expiry) that overlap; plus
//!   deliveries whose time falls inside another lease's interval on the same run.
//! * `duplicate_effects`: deliveries of an effect beyond its first.
//! * `stale_commits`: deliveries whose atomic witness says the token was not the live lease;
//!   deliveries outside the firing lease's own interval (or by an owner with no lease on the
//!   run); deliveries no worker announced with a `before` line.
//! * `unfinished_runs`: runs not `completed` at the end.
//! * `missing_effects`: effects never delivered, and `after` lines reporting a send whose
//!   delivery is not in `sim_effects`.
//! * `zombie_writes`: `renewed` or `released` receipts stamped at or after the end of the
//!   lease they extend or end, or by an owner with no lease on the run left.
//! * `receipt_mismatches`: receipts that do not verify; effects with more than one
//!   `effect_committed` receipt, or one without a delivery; delivered effects with none,
//!   unless the delivering worker was killed between its `before` and `after` lines (its
//!   receipt died with it: counted in `receipts_lost_to_kills`); and each run's lease grants
//!   (its fencing epoch) without their `acquired` receipt in the table, or the reverse.
//!
//! A receipt emitted while no write was held whose insert failed is journaled by
//! the process's sink, whole; the books above count it as what happened, and the report
//! counts it in `receipts_lost_to_store_errors`. An insert the process gave up on may still
//! land (its bytes were in flight when the connection was dropped): a journaled receipt
//! found in the table is counted once, in `receipts_landed_after_store_errors`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heart_fleet_core::canonical;
use heart_fleet_core::ops::{
    DEFAULT_RECONCILE_LIMIT, DEFAULT_RECONCILE_MAX_ATTEMPTS, DEFAULT_SWEEP_LIMIT, Fenced, ReleaseTo,
};
use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::request::{NewRun, StoreReply, StoreRequest};
use heart_fleet_core::sql::{Dialect, SqlParam, SqlRow, SqlValue, Statement};
use heart_fleet_core::{
    ErrorCode, FencingToken, HeartMetrics, IntentRow, LeaseStore, ProbeVerdict, StoreError, Timestamp, verify_receipt,
};
use heart_fleet_stores::receipts::{ReceiptTableSink, StoredReceipt, TableSinkHealth};
use heart_fleet_stores::{AnyStore, StoreTarget, Tx, redact};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Fault, FaultyStore, SafetyCounts, Verdict, metrics_text};
use crate::engine::{Engine, EngineKind};
use crate::rng::SplitMix64;
use crate::sinks::FanoutSink;

/// The environment variable that hands the store URL to workers (kept out of `ps`).
pub const STORE_ENV: &str = "HEART_FLEET_SIM_STORE";

/// How often the parent runs the sweeper.
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// How long the parent sleeps between looks at its workers.
const TICK: Duration = Duration::from_millis(40);

/// Parameters of a multi-process simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcConfig {
    /// Worker processes alive at a time.
    pub processes: u32,
    /// Runs.
    pub runs: u32,
    /// Effects per run.
    pub effects: u32,
    /// Lease length in seconds (also the liveness TTL).
    pub ttl_seconds: i64,
    /// Workers to kill with SIGKILL while they hold a lease.
    pub kills: u32,
    /// Seed of the parent's choices (and of each worker's).
    pub seed: u64,
    /// Wall-clock bound of the whole run.
    pub max_seconds: u64,
    /// Work before each effect, in milliseconds.
    pub work_ms: u64,
    /// Pause on each side of a delivery (widens the window a kill can hit).
    pub effect_ms: u64,
    /// What runs the lease operations, in the parent and in every worker (`--engine`).
    pub engine: EngineKind,
    /// Retry ceiling in every process (`None`: never quarantine); the sweeper requeues the
    /// simulation's quarantined runs as an operator would.
    pub max_retries: Option<u32>,
    /// A deliberate store fault in every process (`--inject-fault`): the report must then
    /// come out unsafe.
    pub fault: Fault,
    /// The key files every process signs its receipts with (`--signing-key`).
    pub signing_keys: Vec<PathBuf>,
}

/// The report of a multi-process simulation: the in-process report's safety counts, and
/// what happened.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcReport {
    /// `processes`.
    pub mode: &'static str,
    /// The store (password redacted).
    pub store: String,
    /// This simulation's id (its rows carry it).
    pub sim_id: String,
    /// The seed.
    pub seed: u64,
    /// Worker processes alive at a time.
    pub processes: u32,
    /// Runs.
    pub runs: u32,
    /// Effects per run.
    pub effects_per_run: u32,
    /// Lease length.
    pub ttl_seconds: i64,
    /// Retry ceiling (`null`: unlimited).
    pub max_retries: Option<u32>,
    /// The injected store fault (`none` normally).
    pub fault: Fault,
    /// The wall-clock bound (`--max-seconds`).
    pub max_seconds: u64,
    /// Wall time of the run.
    pub elapsed_ms: u64,
    /// Every run completed, no intent open, every worker exited, within the bound.
    pub quiescent: bool,
    /// Worker processes started in all.
    pub workers_spawned: u64,
    /// Workers killed with SIGKILL (each while its journal showed it holding a lease).
    pub kills: u64,
    /// Kills that landed between a `before` line and its `after` (mid-delivery).
    pub kills_mid_effect: u64,
    /// Workers that exited with a failure status.
    pub worker_failures: u64,
    /// The first lines of their error output.
    pub worker_errors: Vec<String>,
    /// Leases granted (`acquired` receipts).
    pub leases: u64,
    /// Effects that must be delivered.
    pub effects_expected: u64,
    /// Deliveries recorded by the receiving system.
    pub effects_fired: u64,
    /// Deliveries the receiving system refused (an epoch the reconciler had fenced off).
    pub fires_refused: u64,
    /// Runs recovered by the TTL sweep.
    pub reclaimed: u64,
    /// Runs recovered by the liveness sweep.
    pub liveness_reclaimed: u64,
    /// Expired leases of killed holders that a worker's `acquire` took over (a recovery too,
    /// with its `reclaimed` receipt: `reclaimed + liveness_reclaimed + takeovers` is the
    /// number of `reclaimed` receipts), from the workers' journals.
    pub takeovers: u64,
    /// Quarantined runs the sweeper requeued (with `--max-retries`).
    pub requeued: u64,
    /// Store failures the sweeper and the workers rode through (a lost connection, a missed
    /// deadline): each failed one request, and the process went on.
    pub store_errors: u64,
    /// Workers still running when the time bound was reached (killed then).
    pub stopped_at_bound: u64,
    /// Intents the reconciler committed from a delivery it found.
    pub reconciler_committed: u64,
    /// Intents the reconciler reopened (no delivery: the epoch is now refused).
    pub reconciler_reopened: u64,
    /// Receipts of this simulation's runs in `heart_receipts`.
    pub receipts: u64,
    /// Delivered effects whose `effect_committed` receipt died with a killed worker.
    pub receipts_lost_to_kills: u64,
    /// Receipts lost to store failures: inserts that failed (a lost connection; the process
    /// journaled each receipt, and the books count them as what happened), and
    /// `effect_committed` receipts never emitted because the commit's answer was lost.
    pub receipts_lost_to_store_errors: u64,
    /// Receipts whose insert the process saw fail (and journaled) that are in the table all
    /// the same: the statement reached the server after the client had given up on it.
    pub receipts_landed_after_store_errors: u64,
    /// The seven safety counts (top-level keys of the JSON report).
    #[serde(flatten)]
    pub safety: SafetyCounts,
    /// Whether every safety count is zero.
    pub safe: bool,
    /// `safe`, `unsafe`, or `did-not-finish`: the time bound came first and no safety count
    /// is non-zero but those the unfinished runs explain (their runs and their effects).
    pub verdict: Verdict,
    /// The store clock at the end.
    pub final_time: String,
    /// The parent's (sweeper's) 13 counters; workers' counters die with them.
    pub metrics: HeartMetrics,
    /// Receipts of this simulation in `heart_receipts` by event, from every process.
    pub receipts_by_event: BTreeMap<String, u64>,
    /// The receipts lost to store failures, by event.
    pub receipts_lost_by_event: BTreeMap<String, u64>,
}

impl ProcReport {
    /// The report for people.
    pub fn write_human(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(out, "== heart-fleet simulate report (processes) ==")?;
        let retries = self.max_retries.map_or_else(|| "unlimited".to_owned(), |m| m.to_string());
        writeln!(
            out,
            "store {}, sim {}, seed {}, {} processes, {} runs x {} effects, ttl {} s, max retries {retries}",
            self.store, self.sim_id, self.seed, self.processes, self.runs, self.effects_per_run, self.ttl_seconds
        )?;
        if self.fault != Fault::None {
            writeln!(out, "INJECTED FAULT: {} (the store is broken on purpose)", self.fault.as_str())?;
        }
        let quiet = if self.quiescent { "quiescent" } else { "NOT quiescent" };
        writeln!(out, "{} ms ({quiet}), clock at {}", self.elapsed_ms, self.final_time)?;
        writeln!(
            out,
            "processes: {} started, {} killed with SIGKILL ({} mid-delivery), {} failed",
            self.workers_spawned, self.kills, self.kills_mid_effect, self.worker_failures
        )?;
        for e in &self.worker_errors {
            writeln!(out, "  worker error: {e}")?;
        }
        writeln!(
            out,
            "work: {} leases, {}/{} effects delivered ({} refused), {} recovered ({} by the TTL sweep, {} by liveness, \
             {} taken over by acquire), {} requeued, reconciler {} committed / {} reopened, {} receipts \
             ({} lost to kills, {} to store failures, {} landed after a failed insert)",
            self.leases,
            self.effects_fired,
            self.effects_expected,
            self.fires_refused,
            self.reclaimed + self.liveness_reclaimed + self.takeovers,
            self.reclaimed,
            self.liveness_reclaimed,
            self.takeovers,
            self.requeued,
            self.reconciler_committed,
            self.reconciler_reopened,
            self.receipts,
            self.receipts_lost_to_kills,
            self.receipts_lost_to_store_errors,
            self.receipts_landed_after_store_errors
        )?;
        writeln!(out, "sweeper metrics: {}", metrics_text(&self.metrics))?;
        self.safety.write_human(out)?;
        match self.verdict {
            Verdict::Safe => writeln!(out, "result: SAFE (every safety count is 0)"),
            Verdict::Unsafe => writeln!(out, "result: UNSAFE"),
            Verdict::DidNotFinish => writeln!(
                out,
                "result: DID NOT FINISH (the --max-seconds bound of {} s came first, {} runs unfinished; no other \
                 safety count is non-zero: this run proves nothing either way)",
                self.max_seconds, self.safety.unfinished_runs
            ),
        }
    }
}

fn err_text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Whether an error is the store failing (a lost connection, a missed deadline, a busy
/// file): a worker or the sweeper rides through it, since the store reconnects on the next
/// request and the recovery paths resolve a write whose outcome is unknown. Anything else (a
/// journal that cannot be written, a bug) stops the process.
fn store_failure(e: &str) -> bool {
    e.starts_with("store-unavailable:") || e.starts_with("postgres") || e.starts_with("sqlite")
}

/// How long a worker or the sweeper waits after a store failure before trying again.
const STORE_RETRY_PAUSE: Duration = Duration::from_millis(200);

fn text(s: &str) -> SqlParam {
    SqlParam::Text(s.to_owned())
}

fn stmt(sql: String, params: Vec<SqlParam>) -> Statement {
    Statement { sql, params }
}

fn cell<'a>(row: &'a SqlRow, name: &str) -> Option<&'a SqlValue> {
    row.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn cell_text(row: &SqlRow, name: &str) -> String {
    match cell(row, name) {
        Some(SqlValue::Text(t)) => t.clone(),
        Some(SqlValue::Int(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn cell_int(row: &SqlRow, name: &str) -> i64 {
    match cell(row, name) {
        Some(SqlValue::Int(n)) => *n,
        Some(SqlValue::Text(t)) => t.parse().unwrap_or(0),
        Some(SqlValue::Bool(b)) => i64::from(*b),
        _ => 0,
    }
}

/// Creates the receiving system's tables (idempotent).
fn create_sim_tables(store: &mut AnyStore) -> Result<(), StoreError> {
    let id = match store.dialect() {
        Dialect::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
    };
    store.batch(&format!(
        "CREATE TABLE IF NOT EXISTS sim_effects (id {id}, sim_id TEXT NOT NULL, run_id TEXT NOT NULL, \
         effect_key TEXT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL, live INTEGER NOT NULL, at TEXT NOT NULL); \
         CREATE INDEX IF NOT EXISTS sim_effects_key ON sim_effects (sim_id, effect_key); \
         CREATE TABLE IF NOT EXISTS sim_refused (sim_id TEXT NOT NULL, effect_key TEXT NOT NULL, epoch BIGINT NOT NULL, \
         PRIMARY KEY (sim_id, effect_key, epoch));"
    ))
}

fn run_prefix(sim_id: &str) -> String {
    format!("sim:{sim_id}:run:")
}

/// The simulation's runs: `(id, status)`, in key order.
fn sim_runs(store: &mut AnyStore, sim_id: &str) -> Result<Vec<(String, String)>, StoreError> {
    let like = format!("{}%", run_prefix(sim_id));
    let q = match store.dialect() {
        Dialect::Sqlite => stmt(
            "SELECT id, status FROM agent_runs WHERE idempotency_key LIKE ?1 ORDER BY idempotency_key".into(),
            vec![text(&like)],
        ),
        Dialect::Postgres => stmt(
            "SELECT id::text AS id, status FROM agent_runs WHERE idempotency_key LIKE $1::text \
             ORDER BY idempotency_key"
                .into(),
            vec![text(&like)],
        ),
    };
    Ok(store.query(&q)?.iter().map(|r| (cell_text(r, "id"), cell_text(r, "status"))).collect())
}

/// The fencing epoch of each of the simulation's runs: how many leases were granted on it.
fn sim_epochs(store: &mut AnyStore, sim_id: &str) -> Result<BTreeMap<String, i64>, StoreError> {
    let like = format!("{}%", run_prefix(sim_id));
    let q = match store.dialect() {
        Dialect::Sqlite => {
            stmt("SELECT id, fencing_epoch FROM agent_runs WHERE idempotency_key LIKE ?1".into(), vec![text(&like)])
        }
        Dialect::Postgres => stmt(
            "SELECT id::text AS id, fencing_epoch::bigint AS fencing_epoch FROM agent_runs \
             WHERE idempotency_key LIKE $1::text"
                .into(),
            vec![text(&like)],
        ),
    };
    Ok(store.query(&q)?.iter().map(|r| (cell_text(r, "id"), cell_int(r, "fencing_epoch"))).collect())
}

/// Lease grants without their `acquired` receipt in the table, and `acquired` receipts
/// without a grant: each run's fencing epoch against its `acquired` receipts. The receipt is
/// written in the grant's own transaction, so a kill or a lost connection takes both or
/// neither, and this is zero.
fn grants_unmatched(epochs: &BTreeMap<String, i64>, stored: &[StoredReceipt]) -> u64 {
    let mut acquired: BTreeMap<&str, i64> = BTreeMap::new();
    for r in stored {
        if field(&r.receipt, "event") == Some("acquired")
            && let Some(run) = field(&r.receipt, "runId")
        {
            *acquired.entry(run).or_default() += 1;
        }
    }
    epochs.iter().map(|(run, epoch)| (epoch - acquired.get(run.as_str()).copied().unwrap_or(0)).unsigned_abs()).sum()
}

fn open_intents(store: &mut AnyStore, sim_id: &str) -> Result<i64, StoreError> {
    let like = format!("{}%", run_prefix(sim_id));
    let p = match store.dialect() {
        Dialect::Sqlite => "?1",
        Dialect::Postgres => "$1::text",
    };
    let q = stmt(
        format!(
            "SELECT count(*) AS n FROM effect_intents i JOIN agent_runs r ON r.id = i.run_id \
             WHERE r.idempotency_key LIKE {p} AND i.state IN ('intent', 'dispatched')"
        ),
        vec![text(&like)],
    );
    Ok(store.query(&q)?.first().map_or(0, |r| cell_int(r, "n")))
}

fn intent_state(store: &mut AnyStore, run_id: &str, key: &str) -> Result<Option<String>, StoreError> {
    let q = match store.dialect() {
        Dialect::Sqlite => stmt(
            "SELECT state FROM effect_intents WHERE run_id = ?1 AND effect_key = ?2".into(),
            vec![text(run_id), text(key)],
        ),
        Dialect::Postgres => stmt(
            "SELECT state FROM effect_intents WHERE run_id = $1::text::uuid AND effect_key = $2::text".into(),
            vec![text(run_id), text(key)],
        ),
    };
    Ok(store.query(&q)?.first().map(|r| cell_text(r, "state")))
}

/// The effect key of effect `j` of a run.
pub fn sim_effect_key(sim_id: &str, run_id: &str, j: u32) -> String {
    canonical::effect_key("sim", &json!({ "sim": sim_id, "run": run_id, "effect": j }))
}

fn lock_key(tx: &mut Tx<'_>, sim_id: &str, key: &str) -> Result<(), StoreError> {
    if tx.dialect() == Dialect::Postgres {
        tx.query(&stmt(
            "SELECT 1::int AS ok FROM (SELECT pg_advisory_xact_lock(hashtext($1::text))) l".into(),
            vec![text(&format!("{sim_id}/{key}"))],
        ))?;
    }
    Ok(())
}

/// The receiving system takes a delivery: refused if the reconciler fenced off `epoch`,
/// else one row in `sim_effects` with the atomic witness of the run's row.
fn deliver(
    ext: &mut AnyStore,
    sim_id: &str,
    token: &FencingToken,
    key: &str,
    epoch: i64,
) -> Result<Result<i64, String>, StoreError> {
    ext.transaction(|tx| {
        lock_key(tx, sim_id, key)?;
        let refused = match tx.dialect() {
            Dialect::Sqlite => stmt(
                "SELECT count(*) AS n FROM sim_refused WHERE sim_id = ?1 AND effect_key = ?2 AND epoch = ?3".into(),
                vec![text(sim_id), text(key), SqlParam::Int(epoch)],
            ),
            Dialect::Postgres => stmt(
                "SELECT count(*) AS n FROM sim_refused WHERE sim_id = $1::text AND effect_key = $2::text \
                 AND epoch = $3::bigint"
                    .into(),
                vec![text(sim_id), text(key), SqlParam::Int(epoch)],
            ),
        };
        if tx.query(&refused)?.first().is_some_and(|r| cell_int(r, "n") > 0) {
            return Ok(Err(format!(
                "the receiving system refuses epoch {epoch} for this effect (reconciled as not sent)"
            )));
        }
        let params = vec![
            text(sim_id),
            text(&token.run_id),
            text(key),
            text(&token.owner),
            SqlParam::Int(epoch),
            text(&token.lease_expires_at.to_iso()),
        ];
        let insert = match tx.dialect() {
            Dialect::Sqlite => stmt(
                "INSERT INTO sim_effects (sim_id, run_id, effect_key, owner, epoch, live, at) \
                 SELECT ?1, ?2, ?3, ?4, ?5, \
                 CASE WHEN r.status IN ('leased', 'running') AND r.lease_owner = ?4 AND r.lease_expires_at = ?6 \
                 AND r.fencing_epoch = ?5 AND r.lease_expires_at > c.now THEN 1 ELSE 0 END, c.now \
                 FROM (SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS now) c LEFT JOIN agent_runs r ON r.id = ?2 \
                 RETURNING id"
                    .into(),
                params,
            ),
            Dialect::Postgres => stmt(
                "WITH c AS MATERIALIZED (SELECT date_trunc('milliseconds', clock_timestamp()) AS now) \
                 INSERT INTO sim_effects (sim_id, run_id, effect_key, owner, epoch, live, at) \
                 SELECT $1::text, $2::text, $3::text, $4::text, $5::bigint, \
                 CASE WHEN r.status IN ('leased', 'running') AND r.lease_owner = $4::text \
                 AND r.lease_expires_at = $6::text::timestamptz AND r.fencing_epoch = $5::bigint \
                 AND r.lease_expires_at > c.now THEN 1 ELSE 0 END, \
                 to_char(c.now AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') \
                 FROM c LEFT JOIN agent_runs r ON r.id = $2::text::uuid RETURNING id"
                    .into(),
                params,
            ),
        };
        let rows = tx.query(&insert)?;
        Ok(Ok(rows.first().map_or(0, |r| cell_int(r, "id"))))
    })
}

/// The reconciler's probe: a delivery with the intent's epoch means sent; otherwise the
/// epoch is refused from now on and the answer is not sent (final).
fn probe(ext: &mut AnyStore, sim_id: &str, intent: &IntentRow) -> Result<ProbeVerdict, StoreError> {
    let epoch = intent.fence_epoch.unwrap_or(-1);
    let key = intent.effect_key.clone();
    ext.transaction(|tx| {
        lock_key(tx, sim_id, &key)?;
        let (find, refuse) = match tx.dialect() {
            Dialect::Sqlite => (
                "SELECT id FROM sim_effects WHERE sim_id = ?1 AND effect_key = ?2 AND epoch = ?3 ORDER BY id LIMIT 1",
                "INSERT INTO sim_refused (sim_id, effect_key, epoch) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            ),
            Dialect::Postgres => (
                "SELECT id FROM sim_effects WHERE sim_id = $1::text AND effect_key = $2::text AND epoch = $3::bigint \
                 ORDER BY id LIMIT 1",
                "INSERT INTO sim_refused (sim_id, effect_key, epoch) VALUES ($1::text, $2::text, $3::bigint) \
                 ON CONFLICT DO NOTHING",
            ),
        };
        let params = vec![text(sim_id), text(&key), SqlParam::Int(epoch)];
        if let Some(row) = tx.query(&stmt(find.into(), params.clone()))?.first() {
            return Ok(ProbeVerdict::Sent(
                json!({ "delivery": cell_int(row, "id"), "epoch": epoch, "by": "reconciler" }),
            ));
        }
        tx.query(&stmt(refuse.into(), params))?;
        Ok(ProbeVerdict::NotSent)
    })
}

// ------------------------------------------------------------------------------------------
// Journals
// ------------------------------------------------------------------------------------------

/// A worker's journal: JSON lines, each `fsync`ed before the worker goes on.
struct Journal {
    file: File,
}

impl Journal {
    fn open(path: &Path) -> Result<Journal, String> {
        let file =
            OpenOptions::new().create(true).append(true).open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Journal { file })
    }

    fn write(&mut self, line: &Value) -> Result<(), String> {
        let mut text = line.to_string();
        text.push('\n');
        self.file.write_all(text.as_bytes()).and_then(|()| self.file.sync_data()).map_err(|e| format!("journal: {e}"))
    }
}

/// The table sink, journaling each receipt it could not insert (the whole receipt), so the
/// checker rebuilds the history from what happened, not only from what reached the table.
/// (A receipt that cannot be inserted rolls its write back, so this journals only a receipt
/// emitted while no write was held, which the core's operations never emit.)
struct JournaledTableSink {
    table: ReceiptTableSink,
    health: TableSinkHealth,
    journaled: usize,
    journal: Journal,
}

impl JournaledTableSink {
    fn new(store: &AnyStore, journal: &Path, signing_keys: &[PathBuf]) -> Result<JournaledTableSink, String> {
        let (table, health) = ReceiptTableSink::signed(store, crate::keys::fleet_signer(signing_keys)?);
        Ok(JournaledTableSink { table, health, journaled: 0, journal: Journal::open(journal)? })
    }
}

impl ReceiptSink for JournaledTableSink {
    fn emit(&mut self, receipt: &heart_fleet_core::HeartReceipt) {
        self.table.emit(receipt);
        for lost in self.health.lost_since(self.journaled) {
            self.journaled += 1;
            // A journal that cannot be written fails the checker's books, which is what it
            // should do: nothing else can be done from inside a sink.
            let _ = self.journal.write(&json!({"ev": LOST_RECEIPT, "receipt": lost.receipt, "error": lost.error}));
        }
    }
}

/// The `after` outcome of a `send_once` that ended in a store failure.
const STORE_ERROR_OUTCOME: &str = "store-error";

/// The journal event of a receipt the table sink could not insert.
const LOST_RECEIPT: &str = "receipt-lost";

/// The parent's journal (in the simulation's directory): the receipts its sink lost.
const PARENT_JOURNAL: &str = "parent.journal";

/// The receipts journaled as lost, as rows of the table they did not reach.
fn lost_receipts<'a>(journals: impl Iterator<Item = &'a Vec<Value>>) -> Vec<StoredReceipt> {
    journals
        .flatten()
        .filter(|l| field(l, "ev") == Some(LOST_RECEIPT))
        .filter_map(|l| l.get("receipt").cloned())
        .map(|receipt| StoredReceipt { id: i64::MAX, receipt, columns_differ: false })
        .collect()
}

/// The journaled receipts that are not in the table, and how many are.
///
/// An insert the process gave up on may still have landed (its bytes were on their way when
/// the connection was dropped): a receipt found in the table is stored, not lost, and
/// counting it twice would make one lease two overlapping ones.
fn not_in_table(journaled: Vec<StoredReceipt>, stored: &[StoredReceipt]) -> (Vec<StoredReceipt>, u64) {
    let digests: BTreeSet<&str> = stored.iter().filter_map(|r| field(&r.receipt, "digest")).collect();
    let before = journaled.len();
    let lost: Vec<StoredReceipt> =
        journaled.into_iter().filter(|r| field(&r.receipt, "digest").is_none_or(|d| !digests.contains(d))).collect();
    let landed = (before - lost.len()) as u64;
    (lost, landed)
}

fn read_journal(path: &Path) -> Vec<Value> {
    let Ok(file) = File::open(path) else { return Vec::new() };
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .collect()
}

fn holding(journal: &[Value]) -> bool {
    journal
        .last()
        .and_then(|l| l.get("ev"))
        .and_then(Value::as_str)
        .is_some_and(|ev| matches!(ev, "lease" | "renew" | "before" | "after" | "wait"))
}

// ------------------------------------------------------------------------------------------
// The worker
// ------------------------------------------------------------------------------------------

/// What a worker process is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// The simulation.
    pub sim_id: String,
    /// The worker's name (`w<k>`).
    pub name: String,
    /// Its journal.
    pub journal: PathBuf,
    /// Lease length.
    pub ttl_seconds: i64,
    /// Effects per run.
    pub effects: u32,
    /// Work before each effect.
    pub work_ms: u64,
    /// Pause on each side of a delivery.
    pub effect_ms: u64,
    /// Exit after this long, whatever is left.
    pub deadline_ms: u64,
    /// Seed of its choices.
    pub seed: u64,
    /// What runs its lease operations (`--engine`, passed on by the parent).
    pub engine: EngineKind,
    /// Retry ceiling (`--max-retries`, passed on by the parent).
    pub max_retries: Option<u32>,
    /// The injected store fault (`--inject-fault`, passed on by the parent).
    pub fault: Fault,
    /// The key files its receipts are signed with (`--signing-key`, passed on by the parent;
    /// `$HEART_FLEET_SIGNING_KEY` it inherits).
    pub signing_keys: Vec<PathBuf>,
}

struct Worker {
    cfg: WorkerConfig,
    owner: String,
    fleet: Box<dyn Engine<Store = FaultyStore<AnyStore>>>,
    ext: AnyStore,
    journal: Journal,
    deadline: Instant,
}

/// Opens the store, trying again after a store failure (the database was unreachable, or the
/// connection was lost during the schema check: a read) until `deadline`. A store that is not
/// migrated, or a URL that is not a store, stops the worker at once.
fn open_riding_through(url: &str, deadline: Instant) -> Result<AnyStore, String> {
    loop {
        match heart_fleet_stores::open(url) {
            Ok(store) => return Ok(store),
            Err(heart_fleet_stores::StoreOpenError::Unreachable { .. }) if Instant::now() < deadline => {
                std::thread::sleep(STORE_RETRY_PAUSE);
            }
            Err(e) => return Err(err_text(e)),
        }
    }
}

/// Runs a worker process until every run of the simulation is completed (or its deadline).
pub fn run_worker(url: &str, cfg: WorkerConfig) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(cfg.deadline_ms);
    let store = open_riding_through(url, deadline)?;
    let ext = open_riding_through(url, deadline)?;
    let sinks: Vec<Box<dyn ReceiptSink>> =
        vec![Box::new(JournaledTableSink::new(&store, &cfg.journal, &cfg.signing_keys)?)];
    let store = FaultyStore { inner: store, fault: cfg.fault };
    let fleet = cfg
        .engine
        .prepare()
        .map_err(err_text)?
        .build(store, cfg.max_retries, Box::new(FanoutSink::new(sinks)))
        .map_err(err_text)?;
    let owner = format!("{}:{}", cfg.name, std::process::id());
    let journal = Journal::open(&cfg.journal)?;
    let mut w = Worker { cfg, owner, fleet, ext, journal, deadline };
    w.main()
}

impl Worker {
    fn note(&mut self, line: Value) -> Result<(), String> {
        self.journal.write(&line)
    }

    fn instance_heartbeat(&mut self) -> Result<(), String> {
        if !self.fleet.heartbeat_instance(&self.owner).map_err(err_text)? {
            let host = crate::identity::hostname();
            self.fleet
                .register_instance(&self.owner, Some(&host), Some(i64::from(std::process::id())))
                .map_err(err_text)?;
        }
        Ok(())
    }

    fn main(&mut self) -> Result<(), String> {
        // The first round's heartbeat registers the instance (so a store failure right at the
        // start is ridden through like any other).
        self.note(json!({"ev": "start", "owner": self.owner}))?;
        let mut rng = SplitMix64::new(self.cfg.seed);
        while Instant::now() < self.deadline {
            match self.round(&mut rng) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if store_failure(&e) => {
                    // The lease this worker may hold is given up (its token may be stale, a
                    // write of it may or may not have landed): it expires and is swept.
                    self.note(json!({"ev": "store-error", "error": e}))?;
                    self.note(json!({"ev": "dropped", "why": "a store failure"}))?;
                    std::thread::sleep(STORE_RETRY_PAUSE);
                }
                Err(e) => return Err(e),
            }
        }
        self.note(json!({"ev": "exit"}))
    }

    /// One round: heartbeat, pick an open run, work on it if won. `false`: nothing is open.
    fn round(&mut self, rng: &mut SplitMix64) -> Result<bool, String> {
        self.instance_heartbeat()?;
        let runs = sim_runs(&mut self.ext, &self.cfg.sim_id).map_err(err_text)?;
        let mut open: Vec<String> = runs.into_iter().filter(|(_, s)| s != "completed").map(|(id, _)| id).collect();
        if open.is_empty() {
            return Ok(false);
        }
        rng.shuffle(&mut open);
        let mut won = None;
        for id in open {
            // The counter tells a takeover of an expired lease (a recovery) from a plain win.
            let recoveries = self.fleet.metrics().reclaims;
            let acq = self.fleet.acquire(&id, &self.owner, self.cfg.ttl_seconds).map_err(err_text)?;
            if let Some(fence) = acq.fence.filter(|_| acq.acquired) {
                won = Some((fence, self.fleet.metrics().reclaims > recoveries));
                break;
            }
        }
        match won {
            Some((fence, takeover)) => self.work(fence, takeover)?,
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        Ok(true)
    }

    /// Renews when a third of the lease is gone. `false`: the lease is lost (journaled).
    fn keep(&mut self, token: &mut FencingToken, last: &mut Instant) -> Result<bool, String> {
        self.instance_heartbeat()?;
        if last.elapsed() < Duration::from_millis((self.cfg.ttl_seconds * 1000 / 3) as u64) {
            return Ok(true);
        }
        match self.fleet.renew(token, self.cfg.ttl_seconds).map_err(err_text)? {
            Fenced::Ok { value } => {
                *token = value;
                *last = Instant::now();
                let exp = token.lease_expires_at.to_iso();
                self.note(json!({"ev": "renew", "run": token.run_id, "exp": exp}))?;
                Ok(true)
            }
            Fenced::Rejected { cause } => {
                self.note(
                    json!({"ev": "dropped", "run": token.run_id, "why": format!("renew refused ({})", cause.as_str())}),
                )?;
                Ok(false)
            }
        }
    }

    fn work(&mut self, fence: FencingToken, takeover: bool) -> Result<(), String> {
        let mut token = fence;
        let mut last = Instant::now();
        let exp = token.lease_expires_at.to_iso();
        self.note(json!({"ev": "lease", "run": token.run_id, "exp": exp, "epoch": token.epoch, "takeover": takeover}))?;
        for j in 0..self.cfg.effects {
            let key = sim_effect_key(&self.cfg.sim_id, &token.run_id, j);
            let channel = if j % 2 == 0 { "telegram" } else { "mail" };
            let payload = json!({ "run": token.run_id, "effect": j });
            loop {
                if Instant::now() >= self.deadline {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(self.cfg.work_ms));
                if !self.keep(&mut token, &mut last)? {
                    return Ok(());
                }
                let mut fired = false;
                let (sim_id, effect_ms) = (self.cfg.sim_id.clone(), self.cfg.effect_ms);
                let (ext, journal, tok) = (&mut self.ext, &mut self.journal, token.clone());
                let k = key.clone();
                let mut send = |epoch: Option<i64>| -> Result<Value, String> {
                    let epoch = epoch.unwrap_or(-1);
                    fired = true;
                    journal.write(&json!({"ev": "before", "run": tok.run_id, "key": k, "epoch": epoch}))?;
                    std::thread::sleep(Duration::from_millis(effect_ms));
                    let id = deliver(ext, &sim_id, &tok, &k, epoch).map_err(err_text)??;
                    std::thread::sleep(Duration::from_millis(effect_ms));
                    Ok(json!({ "delivery": id, "epoch": epoch }))
                };
                let res = self.fleet.send_once(&token, channel, &key, &payload, &mut send);
                let epoch = token.epoch;
                match res {
                    Err(e) if e.code == ErrorCode::EffectFailed => {
                        self.note(
                            json!({"ev": "after", "run": token.run_id, "key": key, "epoch": epoch, "fired": fired,
                                         "outcome": "error", "message": e.message}),
                        )?;
                        self.note(json!({"ev": "dropped", "run": token.run_id, "why": "the send failed"}))?;
                        return Ok(());
                    }
                    Err(e) => {
                        if store_failure(&e.to_string()) {
                            // The commit after a send may have landed with its answer lost: the
                            // effect's receipt, never emitted, is then missing for a reason.
                            self.note(json!({"ev": "after", "run": token.run_id, "key": key, "epoch": epoch,
                                             "fired": fired, "outcome": STORE_ERROR_OUTCOME}))?;
                        }
                        return Err(e.to_string());
                    }
                    Ok(r) if r.sent => {
                        self.note(
                            json!({"ev": "after", "run": token.run_id, "key": key, "epoch": epoch, "fired": fired,
                                         "outcome": "sent", "committed": r.committed}),
                        )?;
                        break;
                    }
                    Ok(r) if r.code == Some(ErrorCode::Deduped) => {
                        let state = intent_state(&mut self.ext, &token.run_id, &key).map_err(err_text)?;
                        self.note(
                            json!({"ev": "after", "run": token.run_id, "key": key, "epoch": epoch, "fired": fired,
                                         "outcome": "deduped", "state": state}),
                        )?;
                        if matches!(state.as_deref(), Some("committed" | "abandoned")) {
                            break;
                        }
                        // Dispatched by a holder that died: wait (renewing) for the reconciler.
                        self.note(json!({"ev": "wait", "run": token.run_id, "key": key}))?;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Ok(r) => {
                        self.note(
                            json!({"ev": "after", "run": token.run_id, "key": key, "epoch": epoch, "fired": fired,
                                         "outcome": r.reason}),
                        )?;
                        self.note(json!({"ev": "dropped", "run": token.run_id, "why": r.reason}))?;
                        return Ok(());
                    }
                }
            }
        }
        match self.fleet.release(&token, ReleaseTo::Completed).map_err(err_text)? {
            Fenced::Ok { .. } => self.note(json!({"ev": "released", "run": token.run_id})),
            Fenced::Rejected { cause } => self.note(
                json!({"ev": "dropped", "run": token.run_id, "why": format!("release refused ({})", cause.as_str())}),
            ),
        }
    }
}

// ------------------------------------------------------------------------------------------
// The parent
// ------------------------------------------------------------------------------------------

struct Proc {
    name: String,
    child: Child,
    journal: PathBuf,
    stderr: PathBuf,
}

/// Children that are killed when dropped (an error path never leaves workers behind).
#[derive(Default)]
struct Procs {
    live: Vec<Proc>,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for p in &mut self.live {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

struct Parent<'a> {
    cfg: ProcConfig,
    url: String,
    sim_id: String,
    dir: PathBuf,
    fleet: Box<dyn Engine<Store = FaultyStore<AnyStore>>>,
    ext: AnyStore,
    procs: Procs,
    next_worker: u32,
    spawned: u64,
    journals: BTreeMap<String, PathBuf>,
    killed: BTreeSet<String>,
    /// Workers killed at the time bound (their last receipts may be lost too).
    stopped: BTreeSet<String>,
    kills_mid_effect: u64,
    failures: u64,
    errors: Vec<String>,
    reclaimed: u64,
    liveness_reclaimed: u64,
    requeued: u64,
    store_errors: u64,
    committed: u64,
    reopened: u64,
    progress: Option<&'a mut dyn Write>,
    start: Instant,
}

/// Runs a multi-process simulation against the store at `url` (a SQLite file or
/// PostgreSQL, migrated). `sink` gets the sweeper's receipts too; `progress` gets `# ...`
/// lines as things happen.
pub fn run(
    cfg: &ProcConfig,
    url: &str,
    sink: Option<Box<dyn ReceiptSink>>,
    progress: Option<&mut dyn Write>,
) -> Result<ProcReport, String> {
    if StoreTarget::parse(url).map_err(err_text)? == StoreTarget::SqliteMemory {
        return Err("simulate --processes needs a store the processes can share: a SQLite file or PostgreSQL, \
                    not sqlite::memory:"
            .into());
    }
    let engine = cfg.engine.prepare().map_err(err_text)?;
    let mut store = heart_fleet_stores::open(url).map_err(err_text)?;
    create_sim_tables(&mut store).map_err(|e| format!("create the simulation tables: {e}"))?;
    let ext = heart_fleet_stores::open(url).map_err(err_text)?;
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let sim_id = format!("{}-{}-{nanos}", cfg.seed, std::process::id());
    let dir = std::env::temp_dir().join(format!("heart-fleet-sim-{sim_id}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let parent_journal = dir.join(PARENT_JOURNAL);
    let mut sinks: Vec<Box<dyn ReceiptSink>> =
        vec![Box::new(JournaledTableSink::new(&store, &parent_journal, &cfg.signing_keys)?)];
    sinks.extend(sink);
    let store = FaultyStore { inner: store, fault: cfg.fault };
    let fleet = engine.build(store, cfg.max_retries, Box::new(FanoutSink::new(sinks))).map_err(err_text)?;
    let mut p = Parent {
        cfg: cfg.clone(),
        url: url.to_owned(),
        sim_id,
        dir,
        fleet,
        ext,
        procs: Procs::default(),
        next_worker: 0,
        spawned: 0,
        journals: BTreeMap::new(),
        killed: BTreeSet::new(),
        stopped: BTreeSet::new(),
        kills_mid_effect: 0,
        failures: 0,
        errors: Vec::new(),
        reclaimed: 0,
        liveness_reclaimed: 0,
        requeued: 0,
        store_errors: 0,
        committed: 0,
        reopened: 0,
        progress,
        start: Instant::now(),
    };
    p.seed_runs()?;
    let quiescent = p.drive()?;
    let report = p.report(quiescent);
    let _ = std::fs::remove_dir_all(&p.dir);
    report
}

impl Parent<'_> {
    fn note(&mut self, text: impl FnOnce() -> String) {
        if let Some(out) = self.progress.as_mut() {
            let _ = writeln!(out, "# {:>6} ms: {}", self.start.elapsed().as_millis(), text());
        }
    }

    fn seed_runs(&mut self) -> Result<(), String> {
        for i in 0..self.cfg.runs {
            let req = StoreRequest::EnsureRun(NewRun {
                idempotency_key: format!("{}{:04}", run_prefix(&self.sim_id), i + 1),
                objective: "heart-fleet simulate --processes".into(),
                created_by: "heart-fleet:simulate".into(),
            });
            let store = self.fleet.store_mut();
            // A request run by hand is settled by hand (`LeaseStore::settle`: the store holds
            // writes for its receipts table).
            let a = store.execute(req).and_then(|a| store.settle().map(|()| a));
            let a = a.map_err(|e| format!("create runs: {e}"))?;
            if !matches!(a.reply, StoreReply::Ensured { .. }) {
                return Err("create runs: the store answered something other than the run".into());
            }
        }
        Ok(())
    }

    fn spawn(&mut self) -> Result<(), String> {
        self.next_worker += 1;
        let name = format!("w{}", self.next_worker);
        let journal = self.dir.join(format!("{name}.jsonl"));
        let stderr = self.dir.join(format!("{name}.err"));
        let err_file = File::create(&stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
        let left = Duration::from_secs(self.cfg.max_seconds).saturating_sub(self.start.elapsed());
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let child = Command::new(exe)
            .env(STORE_ENV, &self.url)
            .args(["--engine", self.cfg.engine.as_str(), "worker", "--sim-id", &self.sim_id, "--name", &name])
            .arg("--journal")
            .arg(&journal)
            .args(["--ttl", &self.cfg.ttl_seconds.to_string(), "--effects", &self.cfg.effects.to_string()])
            .args(["--work-ms", &self.cfg.work_ms.to_string(), "--effect-ms", &self.cfg.effect_ms.to_string()])
            .args(["--deadline-ms", &left.as_millis().to_string()])
            .args(self.cfg.max_retries.map(|m| ["--max-retries".to_owned(), m.to_string()]).into_iter().flatten())
            .args(["--inject-fault", self.cfg.fault.as_str()])
            .args(self.cfg.signing_keys.iter().flat_map(|k| [std::ffi::OsStr::new("--signing-key"), k.as_os_str()]))
            .args(["--seed", &(self.cfg.seed.wrapping_mul(1000).wrapping_add(u64::from(self.next_worker))).to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(err_file))
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        let pid = child.id();
        self.journals.insert(name.clone(), journal.clone());
        self.procs.live.push(Proc { name: name.clone(), child, journal, stderr });
        self.spawned += 1;
        self.note(|| format!("started {name} (pid {pid})"));
        Ok(())
    }

    fn reap(&mut self) -> Result<(), String> {
        let mut i = 0;
        while i < self.procs.live.len() {
            let done = match self.procs.live.get_mut(i).map(|p| p.child.try_wait()) {
                Some(Ok(Some(status))) => Some(status),
                Some(Ok(None)) => None,
                Some(Err(e)) => return Err(format!("waiting for a worker: {e}")),
                None => break,
            };
            match done {
                Some(status) => {
                    let p = self.procs.live.remove(i);
                    if !status.success() {
                        self.failures += 1;
                        let first = std::fs::read_to_string(&p.stderr).unwrap_or_default();
                        let first = first.lines().next().unwrap_or("").to_owned();
                        if self.errors.len() < 5 {
                            self.errors.push(format!("{}: {status}: {first}", p.name));
                        }
                    }
                    let name = p.name.clone();
                    self.note(|| format!("{name} exited ({status})"));
                }
                None => i += 1,
            }
        }
        Ok(())
    }

    /// Kills a worker that holds a lease, preferring one in the middle of a delivery (its
    /// journal ends with `before`); once `any_holder` is set (the kill is overdue), any
    /// holder will do. `false` when there was no one to kill.
    fn kill_one(&mut self, rng: &mut SplitMix64, any_holder: bool) -> Result<bool, String> {
        let journals: Vec<Vec<Value>> = self.procs.live.iter().map(|p| read_journal(&p.journal)).collect();
        let mid: Vec<usize> = (0..journals.len())
            .filter(|i| {
                journals.get(*i).and_then(|j| j.last()).and_then(|l| l.get("ev")).and_then(Value::as_str)
                    == Some("before")
            })
            .collect();
        let holders: Vec<usize> =
            (0..journals.len()).filter(|i| journals.get(*i).is_some_and(|j| holding(j))).collect();
        let candidates = if !mid.is_empty() || !any_holder { mid } else { holders };
        let Some(&i) = candidates.get(rng.index(candidates.len().max(1))) else { return Ok(false) };
        let mut p = self.procs.live.remove(i);
        // Child::kill is SIGKILL on unix: no destructor, no flush, no goodbye.
        p.child.kill().map_err(|e| format!("kill {}: {e}", p.name))?;
        let _ = p.child.wait();
        let journal = read_journal(&p.journal);
        let mid = journal.last().and_then(|l| l.get("ev")).and_then(Value::as_str) == Some("before");
        if mid {
            self.kills_mid_effect += 1;
        }
        let last = journal.last().map(Value::to_string).unwrap_or_default();
        self.killed.insert(p.name.clone());
        let name = p.name.clone();
        self.note(|| format!("killed {name} with SIGKILL; its journal ends with {last}"));
        Ok(true)
    }

    fn sweep(&mut self) -> Result<(), String> {
        let ttl = self.fleet.reclaim_expired(DEFAULT_SWEEP_LIMIT).map_err(|e| format!("sweeper: {e}"))?;
        self.reclaimed += ttl.reclaimed_count;
        let live = self
            .fleet
            .reclaim_dead_instance_runs(self.cfg.ttl_seconds * 1000, DEFAULT_SWEEP_LIMIT)
            .map_err(|e| format!("sweeper (liveness): {e}"))?;
        self.liveness_reclaimed += live.reclaimed_count;
        let (ext, sim_id) = (&mut self.ext, self.sim_id.clone());
        let mut probe_fn = |intent: &IntentRow| Some(probe(ext, &sim_id, intent).map_err(err_text));
        let r = self
            .fleet
            .reconcile_outbox(&mut probe_fn, DEFAULT_RECONCILE_MAX_ATTEMPTS, DEFAULT_RECONCILE_LIMIT)
            .map_err(|e| format!("reconciler: {e}"))?;
        self.committed += r.committed;
        self.reopened += r.reopened;
        if self.cfg.max_retries.is_some() {
            // The operator: this simulation's quarantined runs back to ready.
            let runs = sim_runs(&mut self.ext, &self.sim_id).map_err(err_text)?;
            for (id, _) in runs.iter().filter(|(_, status)| status == "quarantined") {
                match self.fleet.requeue_run(id, "sim-operator") {
                    Ok(_) => {
                        self.requeued += 1;
                        self.note(|| format!("operator requeued quarantined {id}"));
                    }
                    // Raced by nobody in this simulation, but an answer is not a failure.
                    Err(e) if e.code == ErrorCode::InvalidState => {}
                    Err(e) => return Err(format!("sweeper (requeue {id}): {e}")),
                }
            }
        }
        if ttl.reclaimed_count + live.reclaimed_count + r.committed + r.reopened > 0 {
            self.note(|| {
                format!(
                    "sweeper: {} reclaimed by TTL, {} by liveness ({} instances dead); reconciler {} committed, {} reopened",
                    ttl.reclaimed_count,
                    live.reclaimed_count,
                    live.dead_instance_ids.len(),
                    r.committed,
                    r.reopened
                )
            });
        }
        Ok(())
    }

    fn all_completed(&mut self) -> Result<bool, String> {
        let runs = sim_runs(&mut self.ext, &self.sim_id).map_err(err_text)?;
        Ok(runs.iter().all(|(_, s)| s == "completed"))
    }

    /// The store failures the workers journaled.
    fn worker_store_errors(&self) -> u64 {
        let count = |path: &PathBuf| {
            read_journal(path).iter().filter(|l| l.get("ev").and_then(Value::as_str) == Some("store-error")).count()
        };
        self.journals.values().map(count).sum::<usize>() as u64
    }

    /// A step's result, riding through a store failure (counted and journaled; the next tick
    /// tries again): `None` then.
    fn ride<T>(&mut self, what: &str, r: Result<T, String>) -> Result<Option<T>, String> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if store_failure(&e) || e.contains(": store-unavailable:") => {
                self.store_errors += 1;
                self.note(|| format!("{what}: {e} (trying again)"));
                std::thread::sleep(STORE_RETRY_PAUSE);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Drives the fleet to quiescence (true) or to the time bound (false).
    fn drive(&mut self) -> Result<bool, String> {
        let mut rng = SplitMix64::new(self.cfg.seed);
        for _ in 0..self.cfg.processes {
            self.spawn()?;
        }
        let bound = Duration::from_secs(self.cfg.max_seconds);
        let mut kills = 0;
        let mut next_kill = Duration::from_millis(100 + rng.below(100));
        let mut next_sweep = SWEEP_EVERY;
        loop {
            std::thread::sleep(TICK);
            let now = self.start.elapsed();
            self.reap()?;
            if now >= next_sweep {
                let swept = self.sweep();
                self.ride("sweep", swept)?;
                next_sweep = now + SWEEP_EVERY;
            }
            let overdue = now >= next_kill + Duration::from_millis(300);
            if kills < self.cfg.kills && now >= next_kill && self.kill_one(&mut rng, overdue)? {
                kills += 1;
                next_kill = now + Duration::from_millis(100 + rng.below(200));
            }
            let completed = self.all_completed();
            let completed = self.ride("check the runs", completed)?.unwrap_or(false);
            if !completed && (self.procs.live.len() as u32) < self.cfg.processes && now < bound {
                self.spawn()?;
            }
            let quiet = completed && self.procs.live.is_empty() && {
                let open = open_intents(&mut self.ext, &self.sim_id).map_err(err_text);
                self.ride("check the intents", open)? == Some(0)
            };
            if quiet {
                let swept = self.sweep();
                if self.ride("final sweep", swept)?.is_some() {
                    return Ok(true);
                }
            }
            if now >= bound {
                let n = self.procs.live.len();
                self.note(|| format!("time bound reached: killing {n} workers"));
                for p in &mut self.procs.live {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    self.stopped.insert(p.name.clone());
                }
                self.procs.live.clear();
                return Ok(false);
            }
        }
    }

    fn report(&mut self, quiescent: bool) -> Result<ProcReport, String> {
        let runs = sim_runs(&mut self.ext, &self.sim_id).map_err(err_text)?;
        let run_ids: BTreeSet<String> = runs.iter().map(|(id, _)| id.clone()).collect();
        // Receipts of this simulation's runs, in insertion order.
        let mut receipts = Vec::new();
        let mut after = 0;
        loop {
            let page = self.ext.read_receipts(after, 5000).map_err(err_text)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            receipts.extend(
                page.into_iter()
                    .filter(|r| r.receipt.get("runId").and_then(Value::as_str).is_some_and(|id| run_ids.contains(id))),
            );
        }
        let mut b = Books::default();
        for r in &receipts {
            if verify_receipt(&r.receipt).is_err() || r.columns_differ {
                b.receipt_mismatches += 1;
            }
        }
        let stored = receipts.len() as u64;
        let epochs = sim_epochs(&mut self.ext, &self.sim_id).map_err(err_text)?;
        b.receipt_mismatches += grants_unmatched(&epochs, &receipts);
        let mut by_event: BTreeMap<String, u64> = BTreeMap::new();
        for r in &receipts {
            let event = r.receipt.get("event").and_then(Value::as_str).unwrap_or("?").to_owned();
            *by_event.entry(event).or_default() += 1;
        }
        let journals: BTreeMap<String, Vec<Value>> =
            self.journals.iter().map(|(name, path)| (name.clone(), read_journal(path))).collect();
        // The receipts the sinks journaled as lost happened too: the books see them.
        let parent = read_journal(&self.dir.join(PARENT_JOURNAL));
        let (lost, landed_late) =
            not_in_table(lost_receipts(journals.values().chain(std::iter::once(&parent))), &receipts);
        let mut lost_by_event: BTreeMap<String, u64> = BTreeMap::new();
        for r in &lost {
            if verify_receipt(&r.receipt).is_err() {
                b.receipt_mismatches += 1;
            }
            let event = r.receipt.get("event").and_then(Value::as_str).unwrap_or("?").to_owned();
            *lost_by_event.entry(event).or_default() += 1;
        }
        let lost_count = lost.len() as u64;
        receipts.extend(lost);
        // A worker killed at the bound dies like any killed worker: its last receipt may be lost.
        let killed: BTreeSet<String> = self.killed.union(&self.stopped).cloned().collect();
        b.leases_from(&receipts, &killed);
        let q = match self.ext.dialect() {
            Dialect::Sqlite => {
                "SELECT id, run_id, effect_key, owner, epoch, live, at FROM sim_effects WHERE sim_id = ?1 ORDER BY id"
            }
            Dialect::Postgres => {
                "SELECT id, run_id, effect_key, owner, epoch, live, at FROM sim_effects WHERE sim_id = $1::text ORDER BY id"
            }
        };
        let deliveries: Vec<Delivery> = self
            .ext
            .query(&stmt(q.into(), vec![text(&self.sim_id)]))
            .map_err(err_text)?
            .iter()
            .map(|r| Delivery {
                run_id: cell_text(r, "run_id"),
                key: cell_text(r, "effect_key"),
                owner: cell_text(r, "owner"),
                epoch: cell_int(r, "epoch"),
                live: cell_int(r, "live") == 1,
                at: Timestamp::parse_iso(&cell_text(r, "at")).map_or(0, |t| t.0),
            })
            .collect();
        b.check_deliveries(&deliveries, &journals);
        let mut expected = BTreeSet::new();
        let mut of_unfinished = BTreeSet::new();
        for (id, status) in &runs {
            for j in 0..self.cfg.effects {
                expected.insert(sim_effect_key(&self.sim_id, id, j));
                if status != "completed" {
                    of_unfinished.insert(sim_effect_key(&self.sim_id, id, j));
                }
            }
        }
        b.check_effects(&expected, &deliveries, &receipts, &journals, &killed);
        if b.receipts_lost_to_store_errors > 0 {
            *lost_by_event.entry("effect_committed".to_owned()).or_default() += b.receipts_lost_to_store_errors;
        }
        let missing_unfinished =
            expected.iter().filter(|k| of_unfinished.contains(*k) && !deliveries.iter().any(|d| &d.key == *k)).count()
                as u64;
        let takeovers = journals
            .values()
            .flatten()
            .filter(|l| field(l, "ev") == Some("lease") && l.get("takeover").and_then(Value::as_bool) == Some(true))
            .count() as u64;
        let unfinished = runs.iter().filter(|(_, s)| s != "completed").count() as u64;
        let now = self.fleet.store_mut().execute(StoreRequest::Now).map_err(err_text)?.now;
        let fires_refused = journals
            .values()
            .flatten()
            .filter(|l| l.get("message").and_then(Value::as_str).is_some_and(|m| m.contains("refuses epoch")))
            .count() as u64;
        let mut report = ProcReport {
            mode: "processes",
            store: redact(&self.url),
            sim_id: self.sim_id.clone(),
            seed: self.cfg.seed,
            processes: self.cfg.processes,
            runs: self.cfg.runs,
            effects_per_run: self.cfg.effects,
            ttl_seconds: self.cfg.ttl_seconds,
            max_retries: self.cfg.max_retries,
            fault: self.cfg.fault,
            max_seconds: self.cfg.max_seconds,
            elapsed_ms: self.start.elapsed().as_millis() as u64,
            quiescent,
            workers_spawned: self.spawned,
            kills: self.killed.len() as u64,
            kills_mid_effect: self.kills_mid_effect,
            worker_failures: self.failures,
            worker_errors: self.errors.clone(),
            leases: b.leases.len() as u64,
            effects_expected: expected.len() as u64,
            effects_fired: deliveries.len() as u64,
            fires_refused,
            reclaimed: self.reclaimed,
            liveness_reclaimed: self.liveness_reclaimed,
            takeovers,
            requeued: self.requeued,
            store_errors: self.store_errors + self.worker_store_errors(),
            stopped_at_bound: self.stopped.len() as u64,
            reconciler_committed: self.committed,
            reconciler_reopened: self.reopened,
            receipts: stored,
            receipts_lost_to_kills: b.receipts_lost_to_kills,
            receipts_lost_to_store_errors: lost_count + b.receipts_lost_to_store_errors,
            receipts_landed_after_store_errors: landed_late,
            safety: SafetyCounts {
                exclusion_violations: b.exclusion_violations,
                duplicate_effects: b.duplicate_effects,
                stale_commits: b.stale_commits,
                unfinished_runs: unfinished,
                missing_effects: b.missing_effects,
                zombie_writes: b.zombie_writes,
                receipt_mismatches: b.receipt_mismatches,
            },
            safe: false,
            verdict: Verdict::Unsafe,
            final_time: now.to_iso(),
            metrics: self.fleet.metrics(),
            receipts_by_event: by_event,
            receipts_lost_by_event: lost_by_event,
        };
        report.safe = report.safety.all_zero();
        // Out of time: unfinished runs and their undelivered effects are what a stop explains;
        // any other non-zero count is a violation whether or not the fleet finished.
        let unexplained = report
            .safety
            .named()
            .iter()
            .filter(|(name, _)| !matches!(*name, "unfinished_runs" | "missing_effects"))
            .map(|(_, n)| *n)
            .sum::<u64>()
            + report.safety.missing_effects.saturating_sub(missing_unfinished);
        report.verdict = match (report.safe, quiescent) {
            (true, _) => Verdict::Safe,
            (false, false) if unexplained == 0 => Verdict::DidNotFinish,
            _ => Verdict::Unsafe,
        };
        Ok(report)
    }
}

/// A delivery as `sim_effects` recorded it.
#[derive(Debug, Clone)]
struct Delivery {
    run_id: String,
    key: String,
    owner: String,
    epoch: i64,
    live: bool,
    at: i64,
}

/// A lease rebuilt from receipts.
#[derive(Debug, Clone)]
struct Lease {
    run_id: String,
    owner: String,
    start: i64,
    end: i64,
    open: bool,
}

#[derive(Debug, Default)]
struct Books {
    leases: Vec<Lease>,
    exclusion_violations: u64,
    duplicate_effects: u64,
    stale_commits: u64,
    missing_effects: u64,
    zombie_writes: u64,
    receipt_mismatches: u64,
    receipts_lost_to_kills: u64,
    receipts_lost_to_store_errors: u64,
}

fn field<'a>(r: &'a Value, k: &str) -> Option<&'a str> {
    r.get(k).and_then(Value::as_str)
}

fn millis(r: &Value, k: &str) -> Option<i64> {
    field(r, k).and_then(|t| Timestamp::parse_iso(t).ok()).map(|t| t.0)
}

/// The worker name of an owner (`w3:12345` → `w3`).
fn worker_of(owner: &str) -> &str {
    owner.split(':').next().unwrap_or(owner)
}

/// The `after` lines the delivering worker journaled for delivery `d` (its key and epoch).
fn after_lines<'a>(journals: &'a BTreeMap<String, Vec<Value>>, d: &'a Delivery) -> impl Iterator<Item = &'a Value> {
    journals.get(worker_of(&d.owner)).into_iter().flatten().filter(move |l| {
        field(l, "ev") == Some("after")
            && field(l, "key") == Some(d.key.as_str())
            && l.get("epoch").and_then(Value::as_i64) == Some(d.epoch)
    })
}

impl Books {
    /// Lease intervals from receipts, and zombie writes.
    fn leases_from(&mut self, receipts: &[heart_fleet_stores::receipts::StoredReceipt], killed: &BTreeSet<String>) {
        let mut sorted: Vec<&Value> = receipts.iter().map(|r| &r.receipt).collect();
        // Store clock first; the table's insertion order breaks ties.
        sorted.sort_by_key(|r| millis(r, "at").unwrap_or(0));
        for r in sorted {
            let (Some(event), Some(run), Some(owner), Some(at)) =
                (field(r, "event"), field(r, "runId"), field(r, "owner"), millis(r, "at"))
            else {
                continue;
            };
            let open = self.leases.iter_mut().rev().find(|l| l.open && l.run_id == run && l.owner == owner);
            match event {
                "acquired" => {
                    let end = millis(r, "leaseExpiresAt").unwrap_or(at);
                    self.leases.push(Lease { run_id: run.into(), owner: owner.into(), start: at, end, open: true });
                }
                // A renew or release by an owner whose lease had already ended (or was taken
                // from it) was accepted by a store that should have refused it: a zombie write.
                "renewed" => match open {
                    Some(l) => {
                        if at >= l.end {
                            self.zombie_writes += 1;
                        }
                        l.end = millis(r, "leaseExpiresAt").unwrap_or(l.end);
                    }
                    None => self.zombie_writes += 1,
                },
                "released" => match open {
                    Some(l) => {
                        if at >= l.end {
                            self.zombie_writes += 1;
                        }
                        l.end = l.end.min(at);
                        l.open = false;
                    }
                    None => self.zombie_writes += 1,
                },
                // A recovery ends a lease that had expired (`at` ≥ its end, on the store's own
                // clock): the interval stays as granted, so a recovery of a live lease leaves it
                // overlapping the next holder's, an exclusion violation. Except a killed
                // holder's: the liveness sweep may take its lease before the expiry, the holder
                // being gone (its instance's heartbeat stopped with it).
                "reclaimed" | "quarantined" => {
                    if let Some(l) = open {
                        if killed.contains(worker_of(&l.owner)) {
                            l.end = l.end.min(at);
                        }
                        l.open = false;
                    }
                }
                // An operator's force-release ends a live lease on purpose.
                "force_released" => {
                    if let Some(l) = open {
                        l.end = l.end.min(at);
                        l.open = false;
                    }
                }
                _ => {}
            }
        }
        let mut by_run: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
        for l in &self.leases {
            by_run.entry(l.run_id.as_str()).or_default().push(l);
        }
        for leases in by_run.values_mut() {
            leases.sort_by_key(|l| (l.start, l.end));
            for (i, a) in leases.iter().enumerate() {
                self.exclusion_violations += leases.iter().skip(i + 1).take_while(|c| c.start < a.end).count() as u64;
            }
        }
    }

    fn check_deliveries(&mut self, deliveries: &[Delivery], journals: &BTreeMap<String, Vec<Value>>) {
        let covers = |l: &Lease, at: i64| l.start <= at && at < l.end;
        for d in deliveries {
            let on_run: Vec<&Lease> = self.leases.iter().filter(|l| l.run_id == d.run_id).collect();
            self.exclusion_violations += on_run.iter().filter(|l| l.owner != d.owner && covers(l, d.at)).count() as u64;
            let own = on_run.iter().any(|l| l.owner == d.owner && covers(l, d.at));
            let announced = journals.get(worker_of(&d.owner)).is_some_and(|j| {
                j.iter().any(|l| {
                    field(l, "ev") == Some("before")
                        && field(l, "key") == Some(d.key.as_str())
                        && l.get("epoch").and_then(Value::as_i64) == Some(d.epoch)
                })
            });
            if !d.live || !own || !announced {
                self.stale_commits += 1;
            }
        }
    }

    fn check_effects(
        &mut self,
        expected: &BTreeSet<String>,
        deliveries: &[Delivery],
        receipts: &[heart_fleet_stores::receipts::StoredReceipt],
        journals: &BTreeMap<String, Vec<Value>>,
        killed: &BTreeSet<String>,
    ) {
        let mut delivered: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
        for d in deliveries {
            delivered.entry(d.key.as_str()).or_default().push(d);
        }
        let mut committed: BTreeMap<&str, u64> = BTreeMap::new();
        for r in receipts {
            if field(&r.receipt, "event") == Some("effect_committed")
                && let Some(k) = field(&r.receipt, "effectKey")
            {
                *committed.entry(k).or_default() += 1;
            }
        }
        for key in expected {
            let ds = delivered.get(key.as_str()).map_or(&[][..], Vec::as_slice);
            self.duplicate_effects += (ds.len() as u64).saturating_sub(1);
            if ds.is_empty() {
                self.missing_effects += 1;
            }
            let c = committed.get(key.as_str()).copied().unwrap_or(0);
            self.receipt_mismatches += c.saturating_sub(1);
            if c == 1 && ds.is_empty() {
                self.receipt_mismatches += 1;
            }
            if c == 0 && !ds.is_empty() {
                // Excused only when every delivery's worker was killed before its `after` line.
                let lost = ds
                    .iter()
                    .all(|d| killed.contains(worker_of(&d.owner)) && after_lines(journals, d).next().is_none());
                // Or when a delivery's `send_once` ended in a store failure: its commit's
                // outcome was unknown to the worker, which emitted no receipt.
                let unknown = ds
                    .iter()
                    .any(|d| after_lines(journals, d).any(|l| field(l, "outcome") == Some(STORE_ERROR_OUTCOME)));
                if lost {
                    self.receipts_lost_to_kills += 1;
                } else if unknown {
                    self.receipts_lost_to_store_errors += 1;
                } else {
                    self.receipt_mismatches += 1;
                }
            }
        }
        // Committed receipts or deliveries of keys that are not this simulation's effects.
        self.receipt_mismatches += committed.keys().filter(|k| !expected.contains(**k)).count() as u64;
        self.stale_commits += deliveries.iter().filter(|d| !expected.contains(&d.key)).count() as u64;
        // A send a worker saw succeed must be in the receiving system.
        for lines in journals.values() {
            for l in lines {
                if field(l, "ev") == Some("after") && field(l, "outcome") == Some("sent") {
                    let key = field(l, "key").unwrap_or("");
                    let epoch = l.get("epoch").and_then(Value::as_i64);
                    if !deliveries.iter().any(|d| d.key == key && Some(d.epoch) == epoch) {
                        self.missing_effects += 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use heart_fleet_core::{HeartEvent, HeartReceipt};
    use heart_fleet_stores::receipts::StoredReceipt;

    fn rec(id: i64, event: HeartEvent, owner: &str, exp: Option<i64>, key: Option<&str>, at: i64) -> StoredReceipt {
        let r = HeartReceipt::new(event, "r1", owner, exp.map(Timestamp), key, Timestamp(at));
        StoredReceipt { id, receipt: serde_json::to_value(r).unwrap(), columns_differ: false }
    }

    fn delivery(owner: &str, key: &str, epoch: i64, live: bool, at: i64) -> Delivery {
        Delivery { run_id: "r1".into(), key: key.into(), owner: owner.into(), epoch, live, at }
    }

    fn journal(lines: &[Value]) -> Vec<Value> {
        lines.to_vec()
    }

    #[test]
    fn a_recovery_before_the_expiry_is_an_overlap_unless_the_holder_was_killed() {
        // w1's lease runs to 5000; a recovery at 1000, then w2 acquires at 1200.
        let receipts = vec![
            rec(1, HeartEvent::Acquired, "w1:1", Some(5000), None, 0),
            rec(2, HeartEvent::Reclaimed, "w1:1", Some(5000), None, 1000),
            rec(3, HeartEvent::Acquired, "w2:2", Some(6000), None, 1200),
        ];
        let mut alive = Books::default();
        alive.leases_from(&receipts, &BTreeSet::new());
        assert_eq!(alive.exclusion_violations, 1, "a live holder's lease taken early");
        let mut killed = Books::default();
        killed.leases_from(&receipts, &["w1".to_owned()].into_iter().collect());
        assert_eq!(killed.exclusion_violations, 0, "a killed holder's lease ends at its recovery");
    }

    #[test]
    fn the_books_catch_overlaps_zombies_duplicates_and_stale_fires() {
        // w1 holds [0, 2000) and renews late (a zombie); w2 acquires at 1000: overlap.
        let receipts = vec![
            rec(1, HeartEvent::Acquired, "w1:1", Some(2000), None, 0),
            rec(2, HeartEvent::Acquired, "w2:2", Some(3000), None, 1000),
            rec(3, HeartEvent::Renewed, "w1:1", Some(4000), None, 2500),
            rec(4, HeartEvent::EffectCommitted, "w2:2", Some(3000), Some("k1"), 1500),
            rec(5, HeartEvent::EffectCommitted, "w1:1", Some(2000), Some("k1"), 1600),
        ];
        let mut b = Books::default();
        b.leases_from(&receipts, &BTreeSet::new());
        assert_eq!(b.zombie_writes, 1);
        assert!(b.exclusion_violations >= 1);
        let before = |key: &str, epoch: i64| json!({"ev": "before", "key": key, "epoch": epoch});
        let journals: BTreeMap<String, Vec<Value>> = [
            ("w1".to_owned(), journal(&[before("k1", 1)])),
            (
                "w2".to_owned(),
                journal(&[before("k1", 2), json!({"ev": "after", "key": "k1", "epoch": 2, "outcome": "sent"})]),
            ),
        ]
        .into_iter()
        .collect();
        // Two deliveries of k1 (one not live), none of k2; one delivery nobody announced.
        let ds = vec![
            delivery("w2:2", "k1", 2, true, 1500),
            delivery("w1:1", "k1", 1, false, 1600),
            delivery("w3:3", "k1", 3, true, 1700),
        ];
        b.check_deliveries(&ds, &journals);
        assert!(b.stale_commits >= 2, "{b:?}");
        let expected: BTreeSet<String> = ["k1".to_owned(), "k2".to_owned()].into_iter().collect();
        b.check_effects(&expected, &ds, &receipts, &journals, &BTreeSet::new());
        assert_eq!(b.duplicate_effects, 2);
        assert_eq!(b.missing_effects, 1);
        assert_eq!(b.receipt_mismatches, 1, "two effect_committed receipts for k1");
    }

    #[test]
    fn a_receipt_lost_to_a_kill_is_excused_only_for_the_killed_worker() {
        let ds = vec![delivery("w1:1", "k1", 1, true, 10)];
        let journals: BTreeMap<String, Vec<Value>> =
            [("w1".to_owned(), vec![json!({"ev": "before", "key": "k1", "epoch": 1})])].into_iter().collect();
        let expected: BTreeSet<String> = ["k1".to_owned()].into_iter().collect();
        let mut killed = Books::default();
        killed.check_effects(&expected, &ds, &[], &journals, &["w1".to_owned()].into_iter().collect());
        assert_eq!((killed.receipts_lost_to_kills, killed.receipt_mismatches), (1, 0));
        let mut alive = Books::default();
        alive.check_effects(&expected, &ds, &[], &journals, &BTreeSet::new());
        assert_eq!((alive.receipts_lost_to_kills, alive.receipt_mismatches), (0, 1));
    }

    #[test]
    fn a_journaled_receipt_found_in_the_table_is_stored_not_lost() {
        // w1's acquired receipt: the insert was seen to fail (journaled) but landed.
        let landed = rec(1, HeartEvent::Acquired, "w1:1", Some(2000), None, 0);
        let really_lost = rec(2, HeartEvent::Renewed, "w1:1", Some(4000), None, 1000);
        let stored = vec![landed.clone()];
        let (lost, landed_late) = not_in_table(vec![landed, really_lost.clone()], &stored);
        assert_eq!(landed_late, 1);
        assert_eq!(lost.iter().map(|r| r.receipt.clone()).collect::<Vec<_>>(), vec![really_lost.receipt]);
        // Counted once, the lease is one interval: no overlap with itself.
        let mut b = Books::default();
        b.leases_from(&[stored, lost].concat(), &BTreeSet::new());
        assert_eq!((b.leases.len(), b.exclusion_violations, b.zombie_writes), (1, 0, 0));
    }
}

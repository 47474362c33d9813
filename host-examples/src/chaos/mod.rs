//! `heart-fleet fleet-chaos`: a mixed fleet (Rust native and component, Node, Python worker
//! processes) on one store under injected faults, judged by the checker of
//! `heart-fleet check-history` ([`history`]) from what the store and the receiving side
//! recorded. `scripts/fleet-chaos.sh` sets up the services and runs it.
//!
//! # The run
//!
//! The harness makes a fresh store (PostgreSQL: the database `heart_chaos` on the server of
//! `--database-url`, dropped and created; SQLite: a file in a temporary directory), migrates
//! it, adds the history trigger (every `UPDATE` of `agent_runs` into `chaos_transitions`) and
//! the receiving side's tables, and creates `--runs` resource runs. It starts the receiver
//! ([`receiver`]), one TCP proxy per proxied worker ([`proxy`]), and the workers
//! ([`worker`] describes their loop), each slot with its route to the store: direct, through
//! its proxy, or through PgBouncer in transaction mode; some under `libfaketime` with their
//! clock an hour off. The harness itself is the sweeper: every half second the TTL sweep, the
//! liveness sweep, the reconciler (its probe asks the receiver's tables) and the operator who
//! requeues quarantined runs.
//!
//! # The faults
//!
//! From the seed, at random times, each kind the store has at least once and one more fault of
//! a random kind for every ten seconds: `kill` (SIGKILL of a
//! worker, preferably one holding a lease; a replacement starts), `pause` (SIGSTOP for the TTL
//! and 1.5 s more, then SIGCONT: the woken worker must find itself fenced out),
//! `backend_kill` (`pg_terminate_backend` of every worker connection), `restart` (the
//! PostgreSQL server, by `--restart-command`), `proxy_delay` (150 ms more each way on every
//! proxied connection, for 3 s), `proxy_drop` (every proxied connection closed), `partition`
//! (one proxied worker cut off for the TTL and 1.5 s more), `clock_skew` (a worker replaced by
//! one whose clock is an hour ahead or behind; behind only on SQLite, see [`skew_offsets`]).
//! `pooler` counts the workers started behind PgBouncer. SQLite has `kill`, `pause` and
//! `clock_skew`.
//!
//! # The end
//!
//! After `--seconds` the harness creates the stop file, wakes paused workers, heals the
//! network, waits for the workers to exit (killing the ones that do not), waits out the last
//! lease, sweeps and reconciles until no run is held and no intent is open, reads the history
//! (written to `history.json` for `check-history --history`), checks it, and prints the
//! report. The verdict is `pass` only when every violation count is 0, every runtime ran,
//! every fault kind was injected, the fleet did at least a minimum of operations, and the
//! harness itself met no error.

pub mod history;
pub mod proxy;
pub mod receiver;
pub mod worker;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heart_fleet_core::ops::{DEFAULT_RECONCILE_LIMIT, DEFAULT_RECONCILE_MAX_ATTEMPTS, DEFAULT_SWEEP_LIMIT};
use heart_fleet_core::sql::{Dialect, SqlParam, Statement};
use heart_fleet_core::{ErrorCode, IntentRow, Timestamp};
use heart_fleet_stores::receipts::ReceiptTableSink;
use heart_fleet_stores::{AnyStore, redact};
use serde::Serialize;
use serde_json::{Value, json};

use self::history::{FinalRun, History, Intent, LeaseState, ReceiptRow, Transition, Verdict};
use self::proxy::Proxy;
use self::receiver::{Receiver, cell_int, cell_text};
use crate::engine::{Engine, EngineKind};
use crate::rng::SplitMix64;

/// The PostgreSQL database a run makes (dropped first).
pub const CHAOS_DATABASE: &str = "heart_chaos";
/// The harness's own connections are named so `backend_kill` spares them.
const HARNESS_APP: &str = "heart-chaos-harness";
/// The deadline of a worker's store call.
const STORE_CALL_MS: u64 = 3000;
/// How often the harness sweeps.
const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// After this many workers of one slot exited by themselves, the slot is left empty.
const MAX_EARLY_EXITS: u32 = 3;
/// The fewest operations (receipts) per second of run a passing run needs.
const MIN_OPERATIONS_PER_SECOND: u64 = 2;

/// Which store the fleet shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChaosStore {
    /// PostgreSQL (every fault kind).
    Postgres,
    /// A SQLite file (`kill`, `pause`, `clock_skew`).
    Sqlite,
}

/// A worker's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Runtime {
    /// `heart-fleet chaos-worker`.
    Rust,
    /// `heart-fleet --engine component chaos-worker`.
    Component,
    /// `node scripts/chaos/worker.mjs` (bindings-node over `pg`).
    Node,
    /// `python scripts/chaos/worker.py` (the wheel over psycopg or sqlite3).
    Python,
}

impl Runtime {
    const ALL: [Runtime; 4] = [Runtime::Rust, Runtime::Component, Runtime::Node, Runtime::Python];

    fn name(self) -> &'static str {
        match self {
            Runtime::Rust => "rust",
            Runtime::Component => "component",
            Runtime::Node => "node",
            Runtime::Python => "python",
        }
    }
}

/// The fault kinds, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL.
    Kill,
    /// SIGSTOP past the TTL, then SIGCONT.
    Pause,
    /// `pg_terminate_backend` of the workers' connections.
    BackendKill,
    /// A PostgreSQL restart.
    Restart,
    /// Latency on the proxied connections.
    ProxyDelay,
    /// The proxied connections closed.
    ProxyDrop,
    /// One proxied worker cut off.
    Partition,
    /// A worker whose clock is an hour off.
    ClockSkew,
    /// A worker behind PgBouncer (transaction mode).
    Pooler,
}

impl FaultKind {
    const ALL: [FaultKind; 9] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::BackendKill,
        FaultKind::Restart,
        FaultKind::ProxyDelay,
        FaultKind::ProxyDrop,
        FaultKind::Partition,
        FaultKind::ClockSkew,
        FaultKind::Pooler,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::BackendKill => "backend_kill",
            FaultKind::Restart => "restart",
            FaultKind::ProxyDelay => "proxy_delay",
            FaultKind::ProxyDrop => "proxy_drop",
            FaultKind::Partition => "partition",
            FaultKind::ClockSkew => "clock_skew",
            FaultKind::Pooler => "pooler",
        }
    }

    fn applies_to(self, store: ChaosStore) -> bool {
        store == ChaosStore::Postgres || matches!(self, FaultKind::Kill | FaultKind::Pause | FaultKind::ClockSkew)
    }

    /// Injected at a time of the schedule (the pooler is a route, counted at start).
    fn timed(self) -> bool {
        self != FaultKind::Pooler
    }
}

/// What `fleet-chaos` is told. (Its `Debug` shows the URLs redacted.)
#[derive(Clone)]
pub struct ChaosConfig {
    /// The store kind.
    pub store: ChaosStore,
    /// How long the fleet runs under faults.
    pub seconds: u64,
    /// The seed of the schedule and of the workers' choices.
    pub seed: u64,
    /// PostgreSQL: a database on the server to create [`CHAOS_DATABASE`] from.
    pub database_url: Option<String>,
    /// PostgreSQL: PgBouncer (transaction mode) in front of the same server (any database name).
    pub pooler_url: Option<String>,
    /// PostgreSQL: the shell command that restarts the server.
    pub restart_command: Option<String>,
    /// `libfaketime.so.1`.
    pub faketime: Option<PathBuf>,
    /// `scripts/chaos/worker.mjs`.
    pub node_worker: Option<PathBuf>,
    /// The Python interpreter with the wheel installed.
    pub python: Option<String>,
    /// `scripts/chaos/worker.py`.
    pub python_worker: Option<PathBuf>,
    /// Resource runs the fleet shares.
    pub runs: u32,
    /// Lease seconds.
    pub ttl_seconds: i64,
    /// The work of one unit.
    pub work_ms: u64,
    /// Where the run's files go (history.json, the workers' stderr); a temporary directory if
    /// not given.
    pub dir: Option<PathBuf>,
}

impl std::fmt::Debug for ChaosConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosConfig")
            .field("store", &self.store)
            .field("seconds", &self.seconds)
            .field("seed", &self.seed)
            .field("database_url", &self.database_url.as_deref().map(redact))
            .field("pooler_url", &self.pooler_url.as_deref().map(redact))
            .field("restart_command", &self.restart_command)
            .field("runs", &self.runs)
            .field("ttl_seconds", &self.ttl_seconds)
            .field("work_ms", &self.work_ms)
            .finish_non_exhaustive()
    }
}

/// Where a worker's connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    /// Through proxy number N.
    Proxy(usize),
    Pooler,
}

#[derive(Debug, Clone)]
struct Slot {
    runtime: Runtime,
    route: Route,
    /// `FAKETIME` offset.
    skew: Option<&'static str>,
}

struct Worker {
    slot: usize,
    name: String,
    child: Child,
    stderr: PathBuf,
    paused: bool,
}

impl Worker {
    fn owner(&self) -> String {
        format!("{}:{}", self.name, self.child.id())
    }
}

/// The JSON report (the last line of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct ChaosReport {
    /// `postgres` or `sqlite`.
    pub store: ChaosStore,
    /// The seed.
    pub seed: u64,
    /// Seconds under faults.
    pub seconds: u64,
    /// Worker processes started, per runtime.
    pub workers: BTreeMap<&'static str, u64>,
    /// Receipts written (each a lease operation that landed).
    pub operations: u64,
    /// Receipts by event.
    pub receipts: BTreeMap<String, u64>,
    /// Deliveries the receiver accepted.
    pub deliveries: u64,
    /// Run-row updates the trigger recorded.
    pub transitions: u64,
    /// Faults injected, per kind the store has.
    pub faults: BTreeMap<&'static str, u64>,
    /// The checker's counts and findings (flattened: the seven counts and `findings`).
    #[serde(flatten)]
    pub checked: Verdict,
    /// From a SIGKILL of a worker holding a lease to the run's next lease (store clock).
    pub recovery_ms: Recovery,
    /// Sweeper passes (TTL sweep, liveness, reconciler, operator) that met a store failure.
    pub sweep_errors: u64,
    /// Deliveries the receiver answered 503 (its store failed).
    pub receiver_store_errors: u64,
    /// What kept the run from proving anything (a worker that died on its own, a fault that
    /// could not be injected, too few operations).
    pub errors: Vec<String>,
    /// Where history.json is.
    pub history: String,
    /// `pass` or `fail`.
    pub verdict: &'static str,
}

/// Times from a worker's death to its run being leased again.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Recovery {
    /// Killed holders whose run was leased again.
    pub samples: u64,
    /// The median.
    pub median: Option<i64>,
    /// The longest.
    pub max: Option<i64>,
}

fn err_text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A `postgres://` URL taken apart: `postgres://AUTH@HOST:PORT/DB?QUERY`. Only the server is
/// kept: the harness makes its own database and parameters. (`Debug` hides the credentials.)
#[derive(Clone, PartialEq, Eq)]
struct PgUrl {
    auth: String,
    host: String,
    port: u16,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUrl(****@{}:{})", self.host, self.port)
    }
}

impl PgUrl {
    fn parse(url: &str) -> Result<PgUrl, String> {
        let bad = || format!("not a postgres://USER:PASSWORD@HOST:PORT/DATABASE URL: {}", redact(url));
        let rest = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")).ok_or_else(bad)?;
        let (auth, rest) = rest.rsplit_once('@').ok_or_else(bad)?;
        let hostport = rest.split(['/', '?']).next().ok_or_else(bad)?;
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|_| bad())?),
            None => (hostport, 5432),
        };
        Ok(PgUrl { auth: auth.to_owned(), host: host.to_owned(), port })
    }

    fn at(&self, host: &str, port: u16, db: &str) -> String {
        format!("postgres://{}@{host}:{port}/{db}", self.auth)
    }

    fn socket(&self) -> Result<SocketAddr, String> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(err_text)?
            .next()
            .ok_or_else(|| format!("{} does not resolve", self.host))
    }
}

/// The fleet's store, as each party reaches it.
struct Target {
    /// PostgreSQL: the server (direct) and the pooler.
    pg: Option<(PgUrl, Option<PgUrl>)>,
    /// SQLite: the file.
    sqlite: Option<PathBuf>,
}

impl Target {
    fn harness_url(&self) -> String {
        match (&self.pg, &self.sqlite) {
            (Some((server, _)), _) => format!(
                "{}?application_name={HARNESS_APP}&heart_statement_timeout_ms=5000&connect_timeout=3",
                server.at(&server.host, server.port, CHAOS_DATABASE)
            ),
            (None, Some(path)) => format!("sqlite:{}", path.display()),
            (None, None) => String::new(),
        }
    }

    /// The URL a worker of `runtime` on `route` is given (proxies by port).
    fn worker_url(&self, runtime: Runtime, route: Route, proxies: &[Proxy]) -> Result<String, String> {
        let Some((server, pooler)) = &self.pg else {
            return Ok(self.sqlite.as_ref().map(|p| format!("sqlite:{}", p.display())).unwrap_or_default());
        };
        let base = match route {
            Route::Direct => server.at(&server.host, server.port, CHAOS_DATABASE),
            Route::Proxy(i) => server.at("127.0.0.1", proxies.get(i).ok_or("no such proxy")?.port(), CHAOS_DATABASE),
            Route::Pooler => {
                let p = pooler.as_ref().ok_or("a pooled worker without --pooler-url")?;
                p.at(&p.host, p.port, CHAOS_DATABASE)
            }
        };
        let pooled = route == Route::Pooler;
        Ok(match runtime {
            Runtime::Rust | Runtime::Component => format!(
                "{base}?heart_statement_timeout_ms={STORE_CALL_MS}&connect_timeout=3{}",
                if pooled { "&pgbouncer=true" } else { "" }
            ),
            Runtime::Node | Runtime::Python => format!("{base}{}", if pooled { "?pgbouncer=true" } else { "" }),
        })
    }
}

/// The history trigger and its table (idempotent).
fn create_history_trigger(store: &mut AnyStore) -> Result<(), String> {
    let sql = match store.dialect() {
        Dialect::Sqlite => "CREATE TABLE IF NOT EXISTS chaos_transitions (id INTEGER PRIMARY KEY AUTOINCREMENT, \
             run_id TEXT NOT NULL, at TEXT NOT NULL, old_status TEXT, old_owner TEXT, old_expires TEXT, old_epoch BIGINT, \
             new_status TEXT, new_owner TEXT, new_expires TEXT, new_epoch BIGINT); \
             CREATE TRIGGER IF NOT EXISTS chaos_record_transition AFTER UPDATE ON agent_runs FOR EACH ROW BEGIN \
             INSERT INTO chaos_transitions (run_id, at, old_status, old_owner, old_expires, old_epoch, new_status, new_owner, \
             new_expires, new_epoch) VALUES (NEW.id, NEW.updated_at, OLD.status, OLD.lease_owner, OLD.lease_expires_at, \
             OLD.fencing_epoch, NEW.status, NEW.lease_owner, NEW.lease_expires_at, NEW.fencing_epoch); END;"
            .to_owned(),
        Dialect::Postgres => {
            let iso = |col: &str| format!("to_char({col} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')");
            format!(
                "CREATE TABLE IF NOT EXISTS chaos_transitions (id BIGSERIAL PRIMARY KEY, run_id TEXT NOT NULL, at TEXT NOT NULL, \
                 old_status TEXT, old_owner TEXT, old_expires TEXT, old_epoch BIGINT, new_status TEXT, new_owner TEXT, \
                 new_expires TEXT, new_epoch BIGINT); \
                 CREATE OR REPLACE FUNCTION chaos_record_transition() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
                 INSERT INTO chaos_transitions (run_id, at, old_status, old_owner, old_expires, old_epoch, new_status, new_owner, \
                 new_expires, new_epoch) VALUES (NEW.id::text, {}, OLD.status, OLD.lease_owner, {}, OLD.fencing_epoch, \
                 NEW.status, NEW.lease_owner, {}, NEW.fencing_epoch); RETURN NULL; END $$; \
                 DROP TRIGGER IF EXISTS chaos_record_transition ON agent_runs; \
                 CREATE TRIGGER chaos_record_transition AFTER UPDATE ON agent_runs FOR EACH ROW \
                 EXECUTE FUNCTION chaos_record_transition();",
                iso("NEW.updated_at"),
                iso("OLD.lease_expires_at"),
                iso("NEW.lease_expires_at")
            )
        }
    };
    store.batch(&sql).map_err(|e| format!("the history trigger: {e}"))?;
    store
        .batch("CREATE TABLE IF NOT EXISTS chaos_killed (owner TEXT NOT NULL)")
        .map_err(|e| format!("the history tables: {e}"))
}

fn ts(text: Option<String>) -> Result<Option<Timestamp>, String> {
    text.map(|t| Timestamp::parse_iso(&t).map_err(err_text)).transpose()
}

fn q(store: &mut AnyStore, sql: &str) -> Result<Vec<heart_fleet_core::sql::SqlRow>, String> {
    store.query(&Statement { sql: sql.to_owned(), params: vec![] }).map_err(err_text)
}

/// Reads a run's history from its store (the tables `fleet-chaos` made).
pub fn read_history(store: &mut AnyStore) -> Result<History, String> {
    let pg = store.dialect() == Dialect::Postgres;
    let mut h = History::default();
    for r in q(
        store,
        "SELECT id, run_id, at, old_status, old_owner, old_expires, old_epoch, new_status, new_owner, new_expires, \
         new_epoch FROM chaos_transitions ORDER BY id",
    )? {
        let state = |p: &str| -> Result<LeaseState, String> {
            Ok(LeaseState {
                status: cell_text(&r, &format!("{p}_status")).unwrap_or_default(),
                owner: cell_text(&r, &format!("{p}_owner")),
                expires_at: ts(cell_text(&r, &format!("{p}_expires")))?,
                epoch: cell_int(&r, &format!("{p}_epoch")).unwrap_or(0),
            })
        };
        h.transitions.push(Transition {
            id: cell_int(&r, "id").unwrap_or(0),
            run_id: cell_text(&r, "run_id").unwrap_or_default(),
            at: ts(cell_text(&r, "at"))?.ok_or("a transition without a time")?,
            old: state("old")?,
            new: state("new")?,
        });
    }
    let mut after = 0;
    loop {
        let page = store.read_receipts(after, 1000).map_err(err_text)?;
        let Some(last) = page.last() else { break };
        after = last.id;
        h.receipts.extend(page.into_iter().map(|r| ReceiptRow {
            id: r.id,
            receipt: r.receipt,
            columns_differ: r.columns_differ,
        }));
    }
    h.deliveries = receiver::deliveries(store)?;
    let intents = if pg {
        "SELECT run_id::text AS run_id, effect_key, state, fence_epoch, external_ref::text AS external_ref FROM effect_intents"
    } else {
        "SELECT run_id, effect_key, state, fence_epoch, external_ref FROM effect_intents"
    };
    for r in q(store, intents)? {
        h.intents.push(Intent {
            run_id: cell_text(&r, "run_id").unwrap_or_default(),
            effect_key: cell_text(&r, "effect_key").unwrap_or_default(),
            state: cell_text(&r, "state").unwrap_or_default(),
            fence_epoch: cell_int(&r, "fence_epoch"),
            external_ref: cell_text(&r, "external_ref").map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t))),
        });
    }
    let runs = if pg {
        "SELECT id::text AS id, status, lease_owner, to_char(lease_expires_at AT TIME ZONE 'UTC', \
         'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS lease_expires_at, fencing_epoch FROM agent_runs ORDER BY id"
    } else {
        "SELECT id, status, lease_owner, lease_expires_at, fencing_epoch FROM agent_runs ORDER BY id"
    };
    for r in q(store, runs)? {
        h.runs.push(FinalRun {
            id: cell_text(&r, "id").unwrap_or_default(),
            state: LeaseState {
                status: cell_text(&r, "status").unwrap_or_default(),
                owner: cell_text(&r, "lease_owner"),
                expires_at: ts(cell_text(&r, "lease_expires_at"))?,
                epoch: cell_int(&r, "fencing_epoch").unwrap_or(0),
            },
        });
    }
    h.killed_owners =
        q(store, "SELECT owner FROM chaos_killed")?.iter().filter_map(|r| cell_text(r, "owner")).collect();
    h.store = Some(if pg { "postgres" } else { "sqlite" }.to_owned());
    Ok(h)
}

/// The fleet's slots: which runtime, which route, which clock.
fn slots(store: ChaosStore) -> Vec<Slot> {
    let s = |runtime, route, skew| Slot { runtime, route, skew };
    match store {
        ChaosStore::Postgres => vec![
            s(Runtime::Rust, Route::Direct, None),
            s(Runtime::Rust, Route::Proxy(0), None),
            s(Runtime::Component, Route::Direct, Some("+1h")),
            s(Runtime::Node, Route::Pooler, None),
            s(Runtime::Node, Route::Proxy(1), None),
            s(Runtime::Python, Route::Pooler, Some("-1h")),
            s(Runtime::Python, Route::Direct, None),
        ],
        // Node has no SQLite driver (Node 20), and the Node package has no SQLite store. Clocks
        // run behind only: see skew_offsets.
        ChaosStore::Sqlite => vec![
            s(Runtime::Rust, Route::Direct, None),
            s(Runtime::Rust, Route::Direct, Some("-1h")),
            s(Runtime::Component, Route::Direct, None),
            s(Runtime::Python, Route::Direct, None),
            s(Runtime::Python, Route::Direct, Some("-1h")),
        ],
    }
}

/// The clock offsets a `clock_skew` fault picks from. PostgreSQL's clock is the server's, so
/// either way is harmless. A SQLite file's clock is the clock of whichever process writes,
/// kept from going backwards by `heart_clock` (migration 0002): a process an hour behind is
/// harmless, but one an hour ahead moves the store's clock an hour forward for everyone
/// (leases end early, which is safe, and the clock then stands still until the other clocks
/// catch up, so a dead worker's run waits that hour to be swept). Processes on one machine
/// share its clock, so SQLite meets a clock ahead only when the machine's clock steps back.
fn skew_offsets(store: ChaosStore) -> &'static [&'static str] {
    match store {
        ChaosStore::Postgres => &["+1h", "-1h"],
        ChaosStore::Sqlite => &["-1h"],
    }
}

/// Something to undo at a time: a paused worker to wake (its own timer normally has).
enum Undo {
    Resume(u32),
}

/// Sends `signal` (`-STOP`, `-CONT`) to `pid` with kill(1) (this crate has no unsafe code).
fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill").args([signal, &pid.to_string()]).status().is_ok_and(|s| s.success())
}

struct Harness<'a> {
    cfg: ChaosConfig,
    target: Target,
    dir: PathBuf,
    stop_file: PathBuf,
    run_ids: Vec<String>,
    fleet: Box<dyn Engine<Store = AnyStore>>,
    /// The reconciler probe's connection (opened again after it failed to open).
    ext: Option<AnyStore>,
    receiver: Receiver,
    proxies: Vec<Proxy>,
    slots: Vec<Slot>,
    workers: Vec<Worker>,
    next_worker: u32,
    /// Workers that exited by themselves, per slot.
    early_exits: BTreeMap<usize, u32>,
    started: BTreeMap<&'static str, u64>,
    faults: BTreeMap<&'static str, u64>,
    undo: Vec<(Instant, Undo)>,
    /// Killed holders: (owner, run, kill time in ms).
    kills: Vec<(String, String, i64)>,
    killed_owners: Vec<String>,
    errors: Vec<String>,
    sweep_errors: u64,
    rng: SplitMix64,
    progress: Option<&'a mut dyn Write>,
    start: Instant,
}

/// No worker outlives the harness, even one that fails or unwinds (the workers also exit when
/// their parent changes, for a harness killed outright).
impl Drop for Harness<'_> {
    fn drop(&mut self) {
        for w in &mut self.workers {
            signal(w.child.id(), "-CONT");
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

/// Runs the fleet under faults and judges it.
pub fn run(cfg: ChaosConfig, progress: Option<&mut dyn Write>) -> Result<ChaosReport, String> {
    let dir = match &cfg.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("heart-fleet-chaos-{}-{}", cfg.seed, std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    check_runtimes(&cfg)?;
    let target = make_store(&cfg, &dir)?;
    let url = target.harness_url();
    let (mut store, _) = heart_fleet_stores::open_migrated(&url).map_err(err_text)?;
    create_history_trigger(&mut store)?;
    receiver::create_tables(&mut store).map_err(|e| format!("the receiver's tables: {e}"))?;
    let engine = EngineKind::Native.prepare().map_err(err_text)?;
    let (sink, _) = ReceiptTableSink::new(&store);
    let mut fleet = engine.build(store, None, Box::new(sink)).map_err(err_text)?;
    let mut run_ids = Vec::new();
    for n in 0..cfg.runs {
        let (row, _) = fleet
            .ensure_resource_run("chaos", &format!("{}-{n}", cfg.seed), "heart-fleet fleet-chaos", "heart-fleet:chaos")
            .map_err(|e| format!("create runs: {e}"))?;
        run_ids.push(row.id);
    }
    let receiver = Receiver::start(heart_fleet_stores::open(&url).map_err(err_text)?)?;
    let slots = slots(cfg.store);
    let mut proxies = Vec::new();
    if let Some((server, _)) = &target.pg {
        let upstream = server.socket()?;
        for _ in 0..slots.iter().filter(|s| matches!(s.route, Route::Proxy(_))).count() {
            proxies.push(Proxy::start(upstream)?);
        }
    }
    let stop_file = dir.join("stop");
    let _ = std::fs::remove_file(&stop_file);
    let mut h = Harness {
        rng: SplitMix64::new(cfg.seed),
        cfg,
        target,
        dir,
        stop_file,
        run_ids,
        fleet,
        ext: None,
        receiver,
        proxies,
        slots,
        workers: Vec::new(),
        next_worker: 0,
        early_exits: BTreeMap::new(),
        started: BTreeMap::new(),
        faults: FaultKind::ALL.iter().map(|k| (k.name(), 0)).collect(),
        undo: Vec::new(),
        kills: Vec::new(),
        killed_owners: Vec::new(),
        errors: Vec::new(),
        sweep_errors: 0,
        progress,
        start: Instant::now(),
    };
    let outcome = h.drive();
    // Whatever happened, no worker outlives the harness.
    h.stop_all();
    outcome?;
    h.finish()
}

/// Every runtime must be startable: a run without one of them would prove less than it says.
fn check_runtimes(cfg: &ChaosConfig) -> Result<(), String> {
    for slot in slots(cfg.store) {
        match slot.runtime {
            Runtime::Node if cfg.node_worker.as_ref().is_none_or(|p| !p.is_file()) => {
                return Err("the Node workers need --node-worker scripts/chaos/worker.mjs".into());
            }
            Runtime::Python if cfg.python_worker.as_ref().is_none_or(|p| !p.is_file()) || cfg.python.is_none() => {
                return Err(
                    "the Python workers need --python PYTHON and --python-worker scripts/chaos/worker.py".into()
                );
            }
            _ => {}
        }
        if slot.skew.is_some() && cfg.faketime.as_ref().is_none_or(|p| !p.is_file()) {
            return Err("clock skew needs --faketime /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 \
                        (Debian's libfaketime)"
                .into());
        }
        if slot.route == Route::Pooler && cfg.pooler_url.is_none() {
            return Err("the pooled workers need --pooler-url (PgBouncer in transaction mode)".into());
        }
    }
    if cfg.store == ChaosStore::Postgres && cfg.restart_command.is_none() {
        return Err("the restart fault needs --restart-command (e.g. \"pg_ctlcluster 15 main restart\")".into());
    }
    Ok(())
}

/// A fresh store for the run.
fn make_store(cfg: &ChaosConfig, dir: &Path) -> Result<Target, String> {
    match cfg.store {
        ChaosStore::Sqlite => {
            let path = dir.join("chaos.db");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            Ok(Target { pg: None, sqlite: Some(path) })
        }
        ChaosStore::Postgres => {
            let url = cfg.database_url.as_deref().ok_or("--store-kind postgres needs --database-url")?;
            let server = PgUrl::parse(url)?;
            let pooler = cfg.pooler_url.as_deref().map(PgUrl::parse).transpose()?;
            let mut admin = heart_fleet_stores::connect(url).map_err(err_text)?;
            admin
                .batch(&format!("DROP DATABASE IF EXISTS {CHAOS_DATABASE} WITH (FORCE)"))
                .map_err(|e| format!("drop {CHAOS_DATABASE}: {e}"))?;
            admin
                .batch(&format!("CREATE DATABASE {CHAOS_DATABASE}"))
                .map_err(|e| format!("create {CHAOS_DATABASE}: {e}"))?;
            Ok(Target { pg: Some((server, pooler)), sqlite: None })
        }
    }
}

impl Harness<'_> {
    fn note(&mut self, text: impl FnOnce() -> String) {
        if let Some(out) = self.progress.as_mut() {
            let _ = writeln!(out, "# {:>6} ms: {}", self.start.elapsed().as_millis(), text());
        }
    }

    fn spawn(&mut self, slot: usize, skew: Option<&'static str>) -> Result<(), String> {
        self.next_worker += 1;
        let s = self.slots[slot].clone();
        let name = format!("{}-{}", s.runtime.name(), self.next_worker);
        let url = self.target.worker_url(s.runtime, s.route, &self.proxies)?;
        let stderr = self.dir.join(format!("{name}.err"));
        let err_file = File::create(&stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        let mut cmd = match s.runtime {
            Runtime::Rust => {
                let mut c = Command::new(exe);
                c.arg("chaos-worker");
                c
            }
            Runtime::Component => {
                let mut c = Command::new(exe);
                c.args(["--engine", "component", "chaos-worker"]);
                c
            }
            Runtime::Node => {
                let mut c = Command::new("node");
                c.arg(self.cfg.node_worker.as_deref().unwrap_or(Path::new("")));
                c
            }
            Runtime::Python => {
                let mut c = Command::new(self.cfg.python.as_deref().unwrap_or("python3"));
                c.arg(self.cfg.python_worker.as_deref().unwrap_or(Path::new("")));
                c
            }
        };
        cmd.env("HEART_CHAOS_STORE", &url)
            .env("HEART_CHAOS_RUNS", self.run_ids.join(","))
            .env("HEART_CHAOS_RECEIVER", self.receiver.url())
            .env("HEART_CHAOS_NAME", &name)
            .env("HEART_CHAOS_TTL", self.cfg.ttl_seconds.to_string())
            .env("HEART_CHAOS_WORK_MS", self.cfg.work_ms.to_string())
            .env("HEART_CHAOS_STOP", &self.stop_file)
            .env("HEART_CHAOS_SEED", self.rng.next_u64().to_string())
            .env("HEART_CHAOS_TIMEOUT_MS", STORE_CALL_MS.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(err_file));
        if let (Some(offset), Some(lib)) = (skew, &self.cfg.faketime) {
            cmd.env("LD_PRELOAD", lib).env("FAKETIME", offset).env("FAKETIME_NO_CACHE", "1");
        }
        if s.route == Route::Pooler {
            *self.faults.entry(FaultKind::Pooler.name()).or_default() += 1;
        }
        let child = cmd.spawn().map_err(|e| format!("start {name}: {e}"))?;
        *self.started.entry(s.runtime.name()).or_default() += 1;
        self.note(|| {
            format!("started {name} (pid {}){}", child.id(), skew.map(|o| format!(", clock {o}")).unwrap_or_default())
        });
        self.workers.push(Worker { slot, name, child, stderr, paused: false });
        Ok(())
    }

    fn drive(&mut self) -> Result<(), String> {
        for slot in 0..self.slots.len() {
            self.spawn(slot, self.slots[slot].skew)?;
        }
        let mut schedule = fault_schedule(self.cfg.store, self.cfg.seconds, &mut self.rng).into_iter().peekable();
        let end = self.start + Duration::from_secs(self.cfg.seconds);
        let mut last_sweep = Instant::now();
        while Instant::now() < end {
            self.reap()?;
            while let Some((at, kind)) = schedule.peek().copied() {
                if self.start + at > Instant::now() {
                    break;
                }
                schedule.next();
                self.inject(kind)?;
            }
            self.undo_due(false);
            if last_sweep.elapsed() >= SWEEP_EVERY {
                last_sweep = Instant::now();
                self.sweep();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Workers that exited on their own: an error (a worker must ride through every fault), and
    /// a replacement in their slot, unless that slot's workers keep dying
    /// ([`MAX_EARLY_EXITS`]: a worker that cannot start at all).
    fn reap(&mut self) -> Result<(), String> {
        let mut i = 0;
        while i < self.workers.len() {
            match self.workers[i].child.try_wait() {
                Ok(Some(status)) => {
                    let w = self.workers.remove(i);
                    let tail = std::fs::read_to_string(&w.stderr).unwrap_or_default();
                    let tail: String = tail.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                    self.errors.push(format!("worker {} exited by itself ({status}): {tail}", w.name));
                    let slot = w.slot;
                    let exits = self.early_exits.entry(slot).or_default();
                    *exits += 1;
                    if *exits < MAX_EARLY_EXITS {
                        let skew = self.slots[slot].skew;
                        self.spawn(slot, skew)?;
                    } else {
                        self.errors.push(format!("slot {slot} ({}) given up after {MAX_EARLY_EXITS} exits", w.name));
                    }
                }
                Ok(None) => i += 1,
                Err(e) => return Err(format!("wait for a worker: {e}")),
            }
        }
        Ok(())
    }

    /// The runs each owner holds now.
    fn held_by(&mut self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let sql = match self.fleet.store_mut().dialect() {
            Dialect::Postgres => {
                "SELECT id::text AS id, lease_owner FROM agent_runs WHERE status IN ('leased', 'running')"
            }
            Dialect::Sqlite => "SELECT id, lease_owner FROM agent_runs WHERE status IN ('leased', 'running')",
        };
        if let Ok(rows) = q(self.fleet.store_mut(), sql) {
            for r in rows {
                if let (Some(id), Some(owner)) = (cell_text(&r, "id"), cell_text(&r, "lease_owner")) {
                    out.entry(owner).or_default().push(id);
                }
            }
        }
        out
    }

    /// A running, unpaused worker, preferably one that holds a lease, and the runs it holds.
    fn victim(&mut self) -> Option<(usize, Vec<String>)> {
        let mut held = self.held_by();
        let awake: Vec<usize> = (0..self.workers.len()).filter(|&i| !self.workers[i].paused).collect();
        let holders: Vec<usize> =
            awake.iter().copied().filter(|&i| held.contains_key(&self.workers[i].owner())).collect();
        let pool = if holders.is_empty() { awake } else { holders };
        if pool.is_empty() {
            return None;
        }
        let i = pool[self.rng.index(pool.len())];
        Some((i, held.remove(&self.workers[i].owner()).unwrap_or_default()))
    }

    fn count(&mut self, kind: FaultKind) {
        *self.faults.entry(kind.name()).or_default() += 1;
    }

    /// Kills worker `i` (SIGKILL), records the runs it held (as [`Harness::victim`] read them
    /// just before), and starts its replacement.
    fn kill(&mut self, i: usize, held: Vec<String>, skew: Option<&'static str>) -> Result<(), String> {
        let mut w = self.workers.remove(i);
        let owner = w.owner();
        if w.child.kill().is_err() {
            self.errors.push(format!("could not kill {}", w.name));
        }
        let _ = w.child.wait();
        let at = now_ms();
        for run in held {
            self.kills.push((owner.clone(), run, at));
        }
        self.record_killed(&owner);
        self.spawn(w.slot, skew)
    }

    fn record_killed(&mut self, owner: &str) {
        self.killed_owners.push(owner.to_owned());
        let p = match self.fleet.store_mut().dialect() {
            Dialect::Postgres => "$1::text",
            Dialect::Sqlite => "?1",
        };
        let stmt = Statement {
            sql: format!("INSERT INTO chaos_killed (owner) VALUES ({p})"),
            params: vec![SqlParam::Text(owner.to_owned())],
        };
        // Kept in memory too: the history read at the end adds what this insert missed.
        let _ = self.fleet.store_mut().query(&stmt);
    }

    /// When the PostgreSQL server the harness uses started (`None`: it does not answer).
    fn server_started(&mut self) -> Option<String> {
        let rows = q(self.fleet.store_mut(), "SELECT pg_postmaster_start_time()::text AS t").ok()?;
        rows.first().and_then(|r| cell_text(r, "t"))
    }

    fn inject(&mut self, kind: FaultKind) -> Result<(), String> {
        let pause = Duration::from_millis(u64::try_from(self.cfg.ttl_seconds * 1000).unwrap_or(0) + 1500);
        match kind {
            FaultKind::Kill => {
                if let Some((i, held)) = self.victim() {
                    let name = self.workers[i].name.clone();
                    self.kill(i, held, self.slots[self.workers[i].slot].skew)?;
                    self.count(kind);
                    self.note(|| format!("kill: SIGKILL {name}"));
                }
            }
            FaultKind::Pause => {
                if let Some((i, _)) = self.victim() {
                    let pid = self.workers[i].child.id();
                    if signal(pid, "-STOP") {
                        self.workers[i].paused = true;
                        // The wake-up has a timer of its own: the harness may be stuck behind
                        // the paused worker (a SQLite write lock it holds) when it is due.
                        std::thread::spawn(move || {
                            std::thread::sleep(pause);
                            signal(pid, "-CONT");
                        });
                        self.undo.push((Instant::now() + pause, Undo::Resume(pid)));
                        self.count(kind);
                        let name = self.workers[i].name.clone();
                        self.note(|| format!("pause: SIGSTOP {name} for {} ms", pause.as_millis()));
                    }
                }
            }
            FaultKind::ClockSkew => {
                if let Some((i, held)) = self.victim() {
                    let offsets = skew_offsets(self.cfg.store);
                    let offset = offsets[self.rng.index(offsets.len())];
                    let name = self.workers[i].name.clone();
                    self.kill(i, held, Some(offset))?;
                    self.count(kind);
                    self.note(|| format!("clock_skew: {name} replaced by a worker at {offset}"));
                }
            }
            FaultKind::BackendKill => {
                let sql = format!(
                    "SELECT count(pg_terminate_backend(pid))::bigint AS n FROM pg_stat_activity WHERE datname = current_database() \
                     AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND application_name <> '{HARNESS_APP}'"
                );
                match q(self.fleet.store_mut(), &sql) {
                    Ok(rows) => {
                        let n = rows.first().and_then(|r| cell_int(r, "n")).unwrap_or(0);
                        if n > 0 {
                            self.count(kind);
                        }
                        self.note(|| format!("backend_kill: {n} worker connections terminated"));
                    }
                    Err(e) => self.note(|| format!("backend_kill failed: {e}")),
                }
            }
            FaultKind::Restart => {
                // Counted only when the server the fleet uses did start again.
                let before = self.server_started();
                let command = self.cfg.restart_command.clone().unwrap_or_default();
                let t = Instant::now();
                let ran =
                    Command::new("sh").args(["-c", &command]).stdout(Stdio::null()).status().is_ok_and(|s| s.success());
                let mut after = None;
                while after.is_none() && t.elapsed() < Duration::from_secs(15) {
                    after = self.server_started();
                    if after.is_none() {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
                let restarted = ran && before.is_some() && after.is_some() && before != after;
                if restarted {
                    self.count(kind);
                }
                self.note(|| {
                    format!(
                        "restart: {} in {} ms",
                        if restarted { "done" } else { "FAILED (the server did not start again)" },
                        t.elapsed().as_millis()
                    )
                });
            }
            FaultKind::ProxyDelay => {
                let open: u64 = self.proxies.iter().map(Proxy::open_connections).sum();
                for p in &self.proxies {
                    p.delay_for(Duration::from_millis(150), Duration::from_secs(3));
                }
                if open > 0 {
                    self.count(kind);
                }
                self.note(|| format!("proxy_delay: +150 ms each way for 3 s on {open} connections"));
            }
            FaultKind::ProxyDrop => {
                let open: u64 = self.proxies.iter().map(Proxy::open_connections).sum();
                for p in &self.proxies {
                    p.drop_connections();
                }
                if open > 0 {
                    self.count(kind);
                }
                self.note(|| format!("proxy_drop: {open} proxied connections closed"));
            }
            FaultKind::Partition => {
                if !self.proxies.is_empty() {
                    let i = self.rng.index(self.proxies.len());
                    let open = self.proxies[i].open_connections();
                    self.proxies[i].partition_for(pause);
                    if open > 0 {
                        self.count(kind);
                    }
                    self.note(|| {
                        format!("partition: proxy {i} ({open} connections) cut off for {} ms", pause.as_millis())
                    });
                }
            }
            FaultKind::Pooler => {}
        }
        Ok(())
    }

    /// Undoes what is due (everything when `all`).
    fn undo_due(&mut self, all: bool) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.undo).into_iter().partition(|(t, _)| all || *t <= now);
        self.undo = later;
        for (_, u) in due {
            match u {
                Undo::Resume(pid) => {
                    // Its timer sent SIGCONT already, unless the run is stopping early.
                    signal(pid, "-CONT");
                    if let Some(w) = self.workers.iter_mut().find(|w| w.child.id() == pid) {
                        w.paused = false;
                    }
                    self.note(|| format!("pause: SIGCONT pid {pid}"));
                }
            }
        }
    }

    /// One pass of the sweeper, the liveness sweep, the reconciler and the operator; failures
    /// are counted (the store may be restarting) and the next pass tries again.
    fn sweep(&mut self) {
        let ttl_ms = self.cfg.ttl_seconds * 1000;
        let mut failed = self.fleet.reclaim_expired(DEFAULT_SWEEP_LIMIT).is_err();
        failed |= self.fleet.reclaim_dead_instance_runs(ttl_ms, DEFAULT_SWEEP_LIMIT).is_err();
        if self.ext.is_none() {
            self.ext = heart_fleet_stores::open(&self.target.harness_url()).ok();
        }
        let ext = &mut self.ext;
        // A probe that cannot reach the receiver's tables is an error for that intent (tried
        // again next pass), never "nobody can tell", which would count towards abandoning it.
        let mut probe = |intent: &IntentRow| match ext.as_mut() {
            Some(store) => Some(receiver::probe(store, intent).map_err(err_text)),
            None => Some(Err("the receiver's tables cannot be reached".to_owned())),
        };
        failed |=
            self.fleet.reconcile_outbox(&mut probe, DEFAULT_RECONCILE_MAX_ATTEMPTS, DEFAULT_RECONCILE_LIMIT).is_err();
        let sql = match self.fleet.store_mut().dialect() {
            Dialect::Postgres => "SELECT id::text AS id FROM agent_runs WHERE status = 'quarantined'",
            Dialect::Sqlite => "SELECT id FROM agent_runs WHERE status = 'quarantined'",
        };
        match q(self.fleet.store_mut(), sql) {
            Ok(rows) => {
                for id in rows.iter().filter_map(|r| cell_text(r, "id")) {
                    match self.fleet.requeue_run(&id, "chaos-operator") {
                        Ok(_) => {}
                        Err(e) if e.code == ErrorCode::InvalidState => {}
                        Err(_) => failed = true,
                    }
                }
            }
            Err(_) => failed = true,
        }
        if failed {
            self.sweep_errors += 1;
        }
    }

    /// Stops every worker: the stop file, the paused ones woken, the network healed; those
    /// still running after the TTL and a few seconds are killed.
    fn stop_all(&mut self) {
        let _ = File::create(&self.stop_file);
        self.undo_due(true);
        for p in &self.proxies {
            p.heal();
        }
        let deadline = Instant::now() + Duration::from_secs(u64::try_from(self.cfg.ttl_seconds).unwrap_or(0) + 8);
        while Instant::now() < deadline && self.workers.iter_mut().any(|w| matches!(w.child.try_wait(), Ok(None))) {
            std::thread::sleep(Duration::from_millis(100));
        }
        for i in 0..self.workers.len() {
            if matches!(self.workers[i].child.try_wait(), Ok(None)) {
                let owner = self.workers[i].owner();
                let _ = self.workers[i].child.kill();
                let _ = self.workers[i].child.wait();
                self.errors.push(format!("worker {} did not stop within the TTL and 8 s", self.workers[i].name));
                self.record_killed(&owner);
            }
        }
        self.workers.clear();
    }

    fn finish(mut self) -> Result<ChaosReport, String> {
        // Wait out the last lease, then sweep and reconcile until nothing is held or open.
        std::thread::sleep(Duration::from_millis(u64::try_from(self.cfg.ttl_seconds * 1000).unwrap_or(0) + 500));
        let url = self.target.harness_url();
        let mut store = heart_fleet_stores::open(&url).map_err(err_text)?;
        for _ in 0..20 {
            self.sweep();
            let open = q(
                &mut store,
                "SELECT (SELECT count(*) FROM agent_runs WHERE status IN ('leased', 'running')) + \
                 (SELECT count(*) FROM effect_intents WHERE state IN ('intent', 'dispatched')) AS n",
            )?;
            if open.first().and_then(|r| cell_int(r, "n")) == Some(0) {
                break;
            }
            std::thread::sleep(SWEEP_EVERY);
        }
        let mut history = read_history(&mut store)?;
        for owner in &self.killed_owners {
            if !history.killed_owners.contains(owner) {
                history.killed_owners.push(owner.clone());
            }
        }
        let path = self.dir.join("history.json");
        std::fs::write(&path, serde_json::to_vec(&history).map_err(err_text)?)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let verdict = history::check(&history);
        Ok(self.report(&history, verdict, &path))
    }

    fn report(&mut self, h: &History, v: Verdict, path: &Path) -> ChaosReport {
        let mut receipts: BTreeMap<String, u64> = BTreeMap::new();
        for r in &h.receipts {
            let event = r.receipt.get("event").and_then(Value::as_str).unwrap_or("?");
            *receipts.entry(event.to_owned()).or_default() += 1;
        }
        let operations = h.receipts.len() as u64;
        let mut errors = std::mem::take(&mut self.errors);
        for kind in FaultKind::ALL.into_iter().filter(|k| k.applies_to(self.cfg.store)) {
            if self.faults.get(kind.name()).copied().unwrap_or(0) == 0 {
                errors.push(format!("the fault {} was never injected", kind.name()));
            }
        }
        for runtime in Runtime::ALL {
            let expected = slots(self.cfg.store).iter().any(|s| s.runtime == runtime);
            let leased = h
                .transitions
                .iter()
                .any(|t| t.new.owner.as_deref().is_some_and(|o| o.starts_with(&format!("{}-", runtime.name()))));
            if expected && !leased {
                errors.push(format!("no {} worker ever took a lease", runtime.name()));
            }
        }
        let floor = MIN_OPERATIONS_PER_SECOND * self.cfg.seconds;
        if operations < floor {
            errors
                .push(format!("{operations} operations, fewer than the {floor} a run of {} s needs", self.cfg.seconds));
        }
        let recovery = recovery(&self.kills, h);
        let pass = v.pass() && errors.is_empty();
        ChaosReport {
            store: self.cfg.store,
            seed: self.cfg.seed,
            seconds: self.cfg.seconds,
            workers: std::mem::take(&mut self.started),
            operations,
            receipts,
            deliveries: h.deliveries.len() as u64,
            transitions: h.transitions.len() as u64,
            faults: std::mem::take(&mut self.faults)
                .into_iter()
                .filter(|(k, _)| FaultKind::ALL.iter().any(|f| f.name() == *k && f.applies_to(self.cfg.store)))
                .collect(),
            checked: v,
            recovery_ms: recovery,
            sweep_errors: self.sweep_errors,
            receiver_store_errors: self.receiver.store_errors(),
            errors,
            history: path.display().to_string(),
            verdict: if pass { "pass" } else { "fail" },
        }
    }
}

/// The schedule: each timed kind the store has, once at least, in a random order spread over
/// the middle of the run (from an eighth to three quarters of it, so the fleet is busy before
/// and has time to recover after); then one more, of a kind drawn at random, for every ten
/// seconds, so a long run meets every kind many times.
fn fault_schedule(store: ChaosStore, seconds: u64, rng: &mut SplitMix64) -> Vec<(Duration, FaultKind)> {
    let mut kinds: Vec<FaultKind> = FaultKind::ALL.into_iter().filter(|k| k.timed() && k.applies_to(store)).collect();
    rng.shuffle(&mut kinds);
    let span = seconds * 1000;
    let (from, to) = (span / 8, span * 3 / 4);
    let slot = (to - from) / kinds.len() as u64;
    let mut out: Vec<(Duration, FaultKind)> = kinds
        .into_iter()
        .enumerate()
        .map(|(i, k)| (Duration::from_millis(from + slot * i as u64 + rng.below(slot / 2 + 1)), k))
        .collect();
    let kinds: Vec<FaultKind> = out.iter().map(|(_, k)| *k).collect();
    for _ in 0..seconds / 10 {
        let kind = kinds[rng.index(kinds.len())];
        out.push((Duration::from_millis(from + rng.below(to - from + 1)), kind));
    }
    out.sort_by_key(|(at, _)| *at);
    out
}

/// For each killed holder, the store-clock time from the kill to the run's next lease.
fn recovery(kills: &[(String, String, i64)], h: &History) -> Recovery {
    let mut times: Vec<i64> = kills
        .iter()
        .filter_map(|(owner, run, at)| {
            h.transitions
                .iter()
                .filter(|t| &t.run_id == run && t.at.0 >= *at && t.new.held())
                .find(|t| t.new.owner.as_deref() != Some(owner.as_str()))
                .map(|t| t.at.0 - at)
        })
        .collect();
    times.sort_unstable();
    Recovery { samples: times.len() as u64, median: times.get(times.len() / 2).copied(), max: times.last().copied() }
}

impl ChaosReport {
    /// The report as one JSON object.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({ "error": e.to_string(), "verdict": "fail" }))
    }

    /// A few lines for people.
    pub fn write_human(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let join =
            |m: &BTreeMap<&'static str, u64>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
        writeln!(out, "fleet-chaos on {:?}, seed {}, {} s", self.store, self.seed, self.seconds)?;
        writeln!(out, "workers: {}", join(&self.workers))?;
        writeln!(out, "faults: {}", join(&self.faults))?;
        writeln!(
            out,
            "operations {} (receipts), deliveries {}, transitions {}",
            self.operations, self.deliveries, self.transitions
        )?;
        let counts = self.checked.counts().iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ");
        writeln!(out, "{counts}")?;
        if let (Some(median), Some(max)) = (self.recovery_ms.median, self.recovery_ms.max) {
            writeln!(
                out,
                "a killed holder's run leased again after {median} ms (median), {max} ms (max), {} kills",
                self.recovery_ms.samples
            )?;
        }
        for f in &self.checked.findings {
            writeln!(out, "finding: {f}")?;
        }
        for e in &self.errors {
            writeln!(out, "error: {e}")?;
        }
        writeln!(out, "history: {}", self.history)?;
        writeln!(out, "verdict: {}", self.verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_are_taken_apart_and_rebuilt_without_losing_the_credentials() {
        let u = PgUrl::parse("postgres://heart:p%40ss@127.0.0.1:5432/heart_test?sslmode=disable").unwrap();
        assert_eq!(u, PgUrl { auth: "heart:p%40ss".into(), host: "127.0.0.1".into(), port: 5432 });
        assert_eq!(u.at("127.0.0.1", 7000, "x"), "postgres://heart:p%40ss@127.0.0.1:7000/x");
        assert_eq!(PgUrl::parse("postgresql://a@db/x").unwrap().port, 5432);
        let e = PgUrl::parse("mysql://heart:secret@h/x").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn the_schedule_has_every_timed_kind_of_the_store_within_the_run() {
        for (store, kinds) in [(ChaosStore::Postgres, 8), (ChaosStore::Sqlite, 3)] {
            for seed in 0..50 {
                let seconds = 20 + seed;
                let s = fault_schedule(store, seconds, &mut SplitMix64::new(seed));
                let distinct: std::collections::BTreeSet<FaultKind> = s.iter().map(|(_, k)| *k).collect();
                assert_eq!(distinct.len(), kinds, "{s:?}");
                assert!(distinct.iter().all(|k| k.applies_to(store) && k.timed()));
                assert_eq!(s.len() as u64, kinds as u64 + seconds / 10);
                assert!(s.windows(2).all(|w| w[0].0 <= w[1].0));
                assert!(
                    s.iter().all(|(at, _)| *at >= Duration::from_millis(seconds * 125)
                        && *at <= Duration::from_millis(seconds * 750)),
                    "{s:?}"
                );
            }
        }
    }

    /// The history trigger and `read_history` on a real SQLite file: the fleet's writes come
    /// back in order with their epochs, and a write made behind the library's back (a lease
    /// taken while another is live) is found.
    #[test]
    fn the_history_of_a_sqlite_store_is_read_back_and_a_forged_takeover_is_found() {
        use heart_fleet_core::ops::{Fenced, ReleaseTo};

        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
        let path = std::env::temp_dir().join(format!("heart-chaos-history-{}-{nanos}.db", std::process::id()));
        let url = format!("sqlite:{}", path.display());
        let (mut store, _) = heart_fleet_stores::open_migrated(&url).unwrap();
        create_history_trigger(&mut store).unwrap();
        receiver::create_tables(&mut store).unwrap();
        let (sink, _) = ReceiptTableSink::new(&store);
        let mut fleet = EngineKind::Native.prepare().unwrap().build(store, None, Box::new(sink)).unwrap();
        let (run, _) = fleet.ensure_resource_run("chaos", "t", "test", "test").unwrap();
        let a = fleet.acquire(&run.id, "a", 60).unwrap().fence.unwrap();
        let Fenced::Ok { value: a } = fleet.renew(&a, 60).unwrap() else { panic!("renew refused") };
        assert!(matches!(fleet.release(&a, ReleaseTo::Ready).unwrap(), Fenced::Ok { .. }));
        let b = fleet.acquire(&run.id, "b", 60).unwrap().fence.unwrap();

        let mut reader = heart_fleet_stores::open(&url).unwrap();
        let h = read_history(&mut reader).unwrap();
        let seen: Vec<(Option<&str>, &str, i64)> =
            h.transitions.iter().map(|t| (t.new.owner.as_deref(), t.new.status.as_str(), t.new.epoch)).collect();
        assert_eq!(
            seen,
            [(Some("a"), "leased", 1), (Some("a"), "leased", 1), (None, "ready", 1), (Some("b"), "leased", 2)]
        );
        assert_eq!(h.receipts.len(), 4);
        assert_eq!(h.runs.len(), 1);
        let v = history::check(&h);
        // b still holds the run: that alone, and its receipt backs it.
        assert_eq!(v.counts().iter().map(|(_, n)| n).sum::<u64>(), 1, "{v:?}");
        assert_eq!(v.unfinished_runs, 1);

        // Mallory takes the run while b's lease is live, without the library.
        reader
            .batch(&format!(
                "UPDATE agent_runs SET lease_owner = 'mallory', fencing_epoch = fencing_epoch + 1, \
                 lease_expires_at = '2999-01-01T00:00:00.000Z', updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') \
                 WHERE id = '{}'",
                b.run_id
            ))
            .unwrap();
        let v = history::check(&read_history(&mut reader).unwrap());
        assert_eq!((v.exclusion_violations, v.receipt_mismatches), (1, 1), "{v:?}");
        drop((fleet, reader));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    #[test]
    fn recovery_is_measured_to_the_next_lease_by_another_owner() {
        let state = |owner: Option<&str>, status: &str| LeaseState {
            status: status.into(),
            owner: owner.map(Into::into),
            expires_at: None,
            epoch: 1,
        };
        let t = |id, at, owner| Transition {
            id,
            run_id: "r".into(),
            at: Timestamp(at),
            old: state(None, "ready"),
            new: state(Some(owner), "leased"),
        };
        let h = History { transitions: vec![t(1, 100, "a"), t(2, 900, "a"), t(3, 2500, "b")], ..History::default() };
        let r = recovery(&[("a".into(), "r".into(), 500)], &h);
        assert_eq!((r.samples, r.median, r.max), (1, Some(2000), Some(2000)));
    }
}

//! The `heart-fleet` argument grammar: what every command accepts, nothing that runs.
//!
//! Every command is one variant of [`Command`] with its own `Args` struct, and one module
//! in [`crate::commands`] that runs it; options shared by several commands are small `Args`
//! structs flattened into them ([`ReceiptsArg`] for `--receipts FILE`). Options every
//! command shares are in [`Global`] (`--store URL`, `--engine`, `--signing-key`), marked
//! `global = true` so they may stand before or after the subcommand. Turning arguments into
//! the simulators' configurations ([`SimulateArgs::sim_config`]) is here too, so the
//! grammar's defaults live in one place.
//!
//! Exit statuses (see [`crate::Exit`]): 0 success, 1 a check failed, 2 the command could not
//! run (clap also exits with 2 on wrong arguments, after a one-line `error: ...` and usage),
//! 3 a `simulate --processes` that ran out of `--max-seconds` before it could be judged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use heart_fleet_core::chain::Signer;

use crate::chaos::ChaosStore;
use crate::engine::{EngineKind, EngineUnavailable, Prepared};
use crate::keys::{self, KeyKind};
use crate::sim::Fault;
use crate::sim::in_process::SimConfig;

/// heart-fleet: fenced leases for fleets of workers, from the command line.
///
/// Commands that work on a store use `--store URL`; without it they use the embedded
/// SQLite store `sqlite:heart-fleet.db` in the current directory, created and migrated on
/// first use. Every other store must be migrated first with `heart-fleet migrate`.
#[derive(Debug, Parser)]
#[command(name = "heart-fleet", version, propagate_version = true)]
pub struct Cli {
    /// Options of every command.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every command.
#[derive(Debug, Clone, Default, Args)]
pub struct Global {
    /// The store: sqlite:PATH, sqlite::memory:, or postgres://USER:PASSWORD@HOST:PORT/DATABASE
    /// (libpq parameters allowed, e.g. ?options=-csearch_path%3Dmy_schema) [default: sqlite:heart-fleet.db
    /// in the current directory, the embedded store, created and migrated on first use; except
    /// for `simulate`, which never uses it: in process it runs on the memory store and refuses
    /// --store, and with --processes its default is a fresh temporary SQLite file, removed after]
    #[arg(long, global = true, value_name = "URL")]
    pub store: Option<String>,
    /// What runs the lease operations: the native crate, or the WebAssembly component
    /// (target/component/heart_fleet.wasm, built by `cargo run -p xtask -- component`, or the
    /// file named by $HEART_FLEET_COMPONENT) through wasmtime.
    #[arg(long, global = true, value_enum, default_value_t = EngineKind::Native)]
    pub engine: EngineKind,
    /// The fuel (roughly: wasm instructions) one call into the component may burn before it
    /// traps [default: 2000000000]. With `--engine component` only; a trap is contained and
    /// reported as an error (tests starve the component with it).
    #[arg(long, global = true, hide = true, value_name = "N")]
    pub component_fuel: Option<u64>,
    /// Sign the link of every receipt this command writes (to heart_receipts and to
    /// --receipts FILE) with the key in FILE, made by `heart-fleet keygen`: an HMAC key, an
    /// Ed25519 secret key, or one of each (give the option twice). The key may also come from
    /// $HEART_FLEET_SIGNING_KEY (the key file's text); both are used. Receipts are chained per
    /// run with or without a key.
    #[arg(long = "signing-key", global = true, value_name = "FILE")]
    pub signing_keys: Vec<PathBuf>,
}

impl Global {
    /// The signer of `--signing-key` and `$HEART_FLEET_SIGNING_KEY`; the error names the file
    /// or the variable, never the key.
    pub fn signer(&self) -> Result<Arc<Signer>, String> {
        keys::fleet_signer(&self.signing_keys)
    }

    /// The engine of `--engine` (and `--component-fuel`), ready to build fleets.
    pub fn prepare_engine(&self) -> Result<Prepared, EngineUnavailable> {
        self.engine.prepare().map(|p| p.with_fuel_per_call(self.component_fuel))
    }
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the canonical JSON of each JSON document read from stdin, one per line.
    ///
    /// Blank lines are skipped. The first invalid line stops the command with
    /// `line N: ...` on stderr and exit status 1.
    Canonicalize,
    /// Print the canonical digest (`sha256:dreamnet-sorted-json:v0:...`) of each JSON
    /// document read from stdin, one per line.
    ///
    /// Blank lines are skipped. The first invalid line stops the command with
    /// `line N: ...` on stderr and exit status 1.
    Digest,
    /// Check a JSON Lines file of receipts, or the store's receipts table (--table): every
    /// receipt's digest, then each run's chain (gaps, reorders, duplicates, forks, broken links,
    /// truncation with --final-seq) and, with --key or --public-key, who signed it.
    ///
    /// Prints one line per finding (`line N: CODE: MESSAGE`, `row N: ...` for the table), then
    /// a summary. Receipts without chain fields (from a TypeScript node, or older) verify by
    /// their digest and are counted unchained. Exit 0 if nothing was found, 1 otherwise, 2 if
    /// the log or a key cannot be read or is not what it must be (a line that is not JSON, a
    /// receipt of an unknown schema version or of another run than --run).
    VerifyReceipts(VerifyReceiptsArgs),
    /// Make a fleet key for --signing-key: an HMAC-SHA-256 key every writer and verifier
    /// shares, or an Ed25519 key pair (writers hold the secret key, verifiers the public one).
    /// Writes the key file with mode 0600 and never over an existing file; prints file names,
    /// never key bytes.
    Keygen(KeygenArgs),
    /// Run a fleet with crashing workers and report whether every safety count stayed 0
    /// (exit 0) or not (exit 1).
    ///
    /// Without --processes: an in-process fleet with crashes and pauses on the memory store
    /// and a virtual clock (a seed reproduces the run exactly). With --processes N: N real
    /// worker processes against one shared store (--store: a SQLite file or PostgreSQL;
    /// default: a fresh temporary SQLite file), some killed with SIGKILL while they hold a
    /// lease, the parent running the sweeper and the reconciler; a fleet still unfinished at
    /// --max-seconds is reported as DID NOT FINISH (exit 3) when no safety count but those
    /// of its unfinished runs is non-zero.
    ///
    /// Both share --runs, --effects, --seed, --ttl, --max-retries, --inject-fault, --json,
    /// --quiet and --receipts. Each refuses the other's flags (exit 2) rather than ignore
    /// them: --workers, --crash-rate, --pause-rate, --steps and --sweep-every are the
    /// in-process fleet's; --kills, --max-seconds and --work-ms the processes'.
    Simulate(SimulateArgs),
    /// Create or upgrade the tables of the store (idempotent; records what it applied in
    /// heart_fleet_migrations).
    Migrate,
    /// Find or create the canary run (deterministic key zoe.heart.canary/singleton), run a
    /// lease-guarded no-op, release the run back to ready, and print the receipts (JSON
    /// lines) and the beat line {"ran":…,"reason"?:…,"metrics":{…}}.
    ///
    /// Exit 0 when the no-op ran or another holder had the lease (reason lease-held), 1 when
    /// the lease could not be taken otherwise, was lost, or the release was refused, 2 when
    /// the store failed.
    Canary(CanaryArgs),
    /// The recovery pass: the TTL sweep (expired leases back to ready, or quarantined at the
    /// retry ceiling), then the liveness sweep (runs of instances silent too long).
    Reclaim(ReclaimArgs),
    /// List and inspect runs; operator actions (requeue, force-release) leave receipts.
    Runs(RunsArgs),
    /// List, register, heartbeat and drain worker instances (for the liveness sweep).
    Instances(InstancesArgs),
    /// Prometheus text of fleet-wide numbers read from the store.
    ///
    /// The core's 13 counters (heart_fleet_acquire_wins_total, …) are per process: they live
    /// in each worker's fleet and die with it, so a separate command cannot read them. This
    /// command derives fleet-wide numbers from the store instead: heart_fleet_receipts_total
    /// by event from the heart_receipts table (which every heart-fleet command and worker
    /// appends to; acquired, renewed, released, reclaimed, quarantined, fence_verified,
    /// effect_committed and effect_deduped equal the fleet-wide sums of the matching
    /// counters), and runs and instances by status.
    Metrics,
    /// The operator console over HTTP: live Prometheus metrics at /metrics (read from the store
    /// on each scrape), a JSON API at /api (runs, a run with its verified receipts, instances,
    /// activity, health) and a web dashboard at /. Operator actions (POST
    /// /api/runs/{id}/requeue, /api/runs/{id}/force-release, /api/instances/{id}/drain) need
    /// `Authorization: Bearer <token>` with the token of --token-file and leave the same
    /// receipts as the CLI verbs; without --token-file the console is read-only. Binds to
    /// loopback unless --listen says otherwise; logs one line per request on stderr.
    Serve(ServeArgs),
    /// A worker process of `simulate --processes` (started by it; not for people).
    #[command(hide = true)]
    Worker(WorkerArgs),
    /// Run a mixed fleet under faults and judge it: Rust (native and --engine component),
    /// Node and Python worker processes on one fresh store (--store-kind postgres: the database
    /// heart_chaos on the server of --database-url, dropped and created; sqlite: a file), with
    /// kills, pauses past the TTL, killed backends, a server restart, a lossy and partitioning
    /// proxy, skewed clocks and PgBouncer. The last line of --json is the report; exit 0 when
    /// the verdict is pass, 1 when it is fail, 2 when the harness could not run.
    /// scripts/fleet-chaos.sh sets up the services and passes every path.
    FleetChaos(FleetChaosArgs),
    /// Check the history of a fleet-chaos run: the store's (--store URL: its history trigger's
    /// table, receipts, deliveries, intents and runs) or a history.json (--history FILE).
    /// Exit 0 when every violation count is 0, 1 otherwise, 2 when it cannot be read.
    CheckHistory(CheckHistoryArgs),
    /// A worker process of `fleet-chaos` (started by it, configured by HEART_CHAOS_*).
    #[command(hide = true)]
    ChaosWorker,
}

/// Arguments of `fleet-chaos`.
#[derive(Debug, Args)]
pub struct FleetChaosArgs {
    /// The store the fleet shares.
    #[arg(long, value_enum, default_value_t = ChaosStore::Sqlite)]
    pub store_kind: ChaosStore,
    /// Seconds under faults.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(10..=86_400))]
    pub seconds: u64,
    /// The seed of the fault schedule and the workers' choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// PostgreSQL: a database on the server (heart_chaos is created beside it).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// PostgreSQL: PgBouncer in transaction mode in front of the same server.
    #[arg(long, value_name = "URL")]
    pub pooler_url: Option<String>,
    /// PostgreSQL: the shell command that restarts the server.
    #[arg(long, value_name = "COMMAND")]
    pub restart_command: Option<String>,
    /// libfaketime.so.1, for the workers with skewed clocks.
    #[arg(long, value_name = "FILE")]
    pub faketime: Option<PathBuf>,
    /// The Node worker (scripts/chaos/worker.mjs).
    #[arg(long, value_name = "FILE")]
    pub node_worker: Option<PathBuf>,
    /// The Python interpreter that has the heart_fleet wheel.
    #[arg(long, value_name = "PYTHON")]
    pub python: Option<String>,
    /// The Python worker (scripts/chaos/worker.py).
    #[arg(long, value_name = "FILE")]
    pub python_worker: Option<PathBuf>,
    /// Resource runs the fleet shares.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: u32,
    /// Lease seconds.
    #[arg(long = "ttl", default_value_t = 2, value_parser = clap::value_parser!(i64).range(1..=600))]
    pub ttl_seconds: i64,
    /// The work of one unit, in ms.
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub work_ms: u64,
    /// Where history.json and the workers' stderr go [default: a temporary directory].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print only the report, as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `check-history`.
#[derive(Debug, Args)]
pub struct CheckHistoryArgs {
    /// A history.json written by fleet-chaos (without it: the store of --store).
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `--receipts FILE`, for every command that emits receipts.
#[derive(Debug, Clone, Default, Args)]
pub struct ReceiptsArg {
    /// Append every receipt to FILE as JSON Lines (created if missing).
    #[arg(long, value_name = "FILE")]
    pub receipts: Option<PathBuf>,
}

/// Arguments of `verify-receipts`.
#[derive(Debug, Args)]
pub struct VerifyReceiptsArgs {
    /// The JSON Lines file (one receipt per line; blank lines are skipped).
    #[arg(value_name = "FILE", required_unless_present = "table")]
    pub file: Option<PathBuf>,
    /// Check the store's heart_receipts table instead of a file.
    #[arg(long, conflicts_with = "file")]
    pub table: bool,
    /// The fleet's HMAC key file: every chained receipt must carry a valid hmac.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// An Ed25519 public key file (keygen's .pub): every chained receipt must carry a valid sig.
    #[arg(long, value_name = "FILE")]
    pub public_key: Option<PathBuf>,
    /// The log is this run's: in a file, a receipt of another run is an error (exit 2); of the
    /// table, only this run's rows are checked.
    #[arg(long, value_name = "ID", value_parser = non_empty)]
    pub run: Option<String>,
    /// The sequence number of the run's last receipt, known from elsewhere: a log that ends
    /// before it is reported truncated (repeatable, one per run).
    #[arg(long, value_name = "RUN=SEQ", value_parser = run_and_seq)]
    pub final_seq: Vec<(String, u64)>,
    /// Receipts without chain fields fail instead of being counted unchained.
    #[arg(long)]
    pub require_chain: bool,
    /// Print the report as one JSON object (counts, runs, findings) instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// The kind of key.
    #[arg(long, value_enum)]
    pub kind: KeyKind,
    /// The key file to create (mode 0600).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Ed25519 only: where the public key goes [default: the --out file with .pub appended].
    #[arg(long, value_name = "FILE")]
    pub public_out: Option<PathBuf>,
}

fn run_and_seq(text: &str) -> Result<(String, u64), String> {
    let (run, seq) = text.rsplit_once('=').ok_or("expected RUN=SEQ")?;
    if run.is_empty() {
        return Err("the run id is empty".into());
    }
    let seq: u64 = seq.parse().map_err(|e| format!("SEQ {seq:?}: {e}"))?;
    if seq == 0 {
        return Err("SEQ counts from 1".into());
    }
    Ok((run.to_owned(), seq))
}

/// Arguments of `canary`.
#[derive(Debug, Args)]
pub struct CanaryArgs {
    /// The lease owner [default: heart-fleet:<hostname>:<pid>]
    #[arg(long, value_name = "NAME", value_parser = non_empty)]
    pub owner: Option<String>,
    /// Lease length in seconds (the heartbeat renews every max(1 s, ttl/2)).
    #[arg(long = "ttl", value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(i64).range(1..=31_536_000))]
    pub ttl_seconds: i64,
    /// Keep the lease this long during the no-op (heartbeating), e.g. to race two canaries.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    pub hold_ms: u64,
    /// Where receipts also go.
    #[command(flatten)]
    pub receipts: ReceiptsArg,
}

/// Arguments of `reclaim`.
#[derive(Debug, Args)]
pub struct ReclaimArgs {
    /// Most runs each sweep recovers.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub limit: u32,
    /// An instance silent for more than this is dead.
    #[arg(long, value_name = "MS", default_value_t = 90_000, value_parser = clap::value_parser!(i64).range(1..=31_536_000_000))]
    pub liveness_ttl_ms: i64,
    /// Retry ceiling: a run recovered past it is quarantined [default: 5]
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Print the summary as one JSON object {"ttlSweep":…,"liveness":…}.
    #[arg(long)]
    pub json: bool,
    /// Where receipts also go.
    #[command(flatten)]
    pub receipts: ReceiptsArg,
}

/// Arguments of `runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The action.
    #[command(subcommand)]
    pub command: RunsCommand,
}

/// `runs` actions.
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// List runs, most recently updated first (one per line; --json: one JSON object per line).
    List {
        /// Only runs in this status (ready, leased, running, completed, quarantined, …).
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        /// At most this many.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: u32,
        /// JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print one run as JSON (exit 1 if there is none).
    Show {
        /// The run id.
        #[arg(value_parser = non_empty)]
        id: String,
    },
    /// Put a quarantined run back to ready with retries 0 (receipt `requeued`).
    Requeue {
        /// The run id.
        #[arg(value_parser = non_empty)]
        id: String,
        /// Who did it (the receipt's owner).
        #[arg(long, value_name = "NAME", value_parser = non_empty)]
        operator: String,
        /// Where the receipt also goes.
        #[command(flatten)]
        receipts: ReceiptsArg,
    },
    /// Remove a lease by force, back to ready (receipt `force_released`); the holder's
    /// token stops working at once.
    ForceRelease {
        /// The run id.
        #[arg(value_parser = non_empty)]
        id: String,
        /// Where the receipt also goes.
        #[command(flatten)]
        receipts: ReceiptsArg,
    },
    /// Find or create a ready run by its idempotency key; prints {"created":…,"run":…}.
    Create {
        /// The idempotency key (not empty).
        #[arg(value_parser = non_empty)]
        key: String,
        /// What the run is for.
        #[arg(long, default_value = "created with heart-fleet runs create")]
        objective: String,
        /// Who creates it.
        #[arg(long, value_name = "NAME", default_value = "heart-fleet:cli", value_parser = non_empty)]
        created_by: String,
    },
}

/// Arguments of `instances`.
#[derive(Debug, Args)]
pub struct InstancesArgs {
    /// The action.
    #[command(subcommand)]
    pub command: InstancesCommand,
}

/// `instances` actions.
#[derive(Debug, Subcommand)]
pub enum InstancesCommand {
    /// List instances (one per line; --json: one JSON object per line).
    List {
        /// JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Register (or re-register) an instance as alive.
    Register {
        /// The instance id (the lease owner name its worker uses).
        #[arg(value_parser = non_empty)]
        id: String,
        /// Its host [default: this host]
        #[arg(long)]
        hostname: Option<String>,
        /// Its process id.
        #[arg(long)]
        pid: Option<i64>,
    },
    /// Record a heartbeat (exit 1 if the instance is unknown or dead).
    Heartbeat {
        /// The instance id.
        #[arg(value_parser = non_empty)]
        id: String,
    },
    /// Mark an instance draining: live until it goes silent (exit 1 if unknown or dead).
    Drain {
        /// The instance id.
        #[arg(value_parser = non_empty)]
        id: String,
    },
}

/// Arguments of the hidden `worker` subcommand.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The simulation.
    #[arg(long)]
    pub sim_id: String,
    /// The worker's name.
    #[arg(long)]
    pub name: String,
    /// Its journal file.
    #[arg(long)]
    pub journal: PathBuf,
    /// Lease length in seconds.
    #[arg(long = "ttl", default_value_t = 2)]
    pub ttl_seconds: i64,
    /// Effects per run.
    #[arg(long, default_value_t = 2)]
    pub effects: u32,
    /// Work before each effect.
    #[arg(long, default_value_t = 60)]
    pub work_ms: u64,
    /// Pause on each side of a delivery.
    #[arg(long, default_value_t = 10)]
    pub effect_ms: u64,
    /// Exit after this long.
    #[arg(long, default_value_t = 60_000)]
    pub deadline_ms: u64,
    /// Seed of its choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Retry ceiling [default: unlimited].
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// The store fault of the simulation.
    #[arg(long, value_enum, default_value_t = Fault::None)]
    pub inject_fault: Fault,
}

/// Arguments of `simulate` (which flags each mode uses: see [`Command::Simulate`] and
/// [`SimulateArgs::foreign_flags`]).
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Workers sharing the fleet (in process only: with --processes the fleet is the N
    /// processes) [default: 4]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub workers: Option<u32>,
    /// Runs to complete.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub runs: u32,
    /// Probability that a worker crashes at a step, 0 to 1 (in process only: with --processes
    /// the crashes are --kills K real SIGKILLs) [default: 0.1]
    #[arg(long, value_name = "P", value_parser = probability)]
    pub crash_rate: Option<f64>,
    /// Probability that a worker pauses (freezes, then acts with its old token) at a step, 0
    /// to 1 (in process only) [default: 0.05]
    #[arg(long, value_name = "P", value_parser = probability)]
    pub pause_rate: Option<f64>,
    /// Effects per run (even ones through send-once, odd ones through guard).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub effects: u32,
    /// Seed of the generator: the same seed reproduces the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Steps with faults before recovery is driven to quiescence (in process only: with
    /// --processes the run is bounded by --max-seconds) [default: 10000]
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,
    /// Lease length in seconds (in process: one step is one second, so a lease must span
    /// two; with --processes it is real time and also the liveness TTL).
    #[arg(long = "ttl", value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(i64).range(2..=3_600))]
    pub ttl_seconds: i64,
    /// The sweeper (reclaim, reconcile, requeue) runs every N steps (in process only: with
    /// --processes it runs every 250 ms) [default: 3]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub sweep_every: Option<u64>,
    /// Retry ceiling; quarantined runs are then requeued by the sweeper [default: unlimited].
    #[arg(long, value_name = "N")]
    pub max_retries: Option<u32>,
    /// Break the store on purpose, to see the safety checks catch it (the run must then
    /// come out unsafe, exit 1); with --processes, in every worker and the sweeper.
    #[arg(long, value_enum, value_name = "FAULT", default_value_t = Fault::None)]
    pub inject_fault: Fault,
    /// Print only the final report, as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Print only the final report (no receipts, faults or metrics as it goes).
    #[arg(long, conflicts_with = "json")]
    pub quiet: bool,
    /// Run N real worker processes against one shared store instead of the in-process fleet.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub processes: Option<u32>,
    /// With --processes: workers to kill with SIGKILL while they hold a lease [default: N]
    #[arg(long, value_name = "K", requires = "processes")]
    pub kills: Option<u32>,
    /// With --processes: the wall-clock bound of the whole run; a fleet that has not finished
    /// by then is reported as DID NOT FINISH (exit 3) unless a safety count it cannot explain
    /// is non-zero (UNSAFE, exit 1) [default: 60]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub max_seconds: Option<u64>,
    /// With --processes: work before each effect, in milliseconds [default: 60]
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub work_ms: Option<u64>,
    /// Where receipts also go.
    #[command(flatten)]
    pub receipts: ReceiptsArg,
}

/// A name or id: any text but the empty one (the core refuses that as `invalid-input`; a
/// wrong argument is refused here, before any store is touched).
fn non_empty(text: &str) -> Result<String, String> {
    if text.is_empty() { Err("must be a non-empty string".to_owned()) } else { Ok(text.to_owned()) }
}

/// The default wall-clock bound of `simulate --processes`, in seconds.
pub const DEFAULT_MAX_SECONDS: u64 = 60;
/// The default work before each effect of `simulate --processes`, in milliseconds.
pub const DEFAULT_WORK_MS: u64 = 60;

impl SimulateArgs {
    /// The flags given that the mode (`processes`: with --processes) does not use, by name.
    pub fn foreign_flags(&self, processes: bool) -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        if processes {
            let given = [
                (self.workers.is_some(), "--workers", "the fleet is the N worker processes of --processes N"),
                (self.crash_rate.is_some(), "--crash-rate", "its crashes are the --kills K SIGKILLs of real workers"),
                (self.pause_rate.is_some(), "--pause-rate", "it does not pause its workers"),
                (self.steps.is_some(), "--steps", "it runs in real time, bounded by --max-seconds"),
                (self.sweep_every.is_some(), "--sweep-every", "its sweeper runs every 250 ms of real time"),
            ];
            out.extend(given.into_iter().filter(|(set, _, _)| *set).map(|(_, flag, why)| (flag, why)));
        } else {
            let given = [
                (self.max_seconds.is_some(), "--max-seconds", "the in-process simulation runs on a virtual clock"),
                (self.work_ms.is_some(), "--work-ms", "the in-process simulation runs on a virtual clock"),
            ];
            out.extend(given.into_iter().filter(|(set, _, _)| *set).map(|(_, flag, why)| (flag, why)));
        }
        out
    }

    /// The in-process simulation's parameters (defaults where a flag is not given).
    pub fn sim_config(&self) -> SimConfig {
        let d = SimConfig::default();
        SimConfig {
            workers: self.workers.unwrap_or(d.workers),
            runs: self.runs,
            crash_rate: self.crash_rate.unwrap_or(d.crash_rate),
            pause_rate: self.pause_rate.unwrap_or(d.pause_rate),
            effects: self.effects,
            seed: self.seed,
            steps: self.steps.unwrap_or(d.steps),
            ttl_seconds: self.ttl_seconds,
            max_retries: self.max_retries,
            sweep_every: self.sweep_every.unwrap_or(d.sweep_every),
            fault: self.inject_fault,
        }
    }
}

/// `serve`'s options.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The address to listen on. Loopback by default: give another address (0.0.0.0:9464)
    /// to expose the console, preferably behind a proxy with TLS. Port 0 picks a free port
    /// (the first line on stderr names it).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// A file whose content (trailing newline removed) is the bearer token operator actions
    /// (requeue, force-release, drain) need. Without it the console is read-only.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// How long one request may wait for the store before it is answered 503.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub store_deadline_ms: u64,
    /// Connections to the store (reads of /metrics share one read at a time).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub connections: usize,
}

fn probability(text: &str) -> Result<f64, String> {
    let p: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&p) { Ok(p) } else { Err(format!("{p} is not a probability between 0 and 1")) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_grammar_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn probabilities_are_checked() {
        assert_eq!(probability("0.25"), Ok(0.25));
        assert!(probability("1.5").is_err());
        assert!(probability("NaN").is_err());
        assert!(probability("x").is_err());
    }

    #[test]
    fn simulate_defaults() {
        let cli = Cli::try_parse_from(["heart-fleet", "simulate"]).unwrap();
        let Command::Simulate(a) = cli.command else { panic!("not simulate") };
        let c = a.sim_config();
        assert_eq!((c.workers, c.runs, c.effects, c.seed, c.crash_rate), (4, 8, 2, 1, 0.1));
        assert_eq!((c.pause_rate, c.steps, c.sweep_every, c.ttl_seconds), (0.05, 10_000, 3, 5));
        assert!(a.max_retries.is_none() && a.receipts.receipts.is_none());
        assert!(a.foreign_flags(true).is_empty() && a.foreign_flags(false).is_empty());
        assert!(Cli::try_parse_from(["heart-fleet", "simulate", "--workers", "0"]).is_err());
    }
}

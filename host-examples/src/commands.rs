//! The commands that work on a store: `migrate`, `canary`, `reclaim`, `runs`, `instances`,
//! `metrics` and `verify-receipts --table`.
//!
//! Each opens the store of `--store` ([`open_store`]; the embedded default is created and
//! migrated on first use, any other store must have been migrated), builds a fleet through
//! the [`Engine`] trait with its receipts going to the store's `heart_receipts` table, to
//! `--receipts FILE` when given, and to a queue the command drains, runs, and reports on
//! `out` / `err`. Errors are one line, `heart-fleet: …`.
//!
//! Exit statuses: 0 success; 1 the command ran but the answer is a refusal or a failed check
//! (run not found, not quarantined, a canary whose work failed, a tampered receipt); 2 the
//! command could not run (store unreachable or not migrated, a store failure mid-operation,
//! an unwritable receipts file, a component that is missing or trapped).

use std::io::Write;
use std::time::{Duration, Instant};

use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::request::{NewRun, StoreReply, StoreRequest};
use heart_fleet_core::session::NotRunReason;
use heart_fleet_core::{ErrorCode, HeartError, HeartMetrics, LeaseOptions, LeaseStore, RunStatus};
use heart_fleet_stores::receipts::{ReceiptTableSink, TableSinkHealth};
use heart_fleet_stores::{AnyStore, DEFAULT_STORE_URL, redact};
use serde::Serialize;
use serde_json::{Value, json};

use crate::Exit;
use crate::cli::{
    CanaryArgs, Global, InstancesArgs, InstancesCommand, ReceiptsArg, ReclaimArgs, RunsArgs, RunsCommand,
    check_receipts, open_receipts,
};
use crate::engine::{Engine, LeaseWork};
use crate::receipts_file::SinkHealth;
use crate::serve::metrics::StoreReading;
use crate::sinks::{FanoutSink, QueueSink, ReceiptQueue};

/// The deterministic kind and key of the canary's resource run.
pub const CANARY_KIND: &str = "zoe.heart.canary";
/// See [`CANARY_KIND`].
pub const CANARY_KEY: &str = "singleton";
/// The canary run's objective (the reference's text).
pub const CANARY_OBJECTIVE: &str =
    "Heart fleet canary: lease-guarded no-op proving the shared lease layer on the live table";

/// Writes `heart-fleet: {message}` to `err` and returns `exit`.
pub fn fail(err: &mut dyn Write, exit: Exit, message: impl std::fmt::Display) -> Exit {
    let _ = writeln!(err, "heart-fleet: {message}");
    exit
}

/// The exit status for an operation's error: a refusal of the input (1) or a failure (2).
pub fn heart_exit(e: &HeartError) -> Exit {
    match e.code {
        ErrorCode::StoreUnavailable | ErrorCode::StoreProtocol => Exit::Error,
        _ => Exit::Failure,
    }
}

/// The store URL a command uses (`--store`, or the embedded default).
pub fn store_url(global: &Global) -> &str {
    global.store.as_deref().unwrap_or(DEFAULT_STORE_URL)
}

/// Opens the store of `--store`. The embedded default ([`DEFAULT_STORE_URL`], when no
/// `--store` is given) is created and migrated on first use; any other store must exist
/// and be migrated (`heart-fleet migrate`). (`--engine` plays no part: commands that only
/// read the store, `metrics` and `verify-receipts --table`, run no lease operation.)
pub fn open_store(global: &Global, err: &mut dyn Write) -> Result<AnyStore, Exit> {
    match global.store.as_deref() {
        Some(url) => heart_fleet_stores::open(url).map_err(|e| fail(err, Exit::Error, e)),
        None => match heart_fleet_stores::open_migrated(DEFAULT_STORE_URL) {
            Ok((store, applied)) => {
                if applied.iter().any(|m| m.applied) {
                    let _ = writeln!(err, "heart-fleet: created the tables of the embedded store {DEFAULT_STORE_URL}");
                }
                Ok(store)
            }
            Err(e) => Err(fail(err, Exit::Error, e)),
        },
    }
}

/// A fleet over an opened store, with its receipts going to the table, the optional file,
/// and a queue the command drains.
pub struct Session {
    /// The engine.
    pub fleet: Box<dyn Engine<Store = AnyStore>>,
    /// Receipts of the command, in emission order.
    pub queue: ReceiptQueue,
    table: TableSinkHealth,
    file: Option<SinkHealth>,
    receipts_path: Option<std::path::PathBuf>,
}

impl Session {
    /// Opens the store and builds the fleet (`max_retries`: the retry ceiling, default 5).
    pub fn open(
        global: &Global,
        receipts: &ReceiptsArg,
        max_retries: Option<u32>,
        err: &mut dyn Write,
    ) -> Result<Session, Exit> {
        // The engine first: a missing component is reported before any store is touched.
        let engine = global.prepare_engine().map_err(|e| fail(err, Exit::Error, e))?;
        let signer = global.signer().map_err(|e| fail(err, Exit::Error, e))?;
        let store = open_store(global, err)?;
        let (file_sink, file) = match open_receipts(receipts, &signer, err)? {
            Some((sink, health)) => (Some(sink), Some(health)),
            None => (None, None),
        };
        let (table_sink, table) = ReceiptTableSink::signed(&store, signer);
        let (queue_sink, queue) = QueueSink::new();
        let mut sinks: Vec<Box<dyn ReceiptSink>> = vec![Box::new(table_sink), Box::new(queue_sink)];
        sinks.extend(file_sink);
        let fleet = engine
            .build(store, max_retries, Box::new(FanoutSink::new(sinks)))
            .map_err(|e| fail(err, heart_exit(&e), format!("--engine {}: {e}", global.engine.as_str())))?;
        Ok(Session { fleet, queue, table, file, receipts_path: receipts.receipts.clone() })
    }

    /// Reports a sink that failed (the table or the file): `Err(Exit::Error)` then.
    pub fn finish(&self, err: &mut dyn Write) -> Result<(), Exit> {
        if let Some(e) = self.table.error() {
            return Err(fail(err, Exit::Error, e));
        }
        check_receipts(self.file.as_ref(), self.receipts_path.as_deref(), err)
    }
}

fn write_lines(out: &mut dyn Write, err: &mut dyn Write, lines: &[String]) -> Result<(), Exit> {
    for line in lines {
        if let Err(e) = writeln!(out, "{line}") {
            return Err(crate::io_failure(err, &e));
        }
    }
    out.flush().map_err(|e| crate::io_failure(err, &e))
}

fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// `migrate`: create or upgrade the tables of `--store` (the embedded default included).
pub fn migrate(global: &Global, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let url = store_url(global);
    let mut store = match heart_fleet_stores::connect(url) {
        Ok(s) => s,
        Err(e) => return fail(err, Exit::Error, e),
    };
    let statuses = match heart_fleet_stores::migrate(&mut store) {
        Ok(s) => s,
        Err(e) => return fail(err, Exit::Error, format!("migrate {}: {e}", redact(url))),
    };
    let mut lines: Vec<String> = statuses
        .iter()
        .map(|m| format!("{}: {}", m.name, if m.applied { "applied" } else { "already applied" }))
        .collect();
    let applied = statuses.iter().filter(|m| m.applied).count();
    lines.push(format!("{}: up to date ({applied} applied now)", redact(url)));
    match write_lines(out, err, &lines) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}

/// The canary's default owner: `heart-fleet:<hostname>:<pid>`.
pub fn default_owner() -> String {
    format!("heart-fleet:{}:{}", hostname(), std::process::id())
}

/// This machine's host name (`/proc/sys/kernel/hostname`, `$HOSTNAME`, else `host`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "host".to_owned())
}

/// The counters of the reference's canary beat line, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BeatMetrics {
    /// `acquireWins`.
    pub acquire_wins: u64,
    /// `acquireCollisions`.
    pub acquire_collisions: u64,
    /// `renews`.
    pub renews: u64,
    /// `releases`.
    pub releases: u64,
    /// `fenceRejections`.
    pub fence_rejections: u64,
    /// `effectCommits`.
    pub effect_commits: u64,
    /// `effectDedupes`.
    pub effect_dedupes: u64,
}

impl From<HeartMetrics> for BeatMetrics {
    fn from(m: HeartMetrics) -> BeatMetrics {
        BeatMetrics {
            acquire_wins: m.acquire_wins,
            acquire_collisions: m.acquire_collisions,
            renews: m.renews,
            releases: m.releases,
            fence_rejections: m.fence_rejections,
            effect_commits: m.effect_commits,
            effect_dedupes: m.effect_dedupes,
        }
    }
}

/// The canary's beat line: `{"ran":…, "reason"?:…, "metrics":{…}}` (the reference's keys and order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Beat {
    /// Whether the no-op ran under the lease.
    pub ran: bool,
    /// Why not (`lease-held`, `lease-error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotRunReason>,
    /// This process's counters.
    pub metrics: BeatMetrics,
}

/// `canary`: find or create the canary run, run a lease-guarded no-op (held `--hold-ms`,
/// heartbeating), release the run back to `ready`, print the receipts and the beat line.
pub fn canary(global: &Global, args: &CanaryArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut s = match Session::open(global, &args.receipts, Some(heart_fleet_core::ops::DEFAULT_MAX_RETRIES), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let run = match s.fleet.ensure_resource_run(CANARY_KIND, CANARY_KEY, CANARY_OBJECTIVE, "heart-fleet:canary") {
        Ok((run, _created)) => run,
        Err(e) => return fail(err, heart_exit(&e), format!("canary: {e}")),
    };
    let opts = LeaseOptions {
        run_id: run.id,
        owner: args.owner.clone().unwrap_or_else(default_owner),
        ttl_seconds: args.ttl_seconds,
        renew_every_ms: None,
        release_to_ready: true,
    };
    let hold = Duration::from_millis(args.hold_ms);
    let mut work = |cx: &mut dyn LeaseWork| -> Result<Value, String> {
        let start = Instant::now();
        while let Some(left) = hold.checked_sub(start.elapsed()).filter(|d| !d.is_zero()) {
            std::thread::sleep(left.min(Duration::from_millis(50)));
            if let Some(cause) = cx.heartbeat() {
                return Err(format!("the lease was lost during the no-op ({})", cause.as_str()));
            }
        }
        Ok(json!("ok"))
    };
    let result = s.fleet.execute_with_lease(&opts, &mut work);
    let mut lines: Vec<String> = s.queue.drain().iter().map(|r| r.to_json_line()).collect();
    let (beat, problem) = match result {
        Err(e) => return fail(err, heart_exit(&e), format!("canary: {e}")),
        Ok(Err(message)) => (Beat { ran: true, reason: None, metrics: s.fleet.metrics().into() }, Some(message)),
        Ok(Ok(outcome)) => {
            let problem = match (&outcome.reason, outcome.code) {
                (Some(NotRunReason::LeaseHeld), Some(ErrorCode::Quarantined)) => {
                    Some("the canary run is quarantined: requeue it with `heart-fleet runs requeue`".to_owned())
                }
                (Some(NotRunReason::LeaseError), code) => {
                    Some(format!("the canary could not take its lease ({})", code.map_or("unknown", ErrorCode::as_str)))
                }
                _ if outcome.ran && !outcome.released => Some("the canary's release was refused".to_owned()),
                _ => outcome.lost.map(|c| format!("the lease was lost during the no-op ({})", c.as_str())),
            };
            (Beat { ran: outcome.ran, reason: outcome.reason, metrics: s.fleet.metrics().into() }, problem)
        }
    };
    lines.push(json_line(&beat));
    if let Err(exit) = write_lines(out, err, &lines).and_then(|()| s.finish(err)) {
        return exit;
    }
    match problem {
        Some(p) => fail(err, Exit::Failure, format!("canary: {p}")),
        None => Exit::Success,
    }
}

/// `reclaim`: the TTL sweep, then the liveness sweep; a summary as JSON or for people.
pub fn reclaim(global: &Global, args: &ReclaimArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut s = match Session::open(global, &args.receipts, args.max_retries.or(Some(5)), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let ttl = match s.fleet.reclaim_expired(args.limit) {
        Ok(t) => t,
        Err(e) => {
            let _ = s.finish(err);
            return fail(err, heart_exit(&e), format!("reclaim (TTL sweep): {e}"));
        }
    };
    let live = match s.fleet.reclaim_dead_instance_runs(args.liveness_ttl_ms, args.limit) {
        Ok(l) => l,
        Err(e) => {
            let _ = s.finish(err);
            let ids = if ttl.reclaimed_ids.is_empty() { "nothing".to_owned() } else { ttl.reclaimed_ids.join(", ") };
            let done = format!("the TTL sweep had reclaimed {ids}");
            return fail(err, heart_exit(&e), format!("reclaim (liveness sweep; {done}): {e}"));
        }
    };
    let lines = if args.json {
        vec![json_line(&json!({ "ttlSweep": ttl, "liveness": live }))]
    } else {
        let mut l = vec![format!(
            "ttl sweep: {} reclaimed, {} quarantined, {} changed under the sweep",
            ttl.reclaimed_count,
            ttl.quarantined_ids.len(),
            ttl.errors.len()
        )];
        l.extend(ttl.reclaimed_ids.iter().map(|id| format!("  reclaimed {id}")));
        l.extend(ttl.quarantined_ids.iter().map(|id| format!("  quarantined {id}")));
        l.push(format!(
            "liveness: {} instances declared dead, {} reclaimed, {} quarantined, {} changed under the pass",
            live.dead_instance_ids.len(),
            live.reclaimed_count,
            live.quarantined_ids.len(),
            live.errors.len()
        ));
        l.extend(live.dead_instance_ids.iter().map(|id| format!("  dead {id}")));
        l.extend(live.reclaimed_ids.iter().map(|id| format!("  reclaimed {id}")));
        l.extend(live.quarantined_ids.iter().map(|id| format!("  quarantined {id}")));
        l
    };
    match write_lines(out, err, &lines).and_then(|()| s.finish(err)) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}

fn run_line(r: &heart_fleet_core::RunRow) -> String {
    format!(
        "{}  {:<11}  owner={}  expires={}  retries={}  epoch={}  key={}",
        r.id,
        r.status.as_str(),
        r.lease_owner.as_deref().unwrap_or("-"),
        r.lease_expires_at.map_or_else(|| "-".to_owned(), |t| t.to_iso()),
        r.retries,
        r.fencing_epoch,
        r.idempotency_key
    )
}

/// `runs …`.
pub fn runs(global: &Global, args: &RunsArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let none = ReceiptsArg::default();
    let receipts = match &args.command {
        RunsCommand::Requeue { receipts, .. } | RunsCommand::ForceRelease { receipts, .. } => receipts,
        _ => &none,
    };
    let mut s = match Session::open(global, receipts, Some(5), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let lines: Result<Vec<String>, HeartError> = match &args.command {
        RunsCommand::List { status, limit, json } => {
            let status = match status.as_deref().map(RunStatus::parse).transpose() {
                Ok(st) => st,
                Err(e) => return fail(err, Exit::Error, format!("--status: {}", e.message)),
            };
            s.fleet
                .list_runs(status, *limit)
                .map(|rows| rows.iter().map(|r| if *json { json_line(r) } else { run_line(r) }).collect::<Vec<_>>())
        }
        RunsCommand::Show { id } => match s.fleet.get_run(id) {
            Ok(Some(r)) => Ok(vec![json_line(&r)]),
            Ok(None) => Err(HeartError::new(ErrorCode::RunNotFound, format!("run {id} not found"))),
            Err(e) => Err(e),
        },
        RunsCommand::Requeue { id, operator, .. } => s.fleet.requeue_run(id, operator).map(|r| vec![json_line(&r)]),
        RunsCommand::ForceRelease { id, .. } => s.fleet.force_release(id).map(|r| vec![json_line(&r)]),
        RunsCommand::Create { key, objective, created_by } => {
            let req = StoreRequest::EnsureRun(NewRun {
                idempotency_key: key.clone(),
                objective: objective.clone(),
                created_by: created_by.clone(),
            });
            match s.fleet.store_mut().execute(req) {
                Ok(a) => match a.reply {
                    StoreReply::Ensured { run, created } => {
                        Ok(vec![json_line(&json!({"created": created, "run": run}))])
                    }
                    _ => Err(HeartError::new(
                        ErrorCode::StoreProtocol,
                        "runs create: the store answered something other than the run",
                    )),
                },
                Err(e) => Err(HeartError::store("runs create", &e)),
            }
        }
    };
    finish_lines(&s, lines, out, err)
}

fn finish_lines(s: &Session, lines: Result<Vec<String>, HeartError>, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let sinks = s.finish(err);
    let lines = match lines {
        Ok(l) => l,
        Err(e) => return fail(err, heart_exit(&e), e),
    };
    match write_lines(out, err, &lines).and(sinks) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}

/// `instances …`.
pub fn instances(global: &Global, args: &InstancesArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut s = match Session::open(global, &ReceiptsArg::default(), Some(5), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let refused = |what: &str, id: &str| {
        HeartError::new(
            ErrorCode::InvalidState,
            format!("{what}: instance {id} is unknown or dead (register it again)"),
        )
    };
    let lines: Result<Vec<String>, HeartError> = match &args.command {
        InstancesCommand::List { json } => s.fleet.list_instances().map(|rows| {
            rows.iter()
                .map(|i| {
                    if *json {
                        json_line(i)
                    } else {
                        format!(
                            "{}  {:<8}  host={}  pid={}  last_heartbeat={}",
                            i.instance_id,
                            i.status.as_str(),
                            i.hostname.as_deref().unwrap_or("-"),
                            i.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                            i.last_heartbeat.to_iso()
                        )
                    }
                })
                .collect()
        }),
        InstancesCommand::Register { id, hostname: host, pid } => {
            let host = host.clone().unwrap_or_else(hostname);
            s.fleet.register_instance(id, Some(&host), *pid).map(|i| vec![json_line(&i)])
        }
        InstancesCommand::Heartbeat { id } => match s.fleet.heartbeat_instance(id) {
            Ok(true) => Ok(vec![json_line(&json!({"instanceId": id, "heartbeat": true}))]),
            Ok(false) => Err(refused("heartbeat", id)),
            Err(e) => Err(e),
        },
        InstancesCommand::Drain { id } => match s.fleet.drain_instance(id) {
            Ok(true) => Ok(vec![json_line(&json!({"instanceId": id, "drained": true}))]),
            Ok(false) => Err(refused("drain", id)),
            Err(e) => Err(e),
        },
    };
    finish_lines(&s, lines, out, err)
}

/// `metrics`: Prometheus text derived from the store, the store families of `serve`'s
/// `/metrics` ([`StoreReading`]). The 13
/// `heart_fleet_*_total` counters of the core live in each process's fleet and die with
/// it; a separate command cannot read another process's, so this one reads the store.
pub fn metrics(global: &Global, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut store = match open_store(global, err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let text = match StoreReading::read(&mut store) {
        Ok(reading) => {
            let mut text = String::new();
            reading.render(&mut text);
            text
        }
        Err(e) => return fail(err, Exit::Error, format!("metrics: {e}")),
    };
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Exit::Success,
        Err(e) => crate::io_failure(err, &e),
    }
}

//! `simulate`: a fleet of workers on one in-process [`HeartFleet`] over the core's
//! [`MemoryStore`], interleaved step by step on a virtual clock, with crashes, pauses, a
//! sweeper and a reconciler, and a safety report computed from bookkeeping of its own.
//! The fleet is reached through the [`Engine`] trait, so `--engine component` runs the same
//! simulation through the WebAssembly component ([`run_on`]); a seed gives the same report
//! on either engine.
//!
//! # The model
//!
//! * `runs` runs start `ready`; each has `effects` effects. Effect `j` of a run goes out
//!   through [`HeartFleet::send_once`] (a durable intent on the `telegram` or `mail`
//!   channel) when `j` is even, and through [`HeartFleet::guard_irreversible`] with one
//!   shared [`MemoryEffectLedger`] when `j` is odd. Effect keys are
//!   [`canonical::effect_key`]`("sim", {"run", "effect"})`.
//! * Every step moves the store clock by [`TICK_MS`], runs the sweeper every
//!   `sweep_every` steps, then lets every worker take one action, in an order drawn
//!   afresh each step. An idle worker picks a run it does not know to be completed and
//!   acquires it (`ttl` seconds, at least 2: one step is one second). A holder first
//!   heartbeats (renews once half its lease is gone), then fires its next effect, or
//!   releases the run as `completed` after the last one. A refused renew, effect or
//!   release (the fence was rejected) makes it drop the run.
//!   When `send_once` answers `deduped`, the holder looks at the intent row: committed
//!   means the effect is done; dispatched means an earlier holder crashed mid-send and the
//!   holder waits (renewing) for the reconciler.
//! * **Crash** (probability `crash_rate` per worker per step): the worker forgets its
//!   lease and its plans; its lease stays in the store until it expires. When the crash
//!   hits a worker about to send, one time in three it forgets before the call, one in three
//!   it dies after the intent was marked dispatched but before the send, and one in three
//!   after the send but before it saw the acknowledgement (the send really happened; the
//!   intent stays dispatched).
//! * **Pause** (probability `pause_rate`): the worker decides its next action, then freezes
//!   for 1 to `2 × ttl` steps and performs that action on waking, with the token it had, as
//!   a process stopped by a long GC pause would. Its lease may have expired and been taken
//!   over meanwhile: the fence must refuse it.
//! * **Sweeper**: [`HeartFleet::reclaim_expired`], then [`HeartFleet::reconcile_outbox`] with
//!   a probe that answers from the simulation's record of what was really sent (`sent` with
//!   the evidence, else `not-sent`), then, when `--max-retries` is set, requeues
//!   quarantined runs as an operator would. With no `--max-retries` (the default) runs are
//!   never quarantined.
//! * After `steps` steps (or earlier, once every run completed) crashes and pauses stop and
//!   the fleet is driven until it is quiescent: every run completed, no intent left open,
//!   no lease held, and every paused worker woke and performed its stale action (bounded
//!   by [`RECOVERY_STEP_BOUND`] steps).
//!
//! # The safety report
//!
//! Computed from the simulation's own records, not from the library's answers alone:
//!
//! * The **lease log**: every lease the store granted (an `acquire` that returned a
//!   fence), as an interval `[acquired at, end)` where `end` is the latest expiry the
//!   store granted it (acquire, renews) or the time its release was accepted.
//! * The **fire log**: every time an effect really ran (the closure handed to the core
//!   executed the external action), with the store's clock and, read from the store's
//!   own row at that moment, whether the firing worker's token was the run's live lease.
//!
//! `exclusion_violations`: pairs of leases on one run whose intervals overlap, plus fires
//! that happened inside another lease's interval on the same run. `duplicate_effects`: fires
//! of an effect beyond its first. `stale_commits`: fires whose token was not the run's live
//! lease in the store's row at that moment (status held, owner, expiry and epoch equal,
//! expiry after `now`), or that fell outside the firing lease's own interval.
//! `unfinished_runs`: runs whose row is not `completed` at the end, or whose completion the
//! simulation never saw accepted. Three more counts must be zero as well:
//! `missing_effects` (an effect of a run that never fired), `zombie_writes` (a renew or
//! release accepted after the lease's interval ended) and `receipt_mismatches` (an effect
//! without exactly one `effect_committed` receipt).
//!
//! [`HeartFleet`]: heart_fleet_core::HeartFleet
//! [`HeartFleet::send_once`]: heart_fleet_core::HeartFleet::send_once
//! [`HeartFleet::guard_irreversible`]: heart_fleet_core::HeartFleet::guard_irreversible
//! [`HeartFleet::reclaim_expired`]: heart_fleet_core::HeartFleet::reclaim_expired
//! [`HeartFleet::reconcile_outbox`]: heart_fleet_core::HeartFleet::reconcile_outbox

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write};
use std::rc::Rc;

use heart_fleet_core::canonical;
use heart_fleet_core::ops::{
    DEFAULT_RECONCILE_LIMIT, DEFAULT_RECONCILE_MAX_ATTEMPTS, DEFAULT_SWEEP_LIMIT, Fenced, ReleaseTo,
};
use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::request::{StoreAnswer, StoreRequest};
use heart_fleet_core::{
    ErrorCode, FencingToken, HeartEvent, HeartMetrics, IntentRow, IntentState, LeaseStore, Ledger, MemoryEffectLedger,
    MemoryStore, ProbeVerdict, RunRow, RunStatus, StoreError, Timestamp,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Fault, SafetyCounts, Verdict, metrics_text};
use crate::engine::{Engine, Prepared};
use crate::rng::SplitMix64;
use crate::sinks::{FanoutSink, QueueSink, ReceiptQueue};

/// How far the clock moves per step (one second).
pub const TICK_MS: i64 = 1_000;
/// The most steps the recovery phase may take before the run is declared unfinished.
pub const RECOVERY_STEP_BOUND: u64 = 100_000;
/// The store clock at the start (2026-07-30T00:00:00.000Z, as in the golden vectors).
pub const START_MS: i64 = 1_785_369_600_000;
/// Print a metrics line every this many steps (human output).
pub const REPORT_EVERY: u64 = 10;

/// The simulation's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Workers sharing the fleet.
    pub workers: u32,
    /// Runs to complete.
    pub runs: u32,
    /// Probability that a worker crashes at a step.
    pub crash_rate: f64,
    /// Probability that a worker pauses at a step.
    pub pause_rate: f64,
    /// Effects per run.
    pub effects: u32,
    /// The generator's seed.
    pub seed: u64,
    /// Steps with crashes and pauses (the recovery phase follows).
    pub steps: u64,
    /// Lease length in seconds.
    pub ttl_seconds: i64,
    /// Retry ceiling (`None`: never quarantine); quarantined runs are requeued.
    pub max_retries: Option<u32>,
    /// The sweeper runs every this many steps.
    pub sweep_every: u64,
    /// A deliberate store fault (tests of the checks themselves).
    pub fault: Fault,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            workers: 4,
            runs: 8,
            crash_rate: 0.1,
            pause_rate: 0.05,
            effects: 2,
            seed: 1,
            steps: 10_000,
            ttl_seconds: 5,
            max_retries: None,
            sweep_every: 3,
            fault: Fault::None,
        }
    }
}

/// The outcome of a simulation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Workers.
    pub workers: u32,
    /// Runs.
    pub runs: u32,
    /// Effects per run.
    pub effects_per_run: u32,
    /// Crash probability.
    pub crash_rate: f64,
    /// Pause probability.
    pub pause_rate: f64,
    /// Lease length.
    pub ttl_seconds: i64,
    /// Retry ceiling (`null`: unlimited).
    pub max_retries: Option<u32>,
    /// The injected store fault (`none` normally).
    pub fault: Fault,
    /// Steps taken in all.
    pub steps: u64,
    /// Steps with crashes and pauses.
    pub chaos_steps: u64,
    /// Steps of the recovery phase.
    pub recovery_steps: u64,
    /// Whether the recovery phase reached quiescence within its bound.
    pub quiescent: bool,
    /// Worker crashes.
    pub crashes: u64,
    /// Crashes in the middle of a send (dispatched, or sent but not acknowledged).
    pub crashes_mid_send: u64,
    /// Worker pauses.
    pub pauses: u64,
    /// Leases granted.
    pub leases: u64,
    /// Renews, effects and releases the fence refused (the worker then dropped the run).
    pub fence_refusals: u64,
    /// Times a holder found its effect dispatched by a crashed holder and waited.
    pub dedupe_waits: u64,
    /// Effects that must fire (`runs × effects`).
    pub effects_expected: u64,
    /// Effects that really fired (the external action ran).
    pub effects_fired: u64,
    /// Runs the sweeper reclaimed.
    pub reclaimed: u64,
    /// Expired leases of crashed holders that `acquire` took over (a recovery too: each has
    /// its `reclaimed` receipt, so `reclaimed + takeovers` is the number of those receipts).
    pub takeovers: u64,
    /// Quarantined runs the operator requeued.
    pub requeued: u64,
    /// Intents the reconciler committed with the probe's evidence.
    pub reconciler_committed: u64,
    /// Intents the reconciler reopened (proved not sent).
    pub reconciler_reopened: u64,
    /// Receipts emitted.
    pub receipts: u64,
    /// The seven safety counts (top-level keys of the JSON report).
    #[serde(flatten)]
    pub safety: SafetyCounts,
    /// Whether every safety count is zero.
    pub safe: bool,
    /// `safe` or `unsafe` (the in-process simulation always finishes: its clock is virtual).
    pub verdict: Verdict,
    /// The store clock at the end.
    pub final_time: String,
    /// The fleet's 13 counters.
    pub metrics: HeartMetrics,
}

impl SimReport {
    /// The report for people.
    pub fn write_human(&self, out: &mut dyn Write) -> io::Result<()> {
        let retries = self.max_retries.map_or_else(|| "unlimited".to_owned(), |m| m.to_string());
        writeln!(out, "== heart-fleet simulate report ==")?;
        writeln!(
            out,
            "seed {}, {} workers, {} runs x {} effects, crash rate {}, pause rate {}, ttl {} s, max retries {retries}",
            self.seed,
            self.workers,
            self.runs,
            self.effects_per_run,
            self.crash_rate,
            self.pause_rate,
            self.ttl_seconds
        )?;
        if self.fault != Fault::None {
            writeln!(out, "INJECTED FAULT: {} (the store is broken on purpose)", self.fault.as_str())?;
        }
        let quiet = if self.quiescent { "quiescent" } else { "NOT quiescent" };
        writeln!(
            out,
            "steps: {} ({} with faults, {} recovery; {quiet}), clock at {}",
            self.steps, self.chaos_steps, self.recovery_steps, self.final_time
        )?;
        writeln!(
            out,
            "faults: {} crashes ({} mid-send), {} pauses; {} fence refusals, {} dedupe waits",
            self.crashes, self.crashes_mid_send, self.pauses, self.fence_refusals, self.dedupe_waits
        )?;
        writeln!(
            out,
            "work: {} leases, {}/{} effects fired, {} recovered ({} by the sweeper, {} taken over by acquire), \
             {} requeued, reconciler {} committed / {} reopened, {} receipts",
            self.leases,
            self.effects_fired,
            self.effects_expected,
            self.reclaimed + self.takeovers,
            self.reclaimed,
            self.takeovers,
            self.requeued,
            self.reconciler_committed,
            self.reconciler_reopened,
            self.receipts
        )?;
        writeln!(out, "metrics: {}", metrics_text(&self.metrics))?;
        self.safety.write_human(out)?;
        if self.safe {
            writeln!(out, "result: SAFE (every safety count is 0)")
        } else {
            writeln!(out, "result: UNSAFE")
        }
    }
}

/// A simulation that could not go on: an operation failed in a way no fault explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError {
    /// The step it happened at.
    pub step: u64,
    /// What happened.
    pub message: String,
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "simulation failed at step {}: {}", self.step, self.message)
    }
}

impl std::error::Error for SimError {}

/// The memory store behind a shared handle, so the simulation can read the store's own
/// rows from inside an effect (while the fleet is in the middle of an operation) to check
/// who really holds the run at the moment the effect fires.
#[derive(Debug, Clone)]
struct SharedStore(Rc<RefCell<MemoryStore>>, Fault);

impl SharedStore {
    fn read<R>(&self, f: impl FnOnce(&MemoryStore) -> R) -> Result<R, String> {
        self.0.try_borrow().map(|s| f(&s)).map_err(|_| "the store is busy".to_owned())
    }

    fn write<R>(&self, f: impl FnOnce(&mut MemoryStore) -> R) -> Result<R, String> {
        self.0.try_borrow_mut().map(|mut s| f(&mut s)).map_err(|_| "the store is busy".to_owned())
    }

    fn advance(&mut self, ms: i64) -> Result<(), String> {
        self.write(|s| s.advance(ms))
    }
}

impl LeaseStore for SharedStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let Ok(mut store) = self.0.try_borrow_mut() else {
            return Err(StoreError("the store is busy".into()));
        };
        let mut answer = store.execute(self.1.corrupt(req))?;
        self.1.corrupt_answer(&mut answer);
        Ok(answer)
    }
}

/// A lease the store granted, as the simulation saw it.
#[derive(Debug, Clone)]
struct LeaseRec {
    run: usize,
    start: i64,
    end: i64,
}

/// One real execution of an effect.
#[derive(Debug, Clone)]
struct FireRec {
    run: usize,
    lease: usize,
    at: i64,
    /// The store's row showed the firing token as the run's live lease.
    row_live: bool,
}

/// The simulation's own records.
#[derive(Debug, Default)]
struct Books {
    leases: Vec<LeaseRec>,
    fires: Vec<FireRec>,
    fire_count: BTreeMap<(usize, usize), u64>,
    /// What really went out on a send channel, for the reconciler's probe.
    sent: BTreeMap<(String, String), Value>,
    completed: Vec<bool>,
    committed_receipts: BTreeMap<(String, String), u64>,
    receipts: u64,
    zombie_writes: u64,
    internal_error: Option<String>,
}

impl Books {
    /// Records that effect `effect` of run `run` is really firing now under `lease`,
    /// reading the store's row to see whether `token` is the run's live lease.
    fn fire(
        &mut self,
        store: &SharedStore,
        token: &FencingToken,
        lease: usize,
        run: usize,
        effect: usize,
    ) -> Result<(), String> {
        let seen = store.read(|s| {
            let now = s.now();
            (now, s.run(&token.run_id).is_some_and(|row| row_is_live_for(row, token, now)))
        });
        let (now, row_live) = match seen {
            Ok(v) => v,
            Err(e) => {
                self.internal_error = Some(format!("reading the store inside an effect: {e}"));
                return Err(e);
            }
        };
        self.fires.push(FireRec { run, lease, at: now.0, row_live });
        *self.fire_count.entry((run, effect)).or_default() += 1;
        Ok(())
    }
}

/// The simulation's own reading of a row: `token` is its live lease at `now`. Written
/// out here rather than calling [`RunRow::holds`], so the check is independent of the core.
fn row_is_live_for(row: &RunRow, token: &FencingToken, now: Timestamp) -> bool {
    matches!(row.status, RunStatus::Leased | RunStatus::Running)
        && row.lease_owner.as_deref() == Some(token.owner.as_str())
        && row.lease_expires_at == Some(token.lease_expires_at)
        && token.epoch == Some(row.fencing_epoch)
        && token.lease_expires_at.0 > now.0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Acquire(usize),
    Effect,
    Release,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crash {
    None,
    /// Dies after the intent was marked dispatched, before the send.
    BeforeSend,
    /// Dies after the send, before the acknowledgement.
    AfterSend,
}

#[derive(Debug, Clone)]
struct Hold {
    lease: usize,
    run: usize,
    token: FencingToken,
    next_effect: usize,
}

#[derive(Debug, Clone)]
struct Worker {
    name: String,
    hold: Option<Hold>,
    paused_for: u64,
    pending: Option<Action>,
}

#[derive(Debug, Default)]
struct Tally {
    crashes: u64,
    crashes_mid_send: u64,
    pauses: u64,
    leases: u64,
    fence_refusals: u64,
    dedupe_waits: u64,
    reclaimed: u64,
    takeovers: u64,
    requeued: u64,
    reconciler_committed: u64,
    reconciler_reopened: u64,
}

fn is_send(effect: usize) -> bool {
    effect.is_multiple_of(2)
}

fn channel_of(effect: usize) -> &'static str {
    if effect.is_multiple_of(4) { "telegram" } else { "mail" }
}

struct Sim<'a> {
    cfg: SimConfig,
    fleet: Box<dyn Engine<Store = SharedStore>>,
    store: SharedStore,
    ledger: MemoryEffectLedger,
    rng: SplitMix64,
    workers: Vec<Worker>,
    run_ids: Vec<String>,
    keys: Vec<Vec<String>>,
    books: Books,
    tally: Tally,
    queue: ReceiptQueue,
    progress: Option<&'a mut dyn Write>,
    step: u64,
    chaos_end: u64,
}

/// Runs a simulation. Receipts go to `sink` too (e.g. a JSON Lines file) when given;
/// with `progress`, receipts (one JSON line each), faults (`# ...` lines) and a metrics
/// line every [`REPORT_EVERY`] steps are written there as they happen.
pub fn run(
    cfg: &SimConfig,
    sink: Option<Box<dyn ReceiptSink>>,
    progress: Option<&mut dyn Write>,
) -> Result<SimReport, SimError> {
    run_on(&Prepared::Native, cfg, sink, progress)
}

/// [`run`] on `engine` (the native crate, or the component: `--engine component`).
pub fn run_on(
    engine: &Prepared,
    cfg: &SimConfig,
    sink: Option<Box<dyn ReceiptSink>>,
    progress: Option<&mut dyn Write>,
) -> Result<SimReport, SimError> {
    let mut sim = Sim::new(engine, cfg, sink, progress)?;
    sim.drive()?;
    sim.report()
}

impl<'a> Sim<'a> {
    fn new(
        engine: &Prepared,
        cfg: &SimConfig,
        sink: Option<Box<dyn ReceiptSink>>,
        progress: Option<&'a mut dyn Write>,
    ) -> Result<Sim<'a>, SimError> {
        let fail = |message: String| SimError { step: 0, message };
        let t0 = Timestamp(START_MS);
        let mut memory = MemoryStore::new(t0);
        let mut run_ids = Vec::new();
        let mut keys = Vec::new();
        for i in 0..cfg.runs as usize {
            let id = format!("run-{:04}", i + 1);
            memory
                .insert(RunRow::ready(id.clone(), format!("sim:{}:run:{}", cfg.seed, i + 1), t0))
                .map_err(|e| fail(e.0))?;
            keys.push(
                (0..cfg.effects as usize)
                    .map(|j| canonical::effect_key("sim", &json!({ "run": id, "effect": j })))
                    .collect(),
            );
            run_ids.push(id);
        }
        let store = SharedStore(Rc::new(RefCell::new(memory)), cfg.fault);
        let (queue_sink, queue) = QueueSink::new();
        let mut sinks: Vec<Box<dyn ReceiptSink>> = vec![Box::new(queue_sink)];
        sinks.extend(sink);
        let fleet = engine
            .build(store.clone(), cfg.max_retries, Box::new(FanoutSink::new(sinks)))
            .map_err(|e| fail(e.to_string()))?;
        let workers = (0..cfg.workers)
            .map(|w| Worker { name: format!("worker-{}", w + 1), hold: None, paused_for: 0, pending: None })
            .collect();
        let books = Books { completed: vec![false; cfg.runs as usize], ..Books::default() };
        Ok(Sim {
            cfg: cfg.clone(),
            fleet,
            store,
            ledger: MemoryEffectLedger::default(),
            rng: SplitMix64::new(cfg.seed),
            workers,
            run_ids,
            keys,
            books,
            tally: Tally::default(),
            queue,
            progress,
            step: 0,
            chaos_end: 0,
        })
    }

    fn err(&self, message: impl Into<String>) -> SimError {
        SimError { step: self.step, message: message.into() }
    }

    fn ttl_ms(&self) -> i64 {
        self.cfg.ttl_seconds * 1000
    }

    fn now(&self) -> Result<Timestamp, SimError> {
        self.store.read(MemoryStore::now).map_err(|e| self.err(e))
    }

    fn note(&mut self, text: impl FnOnce() -> String) {
        if let Some(out) = self.progress.as_mut() {
            let _ = writeln!(out, "# step {}: {}", self.step, text());
        }
    }

    /// Takes the receipts of the last operation: counts them and prints them.
    fn absorb_receipts(&mut self) {
        for r in self.queue.drain() {
            self.books.receipts += 1;
            if r.event == HeartEvent::EffectCommitted {
                let key = (r.run_id.clone(), r.effect_key.clone().unwrap_or_default());
                *self.books.committed_receipts.entry(key).or_default() += 1;
            }
            if let Some(out) = self.progress.as_mut() {
                let _ = writeln!(out, "{}", r.to_json_line());
            }
        }
    }

    fn all_completed(&self) -> bool {
        self.books.completed.iter().all(|c| *c)
    }

    fn quiescent(&self) -> Result<bool, SimError> {
        let open = self
            .store
            .read(|s| s.intents().any(|i| matches!(i.state, IntentState::Intent | IntentState::Dispatched)))
            .map_err(|e| self.err(e))?;
        // A paused worker still has its (stale) action to perform: wait for it too.
        let idle = self.workers.iter().all(|w| w.hold.is_none() && w.pending.is_none() && w.paused_for == 0);
        Ok(self.all_completed() && !open && idle)
    }

    fn drive(&mut self) -> Result<(), SimError> {
        while self.step < self.cfg.steps && !self.all_completed() {
            self.tick(true)?;
        }
        let chaos_end = self.step;
        self.note(|| "faults stop; driving recovery to quiescence".to_owned());
        while !self.quiescent()? && self.step < chaos_end + RECOVERY_STEP_BOUND {
            self.tick(false)?;
        }
        self.chaos_end = chaos_end;
        Ok(())
    }

    fn tick(&mut self, chaos: bool) -> Result<(), SimError> {
        self.step += 1;
        self.store.advance(TICK_MS).map_err(|e| self.err(e))?;
        if self.step.is_multiple_of(self.cfg.sweep_every.max(1)) {
            self.sweep()?;
        }
        let mut order: Vec<usize> = (0..self.workers.len()).collect();
        self.rng.shuffle(&mut order);
        for w in order {
            self.worker_step(w, chaos)?;
        }
        if self.progress.is_some() && self.step.is_multiple_of(REPORT_EVERY) {
            let done = self.books.completed.iter().filter(|c| **c).count();
            let now = self.now()?;
            let metrics = metrics_text(&self.fleet.metrics());
            let total = self.run_ids.len();
            self.note(|| format!("at {now}: {done}/{total} runs completed; {metrics}"));
        }
        Ok(())
    }

    fn sweep(&mut self) -> Result<(), SimError> {
        let s = self.fleet.reclaim_expired(DEFAULT_SWEEP_LIMIT).map_err(|e| self.err(format!("reclaim: {e}")));
        self.absorb_receipts();
        let s = s?;
        self.tally.reclaimed += s.reclaimed_count;
        let sent = &self.books.sent;
        let mut probe = |intent: &IntentRow| {
            Some(Ok(match sent.get(&(intent.run_id.clone(), intent.effect_key.clone())) {
                Some(evidence) => ProbeVerdict::Sent(evidence.clone()),
                None => ProbeVerdict::NotSent,
            }))
        };
        let r = self.fleet.reconcile_outbox(&mut probe, DEFAULT_RECONCILE_MAX_ATTEMPTS, DEFAULT_RECONCILE_LIMIT);
        self.absorb_receipts();
        let r = r.map_err(|e| self.err(format!("reconcile: {e}")))?;
        self.tally.reconciler_committed += r.committed;
        self.tally.reconciler_reopened += r.reopened;
        if r.committed + r.reopened > 0 {
            let (c, o) = (r.committed, r.reopened);
            self.note(|| format!("reconciler: {c} committed from the probe's evidence, {o} reopened"));
        }
        if self.cfg.max_retries.is_some() {
            let quarantined = self
                .fleet
                .list_runs(Some(RunStatus::Quarantined), u32::MAX)
                .map_err(|e| self.err(format!("list runs: {e}")))?;
            for run in quarantined {
                let r = self.fleet.requeue_run(&run.id, "sim-operator");
                self.absorb_receipts();
                r.map_err(|e| self.err(format!("requeue {}: {e}", run.id)))?;
                self.tally.requeued += 1;
                self.note(|| format!("operator requeued quarantined {}", run.id));
            }
        }
        Ok(())
    }

    /// The next action of worker `w`, from what it knows.
    fn decide(&mut self, w: usize) -> Result<Option<Action>, SimError> {
        let Some(hold) = self.workers.get(w).and_then(|wk| wk.hold.clone()) else {
            let open: Vec<usize> =
                (0..self.run_ids.len()).filter(|r| !self.books.completed.get(*r).copied().unwrap_or(true)).collect();
            if open.is_empty() {
                return Ok(None);
            }
            let pick = open.get(self.rng.index(open.len())).copied();
            return Ok(pick.map(Action::Acquire));
        };
        Ok(Some(if hold.next_effect < self.cfg.effects as usize { Action::Effect } else { Action::Release }))
    }

    fn worker(&mut self, w: usize) -> Result<&mut Worker, SimError> {
        let step = self.step;
        self.workers.get_mut(w).ok_or(SimError { step, message: format!("no worker {w}") })
    }

    fn crash(&mut self, w: usize, how: &str) -> Result<(), SimError> {
        let wk = self.worker(w)?;
        let name = wk.name.clone();
        let held = wk.hold.take().map(|h| h.run);
        wk.pending = None;
        self.tally.crashes += 1;
        let what =
            held.and_then(|r| self.run_ids.get(r)).map_or_else(|| "idle".to_owned(), |id| format!("holding {id}"));
        self.note(|| format!("{name} crashed {how} ({what}); it forgets its lease"));
        Ok(())
    }

    fn worker_step(&mut self, w: usize, chaos: bool) -> Result<(), SimError> {
        let wk = self.worker(w)?;
        if wk.paused_for > 0 {
            wk.paused_for -= 1;
            return Ok(());
        }
        if let Some(action) = wk.pending.take() {
            // Awake again: it finishes what it was doing, with the token it had.
            return self.perform(w, action, Crash::None);
        }
        let crashes = chaos && self.rng.chance(self.cfg.crash_rate);
        self.heartbeat(w)?;
        let action = self.decide(w)?;
        if crashes {
            let sending =
                action == Some(Action::Effect) && self.worker(w)?.hold.as_ref().is_some_and(|h| is_send(h.next_effect));
            return match if sending { self.rng.below(3) } else { 0 } {
                1 => self.perform(w, Action::Effect, Crash::BeforeSend),
                2 => self.perform(w, Action::Effect, Crash::AfterSend),
                _ => self.crash(w, "between actions"),
            };
        }
        let Some(action) = action else { return Ok(()) };
        if chaos && self.rng.chance(self.cfg.pause_rate) {
            let steps = 1 + self.rng.below(2 * (self.ttl_ms() / TICK_MS).max(1) as u64);
            let wk = self.worker(w)?;
            wk.pending = Some(action);
            wk.paused_for = steps;
            let name = wk.name.clone();
            self.tally.pauses += 1;
            self.note(|| format!("{name} pauses for {steps} steps before {action:?}"));
            return Ok(());
        }
        self.perform(w, action, Crash::None)
    }

    /// The holder's heartbeat: renews once half the lease is gone, before its action.
    fn heartbeat(&mut self, w: usize) -> Result<(), SimError> {
        let Some(hold) = self.worker(w)?.hold.clone() else { return Ok(()) };
        let now = self.now()?;
        if hold.token.lease_expires_at.0 - now.0 > self.ttl_ms() / 2 {
            return Ok(());
        }
        let res = self.fleet.renew(&hold.token, self.cfg.ttl_seconds);
        self.absorb_receipts();
        match res.map_err(|e| self.err(format!("renew: {e}")))? {
            Fenced::Ok { value } => {
                let rec = self
                    .books
                    .leases
                    .get_mut(hold.lease)
                    .ok_or(SimError { step: self.step, message: "lost a lease record".into() })?;
                if now.0 >= rec.end {
                    self.books.zombie_writes += 1;
                }
                rec.end = value.lease_expires_at.0;
                if let Some(h) = self.worker(w)?.hold.as_mut() {
                    h.token = value;
                }
                Ok(())
            }
            Fenced::Rejected { cause } => self.drop_hold(w, || format!("renew refused ({})", cause.as_str())),
        }
    }

    fn drop_hold(&mut self, w: usize, why: impl FnOnce() -> String) -> Result<(), SimError> {
        let wk = self.worker(w)?;
        wk.hold = None;
        let name = wk.name.clone();
        self.tally.fence_refusals += 1;
        self.note(|| format!("{name} drops its run: {}", why()));
        Ok(())
    }

    fn perform(&mut self, w: usize, action: Action, crash: Crash) -> Result<(), SimError> {
        let name = self.worker(w)?.name.clone();
        let ttl = self.cfg.ttl_seconds;
        if let Action::Acquire(r) = action {
            let run_id = self.run_ids.get(r).cloned().ok_or_else(|| self.err(format!("no run {r}")))?;
            // The row as the store holds it before the call: a win over a held row is a takeover.
            let was_held = self
                .store
                .read(|s| {
                    s.run(&run_id).is_some_and(|row| matches!(row.status, RunStatus::Leased | RunStatus::Running))
                })
                .map_err(|e| self.err(e))?;
            let res = self.fleet.acquire(&run_id, &name, ttl);
            self.absorb_receipts();
            let res = res.map_err(|e| self.err(format!("acquire: {e}")))?;
            if res.acquired && was_held {
                self.tally.takeovers += 1;
            }
            if res.acquired {
                let fence = res.fence.ok_or_else(|| self.err("acquire won without a fence"))?;
                let now = self.now()?;
                self.books.leases.push(LeaseRec { run: r, start: now.0, end: fence.lease_expires_at.0 });
                let lease = self.books.leases.len() - 1;
                self.tally.leases += 1;
                self.worker(w)?.hold = Some(Hold { lease, run: r, token: fence, next_effect: 0 });
            }
            return Ok(());
        }
        let Some(hold) = self.worker(w)?.hold.clone() else {
            return Ok(());
        };
        match action {
            Action::Acquire(_) => Ok(()),
            Action::Release => {
                let res = self.fleet.release(&hold.token, ReleaseTo::Completed);
                self.absorb_receipts();
                match res.map_err(|e| self.err(format!("release: {e}")))? {
                    Fenced::Ok { .. } => {
                        let now = self.now()?;
                        let rec = self
                            .books
                            .leases
                            .get_mut(hold.lease)
                            .ok_or(SimError { step: self.step, message: "lost a lease record".into() })?;
                        if now.0 >= rec.end {
                            self.books.zombie_writes += 1;
                        }
                        rec.end = rec.end.min(now.0);
                        if let Some(c) = self.books.completed.get_mut(hold.run) {
                            *c = true;
                        }
                        self.worker(w)?.hold = None;
                        Ok(())
                    }
                    Fenced::Rejected { cause } => self.drop_hold(w, || format!("release refused ({})", cause.as_str())),
                }
            }
            Action::Effect if is_send(hold.next_effect) => self.send(w, &hold, crash),
            Action::Effect => self.guard(w, &hold),
        }
    }

    fn effect_key(&self, hold: &Hold) -> Result<(String, String), SimError> {
        let run_id = self.run_ids.get(hold.run).cloned();
        let key = self.keys.get(hold.run).and_then(|k| k.get(hold.next_effect)).cloned();
        run_id.zip(key).ok_or_else(|| self.err("no such effect"))
    }

    fn advance_effect(&mut self, w: usize) -> Result<(), SimError> {
        if let Some(h) = self.worker(w)?.hold.as_mut() {
            h.next_effect += 1;
        }
        Ok(())
    }

    fn send(&mut self, w: usize, hold: &Hold, crash: Crash) -> Result<(), SimError> {
        let (run_id, key) = self.effect_key(hold)?;
        let (j, run, lease) = (hold.next_effect, hold.run, hold.lease);
        let channel = channel_of(j);
        let payload = json!({ "run": run_id, "effect": j });
        let (store, books) = (&self.store, &mut self.books);
        let token = &hold.token;
        let res = self.fleet.send_once(token, channel, &key, &payload, &mut |epoch| {
            if crash == Crash::BeforeSend {
                return Err("the worker crashed before the send".into());
            }
            books.fire(store, token, lease, run, j)?;
            let evidence =
                json!({ "channel": channel, "ref": format!("{run_id}/{j}/{}", books.fires.len()), "epoch": epoch });
            books.sent.insert((run_id.clone(), key.clone()), evidence.clone());
            if crash == Crash::AfterSend {
                return Err("the worker crashed after the send, before the acknowledgement".into());
            }
            Ok(evidence)
        });
        self.absorb_receipts();
        if let Some(e) = self.books.internal_error.take() {
            return Err(self.err(e));
        }
        if crash != Crash::None {
            let reached = matches!(&res, Err(e) if e.code == ErrorCode::EffectFailed);
            if reached {
                self.tally.crashes_mid_send += 1;
            }
            let how = if crash == Crash::BeforeSend { "mid-send, before the send" } else { "mid-send, after the send" };
            return self.crash(w, how);
        }
        let res = res.map_err(|e| self.err(format!("send once: {e}")))?;
        if res.sent {
            return self.advance_effect(w);
        }
        match res.reason.as_deref() {
            Some("deduped") => {
                let state = self
                    .store
                    .read(|s| s.intents().find(|i| i.run_id == run_id && i.effect_key == key).map(|i| i.state))
                    .map_err(|e| self.err(e))?;
                match state {
                    Some(IntentState::Committed | IntentState::Abandoned) => self.advance_effect(w),
                    _ => {
                        self.tally.dedupe_waits += 1;
                        let name = self.worker(w)?.name.clone();
                        self.note(|| format!("{name} waits: {run_id} effect {j} was dispatched by a crashed holder"));
                        Ok(())
                    }
                }
            }
            Some(reason) => {
                let reason = reason.to_owned();
                self.drop_hold(w, || format!("send refused ({reason})"))
            }
            None => Err(self.err("send once refused without a reason")),
        }
    }

    fn guard(&mut self, w: usize, hold: &Hold) -> Result<(), SimError> {
        let (run_id, key) = self.effect_key(hold)?;
        let (j, run, lease) = (hold.next_effect, hold.run, hold.lease);
        let (store, books) = (&self.store, &mut self.books);
        let token = &hold.token;
        let res = self.fleet.guard_irreversible(token, Ledger::Memory(&mut self.ledger), &key, &mut |epoch| {
            books.fire(store, token, lease, run, j)?;
            Ok(json!({ "run": run_id, "effect": j, "epoch": epoch }))
        });
        self.absorb_receipts();
        if let Some(e) = self.books.internal_error.take() {
            return Err(self.err(e));
        }
        let res = res.map_err(|e| self.err(format!("guard: {e}")))?;
        if res.committed || res.code == Some(ErrorCode::Deduped) {
            return self.advance_effect(w);
        }
        let reason = res.reason.unwrap_or_default();
        self.drop_hold(w, || format!("guard refused ({reason})"))
    }

    fn report(&mut self) -> Result<SimReport, SimError> {
        let b = &self.books;
        // Exclusion: overlapping lease intervals on a run, and fires inside another lease.
        let mut by_run: BTreeMap<usize, Vec<(usize, &LeaseRec)>> = BTreeMap::new();
        for (i, l) in b.leases.iter().enumerate() {
            by_run.entry(l.run).or_default().push((i, l));
        }
        let mut exclusion = 0u64;
        for leases in by_run.values_mut() {
            leases.sort_by_key(|(_, l)| (l.start, l.end));
            for (i, (_, a)) in leases.iter().enumerate() {
                exclusion += leases.iter().skip(i + 1).take_while(|(_, c)| c.start < a.end).count() as u64;
            }
        }
        let mut stale = 0u64;
        let covers = |l: &LeaseRec, at: i64| l.start <= at && at < l.end;
        for f in &b.fires {
            let others = by_run.get(&f.run).map_or(&[][..], Vec::as_slice);
            exclusion += others.iter().filter(|(i, l)| *i != f.lease && covers(l, f.at)).count() as u64;
            let inside_own = b.leases.get(f.lease).is_some_and(|l| l.run == f.run && covers(l, f.at));
            if !f.row_live || !inside_own {
                stale += 1;
            }
        }
        let duplicate: u64 = b.fire_count.values().map(|n| n.saturating_sub(1)).sum();
        let mut missing = 0u64;
        let mut mismatches = 0u64;
        let mut expected_receipts = BTreeSet::new();
        for (r, keys) in self.keys.iter().enumerate() {
            for (j, key) in keys.iter().enumerate() {
                if b.fire_count.get(&(r, j)).copied().unwrap_or(0) == 0 {
                    missing += 1;
                }
                let run_id = self.run_ids.get(r).cloned().unwrap_or_default();
                expected_receipts.insert((run_id, key.clone()));
            }
        }
        for k in &expected_receipts {
            if b.committed_receipts.get(k).copied().unwrap_or(0) != 1 {
                mismatches += 1;
            }
        }
        mismatches += b.committed_receipts.keys().filter(|k| !expected_receipts.contains(*k)).count() as u64;
        let statuses: Vec<RunStatus> = self
            .store
            .read(|s| self.run_ids.iter().map(|id| s.run(id).map_or(RunStatus::Failed, |r| r.status)).collect())
            .map_err(|e| self.err(e))?;
        let unfinished = statuses
            .iter()
            .zip(&b.completed)
            .filter(|(status, seen)| **status != RunStatus::Completed || !**seen)
            .count() as u64;
        let quiescent = self.quiescent()?;
        let now = self.now()?;
        let chaos = self.chaos_end;
        let mut report = SimReport {
            seed: self.cfg.seed,
            workers: self.cfg.workers,
            runs: self.cfg.runs,
            effects_per_run: self.cfg.effects,
            crash_rate: self.cfg.crash_rate,
            pause_rate: self.cfg.pause_rate,
            ttl_seconds: self.cfg.ttl_seconds,
            max_retries: self.cfg.max_retries,
            fault: self.cfg.fault,
            steps: self.step,
            chaos_steps: chaos,
            recovery_steps: self.step - chaos,
            quiescent,
            crashes: self.tally.crashes,
            crashes_mid_send: self.tally.crashes_mid_send,
            pauses: self.tally.pauses,
            leases: self.tally.leases,
            fence_refusals: self.tally.fence_refusals,
            dedupe_waits: self.tally.dedupe_waits,
            effects_expected: u64::from(self.cfg.runs) * u64::from(self.cfg.effects),
            effects_fired: b.fires.len() as u64,
            reclaimed: self.tally.reclaimed,
            takeovers: self.tally.takeovers,
            requeued: self.tally.requeued,
            reconciler_committed: self.tally.reconciler_committed,
            reconciler_reopened: self.tally.reconciler_reopened,
            receipts: b.receipts,
            safety: SafetyCounts {
                exclusion_violations: exclusion,
                duplicate_effects: duplicate,
                stale_commits: stale,
                unfinished_runs: unfinished,
                missing_effects: missing,
                zombie_writes: b.zombie_writes,
                receipt_mismatches: mismatches,
            },
            safe: false,
            verdict: Verdict::Unsafe,
            final_time: now.to_iso(),
            metrics: self.fleet.metrics(),
        };
        report.safe = report.safety.all_zero();
        report.verdict = if report.safe { Verdict::Safe } else { Verdict::Unsafe };
        Ok(report)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn cfg(seed: u64, crash_rate: f64) -> SimConfig {
        SimConfig { seed, crash_rate, ..SimConfig::default() }
    }

    #[test]
    fn a_seed_reproduces_a_run_exactly() {
        let a = run(&cfg(7, 0.2), None, None).unwrap();
        let b = run(&cfg(7, 0.2), None, None).unwrap();
        assert_eq!(a, b);
        let c = run(&cfg(8, 0.2), None, None).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn faults_happen_and_every_safety_count_is_zero() {
        for seed in 1..=20 {
            let r =
                run(&SimConfig { seed, crash_rate: 0.3, pause_rate: 0.1, ..SimConfig::default() }, None, None).unwrap();
            assert!(r.safe, "seed {seed}: {r:#?}");
            assert!(r.quiescent, "seed {seed}");
            assert_eq!(r.effects_fired, r.effects_expected, "seed {seed}");
        }
    }

    #[test]
    fn the_recovery_paths_are_exercised_across_seeds() {
        // A slower sweeper widens the window in which a new holder finds an intent that a
        // crashed holder dispatched, so every path shows up within a few seeds.
        let (mut mid_send, mut committed, mut reopened, mut refusals, mut waits, mut reclaimed, mut takeovers) =
            (0, 0, 0, 0, 0, 0, 0);
        for seed in 1..=30 {
            let r = run(
                &SimConfig { seed, crash_rate: 0.3, pause_rate: 0.1, sweep_every: 5, ..SimConfig::default() },
                None,
                None,
            )
            .unwrap();
            assert!(r.safe, "seed {seed}: {r:#?}");
            mid_send += r.crashes_mid_send;
            committed += r.reconciler_committed;
            reopened += r.reconciler_reopened;
            refusals += r.fence_refusals;
            waits += r.dedupe_waits;
            reclaimed += r.reclaimed;
            takeovers += r.metrics.reclaims - r.reclaimed;
            assert_eq!(r.takeovers, r.metrics.reclaims - r.reclaimed, "seed {seed}: the report counts every recovery");
        }
        assert!(mid_send > 0);
        assert!(committed > 0, "a send whose ack was lost was committed by the reconciler");
        assert!(reopened > 0, "a dispatched, unsent intent was reopened");
        assert!(refusals > 0, "a paused worker was refused");
        assert!(waits > 0, "a holder waited for the reconciler");
        assert!(reclaimed > 0, "the sweeper reclaimed");
        assert!(takeovers > 0, "acquire took over an expired lease");
    }

    #[test]
    fn a_short_fault_phase_is_followed_by_recovery() {
        let r = run(&SimConfig { seed: 5, crash_rate: 0.5, steps: 6, runs: 20, ..SimConfig::default() }, None, None)
            .unwrap();
        assert_eq!(r.chaos_steps, 6);
        assert!(r.recovery_steps > 0 && r.quiescent && r.safe, "{r:#?}");
    }

    #[test]
    fn a_retry_ceiling_quarantines_and_the_operator_requeues() {
        let mut requeued = 0;
        for seed in 1..=10 {
            let r = run(&SimConfig { seed, crash_rate: 0.4, max_retries: Some(1), ..SimConfig::default() }, None, None)
                .unwrap();
            assert!(r.safe, "seed {seed}: {r:#?}");
            requeued += r.requeued;
        }
        assert!(requeued > 0);
    }

    #[test]
    fn the_stale_check_reads_the_row_independently() {
        let t = Timestamp(START_MS);
        let mut row = RunRow::ready("r", "k", t);
        let token = FencingToken {
            run_id: "r".into(),
            owner: "w".into(),
            lease_expires_at: Timestamp(START_MS + 5000),
            epoch: Some(1),
        };
        assert!(!row_is_live_for(&row, &token, t));
        row.status = RunStatus::Leased;
        row.lease_owner = Some("w".into());
        row.lease_expires_at = Some(token.lease_expires_at);
        row.fencing_epoch = 1;
        assert!(row_is_live_for(&row, &token, t));
        assert!(!row_is_live_for(&row, &token, token.lease_expires_at));
        row.fencing_epoch = 2;
        assert!(!row_is_live_for(&row, &token, t));
    }

    #[test]
    fn a_store_without_fencing_is_caught() {
        let (mut exclusion, mut stale) = (0, 0);
        for seed in 1..=5 {
            let cfg =
                SimConfig { seed, crash_rate: 0.2, pause_rate: 0.2, fault: Fault::NoFencing, ..SimConfig::default() };
            let r = run(&cfg, None, None).unwrap();
            assert!(!r.safe, "seed {seed}");
            exclusion += r.safety.exclusion_violations;
            stale += r.safety.stale_commits;
        }
        assert!(exclusion > 0 && stale > 0, "{exclusion} {stale}");
    }

    #[test]
    fn a_store_without_an_effect_ledger_is_caught() {
        let mut duplicates = 0;
        for seed in 1..=5 {
            let cfg = SimConfig { seed, crash_rate: 0.2, fault: Fault::NoLedger, ..SimConfig::default() };
            let r = run(&cfg, None, None).unwrap();
            duplicates += r.safety.duplicate_effects;
        }
        assert!(duplicates > 0);
    }

    #[test]
    fn no_runs_is_trivially_safe() {
        let r = run(&SimConfig { runs: 0, ..SimConfig::default() }, None, None).unwrap();
        assert!(r.safe && r.quiescent);
        assert_eq!(r.steps, 0);
    }
}

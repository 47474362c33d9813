//! [`HeartFleet`]: the reference's API over a synchronous store, driving the machines of
//! [`crate::ops`] with [`crate::driver::drive`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::driver::{Host, LeaseStore, Ledger, NoHost, Recorder, drive, settled};
use crate::error::{ErrorCode, HeartError, StoreError};
use crate::machine::{Machine, ProbeVerdict};
use crate::metrics::HeartMetrics;
use crate::model::{FencingToken, InstanceRow, IntentRow, RunRow, RunStatus};
use crate::ops::{
    self, AcquireResult, Fenced, FleetConfig, GuardResult, LivenessSummary, LostCause, ReclaimSummary,
    ReconcileSummary, ReleaseTo, SendResult,
};
use crate::receipt::{HeartReceipt, ReceiptSink};
use crate::request::StoreRequest;
use crate::session::{LeaseSession, NotRunReason};

/// Options of [`HeartFleet::execute_with_lease`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseOptions {
    /// The run.
    pub run_id: String,
    /// The worker.
    pub owner: String,
    /// Lease length.
    pub ttl_seconds: i64,
    /// Heartbeat period (default `max(1000, ttl*1000/2)`).
    #[serde(default)]
    pub renew_every_ms: Option<i64>,
    /// Resource runs: release to `ready` after a success (fix 8).
    #[serde(default)]
    pub release_to_ready: bool,
}

/// The outcome of [`HeartFleet::execute_with_lease`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecuteOutcome<T> {
    /// Whether the work ran.
    pub ran: bool,
    /// The work's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<T>,
    /// Why it did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotRunReason>,
    /// The acquire's code when it did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// Set when the lease was lost while the work ran (fix 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<LostCause>,
    /// Whether the final release went through.
    pub released: bool,
}

/// What the work sees while it runs under a lease.
pub struct LeaseContext<'a, S: LeaseStore> {
    fleet: &'a mut HeartFleet<S>,
    session: LeaseSession,
    last_beat_ms: i64,
    ttl_seconds: i64,
}

impl<S: LeaseStore> LeaseContext<'_, S> {
    /// The newest fencing token (renewals rotate it).
    pub fn fence(&self) -> Option<&FencingToken> {
        self.session.fence()
    }

    /// The lease-lost signal: `Some(cause)` once the lease is gone. The work is not
    /// stopped; it should stop issuing fenced effects.
    pub fn lost(&self) -> Option<LostCause> {
        self.session.lost()
    }

    /// A cooperative heartbeat for synchronous work: reads the store clock and renews
    /// when a period has passed since the last beat. Returns the lost cause, if any.
    pub fn heartbeat(&mut self) -> Option<LostCause> {
        let now = match self.fleet.store.execute(StoreRequest::Now) {
            Ok(a) => a.now.0,
            Err(_) => return self.session.lost(),
        };
        if now - self.last_beat_ms < self.session.interval_ms() || !self.session.should_renew() {
            self.session.check_expiry(now);
            return self.session.lost();
        }
        self.last_beat_ms = now;
        if let Some(fence) = self.session.fence().cloned() {
            let result = self.fleet.renew(&fence, self.ttl_seconds);
            self.session.on_renewed(&result, now);
        }
        self.session.lost()
    }

    /// The fleet, for fenced operations inside the work (guard, send-once).
    pub fn fleet(&mut self) -> &mut HeartFleet<S> {
        self.fleet
    }
}

/// The lease layer over one store: the reference's `HeartFleet`.
pub struct HeartFleet<S: LeaseStore> {
    store: S,
    config: FleetConfig,
    recorder: Recorder,
}

impl<S: LeaseStore> std::fmt::Debug for HeartFleet<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartFleet").field("config", &self.config).field("recorder", &self.recorder).finish()
    }
}

struct EffectHost<'a, F> {
    ledger: Option<Ledger<'a>>,
    effect: Option<F>,
}

impl<F: FnOnce(Option<i64>) -> Result<Value, String>> Host for EffectHost<'_, F> {
    fn record_once(&mut self, run_id: &str, effect_key: &str) -> Result<bool, StoreError> {
        match self.ledger.as_mut() {
            Some(Ledger::Memory(l)) => Ok(l.record_once(run_id, effect_key)),
            Some(Ledger::Durable) | None => Err(StoreError("no effect ledger".into())),
        }
    }
    fn effect(&mut self, _: &str, epoch: Option<i64>) -> Result<Value, String> {
        match self.effect.take() {
            Some(f) => f(epoch),
            None => Err("the effect was already run".into()),
        }
    }
    fn probe(&mut self, _: &IntentRow) -> Result<ProbeVerdict, String> {
        Ok(ProbeVerdict::Unknown)
    }
}

struct ProbeHost<'a>(&'a mut dyn FnMut(&IntentRow) -> Option<Result<ProbeVerdict, String>>);

impl Host for ProbeHost<'_> {
    fn record_once(&mut self, _: &str, _: &str) -> Result<bool, StoreError> {
        NoHost.record_once("", "")
    }
    fn effect(&mut self, k: &str, e: Option<i64>) -> Result<Value, String> {
        NoHost.effect(k, e)
    }
    fn probe(&mut self, intent: &IntentRow) -> Result<ProbeVerdict, String> {
        (self.0)(intent).unwrap_or(Ok(ProbeVerdict::Unknown))
    }
}

impl<S: LeaseStore> HeartFleet<S> {
    /// A fleet with the reference's defaults (`maxRetries` 5, receipts kept in memory).
    pub fn new(store: S) -> HeartFleet<S> {
        HeartFleet { store, config: FleetConfig::default(), recorder: Recorder::default() }
    }

    /// Sets the retry ceiling (`None`: never quarantine).
    pub fn with_max_retries(mut self, max_retries: Option<u32>) -> Self {
        self.config.max_retries = max_retries;
        self
    }

    /// Sends receipts to `sink` instead of keeping them (`onReceipt`).
    pub fn with_sink(mut self, sink: Box<dyn ReceiptSink>) -> Self {
        self.recorder.sink = Some(sink);
        self
    }

    /// The configuration.
    pub fn config(&self) -> FleetConfig {
        self.config
    }

    /// The counters.
    pub fn metrics(&self) -> &HeartMetrics {
        &self.recorder.metrics
    }

    /// Receipts kept so far (empty when a sink was given).
    pub fn receipts(&self) -> &[HeartReceipt] {
        &self.recorder.receipts
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutably (tests move the memory store's clock this way).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Drives any machine against this fleet's store with no host needs.
    pub fn run<T: 'static>(&mut self, m: Machine<T>) -> Result<T, HeartError> {
        drive(m, &mut self.store, &mut self.recorder, &mut NoHost)
    }

    /// `acquire(runId, owner, ttlSeconds)`.
    pub fn acquire(&mut self, run_id: &str, owner: &str, ttl_seconds: i64) -> Result<AcquireResult, HeartError> {
        self.run(ops::acquire(self.config, run_id, owner, ttl_seconds))
    }

    /// `renew(fence, ttlSeconds)`: the new token, or the cause of the refusal.
    pub fn renew(&mut self, fence: &FencingToken, ttl_seconds: i64) -> Result<Fenced<FencingToken>, HeartError> {
        self.run(ops::renew(fence, ttl_seconds))
    }

    /// `release(fence, nextStatus)`.
    pub fn release(&mut self, fence: &FencingToken, to: ReleaseTo) -> Result<Fenced<RunRow>, HeartError> {
        // `ops::release` as a machine would copy the token; the fleet lends it instead.
        let before = self.recorder.metrics;
        let result = ops::lease::release_on(fence, to, &mut self.store, &mut self.recorder);
        settled(&mut self.store, &mut self.recorder, before, result)
    }

    /// `verifyFence(fence)`.
    pub fn verify_fence(&mut self, fence: &FencingToken) -> Result<bool, HeartError> {
        // `ops::verify_fence` as a machine would copy the token; the fleet lends it instead.
        let before = self.recorder.metrics;
        let result = ops::lease::verify_fence_on(fence, &mut self.store, &mut self.recorder);
        settled(&mut self.store, &mut self.recorder, before, result)
    }

    /// `reclaimExpired({limit})`.
    pub fn reclaim_expired(&mut self, limit: u32) -> Result<ReclaimSummary, HeartError> {
        self.run(ops::reclaim_expired(self.config, limit))
    }

    /// The liveness pass.
    pub fn reclaim_dead_instance_runs(&mut self, ttl_ms: i64, limit: u32) -> Result<LivenessSummary, HeartError> {
        self.run(ops::reclaim_dead_instance_runs(self.config, ttl_ms, limit))
    }

    fn durable_record_once(
        store: &mut S,
        recorder: &mut Recorder,
        run_id: &str,
        key: &str,
    ) -> Result<bool, StoreError> {
        drive(ops::durable_record_once(run_id, key), store, recorder, &mut NoHost).map_err(|e| StoreError(e.message))
    }

    /// `guardIrreversible(heart, fence, ledger, effectKey, effect)`. The effect gets the
    /// run's fencing epoch to hand to the receiving system.
    pub fn guard_irreversible(
        &mut self,
        fence: &FencingToken,
        ledger: Ledger<'_>,
        effect_key: &str,
        effect: impl FnOnce(Option<i64>) -> Result<Value, String>,
    ) -> Result<GuardResult, HeartError> {
        match ledger {
            Ledger::Durable => self.guard_durable(fence, effect_key, effect),
            memory => {
                let mut host = EffectHost { ledger: Some(memory), effect: Some(effect) };
                drive(ops::guard_irreversible(fence, effect_key), &mut self.store, &mut self.recorder, &mut host)
            }
        }
    }

    fn guard_durable(
        &mut self,
        fence: &FencingToken,
        effect_key: &str,
        effect: impl FnOnce(Option<i64>) -> Result<Value, String>,
    ) -> Result<GuardResult, HeartError> {
        let mut m = ops::guard_irreversible(fence, effect_key);
        let mut effect = Some(effect);
        let mut step = m.start();
        let mut before = self.recorder.metrics;
        loop {
            self.recorder.absorb(m.drain_events());
            let need = match step {
                crate::machine::Step::Done(r) => return settled(&mut self.store, &mut self.recorder, before, r),
                crate::machine::Step::Need(n) => n,
            };
            use crate::machine::{Answer, Need};
            if !matches!(need, Need::Store(_)) {
                // The effect's turn: the claim is committed first.
                settled(&mut self.store, &mut self.recorder, before, Ok(()))?;
                before = self.recorder.metrics;
            }
            let answer = match need {
                Need::Store(req) => Answer::Store(self.store.execute(req)),
                Need::RecordOnce { run_id, effect_key } => Answer::Recorded(Self::durable_record_once(
                    &mut self.store,
                    &mut self.recorder,
                    &run_id,
                    &effect_key,
                )),
                Need::Effect { epoch, .. } => Answer::Effect(match effect.take() {
                    Some(f) => f(epoch),
                    None => Err("the effect was already run".into()),
                }),
                Need::Probe { .. } => Answer::Probe(Ok(ProbeVerdict::Unknown)),
            };
            step = m.resume(answer);
        }
    }

    /// `sendOnce`: `send` gets the fencing epoch and returns the `external_ref` evidence.
    pub fn send_once(
        &mut self,
        fence: &FencingToken,
        channel: &str,
        effect_key: &str,
        payload: &Value,
        send: impl FnOnce(Option<i64>) -> Result<Value, String>,
    ) -> Result<SendResult, HeartError> {
        let m = ops::send_once(fence, channel, effect_key, payload);
        let mut host = EffectHost { ledger: None, effect: Some(send) };
        drive(m, &mut self.store, &mut self.recorder, &mut host)
    }

    /// `reconcileOutbox`: `probe` answers per intent (`None`: no probe for that channel).
    pub fn reconcile_outbox(
        &mut self,
        probe: &mut dyn FnMut(&IntentRow) -> Option<Result<ProbeVerdict, String>>,
        max_attempts: i64,
        limit: u32,
    ) -> Result<ReconcileSummary, HeartError> {
        drive(ops::reconcile_outbox(max_attempts, limit), &mut self.store, &mut self.recorder, &mut ProbeHost(probe))
    }

    /// Find or create a resource run (fix 8).
    pub fn ensure_resource_run(
        &mut self,
        kind: &str,
        key: &str,
        objective: &str,
        created_by: &str,
    ) -> Result<(RunRow, bool), HeartError> {
        self.run(ops::ensure_resource_run(kind, key, objective, created_by))
    }

    /// Registers an instance.
    pub fn register_instance(
        &mut self,
        id: &str,
        hostname: Option<&str>,
        pid: Option<i64>,
    ) -> Result<InstanceRow, HeartError> {
        self.run(ops::register_instance(id, hostname, pid, None))
    }

    /// Heartbeats an instance.
    pub fn heartbeat_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        self.run(ops::heartbeat_instance(id))
    }

    /// Drains an instance.
    pub fn drain_instance(&mut self, id: &str) -> Result<bool, HeartError> {
        self.run(ops::drain_instance(id))
    }

    /// Lists runs.
    pub fn list_runs(&mut self, status: Option<RunStatus>, limit: u32) -> Result<Vec<RunRow>, HeartError> {
        self.run(ops::list_runs(status, limit))
    }

    /// Operator: one run, or `None`.
    pub fn get_run(&mut self, run_id: &str) -> Result<Option<RunRow>, HeartError> {
        self.run(ops::get_run(run_id))
    }

    /// Every instance, by id.
    pub fn list_instances(&mut self) -> Result<Vec<InstanceRow>, HeartError> {
        self.run(ops::list_instances())
    }

    /// Requeues a quarantined run.
    pub fn requeue_run(&mut self, run_id: &str, operator: &str) -> Result<RunRow, HeartError> {
        self.run(ops::requeue_run(run_id, operator))
    }

    /// Force-releases a lease.
    pub fn force_release(&mut self, run_id: &str) -> Result<RunRow, HeartError> {
        self.run(ops::force_release(run_id))
    }

    /// `executeWithLease(heart, {runId, owner, ttlSeconds, renewEveryMs}, work)` for
    /// synchronous work: acquire, run `work` (which may call
    /// [`LeaseContext::heartbeat`] to renew on schedule and [`LeaseContext::lost`] to
    /// observe a loss), then release with the newest token: `completed` (or `ready` for
    /// resource runs with `release_to_ready`) when the work returns `Ok`, else `failed`.
    pub fn execute_with_lease<T, E>(
        &mut self,
        opts: &LeaseOptions,
        work: impl FnOnce(&mut LeaseContext<'_, S>) -> Result<T, E>,
    ) -> Result<Result<ExecuteOutcome<T>, E>, HeartError> {
        let not_run = |reason, code| ExecuteOutcome {
            ran: false,
            result: None,
            reason: Some(reason),
            code,
            lost: None,
            released: false,
        };
        let mut session = match LeaseSession::new(opts.ttl_seconds, opts.renew_every_ms) {
            Ok(s) => s,
            Err(_) => return Ok(Ok(not_run(NotRunReason::ON_INVALID_INPUT, Some(ErrorCode::InvalidInput)))),
        };
        let started =
            self.store.execute(StoreRequest::Now).map_err(|e| HeartError::store("execute: read the clock", &e))?.now.0;
        let acq = self.acquire(&opts.run_id, &opts.owner, opts.ttl_seconds)?;
        let Some(fence) = acq.fence.filter(|_| acq.acquired) else {
            return Ok(Ok(not_run(NotRunReason::after_acquire(acq.run.is_some()), acq.code)));
        };
        session.on_acquired(fence, started);
        let mut cx = LeaseContext { fleet: self, session, last_beat_ms: started, ttl_seconds: opts.ttl_seconds };
        let outcome = work(&mut cx);
        let session = cx.session;
        let to = match (&outcome, opts.release_to_ready) {
            (Ok(_), true) => ReleaseTo::Ready,
            (Ok(_), false) => ReleaseTo::Completed,
            (Err(_), _) => ReleaseTo::Failed,
        };
        let released = match session.fence().filter(|_| session.should_release()) {
            Some(fence) => matches!(self.release(fence, to), Ok(Fenced::Ok { .. })),
            None => false,
        };
        Ok(outcome.map(|result| ExecuteOutcome {
            ran: true,
            result: Some(result),
            reason: None,
            code: None,
            lost: session.lost(),
            released,
        }))
    }
}

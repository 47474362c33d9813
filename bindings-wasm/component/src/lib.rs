//! # heart-fleet-component
//!
//! The heart-fleet core as a WebAssembly component (world `heart:fleet/heart-fleet@0.1.0`,
//! see `wit/`). A thin layer: every exported operation builds the core's sans-I/O
//! [`Machine`](heart_fleet_core::Machine) and drives it with the sync loop of the core's crate
//! docs, where
//!
//! * a store request goes to the imported `lease-store.execute` as the typed WIT
//!   `store-request`, and its typed answer comes back checked (module `store`); a
//!   `store-error` ends the operation with `store-unavailable` naming its step, or with
//!   `store-protocol` for a `protocol` error or an answer that fails the checks;
//! * an effect, a host ledger look-up and a probe go to the imported `effects` functions
//!   with the `handle` the host passed into the export call;
//! * receipts and counter changes are absorbed into the `fleet` resource's recorder, in
//!   order, and handed back with the operation's result (`emitted`: one export call per
//!   operation; the recorder keeps nothing between calls).
//!
//! Nothing here panics: failures are `heart-error` results. Built for
//! `wasm32-unknown-unknown` and wrapped into a component by `cargo run -p xtask -- component`,
//! it imports nothing but `heart:fleet/*`.

mod convert;
mod store;

use std::cell::RefCell;
use std::rc::Rc;

use heart_fleet_core::driver::{LeaseStore, MemoryEffectLedger, NoHost, Recorder, drive};
use heart_fleet_core::machine::{Answer, Machine, Need, ProbeVerdict, Step, keep_store_failure_code};
use heart_fleet_core::ops::{self, Fenced, FleetConfig, ReleaseTo};
use heart_fleet_core::session::{LeaseSession, NotRunReason};
use heart_fleet_core::{
    ErrorCode, HeartError, HeartMetrics, IntentRow, StoreAnswer, StoreError, StoreRequest, canonical,
};
use serde_json::Value;

/// The bindings wit-bindgen generates from `wit/` (world `heart-fleet`).
#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        world: "heart-fleet",
        path: "../../wit",
        pub_export_macro: true,
    });
}

use bindings::exports::heart::fleet::{canonical as wit_canonical, fleet as wit_fleet};
use bindings::heart::fleet::{effects, types as wit};

/// The component's exports.
pub struct Component;

bindings::export!(Component with_types_in bindings);

/// The imported `lease-store` as a core [`LeaseStore`] (for [`drive`]; a failure's code is
/// kept only by [`FleetState::run`]).
struct ImportedStore;

impl LeaseStore for ImportedStore {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        store::execute(req).map_err(|f| StoreError(f.message))
    }
}

/// The store's clock; a failure is the error of an operation stopped at `step`.
fn store_now(step: &str) -> Result<i64, HeartError> {
    store::execute(StoreRequest::Now).map(|a| a.now.0).map_err(|f| f.at(step))
}

/// Which ledger answers [`Need::RecordOnce`] in one call.
#[derive(Clone, Copy)]
enum LedgerChoice {
    /// No ledger (the operation needs none).
    None,
    /// The fleet's own in-process set.
    Memory,
    /// `effects.record-once` with the call's handle.
    Host,
    /// The store's `effect_intents` table.
    Durable,
}

/// The non-store needs of one export call.
#[derive(Clone, Copy)]
struct CallHost {
    /// The host's handle, for calls that may need effects or probes.
    handle: Option<u64>,
    ledger: LedgerChoice,
}

const NO_HOST: CallHost = CallHost { handle: None, ledger: LedgerChoice::None };

/// The state behind a `fleet` resource (shared with its lease sessions).
struct FleetState {
    recorder: Recorder,
    ledger: MemoryEffectLedger,
}

fn busy() -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, "the fleet is busy (re-entrant call)")
}

impl FleetState {
    /// The sync driving loop of the crate docs, over the imported store and effects.
    fn run<T: 'static>(&mut self, mut machine: Machine<T>, host: CallHost) -> Result<T, HeartError> {
        let mut step = machine.start();
        loop {
            self.recorder.absorb(machine.drain_events());
            let need = match step {
                Step::Done(result) => return result,
                Step::Need(need) => need,
            };
            // A failed store request keeps its code (`store-protocol`) when it ends the operation.
            let mut failed = None;
            let answer = match need {
                Need::Store(req) => Answer::Store(store::execute(req).map_err(|f| {
                    failed = Some(f.code);
                    StoreError(f.message)
                })),
                Need::RecordOnce { run_id, effect_key } => {
                    Answer::Recorded(self.record_once(host, &run_id, &effect_key))
                }
                Need::Effect { effect_key, epoch } => Answer::Effect(run_effect(host, &effect_key, epoch)),
                Need::Probe { intent } => Answer::Probe(probe(host, intent)),
            };
            step = machine.resume(answer);
            if let Some(code) = failed {
                keep_store_failure_code(&mut step, code);
            }
        }
    }

    fn record_once(&mut self, host: CallHost, run_id: &str, effect_key: &str) -> Result<bool, StoreError> {
        match (host.ledger, host.handle) {
            (LedgerChoice::Memory, _) => Ok(self.ledger.record_once(run_id, effect_key)),
            (LedgerChoice::Host, Some(handle)) => effects::record_once(handle, run_id, effect_key).map_err(StoreError),
            (LedgerChoice::Durable, _) => {
                drive(ops::durable_record_once(run_id, effect_key), &mut ImportedStore, &mut self.recorder, &mut NoHost)
                    .map_err(|e| StoreError(e.message))
            }
            (LedgerChoice::None, _) | (LedgerChoice::Host, None) => Err(StoreError("no effect ledger".into())),
        }
    }

    fn renew(
        &mut self,
        fence: &heart_fleet_core::FencingToken,
        ttl: i64,
    ) -> Result<Fenced<heart_fleet_core::FencingToken>, HeartError> {
        self.run(ops::renew(fence, ttl), NO_HOST)
    }
}

fn run_effect(host: CallHost, effect_key: &str, epoch: Option<i64>) -> Result<Value, String> {
    let Some(handle) = host.handle else {
        return Err("this operation has no effect".into());
    };
    let text = effects::run_effect(handle, effect_key, epoch)?;
    serde_json::from_str(&text).map_err(|e| format!("the effect's result is not JSON: {e}"))
}

fn probe(host: CallHost, intent: IntentRow) -> Result<ProbeVerdict, String> {
    let Some(handle) = host.handle else {
        return Ok(ProbeVerdict::Unknown);
    };
    match effects::probe(handle, &convert::intent(intent))? {
        effects::ProbeVerdict::Sent(evidence) => serde_json::from_str(&evidence)
            .map(ProbeVerdict::Sent)
            .map_err(|e| format!("the probe's evidence is not JSON: {e}")),
        effects::ProbeVerdict::NotSent => Ok(ProbeVerdict::NotSent),
        effects::ProbeVerdict::Unknown => Ok(ProbeVerdict::Unknown),
    }
}

/// The `fleet` resource.
pub struct Fleet {
    state: Rc<RefCell<FleetState>>,
    /// Set once, by the constructor.
    config: FleetConfig,
}

type WitResult<T> = Result<T, wit::HeartError>;

/// A result with what its operation emitted.
type Emitting<T> = (WitResult<T>, wit_fleet::Emitted);

/// Nothing emitted (the operation did not start).
fn nothing() -> wit_fleet::Emitted {
    wit_fleet::Emitted { receipts: Vec::new(), counters: convert::metrics(&HeartMetrics::default()) }
}

/// A failure before any operation started.
fn refused<T>(e: wit::HeartError) -> Emitting<T> {
    (Err(e), nothing())
}

impl FleetState {
    /// Hands over what was emitted since the last call: the receipts, and the counters
    /// (which start again from zero).
    fn emitted(&mut self) -> wit_fleet::Emitted {
        let receipts = std::mem::take(&mut self.recorder.receipts).into_iter().map(convert::receipt).collect();
        let counters = convert::metrics(&std::mem::take(&mut self.recorder.metrics));
        wit_fleet::Emitted { receipts, counters }
    }
}

impl Fleet {
    /// Runs `machine` against the shared state and converts its result.
    fn op<T: 'static, U>(&self, machine: Machine<T>, host: CallHost, out: impl FnOnce(T) -> U) -> Emitting<U> {
        let Ok(mut state) = self.state.try_borrow_mut() else {
            return refused(convert::error(busy()));
        };
        let result = state.run(machine, host).map(out).map_err(convert::error);
        (result, state.emitted())
    }
}

impl wit_fleet::GuestFleet for Fleet {
    fn new(max_retries: Option<u32>) -> Self {
        let state = FleetState { recorder: Recorder::default(), ledger: MemoryEffectLedger::default() };
        Fleet { state: Rc::new(RefCell::new(state)), config: FleetConfig { max_retries } }
    }

    fn acquire(&self, run_id: String, owner: String, ttl_seconds: i64) -> Emitting<wit::AcquireResult> {
        self.op(ops::acquire(self.config, &run_id, &owner, ttl_seconds), NO_HOST, convert::acquire_result)
    }

    fn renew(&self, fence: wit::FencingToken, ttl_seconds: i64) -> Emitting<wit::Renewed> {
        self.op(ops::renew(&convert::token_in(fence), ttl_seconds), NO_HOST, convert::renewed)
    }

    fn release(&self, fence: wit::FencingToken, next_status: wit::ReleaseTo) -> Emitting<wit::Released> {
        let m = ops::release(&convert::token_in(fence), convert::release_to(next_status));
        self.op(m, NO_HOST, convert::released)
    }

    fn verify_fence(&self, fence: wit::FencingToken) -> Emitting<bool> {
        self.op(ops::verify_fence(&convert::token_in(fence)), NO_HOST, |ok| ok)
    }

    fn reclaim_expired(&self, limit: u32) -> Emitting<wit::ReclaimSummary> {
        self.op(ops::reclaim_expired(self.config, limit), NO_HOST, convert::reclaim_summary)
    }

    fn guard_irreversible(
        &self,
        fence: wit::FencingToken,
        ledger: wit::LedgerKind,
        effect_key: String,
        handle: u64,
    ) -> Emitting<wit::GuardResult> {
        let ledger = match ledger {
            wit::LedgerKind::Memory => LedgerChoice::Memory,
            wit::LedgerKind::Host => LedgerChoice::Host,
            wit::LedgerKind::Durable => LedgerChoice::Durable,
        };
        let m = ops::guard_irreversible(&convert::token_in(fence), &effect_key);
        self.op(m, CallHost { handle: Some(handle), ledger }, convert::guard_result)
    }

    fn send_once(
        &self,
        fence: wit::FencingToken,
        channel: String,
        effect_key: String,
        payload: String,
        handle: u64,
    ) -> Emitting<wit::SendResult> {
        let payload = match convert::parse_json("payload", &payload) {
            Ok(p) => p,
            Err(e) => return refused(e),
        };
        let m = ops::send_once(&convert::token_in(fence), &channel, &effect_key, &payload);
        self.op(m, CallHost { handle: Some(handle), ledger: LedgerChoice::None }, convert::send_result)
    }

    fn reconcile_outbox(&self, max_attempts: i64, limit: u32, handle: u64) -> Emitting<wit::ReconcileSummary> {
        let host = CallHost { handle: Some(handle), ledger: LedgerChoice::None };
        self.op(ops::reconcile_outbox(max_attempts, limit), host, convert::reconcile_summary)
    }

    fn reclaim_dead_instance_runs(&self, ttl_ms: i64, limit: u32) -> Emitting<wit::LivenessSummary> {
        self.op(ops::reclaim_dead_instance_runs(self.config, ttl_ms, limit), NO_HOST, convert::liveness_summary)
    }

    fn register_instance(
        &self,
        instance_id: String,
        hostname: Option<String>,
        pid: Option<i64>,
        metadata: Option<String>,
    ) -> Emitting<wit::InstanceRow> {
        let metadata = match metadata.map(|m| convert::parse_json("metadata", &m)).transpose() {
            Ok(m) => m,
            Err(e) => return refused(e),
        };
        let m = ops::register_instance(&instance_id, hostname.as_deref(), pid, metadata);
        self.op(m, NO_HOST, convert::instance)
    }

    fn heartbeat_instance(&self, instance_id: String) -> Emitting<bool> {
        self.op(ops::heartbeat_instance(&instance_id), NO_HOST, |ok| ok)
    }

    fn drain_instance(&self, instance_id: String) -> Emitting<bool> {
        self.op(ops::drain_instance(&instance_id), NO_HOST, |ok| ok)
    }

    fn list_instances(&self) -> Emitting<Vec<wit::InstanceRow>> {
        self.op(ops::list_instances(), NO_HOST, |rows| rows.into_iter().map(convert::instance).collect())
    }

    fn ensure_resource_run(
        &self,
        kind: String,
        key: String,
        objective: String,
        created_by: String,
    ) -> Emitting<wit::EnsuredRun> {
        let m = ops::ensure_resource_run(&kind, &key, &objective, &created_by);
        self.op(m, NO_HOST, |(run, created)| wit::EnsuredRun { run: convert::run(run), created })
    }

    fn list_runs(&self, status: Option<wit::RunStatus>, limit: u32) -> Emitting<Vec<wit::RunRow>> {
        let m = ops::list_runs(status.map(convert::status_in), limit);
        self.op(m, NO_HOST, |rows| rows.into_iter().map(convert::run).collect())
    }

    fn get_run(&self, run_id: String) -> Emitting<Option<wit::RunRow>> {
        self.op(ops::get_run(&run_id), NO_HOST, |row| row.map(convert::run))
    }

    fn requeue_run(&self, run_id: String, operator: String) -> Emitting<wit::RunRow> {
        self.op(ops::requeue_run(&run_id, &operator), NO_HOST, convert::run)
    }

    fn force_release(&self, run_id: String) -> Emitting<wit::RunRow> {
        self.op(ops::force_release(&run_id), NO_HOST, convert::run)
    }

    fn now(&self) -> WitResult<wit::Timestamp> {
        store_now("read the clock").map_err(convert::error)
    }

    fn start_lease(&self, options: wit::LeaseOptions) -> Emitting<wit_fleet::LeaseStart> {
        let not_run = |reason, code| Ok(wit_fleet::LeaseStart::NotRun(convert::not_run(reason, code)));
        let mut session = match LeaseSession::new(options.ttl_seconds, options.renew_every_ms) {
            Ok(s) => s,
            Err(_) => return (not_run(NotRunReason::LeaseError, Some(ErrorCode::InvalidInput)), nothing()),
        };
        let started = match store_now("execute: read the clock") {
            Ok(now) => now,
            Err(e) => return refused(convert::error(e)),
        };
        let acquire = ops::acquire(self.config, &options.run_id, &options.owner, options.ttl_seconds);
        let (acq, emitted) = self.op(acquire, NO_HOST, |acq| acq);
        let acq = match acq {
            Ok(acq) => acq,
            Err(e) => return (Err(e), emitted),
        };
        let Some(fence) = acq.fence.filter(|_| acq.acquired) else {
            let reason = if acq.run.is_none() { NotRunReason::LeaseError } else { NotRunReason::LeaseHeld };
            return (not_run(reason, acq.code), emitted);
        };
        session.on_acquired(fence, started);
        let inner = SessionInner {
            session,
            last_beat_ms: started,
            ttl_seconds: options.ttl_seconds,
            release_to_ready: options.release_to_ready,
            finished: false,
        };
        let started = wit_fleet::LeaseSession::new(Session { fleet: self.state.clone(), inner: RefCell::new(inner) });
        (Ok(wit_fleet::LeaseStart::Started(started)), emitted)
    }
}
struct SessionInner {
    session: LeaseSession,
    last_beat_ms: i64,
    ttl_seconds: i64,
    release_to_ready: bool,
    finished: bool,
}

/// The `lease-session` resource: [`heart_fleet_core::fleet::LeaseContext`]'s logic.
pub struct Session {
    fleet: Rc<RefCell<FleetState>>,
    inner: RefCell<SessionInner>,
}

impl wit_fleet::GuestLeaseSession for Session {
    fn fence(&self) -> Option<wit::FencingToken> {
        self.inner.try_borrow().ok().and_then(|s| s.session.fence().cloned()).map(convert::token)
    }

    fn lost(&self) -> Option<wit::LostCause> {
        self.inner.try_borrow().ok().and_then(|s| s.session.lost()).map(convert::lost)
    }

    fn interval_ms(&self) -> i64 {
        self.inner.try_borrow().map(|s| s.session.interval_ms()).unwrap_or_default()
    }

    fn heartbeat(&self) -> (Option<wit::LostCause>, wit_fleet::Emitted) {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return (None, nothing());
        };
        let inner = &mut *inner;
        let now = match store_now("heartbeat: read the clock") {
            Ok(now) => now,
            Err(_) => return (inner.session.lost().map(convert::lost), nothing()),
        };
        if now - inner.last_beat_ms < inner.session.interval_ms() || !inner.session.should_renew() {
            inner.session.check_expiry(now);
            return (inner.session.lost().map(convert::lost), nothing());
        }
        inner.last_beat_ms = now;
        let mut emitted = nothing();
        if let Some(fence) = inner.session.fence().cloned() {
            let result = match self.fleet.try_borrow_mut() {
                Ok(mut state) => {
                    let renewed = state.renew(&fence, inner.ttl_seconds);
                    emitted = state.emitted();
                    renewed
                }
                Err(_) => Err(busy()),
            };
            inner.session.on_renewed(&result, now);
        }
        (inner.session.lost().map(convert::lost), emitted)
    }

    fn finish(&self, success: bool) -> (wit::LeaseFinish, wit_fleet::Emitted) {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return (wit::LeaseFinish { lost: None, released: false }, nothing());
        };
        let lost = inner.session.lost();
        if inner.finished {
            return (wit::LeaseFinish { lost: lost.map(convert::lost), released: false }, nothing());
        }
        inner.finished = true;
        let to = match (success, inner.release_to_ready) {
            (true, true) => ReleaseTo::Ready,
            (true, false) => ReleaseTo::Completed,
            (false, _) => ReleaseTo::Failed,
        };
        let (released, emitted) = match inner.session.fence().filter(|_| inner.session.should_release()) {
            Some(fence) => match self.fleet.try_borrow_mut() {
                Ok(mut state) => {
                    let released = matches!(state.run(ops::release(fence, to), NO_HOST), Ok(Fenced::Ok { .. }));
                    (released, state.emitted())
                }
                Err(_) => (false, nothing()),
            },
            None => (false, nothing()),
        };
        (wit::LeaseFinish { lost: lost.map(convert::lost), released }, emitted)
    }
}

impl wit_fleet::Guest for Component {
    type Fleet = Fleet;
    type LeaseSession = Session;
}

fn canonical_error(e: canonical::CanonicalError) -> wit::HeartError {
    convert::invalid(e.to_string())
}

impl wit_canonical::Guest for Component {
    fn canonicalize(json: String) -> WitResult<String> {
        canonical::canonicalize_json(&json).map_err(canonical_error)
    }

    fn digest(json: String) -> WitResult<String> {
        canonical::digest_json(&json).map_err(canonical_error)
    }

    fn sha256_hex(text: String) -> String {
        canonical::sha256_hex(&text)
    }

    fn deterministic_resource_id(kind: String, key: String) -> WitResult<String> {
        canonical::deterministic_resource_id(&kind, &key).map_err(canonical_error)
    }

    fn effect_key(prefix: String, identity: String) -> WitResult<String> {
        let canonical_text = canonical::canonicalize_json(&identity).map_err(canonical_error)?;
        Ok(format!("{prefix}:{}", canonical::sha256_hex(&canonical_text)))
    }

    fn verify_receipt(receipt: String) -> WitResult<()> {
        let value = convert::parse_json("the receipt", &receipt)?;
        heart_fleet_core::verify_receipt(&value).map_err(convert::error)
    }
}

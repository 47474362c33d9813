//! [`BridgeFleet`] builds and starts an operation; [`BridgeOp`] is resumed by the host's
//! driving loop. The step protocol is in the [module docs](super).

use std::cell::OnceCell;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Value, json};

use super::call::Call;
use super::compact::{self, Encode, compact_answer};
use super::memory::BridgeMemoryStore;
use super::reference::{EpochColumn, Progress, ReferenceStore};
use crate::driver::Recorder;
use crate::machine::{Answer, Event, Machine, Need, ProbeVerdict, Step, keep_store_failure_code};
use crate::metrics::HeartMetrics;

use crate::ops::{self, FleetConfig};
use crate::receipt::HeartReceipt;
use crate::request::StoreRequest;
use crate::{ErrorCode, HeartError, LeaseStore, StoreAnswer, StoreError};

/// A fleet's counters and receipts, shared by the operations it started.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) config: FleetConfig,
    /// The counters, and the receipts: kept for `receipts()`, or with a sink, waiting to be
    /// handed to the host with the next step.
    pub(super) recorder: Recorder,
    /// Whether a host sink takes the receipts instead.
    pub(super) sink: bool,
    /// With a sink: whether the host takes the receipts apart from the steps, as the core's
    /// values ([`BridgeFleet::take_receipts`]), instead of in each step's JSON.
    pub(super) apart: bool,
}

impl Shared {
    fn absorb(&mut self, events: Vec<Event>) {
        self.recorder.absorb(events);
    }

    /// The receipts waiting for the host's sink (none without one: they are kept).
    pub(super) fn take_pending(&mut self) -> Vec<HeartReceipt> {
        if self.sink { std::mem::take(&mut self.recorder.receipts) } else { Vec::new() }
    }

    /// The receipts a step carries: the pending ones, unless the host takes them apart.
    fn take_for_step(&mut self) -> Vec<HeartReceipt> {
        if self.apart { Vec::new() } else { self.take_pending() }
    }
}

/// A machine whose result is already turned into the JSON the JS API returns.
///
/// The result is JSON text written straight from the core's types, so fields keep the
/// reference's order (rows, tokens, summaries, receipts).
trait DynOp {
    fn start(&mut self) -> Step<String>;
    fn resume(&mut self, answer: Answer) -> Step<String>;
    fn drain(&mut self) -> Vec<Event>;
    /// The result kept for a compact answer (see `Typed::compact`), with `receipts`: the
    /// compact text, or the JSON when it has no compact form. `None` when nothing was kept.
    fn finish(&mut self, receipts: &[HeartReceipt]) -> Option<String>;
    /// The lease machine's request slot ([`Machine::lease_slot`]), for a [`Keeping`]
    /// operation: its requests are handed back by a typed host and kept as spares (not in
    /// WebAssembly, see [`Running::keep_spare`]).
    #[cfg(not(target_family = "wasm"))]
    fn lease_slot(&mut self) -> Option<(&ops::lease::LeaseOp<'static>, &mut StoreRequest)> {
        None
    }
    /// The result kept as the core's value (a [`Keeping`] operation in the [`AsValue`] form), once it is done.
    fn take_kept(&mut self) -> Option<KeptResult> {
        None
    }
}

/// The result of a lease-cycle operation started with [`BridgeFleet::start_kept`], as the
/// core's value: a host that builds its own records from it parses no JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum KeptResult {
    /// `acquire`'s.
    Acquired(ops::AcquireResult),
    /// `renew`'s: the new token, or why it was rejected.
    Renewed(ops::Fenced<crate::FencingToken>),
    /// `release`'s: the released row, or why it was rejected.
    Released(ops::Fenced<crate::RunRow>),
    /// `verifyFence`'s: whether the token holds a live lease.
    Verified(bool),
}

struct Typed<T> {
    machine: Machine<T>,
    out: fn(T) -> String,
}

fn map_step<T>(step: Step<T>, out: fn(T) -> String) -> Step<String> {
    match step {
        Step::Need(n) => Step::Need(n),
        Step::Done(r) => Step::Done(r.map(out)),
    }
}

impl<T: 'static> DynOp for Typed<T> {
    fn start(&mut self) -> Step<String> {
        map_step(self.machine.start(), self.out)
    }
    fn resume(&mut self, answer: Answer) -> Step<String> {
        map_step(self.machine.resume(answer), self.out)
    }
    fn drain(&mut self) -> Vec<Event> {
        self.machine.drain_events()
    }
    fn finish(&mut self, _: &[HeartReceipt]) -> Option<String> {
        None
    }
}

/// A lease-cycle operation that keeps its result out of its final step (the step says
/// [`KeptForm::PLACEHOLDER`]) and hands it over in a form of its own ([`KeptForm`]).
struct Keeping<T, F> {
    machine: Machine<T>,
    form: F,
    kept: Option<T>,
}

/// How a [`Keeping`] operation hands its result over.
trait KeptForm<T> {
    /// What the final step says in place of the result.
    const PLACEHOLDER: &'static str;
    /// The result written with its receipts, for a form that writes one.
    fn finish(&self, _kept: &mut Option<T>, _receipts: &[HeartReceipt]) -> Option<String> {
        None
    }
    /// The result as the core's value, for a form that gives one.
    fn take(&self, _kept: &mut Option<T>) -> Option<KeptResult> {
        None
    }
}

/// The compact form (`bridge::compact`): written by `finish` with its receipts (the step
/// says `Done(Ok(""))`). A type of its own, so that only the four lease-cycle results carry
/// the compact writer.
struct AsCompact<T> {
    out: fn(T) -> String,
    encode: Encode<T>,
}

impl<T> KeptForm<T> for AsCompact<T> {
    const PLACEHOLDER: &'static str = "";
    fn finish(&self, kept: &mut Option<T>, receipts: &[HeartReceipt]) -> Option<String> {
        let value = kept.take()?;
        let compact = compact_answer(&value, self.encode, receipts);
        Some(compact.unwrap_or_else(|| step_json(&Step::Done(Ok((self.out)(value))), receipts.to_vec())))
    }
}

/// The core's value, a [`KeptResult`] ([`BridgeOp::take_result`]; the step says `"ok":null`).
struct AsValue<T> {
    wrap: fn(T) -> KeptResult,
}

impl<T> KeptForm<T> for AsValue<T> {
    const PLACEHOLDER: &'static str = "null";
    fn take(&self, kept: &mut Option<T>) -> Option<KeptResult> {
        kept.take().map(self.wrap)
    }
}

impl<T, F: KeptForm<T>> Keeping<T, F> {
    fn map(&mut self, step: Step<T>) -> Step<String> {
        match step {
            Step::Need(n) => Step::Need(n),
            Step::Done(Ok(v)) => {
                self.kept = Some(v);
                Step::Done(Ok(F::PLACEHOLDER.to_owned()))
            }
            Step::Done(Err(e)) => Step::Done(Err(e)),
        }
    }
}

impl<T: 'static, F: KeptForm<T>> DynOp for Keeping<T, F> {
    fn start(&mut self) -> Step<String> {
        let step = self.machine.start();
        self.map(step)
    }
    fn resume(&mut self, answer: Answer) -> Step<String> {
        let step = self.machine.resume(answer);
        self.map(step)
    }
    fn drain(&mut self) -> Vec<Event> {
        self.machine.drain_events()
    }
    fn finish(&mut self, receipts: &[HeartReceipt]) -> Option<String> {
        self.form.finish(&mut self.kept, receipts)
    }
    fn take_kept(&mut self) -> Option<KeptResult> {
        self.form.take(&mut self.kept)
    }
    #[cfg(not(target_family = "wasm"))]
    fn lease_slot(&mut self) -> Option<(&ops::lease::LeaseOp<'static>, &mut StoreRequest)> {
        self.machine.lease_slot()
    }
}

fn to_json<T: serde::Serialize>(v: T) -> String {
    super::to_text(&v)
}

fn boxed<T: serde::Serialize + Send + 'static>(machine: Machine<T>) -> Box<dyn DynOp + Send> {
    Box::new(Typed { machine, out: to_json::<T> })
}

/// A lease-cycle operation, answered compactly when `compact` (the `bridge::compact` form).
fn cycle<T: serde::Serialize + Send + 'static>(
    machine: Machine<T>,
    encode: Encode<T>,
    compact: bool,
) -> Box<dyn DynOp + Send> {
    if compact {
        Box::new(Keeping { machine, form: AsCompact { out: to_json::<T>, encode }, kept: None })
    } else {
        boxed(machine)
    }
}

/// A lease-cycle operation whose result is kept as a [`KeptResult`] (`wrap`).
fn kept<T: 'static + Send>(machine: Machine<T>, wrap: fn(T) -> KeptResult) -> Box<dyn DynOp + Send> {
    Box::new(Keeping { machine, form: AsValue { wrap }, kept: None })
}

/// The machine of `call` for [`BridgeFleet::start_kept`]: the lease cycle's result kept, the
/// rest as JSON. A function of its own, so a host that never keeps results (the wasm
/// packages) carries none of this code.
fn build_kept(call: Call, cfg: FleetConfig) -> Box<dyn DynOp + Send> {
    match call {
        Call::Acquire { run_id, owner, ttl_seconds } => {
            kept(ops::acquire(cfg, &run_id, &owner, ttl_seconds), KeptResult::Acquired)
        }
        Call::Renew { fence, ttl_seconds } => kept(ops::renew(&fence, ttl_seconds), KeptResult::Renewed),
        Call::Release { fence, next_status } => kept(ops::release(&fence, next_status), KeptResult::Released),
        Call::VerifyFence { fence } => kept(ops::verify_fence(&fence), KeptResult::Verified),
        other => build(other, cfg, false),
    }
}

fn ensured((run, created): (crate::RunRow, bool)) -> String {
    format!("{{\"run\":{},\"created\":{created}}}", to_json(run))
}

/// The machine of `call`, its result written as the JSON the host's API returns (with
/// `compact`, the lease cycle's in the compact form).
fn build(call: Call, cfg: FleetConfig, compact: bool) -> Box<dyn DynOp + Send> {
    match call {
        Call::Acquire { run_id, owner, ttl_seconds } => {
            cycle(ops::acquire(cfg, &run_id, &owner, ttl_seconds), compact::acquired, compact)
        }
        Call::Renew { fence, ttl_seconds } => cycle(ops::renew(&fence, ttl_seconds), compact::renewed, compact),
        Call::Release { fence, next_status } => cycle(ops::release(&fence, next_status), compact::released, compact),
        Call::VerifyFence { fence } => cycle(ops::verify_fence(&fence), compact::verified, compact),
        Call::GuardIrreversible { fence, effect_key } => boxed(ops::guard_irreversible(&fence, &effect_key)),
        Call::SendOnce { fence, channel, effect_key, payload } => {
            boxed(ops::send_once(&fence, &channel, &effect_key, &payload))
        }
        Call::ReclaimExpired { limit } => boxed(ops::reclaim_expired(cfg, limit)),
        Call::ReconcileOutbox { max_attempts, limit } => boxed(ops::reconcile_outbox(max_attempts, limit)),
        Call::ReclaimDeadInstanceRuns { ttl_ms, limit } => boxed(ops::reclaim_dead_instance_runs(cfg, ttl_ms, limit)),
        Call::ListRuns { status, limit } => boxed(ops::list_runs(status, limit)),
        Call::RecordOnce { run_id, effect_key } => boxed(ops::durable_record_once(&run_id, &effect_key)),
        Call::RegisterInstance { instance_id, hostname, pid, metadata } => {
            boxed(ops::register_instance(&instance_id, hostname.as_deref(), pid, metadata))
        }
        Call::HeartbeatInstance { instance_id } => boxed(ops::heartbeat_instance(&instance_id)),
        Call::DrainInstance { instance_id } => boxed(ops::drain_instance(&instance_id)),
        Call::ListInstances => boxed(ops::list_instances()),
        Call::GetRun { run_id } => boxed(ops::get_run(&run_id)),
        Call::RequeueRun { run_id, operator } => boxed(ops::requeue_run(&run_id, &operator)),
        Call::ForceRelease { run_id } => boxed(ops::force_release(&run_id)),
        Call::EnsureResourceRun { kind, key, objective, created_by } => {
            let machine = ops::ensure_resource_run(&kind, &key, &objective, &created_by);
            Box::new(Typed { machine, out: ensured })
        }
    }
}

/// Writes a step as JSON text, with the receipts waiting for a sink.
pub(super) fn step_json(step: &Step<String>, pending: Vec<HeartReceipt>) -> String {
    let mut out = match step {
        Step::Done(Ok(v)) => {
            // Sized for the closing brace; no formatting machinery (a kept result's step).
            let mut out = String::with_capacity(v.len() + 24);
            out.push_str("{\"done\":true,\"ok\":");
            out.push_str(v);
            out
        }
        Step::Done(Err(e)) => {
            format!("{{\"done\":true,\"error\":{}", json!({ "code": e.code.as_str(), "message": e.message }))
        }
        Step::Need(Need::Store(_)) if pending.is_empty() => return "{\"need\":\"store\"}".to_owned(),
        Step::Need(Need::Store(_)) => "{\"need\":\"store\"".to_owned(),
        Step::Need(Need::RecordOnce { run_id, effect_key }) => {
            format!("{{\"need\":\"recordOnce\",\"runId\":{},\"effectKey\":{}", json!(run_id), json!(effect_key))
        }
        Step::Need(Need::Effect { effect_key, epoch }) => {
            format!("{{\"need\":\"effect\",\"effectKey\":{},\"epoch\":{}", json!(effect_key), json!(epoch))
        }
        Step::Need(Need::Probe { intent }) => format!("{{\"need\":\"probe\",\"intent\":{}", to_json(intent)),
    };
    if !pending.is_empty() {
        let _ = write!(out, ",\"receipts\":{}", serde_json::to_string(&pending).unwrap_or_else(|_| "[]".into()));
    }
    out.push('}');
    out
}

/// The running state of one operation: its machine and where its store requests go.
struct Running {
    op: Box<dyn DynOp + Send>,
    shared: Arc<Mutex<Shared>>,
    memory: Option<BridgeMemoryStore>,
    /// Over a store with the `LeaseStore` methods: the calls its requests become.
    reference: Option<Box<ReferenceStore>>,
}

impl Running {
    /// A finished operation's last request, handed back by a typed host
    /// ([`BridgeOp::give_back_request`]), becomes the spare the next operation of its kind
    /// refits. Not in WebAssembly, where no host hands requests back (and the edge build's
    /// size ceiling counts every byte).
    #[cfg(not(target_family = "wasm"))]
    fn keep_spare(&mut self) {
        if let (Some((lease, slot)), Ok(mut shared)) = (self.op.lease_slot(), self.shared.lock())
            && !matches!(slot, StoreRequest::Now)
        {
            *shared.recorder.spares.slot(lease) = Some(Box::new(std::mem::replace(slot, StoreRequest::Now)));
        }
    }

    /// Resumes the machine with a store's answer; a failure the core found (not the store)
    /// keeps its code when it ends the operation.
    fn answer(&mut self, answer: Result<StoreAnswer, HeartError>) -> Step<String> {
        match answer {
            Ok(a) => self.op.resume(Answer::Store(Ok(a))),
            Err(e) => {
                let mut step = self.op.resume(Answer::Store(Err(StoreError(e.message))));
                keep_store_failure_code(&mut step, e.code);
                step
            }
        }
    }

    /// Applies events and answers store requests in place (a memory store) or turns them
    /// into `LeaseStore` calls, until the machine needs the host or is done: `step` is then
    /// that step, or the result is the `LeaseStore` call to make (its compact text).
    fn drive(&mut self, step: &mut Step<String>) -> Option<String> {
        loop {
            let events = self.op.drain();
            if let Ok(mut shared) = self.shared.lock() {
                shared.absorb(events);
            }
            let Step::Need(Need::Store(req)) = &*step else { break };
            if let Some(memory) = &self.memory {
                let answer = match memory.inner.lock() {
                    Ok(mut store) => store.execute(req.clone()),
                    Err(_) => Err(StoreError(super::memory::poisoned().message)),
                };
                *step = self.op.resume(Answer::Store(answer));
                continue;
            }
            let Some(reference) = self.reference.as_mut() else { break };
            match reference.start(req.clone()) {
                Progress::Call(call) => return Some(call),
                Progress::Answer(answer) => *step = self.answer(answer),
            }
        }
        None
    }

    /// Drives `step` as far as Rust can; returns the text for the host (the step's JSON,
    /// with the receipts waiting for a sink, or a `LeaseStore` call's compact text) and
    /// where that left the operation.
    fn run(&mut self, mut step: Step<String>) -> (String, Left) {
        if let Some(call) = self.drive(&mut step) {
            return (call, Left::Waiting(None));
        }
        let pending = self.shared.lock().map(|mut s| s.take_for_step()).unwrap_or_default();
        if let Step::Done(Ok(_)) = step
            && let Some(text) = self.op.finish(&pending)
        {
            return (text, Left::Done(None));
        }
        let text = step_json(&step, pending);
        let left = match step {
            Step::Done(result) => Left::Done(result.err()),
            Step::Need(Need::Store(req)) => Left::Waiting(Some(Box::new(req))),
            Step::Need(_) => Left::Waiting(None),
        };
        (text, left)
    }
}

/// Where a step left an operation.
enum Left {
    /// Waiting for the host; with the store request when that is what it needs (boxed, as
    /// the waiting operation keeps it).
    Waiting(Option<Box<StoreRequest>>),
    /// Finished; with the error when it failed.
    Done(Option<HeartError>),
}

/// What [`BridgeFleet::begin`] gives back.
#[derive(Debug)]
pub enum Begun {
    /// The operation finished without the host (bad arguments, or the memory store answered
    /// every request): the final step (JSON text).
    Done(String),
    /// The operation waits for the host: resume it with the answer to its current need.
    Pending(BridgeOp),
}

/// The counters, receipts and configuration of one fleet, and the factory of its operations.
///
/// Cloning gives another handle on the same fleet.
#[derive(Debug, Clone)]
pub struct BridgeFleet {
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) memory: Option<BridgeMemoryStore>,
    /// Over a store with the `LeaseStore` methods: whether its rows have `fencing_epoch`.
    epoch_column: EpochColumn,
}

impl BridgeFleet {
    /// A fleet with retry ceiling `max_retries` (`None`: never quarantine). With `sink`,
    /// receipts are handed to the host with each step instead of being kept.
    pub fn new(max_retries: Option<u32>, sink: bool) -> BridgeFleet {
        let shared = Shared { config: FleetConfig { max_retries }, sink, ..Shared::default() };
        BridgeFleet { shared: Arc::new(Mutex::new(shared)), memory: None, epoch_column: EpochColumn::default() }
    }

    /// Answers store requests of this fleet's operations from `store`, in place.
    pub fn attach_memory_store(&mut self, store: &BridgeMemoryStore) {
        self.memory = Some(store.clone());
    }

    /// Builds operation `kind` from `args` (JSON text) and starts it.
    ///
    /// Bad arguments and unknown operations finish at once with an `invalid-input` step
    /// (acquire keeps the reference's `{acquired:false, reason:"Invalid input"}` for bad
    /// values).
    pub fn begin(&self, kind: &str, args: &str) -> Begun {
        self.begin_with(kind, args, self.memory.clone(), None)
    }

    /// [`BridgeFleet::begin`], but every store request goes to the host even when a memory
    /// store is attached: for a host that routes one operation's requests to several stores
    /// (runs in one, effect intents in another). Counters and receipts are this fleet's.
    pub fn begin_on_host(&self, kind: &str, args: &str) -> Begun {
        self.begin_with(kind, args, None, None)
    }

    /// [`BridgeFleet::begin`] over a store with the TypeScript package's `LeaseStore`
    /// methods: each store request comes back as the calls of those methods the host makes
    /// (the `reference` module docs; a write decided at most `cas_retries` times, taken within
    /// `1..=MAX_CAS_RETRIES`).
    pub fn begin_on_reference(&self, kind: &str, args: &str, cas_retries: u32) -> Begun {
        let store = ReferenceStore::sharing(cas_retries, self.epoch_column.clone());
        self.begin_with(kind, args, None, Some(Box::new(store)))
    }

    fn begin_with(
        &self,
        kind: &str,
        args: &str,
        memory: Option<BridgeMemoryStore>,
        reference: Option<Box<ReferenceStore>>,
    ) -> Begun {
        let config = self.shared.lock().map(|s| s.config).unwrap_or_default();
        let op = match Call::parse(kind, args) {
            Ok(call) => build(call, config, reference.is_some()),
            Err(e) => return Begun::Done(step_json(&Step::Done(Err(e)), Vec::new())),
        };
        let mut running = Running { op, shared: self.shared.clone(), memory, reference };
        let first = running.op.start();
        match running.run(first) {
            (text, Left::Done(_)) => Begun::Done(text),
            (text, Left::Waiting(request)) => Begun::Pending(BridgeOp::waiting(running, text, request)),
        }
    }

    /// Starts `call` (built by the host from its own typed values, so no JSON arguments are
    /// read) with the lease cycle's result kept as a [`KeptResult`]: the operation, finished
    /// or waiting for the host. Once done, its final step says `"ok":null` and
    /// [`BridgeOp::take_result`] gives the value (an error stays in the step). Store requests
    /// go to the attached memory store, if any, else to the host.
    pub fn start_kept(&self, call: Call) -> BridgeOp {
        let config = self.shared.lock().map(|s| s.config).unwrap_or_default();
        let op = build_kept(call, config);
        #[cfg(not(target_family = "wasm"))]
        let op = self.lend_spare(op);
        let mut running = Running { op, shared: self.shared.clone(), memory: self.memory.clone(), reference: None };
        let first = running.op.start();
        let mut started = BridgeOp::waiting(running, String::new(), None);
        started.advance(first);
        started
    }

    /// `op` with the request of the last operation of its kind handed back by the host
    /// ([`BridgeOp::give_back_request`]) in its slot, to refit instead of building its first
    /// request anew (`ops::lease::Spares`).
    #[cfg(not(target_family = "wasm"))]
    fn lend_spare(&self, mut op: Box<dyn DynOp + Send>) -> Box<dyn DynOp + Send> {
        if let (Some((lease, slot)), Ok(mut shared)) = (op.lease_slot(), self.shared.lock())
            && let Some(spare) = shared.recorder.spares.slot(lease).take()
        {
            *slot = *spare;
        }
        op
    }

    /// With a sink: the receipts are no longer written into the steps' JSON; the host takes
    /// them with [`BridgeFleet::take_receipts`] after each call that begins or resumes an
    /// operation, as the core's values, and builds its own records from them (no JSON text
    /// written and parsed again per receipt).
    pub fn take_receipts_apart(&mut self) {
        if let Ok(mut s) = self.shared.lock() {
            s.apart = true;
        }
    }

    /// The receipts waiting for the host's sink, in order (none when the fleet keeps them).
    pub fn take_receipts(&self) -> Vec<HeartReceipt> {
        self.shared.lock().map(|mut s| s.take_pending()).unwrap_or_default()
    }

    /// The 13 counters.
    pub fn metrics(&self) -> HeartMetrics {
        self.shared.lock().map(|s| s.recorder.metrics).unwrap_or_default()
    }

    /// Takes back what an operation counted since the host's last settle, when the store
    /// rolled those writes back with their receipts (what they counted did not happen).
    pub fn uncount(&self, delta: &HeartMetrics) {
        if let Ok(mut s) = self.shared.lock() {
            s.recorder.metrics.remove(delta);
        }
    }

    /// The counters in the Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        self.shared.lock().map(|s| s.recorder.metrics.to_prometheus()).unwrap_or_default()
    }

    /// The receipts kept so far (JSON array; empty when a sink takes them).
    pub fn receipts_json(&self) -> String {
        self.shared.lock().map(|s| super::to_text(&s.recorder.receipts)).unwrap_or_else(|_| "[]".to_owned())
    }

    /// How many receipts are kept.
    pub fn receipt_count(&self) -> usize {
        self.shared.lock().map(|s| s.recorder.receipts.len()).unwrap_or(0)
    }
}

/// One operation waiting for the host. Resume it with the answer to its current need.
pub struct BridgeOp {
    running: Option<Running>,
    need: String,
    /// The store request of the current need, handed to a typed host as it is (boxed: a
    /// `BridgeOp` stays small while it waits).
    request: Option<Box<StoreRequest>>,
    /// `request` as StoreRequest JSON, written the first time a host asks for the text.
    request_text: OnceCell<String>,
    /// The result of a finished [`BridgeFleet::start_kept`] operation, until taken (boxed:
    /// a `BridgeOp` stays small while it waits).
    kept: Option<Box<KeptResult>>,
    /// The error a finished operation ended with (boxed, as `kept`).
    failure: Option<Box<HeartError>>,
}

impl std::fmt::Debug for BridgeOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeOp").field("need", &self.need).field("done", &self.running.is_none()).finish()
    }
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Running")
    }
}

#[derive(Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
enum Verdict {
    Sent {
        #[serde(default, rename = "externalRef")]
        external_ref: Value,
    },
    NotSent,
    Unknown,
}

fn finished() -> String {
    step_json(&Step::Done(Err(HeartError::new(ErrorCode::StoreProtocol, "the operation already finished"))), Vec::new())
}

impl BridgeOp {
    fn waiting(running: Running, need: String, request: Option<Box<StoreRequest>>) -> BridgeOp {
        BridgeOp { running: Some(running), need, request, request_text: OnceCell::new(), kept: None, failure: None }
    }

    /// The current step (JSON text): what the operation needs, or once it is done, its
    /// final step.
    pub fn need(&self) -> &str {
        &self.need
    }

    /// The store request of the current need (StoreRequest JSON text; empty when the need
    /// is not a store request).
    pub fn request(&self) -> &str {
        self.request_text.get_or_init(|| self.request.as_deref().map(to_json).unwrap_or_default())
    }

    /// The store request of the current need, typed (`None` when the need is not a store
    /// request): for a host that hands it to its store without JSON.
    pub fn store_request(&self) -> Option<&StoreRequest> {
        self.request.as_deref()
    }

    /// Takes the store request of the current need out of the operation, to hand it to a
    /// typed host's store without a copy. [`BridgeOp::request`] then gives its text only if
    /// it was read before.
    pub fn take_store_request(&mut self) -> Option<StoreRequest> {
        self.request.take().map(|request| *request)
    }

    /// Gives back a request [`BridgeOp::take_store_request`] handed out, once its store
    /// answered and nothing else holds it (call it before resuming): an operation of
    /// [`BridgeFleet::start_kept`] keeps its last one for the next operation of its kind to
    /// refit, as the core's own stores' operations do, instead of building that one anew.
    /// Anything else drops it. Not in WebAssembly (see [`Running::keep_spare`]).
    #[cfg(not(target_family = "wasm"))]
    pub fn give_back_request(&mut self, request: StoreRequest) {
        if let Some((_, slot)) = self.running.as_mut().and_then(|r| r.op.lease_slot())
            && matches!(slot, StoreRequest::Now)
        {
            *slot = request;
        }
    }

    fn resume(&mut self, answer: Result<Answer, HeartError>) -> String {
        let Some(running) = self.running.as_mut() else {
            return finished();
        };
        let step = match answer {
            Ok(answer) => running.op.resume(answer),
            // A protocol failure ends the operation; nothing more is asked of the store.
            Err(e) => Step::Done(Err(e)),
        };
        self.advance(step)
    }

    /// Drives the running operation on from `step` and keeps what it needs next.
    fn advance(&mut self, step: Step<String>) -> String {
        let Some(running) = self.running.as_mut() else {
            return finished();
        };
        let (text, left) = running.run(step);
        self.request = match left {
            Left::Waiting(request) => request,
            Left::Done(failure) => {
                #[cfg(not(target_family = "wasm"))]
                running.keep_spare();
                self.kept = running.op.take_kept().map(Box::new);
                self.failure = failure.map(Box::new);
                self.running = None;
                None
            }
        };
        self.need.clone_from(&text);
        self.request_text = OnceCell::new();
        text
    }

    /// The error a finished operation ended with (`None` while it runs or when it
    /// succeeded): what its final step's `error` says.
    pub fn failure(&self) -> Option<&HeartError> {
        self.failure.as_deref()
    }

    /// The result of a finished [`BridgeFleet::start_kept`] operation (`None` before it
    /// finished, after an error, or once taken).
    pub fn take_result(&mut self) -> Option<KeptResult> {
        self.kept.take().map(|kept| *kept)
    }

    /// The store's answer (StoreAnswer JSON). Text that is not a StoreAnswer ends the
    /// operation with `store-protocol`.
    pub fn resume_store(&mut self, answer: &str) -> String {
        let parsed = serde_json::from_str::<StoreAnswer>(answer).map_err(|e| {
            HeartError::new(ErrorCode::StoreProtocol, format!("the store's answer is not a StoreAnswer: {e}"))
        });
        self.resume(parsed.map(|a| Answer::Store(Ok(a))))
    }

    /// The store's answer, typed (from a store that answered without JSON, such as the
    /// memory store's typed `execute`).
    pub fn resume_store_answer(&mut self, answer: StoreAnswer) -> String {
        self.resume(Ok(Answer::Store(Ok(answer))))
    }

    /// The store failed (it threw or rejected): the operation ends with `store-unavailable`.
    pub fn resume_store_error(&mut self, message: &str) -> String {
        self.resume_store_failure(ErrorCode::StoreUnavailable.as_str(), message)
    }

    /// The store failed with `code`: `store-protocol` (its answer had the wrong shape) and
    /// `invalid-input` (the request is one its contract cannot serve) are kept when the
    /// failure ends the operation; any other code is `store-unavailable`.
    pub fn resume_store_failure(&mut self, code: &str, message: &str) -> String {
        let code = ErrorCode::parse(code)
            .filter(|c| matches!(c, ErrorCode::StoreProtocol | ErrorCode::InvalidInput))
            .unwrap_or(ErrorCode::StoreUnavailable);
        let Some(running) = self.running.as_mut() else {
            return finished();
        };
        if let Some(reference) = running.reference.as_mut() {
            reference.failed();
        }
        let step = running.answer(Err(HeartError::new(code, message)));
        self.advance(step)
    }

    /// Answers a `LeaseStore` call with `progress` made by the operation's [`ReferenceStore`].
    fn resume_reference(&mut self, progress: impl FnOnce(&mut ReferenceStore) -> Progress) -> String {
        let Some(running) = self.running.as_mut() else {
            return finished();
        };
        if running.reference.is_none() {
            let e = HeartError::new(ErrorCode::StoreProtocol, "a LeaseStore answer for an operation that made no call");
            return self.resume(Err(e));
        }
        let Some(reference) = running.reference.as_mut() else { return finished() };
        match progress(reference) {
            Progress::Call(call) => {
                self.need.clone_from(&call);
                call
            }
            Progress::Answer(answer) => {
                let step = running.answer(answer);
                self.advance(step)
            }
        }
    }

    /// The `LeaseStore`'s `now()` answered, in milliseconds.
    pub fn resume_clock(&mut self, ms: i64) -> String {
        self.resume_reference(|r| r.clock(ms))
    }

    /// The `LeaseStore`'s `now()` (milliseconds) and `getRun` (the row as JSON, or `null`)
    /// answered.
    pub fn resume_read(&mut self, ms: i64, row: &str) -> String {
        self.resume_reference(|r| r.read(ms, row))
    }

    /// The `LeaseStore`'s `conditionalUpdate` answered: the row (JSON) or `null`.
    pub fn resume_written(&mut self, row: &str) -> String {
        self.resume_reference(|r| r.written(row))
    }

    /// The `LeaseStore`'s `findExpiredLeases` answered: the rows (a JSON array).
    pub fn resume_rows(&mut self, rows: &str) -> String {
        self.resume_reference(|r| r.rows(rows))
    }

    /// The effect ledger's answer: `true` the first time the key was recorded.
    pub fn resume_recorded(&mut self, first: bool) -> String {
        self.resume(Ok(Answer::Recorded(Ok(first))))
    }

    /// The effect ledger failed.
    pub fn resume_recorded_error(&mut self, message: &str) -> String {
        self.resume(Ok(Answer::Recorded(Err(StoreError(message.to_owned())))))
    }

    /// The effect's result (JSON; the `external_ref` evidence for send-once).
    pub fn resume_effect(&mut self, value: &str) -> String {
        let parsed = serde_json::from_str::<Value>(value)
            .map_err(|e| HeartError::invalid(format!("the effect's result is not JSON: {e}")));
        self.resume(parsed.map(|v| Answer::Effect(Ok(v))))
    }

    /// The effect threw.
    pub fn resume_effect_error(&mut self, message: &str) -> String {
        self.resume(Ok(Answer::Effect(Err(message.to_owned()))))
    }

    /// The probe's verdict: `{"status":"sent","externalRef":…}`, `{"status":"not-sent"}` or
    /// `{"status":"unknown"}`. Anything else counts as a probe failure.
    pub fn resume_probe(&mut self, verdict: &str) -> String {
        let answer = match serde_json::from_str::<Verdict>(verdict) {
            Ok(Verdict::Sent { external_ref }) => Ok(ProbeVerdict::Sent(external_ref)),
            Ok(Verdict::NotSent) => Ok(ProbeVerdict::NotSent),
            Ok(Verdict::Unknown) => Ok(ProbeVerdict::Unknown),
            Err(e) => Err(format!("the probe's verdict is not sent/not-sent/unknown: {e}")),
        };
        self.resume(Ok(Answer::Probe(answer)))
    }

    /// The probe threw.
    pub fn resume_probe_error(&mut self, message: &str) -> String {
        self.resume(Ok(Answer::Probe(Err(message.to_owned()))))
    }

    /// Whether the operation finished.
    pub fn is_done(&self) -> bool {
        self.running.is_none()
    }
}

/// The operations of one fleet waiting for the host, each by a handle (a small integer):
/// for hosts where an object per operation costs more than the operation itself (a napi-rs
/// or wasm-bindgen class instance is an engine object with a finalizer the garbage collector
/// runs later). A finished operation's slot is freed at once and its handle reused;
/// [`BridgeOps::abandon`] frees the slot of one the host gives up on.
#[derive(Debug, Default)]
pub struct BridgeOps {
    slots: Vec<Option<BridgeOp>>,
    free: Vec<u32>,
}

/// What a host gets for a begun operation from [`BridgeOps::admit`].
#[derive(Debug, PartialEq, Eq)]
pub enum Admitted {
    /// It finished without the host: the final step's text.
    Done(String),
    /// It waits for the host: resume it by this handle.
    Pending(u32),
}

impl BridgeOps {
    /// No operations.
    pub fn new() -> BridgeOps {
        BridgeOps::default()
    }

    /// Keeps a begun operation that waits for the host, under a fresh handle.
    pub fn admit(&mut self, begun: Begun) -> Admitted {
        let op = match begun {
            Begun::Done(text) => return Admitted::Done(text),
            Begun::Pending(op) => op,
        };
        if let Some(handle) = self.free.pop()
            && let Some(slot) = self.slots.get_mut(handle as usize)
        {
            *slot = Some(op);
            return Admitted::Pending(handle);
        }
        self.slots.push(Some(op));
        Admitted::Pending(u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX))
    }

    /// The current need of operation `handle` (empty for an unknown handle).
    pub fn need(&self, handle: u32) -> &str {
        self.get(handle).map_or("", BridgeOp::need)
    }

    /// The store request of operation `handle`'s current need (empty when none).
    pub fn request(&self, handle: u32) -> &str {
        self.get(handle).map_or("", BridgeOp::request)
    }

    fn get(&self, handle: u32) -> Option<&BridgeOp> {
        self.slots.get(handle as usize).and_then(Option::as_ref)
    }

    /// Resumes operation `handle` with `answer` (one of [`BridgeOp`]'s `resume_*`); a finished
    /// operation's slot is freed. An unknown handle (finished, abandoned, never given) is the
    /// `store-protocol` step of a finished operation.
    pub fn resume(&mut self, handle: u32, answer: impl FnOnce(&mut BridgeOp) -> String) -> String {
        let Some(op) = self.slots.get_mut(handle as usize).and_then(Option::as_mut) else {
            return finished();
        };
        let text = answer(op);
        if op.is_done() {
            self.abandon(handle);
        }
        text
    }

    /// Frees operation `handle`'s slot (nothing for an unknown handle).
    pub fn abandon(&mut self, handle: u32) {
        if let Some(slot) = self.slots.get_mut(handle as usize)
            && slot.take().is_some()
        {
            self.free.push(handle);
        }
    }

    /// How many operations wait for the host.
    pub fn pending(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RunRow, Timestamp};

    fn memory() -> BridgeMemoryStore {
        let t0 = Timestamp(1_785_369_600_000);
        let store = BridgeMemoryStore::new(t0.0);
        store.insert(&serde_json::to_string(&RunRow::ready("r", "k", t0)).unwrap()).unwrap();
        store
    }

    fn fleet(memory: Option<BridgeMemoryStore>) -> BridgeFleet {
        let mut f = BridgeFleet::new(Some(5), false);
        if let Some(m) = memory {
            f.attach_memory_store(&m);
        }
        f
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn handles_are_send_so_a_heartbeat_thread_may_use_them() {
        fn send<T: Send>() {}
        send::<BridgeFleet>();
        send::<BridgeOp>();
        send::<BridgeMemoryStore>();
    }

    #[test]
    fn a_memory_fleet_finishes_in_begin_with_the_reference_shape_in_order() {
        let f = fleet(Some(memory()));
        let Begun::Done(text) = f.begin("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#) else {
            panic!("expected a finished step");
        };
        assert!(text.starts_with(r#"{"done":true,"ok":{"acquired":true,"run":{"id":"r","task_id":null"#), "{text}");
        assert_eq!(f.metrics().acquire_wins, 1);
        assert_eq!(f.receipt_count(), 1);
        assert_eq!(json(&f.receipts_json())[0]["event"], "acquired");
    }

    #[test]
    fn a_host_store_op_hands_the_request_out_and_a_failure_is_store_unavailable() {
        let f = fleet(None);
        let Begun::Pending(mut op) = f
            .begin("verifyFence", r#"{"fence":{"runId":"r","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"}}"#)
        else {
            panic!("expected a pending op");
        };
        assert_eq!(json(op.need()), serde_json::json!({ "need": "store" }));
        assert_eq!(json(op.request())["op"], "update_run");
        let done = json(&op.resume_store_error("connection reset"));
        assert_eq!(done["error"]["code"], "store-unavailable");
        assert!(op.is_done());
        // A failure the host's own check found keeps its code; any other code does not.
        let verify = r#"{"fence":{"runId":"r","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"}}"#;
        for (code, ends) in [
            ("store-protocol", "store-protocol"),
            ("invalid-input", "invalid-input"),
            ("nope", "store-unavailable"),
            ("run-not-found", "store-unavailable"),
        ] {
            let Begun::Pending(mut op) = f.begin("verifyFence", verify) else { panic!("pending") };
            let done = json(&op.resume_store_failure(code, "the store answered 42"));
            assert_eq!(done["error"]["code"], ends, "{code}");
            assert!(done["error"]["message"].as_str().unwrap().ends_with("the store answered 42"), "{done}");
        }
        assert_eq!(json(&op.resume_store("{}"))["error"]["code"], "store-protocol");
    }

    #[test]
    fn a_reply_of_the_wrong_kind_is_one_line_of_store_protocol_without_debug_text() {
        let f = fleet(None);
        let Begun::Pending(mut op) = f.begin("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#) else {
            panic!("expected a pending op");
        };
        let done = json(&op.resume_store(r#"{"now":"2026-07-30T00:00:00.000Z","reply":{"kind":"runs","runs":[]}}"#));
        assert_eq!(done["error"]["code"], "store-protocol");
        let message = done["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("unexpected answer at acquire"), "{message}");
        assert!(message.contains("kind runs"), "{message}");
        for internal in ["StoreAnswer", "Timestamp(", "Runs {", "Ok(", "\n"] {
            assert!(!message.contains(internal), "{message}");
        }
    }

    #[test]
    fn verify_asks_only_whether_its_write_hit_and_a_hit_never_passes_for_a_row() {
        let f = fleet(None);
        let fence = r#"{"fence":{"runId":"r","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"}}"#;
        let now = r#""now":"2026-07-30T00:00:00.000Z""#;
        let row = serde_json::to_string(&crate::RunRow::ready("r", "k", crate::Timestamp(0))).unwrap();
        // The request says so; a hit-only answer decides, and so does a store that answers
        // the rows anyway (one that predates want_after).
        for (reply, live) in [
            (r#"{"kind":"run_hit","hit":true}"#.to_owned(), true),
            (r#"{"kind":"run_hit","hit":false}"#.to_owned(), false),
            (format!(r#"{{"kind":"run_write","before":null,"after":{row}}}"#), true),
            (r#"{"kind":"run_write","before":null,"after":null}"#.to_owned(), false),
        ] {
            let Begun::Pending(mut op) = f.begin("verifyFence", fence) else { panic!("pending") };
            assert_eq!(json(op.request())["want_after"], false);
            let done = json(&op.resume_store(&format!("{{{now},\"reply\":{reply}}}")));
            assert_eq!(done["ok"], live, "{reply}: {done}");
        }
        // Every other write wants the row: `want_after` is left out of its JSON (the default),
        // and a hit-only answer is a protocol error, not a miss.
        let Begun::Pending(mut op) = f.begin("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#) else {
            panic!("pending");
        };
        assert!(json(op.request()).get("want_after").is_none(), "{}", op.request());
        let done = json(&op.resume_store(&format!(r#"{{{now},"reply":{{"kind":"run_hit","hit":true}}}}"#)));
        assert_eq!(done["error"]["code"], "store-protocol", "{done}");
        assert!(done["error"]["message"].as_str().unwrap().contains("kind run_hit"), "{done}");
    }

    #[test]
    fn bad_arguments_and_unknown_operations_are_invalid_input() {
        let f = fleet(None);
        for (kind, args) in [("renew", "{}"), ("release", r#"{"fence":1}"#), ("nope", "{}"), ("acquire", "not json")] {
            let Begun::Done(text) = f.begin(kind, args) else { panic!("{kind} should finish") };
            assert_eq!(json(&text)["error"]["code"], "invalid-input", "{kind}");
        }
        // acquire keeps the reference's result shape for bad values.
        let Begun::Done(text) = f.begin("acquire", r#"{"runId":"","owner":"w","ttlSeconds":0}"#) else {
            panic!("acquire should finish");
        };
        assert_eq!(json(&text)["ok"]["reason"], "Invalid input");
    }

    #[test]
    fn begin_on_host_hands_every_store_request_to_the_host_even_with_a_memory_store() {
        let store = memory();
        let f = fleet(Some(store.clone()));
        let Begun::Pending(mut op) = f.begin_on_host("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#) else {
            panic!("the host answers the store requests");
        };
        assert_eq!(json(op.need())["need"], "store");
        // The host answers from the same memory store; the counters are the fleet's.
        let answer = store.execute_json(op.request()).unwrap();
        let text = op.resume_store(&answer);
        assert_eq!(json(&text)["ok"]["acquired"], true);
        assert_eq!(f.metrics().acquire_wins, 1);
    }

    #[test]
    fn a_typed_host_is_handed_the_request_and_answers_as_the_json_host_does() {
        // Two fleets over two identical stores: one host answers through JSON text, the
        // other hands the typed request to its store and resumes with the typed answer.
        let (json_store, typed_store) = (memory(), memory());
        let (json_fleet, typed_fleet) = (fleet(Some(json_store.clone())), fleet(Some(typed_store.clone())));
        for args in [r#"{"runId":"r","owner":"w","ttlSeconds":60}"#, r#"{"runId":"r","owner":"v","ttlSeconds":60}"#] {
            let Begun::Pending(mut by_json) = json_fleet.begin_on_host("acquire", args) else { panic!("pending") };
            let Begun::Pending(mut by_type) = typed_fleet.begin_on_host("acquire", args) else { panic!("pending") };
            let mut steps = (String::new(), String::new());
            while !by_json.is_done() {
                let typed = by_type.take_store_request().expect("a store need");
                assert!(by_type.take_store_request().is_none(), "taken once");
                assert_eq!(serde_json::to_string(&typed).unwrap(), by_json.request());
                steps.0 = by_json.resume_store(&json_store.execute_json(by_json.request()).unwrap());
                steps.1 = by_type.resume_store_answer(typed_store.execute(&typed).unwrap());
                assert_eq!(steps.0, steps.1);
            }
            assert!(by_type.is_done());
            assert_eq!(by_json.failure(), None);
        }
        assert_eq!(json_store.runs_json().unwrap(), typed_store.runs_json().unwrap());
        assert_eq!(json_fleet.metrics(), typed_fleet.metrics());
        // A failed operation keeps its error for a typed host (the final step's error).
        let Begun::Pending(mut op) =
            typed_fleet.begin_on_host("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#)
        else {
            panic!("pending")
        };
        assert_eq!(op.failure(), None, "not finished");
        let step = json(&op.resume_store_error("connection reset"));
        let failure = op.failure().expect("ended with an error").clone();
        assert_eq!(failure.code, ErrorCode::StoreUnavailable);
        assert_eq!(failure.message, step["error"]["message"].as_str().unwrap());
        assert!(failure.message.ends_with("connection reset"), "{}", failure.message);
        assert!(op.take_result().is_none());
    }

    #[test]
    fn over_a_lease_store_the_cycle_is_its_calls_and_a_compact_answer() {
        let f = BridgeFleet::new(Some(5), true);
        let Begun::Pending(mut op) = f.begin_on_reference("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#, 5)
        else {
            panic!("the host's store answers");
        };
        assert_eq!(op.need(), "G\u{1f}r", "the clock and the row first");
        let row = serde_json::to_value(RunRow::ready("r", "k", Timestamp(1_785_369_600_000))).unwrap();
        let cas = op.resume_read(1_785_369_600_000, &row.to_string());
        assert!(cas.starts_with("u\u{1f}r\u{1f}{"), "{cas}");
        let mut written = row.clone();
        written["status"] = "leased".into();
        written["lease_owner"] = "w".into();
        written["lease_expires_at"] = "2026-07-30T00:01:00.000Z".into();
        written["fencing_epoch"] = 1.into();
        let done = op.resume_written(&written.to_string());
        assert!(done.starts_with("A\u{1f}r\u{1f}"), "acquired, compactly: {done}");
        assert!(op.is_done());
        assert_eq!(f.metrics().acquire_wins, 1);
        // A row of the wrong shape ends the operation with store-protocol, not store-unavailable.
        let Begun::Pending(mut op) = f.begin_on_reference("getRun", r#"{"runId":"r"}"#, 5) else { panic!("pending") };
        let bad = json(&op.resume_read(0, "\"ok\""));
        assert_eq!(bad["error"]["code"], "store-protocol", "{bad}");
        // What the contract cannot serve: invalid-input, before any call.
        let Begun::Done(text) = f.begin_on_reference("listRuns", "{}", 5) else { panic!("refused at once") };
        assert_eq!(json(&text)["error"]["code"], "invalid-input");
    }

    #[test]
    fn operations_by_handle_free_their_slot_when_done_and_reuse_it() {
        let f = fleet(None);
        let mut ops = BridgeOps::new();
        let verify = r#"{"fence":{"runId":"r","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"}}"#;
        let Admitted::Pending(a) = ops.admit(f.begin("verifyFence", verify)) else { panic!("pending") };
        let Admitted::Pending(b) = ops.admit(f.begin("verifyFence", verify)) else { panic!("pending") };
        assert_ne!(a, b);
        assert_eq!(json(ops.request(a))["op"], "update_run");
        assert_eq!(ops.pending(), 2);
        let done = json(&ops.resume(a, |op| op.resume_store_error("reset")));
        assert_eq!(done["error"]["code"], "store-unavailable");
        assert_eq!(ops.pending(), 1, "a finished operation's slot is freed");
        assert_eq!(json(&ops.resume(a, |op| op.resume_store("{}")))["error"]["code"], "store-protocol");
        assert_eq!(ops.need(a), "");
        let Admitted::Pending(c) = ops.admit(f.begin("verifyFence", verify)) else { panic!("pending") };
        assert_eq!(c, a, "the freed handle is reused");
        ops.abandon(b);
        ops.abandon(b);
        assert_eq!(ops.pending(), 1);
        assert!(matches!(ops.admit(f.begin("nope", "{}")), Admitted::Done(_)));
    }

    #[test]
    fn a_sink_fleet_hands_receipts_out_with_the_step() {
        let mut f = BridgeFleet::new(Some(5), true);
        f.attach_memory_store(&memory());
        let Begun::Done(text) = f.begin("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#) else {
            panic!("expected a finished step");
        };
        let step = json(&text);
        assert_eq!(step["receipts"][0]["event"], "acquired");
        assert_eq!(f.receipt_count(), 0);
    }

    #[test]
    fn a_kept_operation_gives_the_core_value_the_typed_memory_path_gives() {
        use crate::ops::Fenced;
        // The same acquire → verify → release on two equal stores: one attached (typed
        // path), one answered by the host (kept path).
        let (attached, hosted) = (memory(), memory());
        let mut typed = BridgeFleet::new(Some(5), false);
        typed.attach_memory_store(&attached);
        let kept = BridgeFleet::new(Some(5), false);
        let host = |call: Call| {
            let mut op = kept.start_kept(call);
            while !op.is_done() {
                let answer = hosted.execute_json(op.request()).unwrap();
                let step = json(&op.resume_store(&answer));
                if step["done"] == true {
                    assert_eq!(step.get("ok"), Some(&Value::Null), "{step}");
                }
            }
            op.take_result()
        };
        let (want, _) = typed.acquire_typed("r", "w", 60).unwrap();
        let want = want.unwrap();
        let call = Call::Acquire { run_id: "r".into(), owner: "w".into(), ttl_seconds: 60 };
        assert_eq!(host(call), Some(KeptResult::Acquired(want.clone())));
        let fence = want.fence.clone().unwrap();
        assert_eq!(host(Call::VerifyFence { fence: fence.clone() }), Some(KeptResult::Verified(true)));
        let (row, _) = typed.release_typed(&fence, "completed").unwrap();
        let released =
            host(Call::Release { fence: fence.clone(), next_status: ops::ReleaseTo::parse("completed").unwrap() });
        assert!(matches!(&released, Some(KeptResult::Released(Fenced::Ok { .. }))), "{released:?}");
        assert_eq!(released, Some(KeptResult::Released(row.unwrap())));
        // Rejected: still a value (the cause), not an error.
        let again = host(Call::Renew { fence: fence.clone(), ttl_seconds: 60 });
        assert!(matches!(again, Some(KeptResult::Renewed(Fenced::Rejected { .. }))), "{again:?}");
        // Finished at once (a bad token): the error is in the step, no value.
        let bad = crate::FencingToken { run_id: String::new(), ..fence };
        let mut op = kept.start_kept(Call::VerifyFence { fence: bad });
        assert!(op.is_done());
        assert_eq!(json(op.need())["error"]["code"], "invalid-input");
        assert_eq!(op.take_result(), None);
        // Taken once.
        let mut op = kept.start_kept(Call::Acquire { run_id: "r".into(), owner: "w".into(), ttl_seconds: 0 });
        assert!(op.is_done(), "a bad ttl answers at once");
        assert!(matches!(op.take_result(), Some(KeptResult::Acquired(ops::AcquireResult { acquired: false, .. }))));
        assert_eq!(op.take_result(), None);
    }

    #[test]
    fn a_request_handed_back_is_refitted_by_the_next_operation_of_its_kind() {
        // Two equal fleets on two equal stores, answered by a typed host: one hands each
        // request back once answered, the other drops it. Every request (the refits
        // included) and every result must be the same.
        let hosted = |give_back: bool| {
            let (fleet, store) = (BridgeFleet::new(Some(5), false), memory());
            move |call: Call| {
                let mut op = fleet.start_kept(call);
                let mut requests = Vec::new();
                while !op.is_done() {
                    let request = op.take_store_request().unwrap();
                    requests.push(super::super::to_text(&request));
                    let answer = store.execute(&request).unwrap();
                    if give_back {
                        op.give_back_request(request);
                    }
                    op.resume_store_answer(answer);
                }
                let spares = fleet.shared.lock().unwrap().recorder.spares.held();
                (requests, op.take_result(), spares)
            }
        };
        let (back, dropped) = (hosted(true), hosted(false));
        let Some(KeptResult::Acquired(first)) =
            back(Call::Acquire { run_id: "r".into(), owner: "w".into(), ttl_seconds: 60 }).1
        else {
            panic!("acquired");
        };
        dropped(Call::Acquire { run_id: "r".into(), owner: "w".into(), ttl_seconds: 60 });
        let mut fence = first.fence.unwrap();
        let mut held = 0;
        for ttl_seconds in [30, 90, 45] {
            let (a, b) = (
                back(Call::Renew { fence: fence.clone(), ttl_seconds }),
                dropped(Call::Renew { fence: fence.clone(), ttl_seconds }),
            );
            assert_eq!((&a.0, &a.1), (&b.0, &b.1), "a renew refitted from the last one handed back");
            assert_eq!(b.2, 0, "nothing handed back, no spare");
            held = a.2;
            let Some(KeptResult::Renewed(ops::Fenced::Ok { value, .. })) = a.1 else { panic!("renewed: {:?}", a.1) };
            fence = value;
        }
        assert_eq!(held, 2, "acquire's and renew's requests are kept as spares");
        for call in [
            Call::VerifyFence { fence: fence.clone() },
            Call::Release { fence: fence.clone(), next_status: ops::ReleaseTo::parse("completed").unwrap() },
        ] {
            let (a, b) = (back(call.clone()), dropped(call));
            assert_eq!((&a.0, &a.1), (&b.0, &b.1));
        }
        // A lost token's renew: a write that misses, then the read that explains it.
        let (a, b) = (
            back(Call::Renew { fence: fence.clone(), ttl_seconds: 60 }),
            dropped(Call::Renew { fence, ttl_seconds: 60 }),
        );
        assert_eq!(a.0.len(), 2, "{:?}", a.0);
        assert_eq!((&a.0, &a.1), (&b.0, &b.1));
    }

    #[test]
    fn a_fleet_that_takes_receipts_apart_gets_them_as_values_not_in_the_steps() {
        let store = memory();
        let mut f = BridgeFleet::new(Some(5), true);
        f.take_receipts_apart();
        f.attach_memory_store(&store);
        let Begun::Done(text) = f.begin("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#) else {
            panic!("expected a finished step");
        };
        let step = json(&text);
        assert!(step.get("receipts").is_none(), "{text}");
        let fence = step["ok"]["fence"].to_string();
        let taken = f.take_receipts();
        assert_eq!(taken.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(), ["acquired"]);
        assert!(f.take_receipts().is_empty(), "taken once");
        // An operation resumed by the host: its receipts wait for the host the same way.
        let Begun::Pending(mut op) = f.begin_on_host("verifyFence", &format!(r#"{{"fence":{fence}}}"#)) else {
            panic!("pending on the host's store")
        };
        let answer = store.execute_json(op.request()).unwrap();
        let done = json(&op.resume_store(&answer));
        assert_eq!(done["ok"], true, "{done}");
        assert!(done.get("receipts").is_none(), "{done}");
        let taken = f.take_receipts();
        assert_eq!(taken.iter().map(|r| r.event.as_str()).collect::<Vec<_>>(), ["fence_verified"]);
        assert_eq!(f.receipt_count(), 0, "nothing kept: a sink takes them");
    }
}

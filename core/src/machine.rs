//! The sans-I/O operation machine.
//!
//! An operation is a [`Machine`]: a value that says what it needs next ([`Need`]) and is
//! resumed with the answer ([`Answer`]) until it is [`Step::Done`]. The lease operations
//! (acquire, renew, release, verify) are plain state machines ([`crate::ops`]'s `lease`
//! module: their inputs and a step), the machine keeping their request. Every other operation is
//! written as straight-line `async` code over an `Io` handle whose `await` points hand a
//! request out and suspend; no executor, thread, timer or waker is involved (the machine is
//! polled with a no-op waker and is only ever pending on its own request slot). Receipts and
//! metric changes are queued as [`Event`]s in order and drained by the driver after every
//! step, so they reach the fleet's sink even when a later step fails; [`crate::driver::drive`]
//! lets the lease operations report them to its recorder directly, in the same order.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use serde_json::Value;

use crate::driver::{LeaseStore, Recorder};
use crate::error::{ErrorCode, HeartError, StoreError};
use crate::metrics::Counter;
use crate::model::IntentRow;
use crate::ops::lease::{self, Advance, LeaseOp, Reply};
use crate::receipt::{HeartEvent, HeartReceipt};
use crate::request::{StoreAnswer, StoreRequest};
use crate::time::Timestamp;

/// What a machine needs from its host to go on.
#[derive(Debug, Clone, PartialEq)]
pub enum Need {
    /// Execute a store request; answer with [`Answer::Store`].
    Store(StoreRequest),
    /// Record `(run_id, effect_key)` in the effect ledger once; answer with
    /// [`Answer::Recorded`] (`true` the first time).
    RecordOnce {
        /// The run.
        run_id: String,
        /// The effect key.
        effect_key: String,
    },
    /// Run the host's irreversible effect now; answer with [`Answer::Effect`].
    Effect {
        /// The effect key.
        effect_key: String,
        /// The run's fencing epoch for the receiving system to check, when known.
        epoch: Option<i64>,
    },
    /// Ask the channel's probe whether a dispatched intent was sent; answer with
    /// [`Answer::Probe`].
    Probe {
        /// The stale dispatched intent.
        intent: IntentRow,
    },
}

/// A channel probe's verdict on a dispatched intent.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeVerdict {
    /// It was sent; here is the evidence.
    Sent(Value),
    /// It provably was not sent.
    NotSent,
    /// Nobody can tell.
    Unknown,
}

/// The host's answer to a [`Need`].
// Answers are moved once per step and never stored in bulk; boxing rows would only add
// allocations on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The store's answer, or its failure.
    Store(Result<StoreAnswer, StoreError>),
    /// The ledger's answer, or its failure.
    Recorded(Result<bool, StoreError>),
    /// The effect's result (`external_ref` evidence for send-once), or its error message.
    Effect(Result<Value, String>),
    /// The probe's verdict, or its error message.
    Probe(Result<ProbeVerdict, String>),
}

/// Keeps the code of a store failure the core (not the store) found, such as
/// `store-protocol` for an answer of the wrong shape, when that failure is what ended the
/// operation: a machine reports every failed store request as `store-unavailable`.
pub fn keep_store_failure_code<T>(step: &mut Step<T>, code: ErrorCode) {
    if let Step::Done(Err(end)) = step
        && end.code == ErrorCode::StoreUnavailable
    {
        end.code = code;
    }
}

/// A receipt or metric change, in the order the operation made them.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A counter went up by one.
    Metric(Counter),
    /// A receipt was emitted.
    Receipt(HeartReceipt),
}

/// One step of a machine.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Step<T> {
    /// The machine waits for this.
    Need(Need),
    /// The operation finished.
    Done(Result<T, HeartError>),
}

/// Where an operation's counters and receipts go as it makes them: a machine's event queue,
/// or (for the lease operations [`crate::driver::drive`] runs) the fleet's recorder itself.
pub(crate) trait Emit {
    /// A counter goes up by one.
    fn bump(&mut self, c: Counter);
    /// A receipt with these fields ([`HeartReceipt::new`]) is emitted.
    fn receipt(
        &mut self,
        event: HeartEvent,
        run_id: &str,
        owner: &str,
        lease_expires_at: Option<Timestamp>,
        effect_key: Option<&str>,
        at: Timestamp,
    );
}

impl Emit for Vec<Event> {
    fn bump(&mut self, c: Counter) {
        self.push(Event::Metric(c));
    }

    fn receipt(
        &mut self,
        event: HeartEvent,
        run_id: &str,
        owner: &str,
        lease_expires_at: Option<Timestamp>,
        effect_key: Option<&str>,
        at: Timestamp,
    ) {
        self.push(Event::Receipt(HeartReceipt::new(event, run_id, owner, lease_expires_at, effect_key, at)));
    }
}

#[derive(Default)]
struct Slot {
    need: Option<Need>,
    answer: Option<Answer>,
    events: Vec<Event>,
}

/// The operation's side of the slot: hands requests out and records events.
#[derive(Clone)]
pub(crate) struct Io {
    slot: Arc<Mutex<Slot>>,
}

fn poisoned() -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, "operation state poisoned")
}

struct AwaitAnswer {
    slot: Arc<Mutex<Slot>>,
    need: Option<Need>,
}

impl Future for AwaitAnswer {
    type Output = Result<Answer, HeartError>;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Ok(mut slot) = this.slot.lock() else {
            return Poll::Ready(Err(poisoned()));
        };
        if let Some(need) = this.need.take() {
            // First poll: hand the request out. Any answer left in the slot is stale.
            slot.answer = None;
            slot.need = Some(need);
            return Poll::Pending;
        }
        match slot.answer.take() {
            Some(answer) => Poll::Ready(Ok(answer)),
            None => Poll::Pending,
        }
    }
}

impl Io {
    /// Hands `need` out and waits for the answer.
    pub(crate) async fn ask(&self, need: Need) -> Result<Answer, HeartError> {
        AwaitAnswer { slot: self.slot.clone(), need: Some(need) }.await
    }

    /// Executes a store request; a store failure becomes `store-unavailable` naming `step`.
    pub(crate) async fn store(&self, step: &str, req: StoreRequest) -> Result<StoreAnswer, HeartError> {
        match self.ask(Need::Store(req)).await? {
            Answer::Store(Ok(a)) => Ok(a),
            Answer::Store(Err(e)) => Err(HeartError::store(step, &e)),
            other => Err(mismatch(step, &other)),
        }
    }

    /// Records an event.
    pub(crate) fn event(&self, e: Event) {
        if let Ok(mut slot) = self.slot.lock() {
            slot.events.push(e);
        }
    }

    /// Bumps a counter.
    pub(crate) fn bump(&self, c: Counter) {
        self.event(Event::Metric(c));
    }

    /// Emits a receipt.
    pub(crate) fn receipt(&self, r: HeartReceipt) {
        self.event(Event::Receipt(r));
    }
}

impl Emit for Io {
    fn bump(&mut self, c: Counter) {
        Io::bump(self, c);
    }

    fn receipt(
        &mut self,
        event: HeartEvent,
        run_id: &str,
        owner: &str,
        lease_expires_at: Option<Timestamp>,
        effect_key: Option<&str>,
        at: Timestamp,
    ) {
        Io::receipt(self, HeartReceipt::new(event, run_id, owner, lease_expires_at, effect_key, at));
    }
}

/// The error for an answer of the wrong kind (a host bug): one line naming the step and the
/// kind of answer that came, never the answer's contents (rows, timestamps, Rust `Debug`
/// text), which belong to the store and not to an error message.
pub(crate) fn mismatch(step: &str, got: &Answer) -> HeartError {
    use crate::request::StoreReply as R;
    let what = match got {
        Answer::Store(Ok(a)) => match &a.reply {
            R::Now => "a store reply of kind now",
            R::Run { .. } => "a store reply of kind run",
            R::RunWrite { .. } => "a store reply of kind run_write",
            R::RunHit { .. } => "a store reply of kind run_hit",
            R::Runs { .. } => "a store reply of kind runs",
            R::Ensured { .. } => "a store reply of kind ensured",
            R::Claim { .. } => "a store reply of kind claim",
            R::Intent { .. } => "a store reply of kind intent",
            R::Intents { .. } => "a store reply of kind intents",
            R::Log { .. } => "a store reply of kind log",
            R::Instances { .. } => "a store reply of kind instances",
        },
        Answer::Store(Err(_)) => "a store failure",
        Answer::Recorded(_) => "an effect ledger answer",
        Answer::Effect(_) => "an effect result",
        Answer::Probe(_) => "a probe verdict",
    };
    mismatch_kind(step, what)
}

/// [`mismatch`] for an answer described by its kind (`what`).
pub(crate) fn mismatch_kind(step: &str, what: &str) -> HeartError {
    HeartError::new(
        ErrorCode::StoreProtocol,
        format!("unexpected answer at {step}: {what}, not the reply this step needs"),
    )
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, HeartError>> + Send>>;

fn finished() -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, "operation already finished")
}

fn no_answer() -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, "operation resumed without an answer")
}

/// A running operation. See the crate docs for the driving loop.
pub struct Machine<T> {
    body: Body<T>,
}

// The lease variant is the common one, and a machine is never stored in bulk: boxing it
// would be the very per-operation allocation this layout avoids.
#[allow(clippy::large_enum_variant)]
enum Body<T> {
    /// A lease operation.
    Lease(Lease<T>),
    /// Any other operation; `fut` is `None` once it finished.
    Async { fut: Option<BoxFuture<T>>, slot: Arc<Mutex<Slot>> },
}

/// A lease operation as a machine: the plain state machine and its typed step, its request
/// slot, where it stands and its queued events.
struct Lease<T> {
    op: LeaseOp<'static>,
    step: Advance<T>,
    request: StoreRequest,
    phase: Phase,
    events: Vec<Event>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotStarted,
    /// Its request was handed out.
    Waiting,
    Finished,
}

impl<T> Lease<T> {
    fn start(&mut self) -> Step<T> {
        match self.phase {
            Phase::NotStarted => {
                self.op.start(&mut self.events, &mut self.request);
                self.phase = Phase::Waiting;
                self.hand_out()
            }
            // As the async machines do: asking again without an answer ends the operation.
            Phase::Waiting => self.finish(Err(no_answer())),
            Phase::Finished => Step::Done(Err(finished())),
        }
    }

    fn resume(&mut self, mut answer: Answer) -> Step<T> {
        match self.phase {
            // An answer before the first request is stale, as in the async machines.
            Phase::NotStarted => self.start(),
            Phase::Waiting => {
                match (self.step)(&mut self.op, Reply::Owned(&mut answer), &mut self.events, &mut self.request) {
                    Ok(None) => self.hand_out(),
                    Ok(Some(result)) => self.finish(Ok(result)),
                    Err(e) => self.finish(Err(e)),
                }
            }
            Phase::Finished => Step::Done(Err(finished())),
        }
    }

    /// Hands the request out to the host.
    fn hand_out(&mut self) -> Step<T> {
        Step::Need(Need::Store(std::mem::replace(&mut self.request, StoreRequest::Now)))
    }

    fn finish(&mut self, result: Result<T, HeartError>) -> Step<T> {
        self.phase = Phase::Finished;
        Step::Done(result)
    }
}

impl<T> std::fmt::Debug for Machine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Machine")
    }
}

impl<T: 'static> Machine<T> {
    /// Wraps an operation body.
    pub(crate) fn new<F, Fut>(body: F) -> Machine<T>
    where
        F: FnOnce(Io) -> Fut,
        Fut: Future<Output = Result<T, HeartError>> + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Slot::default()));
        let io = Io { slot: slot.clone() };
        Machine { body: Body::Async { fut: Some(Box::pin(body(io))), slot } }
    }

    /// A machine that is already done (validation failures).
    pub(crate) fn done(result: Result<T, HeartError>) -> Machine<T>
    where
        T: Send,
    {
        Machine::new(move |_| async move { result })
    }

    /// A lease operation's request slot, for a host that hands requests out and back
    /// (`bridge::BridgeOp::give_back_request`): the operation (whose kind names its spare)
    /// and the slot, which holds the request it will start from or refit (before it
    /// started), the request handed back (while it waits), or its last request once done.
    /// `None` for any other machine. Not in WebAssembly, where no host hands requests back.
    #[cfg(not(target_family = "wasm"))]
    pub(crate) fn lease_slot(&mut self) -> Option<(&LeaseOp<'static>, &mut StoreRequest)> {
        match &mut self.body {
            Body::Lease(lease) => Some((&lease.op, &mut lease.request)),
            Body::Async { .. } => None,
        }
    }

    /// Wraps a lease operation and its step.
    pub(crate) fn lease(op: LeaseOp<'static>, step: Advance<T>) -> Machine<T> {
        let lease = Lease { op, step, request: StoreRequest::Now, phase: Phase::NotStarted, events: Vec::new() };
        Machine { body: Body::Lease(lease) }
    }

    /// Starts the machine: its first need, or its result.
    pub fn start(&mut self) -> Step<T> {
        match &mut self.body {
            Body::Lease(lease) => lease.start(),
            Body::Async { fut, slot } => poll(fut, slot),
        }
    }

    /// Resumes the machine with the answer to its last need.
    pub fn resume(&mut self, answer: Answer) -> Step<T> {
        match &mut self.body {
            Body::Lease(lease) => lease.resume(answer),
            Body::Async { fut, slot } => {
                match slot.lock() {
                    Ok(mut slot) => slot.answer = Some(answer),
                    Err(_) => return Step::Done(Err(poisoned())),
                }
                poll(fut, slot)
            }
        }
    }

    /// Takes the receipts and metric changes made since the last call, in order.
    pub fn drain_events(&mut self) -> Vec<Event> {
        match &mut self.body {
            Body::Lease(lease) => std::mem::take(&mut lease.events),
            Body::Async { slot, .. } => slot.lock().map(|mut s| std::mem::take(&mut s.events)).unwrap_or_default(),
        }
    }

    /// Runs a lease operation that has not started to its end against `store`, reporting its
    /// counters and receipts straight to `recorder` and letting a store that writes in place
    /// lend it the rows. `None` (nothing done) for any other machine.
    pub(crate) fn run_lease<S: LeaseStore + ?Sized>(
        &mut self,
        store: &mut S,
        recorder: &mut Recorder,
    ) -> Option<Result<T, HeartError>> {
        let Body::Lease(lease) = &mut self.body else { return None };
        if lease.phase != Phase::NotStarted {
            return None;
        }
        lease.phase = Phase::Finished;
        Some(lease::run(&mut lease.op, lease.step, store, recorder))
    }
}

/// Polls an async operation once: its next need, or its result (`fut` becomes `None`).
fn poll<T>(fut: &mut Option<BoxFuture<T>>, slot: &Mutex<Slot>) -> Step<T> {
    let Some(running) = fut.as_mut() else {
        return Step::Done(Err(finished()));
    };
    let mut cx = Context::from_waker(Waker::noop());
    match running.as_mut().poll(&mut cx) {
        Poll::Ready(result) => {
            *fut = None;
            Step::Done(result)
        }
        Poll::Pending => match slot.lock().ok().and_then(|mut s| s.need.take()) {
            Some(need) => Step::Need(need),
            None => {
                *fut = None;
                Step::Done(Err(no_answer()))
            }
        },
    }
}

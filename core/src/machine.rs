//! The sans-I/O operation machine.
//!
//! An operation is a [`Machine`]: a value that says what it needs next ([`Need`]) and is
//! resumed with the answer ([`Answer`]) until it is [`Step::Done`]. Inside, each operation
//! is written as straight-line `async` code over an `Io` handle whose `await` points hand
//! a request out and suspend; no executor, thread, timer or waker is involved (the machine
//! is polled with a no-op waker and is only ever pending on its own request slot).
//! Receipts and metric changes are queued as [`Event`]s in order and drained by the driver
//! after every step, so they reach the fleet's sink even when a later step fails.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use serde_json::Value;

use crate::error::{ErrorCode, HeartError, StoreError};
use crate::metrics::Counter;
use crate::model::IntentRow;
use crate::receipt::HeartReceipt;
use crate::request::{StoreAnswer, StoreRequest};

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
    HeartError::new(
        ErrorCode::StoreProtocol,
        format!("unexpected answer at {step}: {what}, not the reply this step needs"),
    )
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, HeartError>> + Send>>;

/// A running operation. See the crate docs for the driving loop.
pub struct Machine<T> {
    fut: Option<BoxFuture<T>>,
    slot: Arc<Mutex<Slot>>,
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
        Machine { fut: Some(Box::pin(body(io))), slot }
    }

    /// A machine that is already done (validation failures).
    pub(crate) fn done(result: Result<T, HeartError>) -> Machine<T>
    where
        T: Send,
    {
        Machine::new(move |_| async move { result })
    }

    /// Starts the machine: its first need, or its result.
    pub fn start(&mut self) -> Step<T> {
        self.poll()
    }

    /// Resumes the machine with the answer to its last need.
    pub fn resume(&mut self, answer: Answer) -> Step<T> {
        match self.slot.lock() {
            Ok(mut slot) => slot.answer = Some(answer),
            Err(_) => return Step::Done(Err(poisoned())),
        }
        self.poll()
    }

    /// Takes the receipts and metric changes made since the last call, in order.
    pub fn drain_events(&mut self) -> Vec<Event> {
        self.slot.lock().map(|mut s| std::mem::take(&mut s.events)).unwrap_or_default()
    }

    fn poll(&mut self) -> Step<T> {
        let Some(fut) = self.fut.as_mut() else {
            return Step::Done(Err(HeartError::new(ErrorCode::StoreProtocol, "operation already finished")));
        };
        let mut cx = Context::from_waker(Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(result) => {
                self.fut = None;
                Step::Done(result)
            }
            Poll::Pending => match self.slot.lock().ok().and_then(|mut s| s.need.take()) {
                Some(need) => Step::Need(need),
                None => {
                    self.fut = None;
                    Step::Done(Err(HeartError::new(ErrorCode::StoreProtocol, "operation resumed without an answer")))
                }
            },
        }
    }
}

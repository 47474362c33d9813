//! Drivers: thin loops that feed a [`Machine`] what it needs.
//!
//! * [`LeaseStore`] + [`drive`]: the sync driver (memory store, SQLite, sync PostgreSQL,
//!   the component's imported `lease-store`).
//! * [`AsyncLeaseStore`] + [`drive_async`]: the async driver for Rust async stores.
//! * Bindings drive machines themselves from their own event loops (see the crate docs).

use std::collections::HashSet;

use crate::error::{HeartError, StoreError};
use crate::machine::{Answer, Emit, Event, Machine, Need, ProbeVerdict, Step};
use crate::metrics::{Counter, HeartMetrics};
use crate::model::IntentRow;
use crate::ops::lease::Spares;
use crate::receipt::{HeartEvent, HeartReceipt, ReceiptSink};
use crate::request::{RunWriteRef, StoreAnswer, StoreRequest};
use crate::time::Timestamp;

/// A synchronous store: executes one request atomically.
pub trait LeaseStore {
    /// Executes `req`, or reports a failure (never a silent miss).
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError>;

    /// Executes a [`StoreRequest::UpdateRun`] without taking the request, lending the rows of
    /// the reply instead of copying them: the lease operations that [`drive`] and
    /// [`crate::HeartFleet`] run keep their request for the next one to refit, and copy at most
    /// the row after the write. It must answer exactly as [`LeaseStore::execute`] would.
    /// `None` (the default) when the store cannot, or `req` is another request: the request is
    /// then handed over to [`LeaseStore::execute`].
    fn write_run_in_place(&mut self, _req: &StoreRequest) -> Option<Result<RunWriteRef<'_>, StoreError>> {
        None
    }

    /// The operation that made the requests since the last call is over, or about to hand
    /// control to the host (an effect, a probe), and every receipt of its writes has gone to
    /// the sink. A store that keeps receipts in the same transaction as the writes they record
    /// (the Rust SQL stores with a receipts-table sink) commits here; an `Err` means it rolled
    /// the operation's writes back with their receipts, and the operation fails with it.
    /// The drivers call it; a host that runs requests itself must too. Nothing to do by
    /// default.
    fn settle(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    /// The operation was cut short (a component instance trapped, say): a store that holds
    /// writes rolls back what it holds, and nothing is reported (the operation has failed
    /// already). Nothing to do by default.
    fn abandon(&mut self) {}
}

impl<S: LeaseStore + ?Sized> LeaseStore for &mut S {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        (**self).execute(req)
    }

    fn write_run_in_place(&mut self, req: &StoreRequest) -> Option<Result<RunWriteRef<'_>, StoreError>> {
        (**self).write_run_in_place(req)
    }

    fn settle(&mut self) -> Result<(), StoreError> {
        (**self).settle()
    }

    fn abandon(&mut self) {
        (**self).abandon();
    }
}

/// Ends an operation on `store` ([`LeaseStore::settle`]): its result, or the store's error
/// when the store rolled its writes back, with the counters those writes bumped restored to
/// `before` (what they counted did not happen).
pub(crate) fn settled<T, S: LeaseStore + ?Sized>(
    store: &mut S,
    recorder: &mut Recorder,
    before: HeartMetrics,
    result: Result<T, HeartError>,
) -> Result<T, HeartError> {
    match store.settle() {
        Ok(()) => result,
        Err(e) => {
            recorder.metrics = before;
            // An operation that failed already keeps its own error.
            result.and(Err(HeartError::store("the writes were rolled back with their receipts", &e)))
        }
    }
}

/// An asynchronous store.
pub trait AsyncLeaseStore {
    /// Executes `req`, or reports a failure.
    fn execute(&self, req: StoreRequest) -> impl std::future::Future<Output = Result<StoreAnswer, StoreError>>;
}

/// Where metric changes and receipts of machines end up: the fleet's counters and sink.
#[derive(Default)]
pub struct Recorder {
    /// The 13 counters.
    pub metrics: HeartMetrics,
    /// Receipts kept when no sink was given (`receipts()` in the reference).
    pub receipts: Vec<HeartReceipt>,
    /// The host's sink (`onReceipt`); when set, `receipts` stays empty as in the reference.
    pub sink: Option<Box<dyn ReceiptSink>>,
    /// The receipt lent to the sink, rebuilt in place for each one (the sink only borrows it).
    sink_receipt: Option<HeartReceipt>,
    /// The request slots of finished lease operations, for the next ones to refit.
    pub(crate) spares: Spares,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("metrics", &self.metrics).field("receipts", &self.receipts.len()).finish()
    }
}

impl Recorder {
    /// Applies events in order: the counter first, then the receipt, as the reference does.
    pub fn absorb(&mut self, events: Vec<Event>) {
        for e in events {
            match e {
                Event::Metric(c) => self.metrics.bump(c),
                Event::Receipt(r) => match self.sink.as_mut() {
                    Some(sink) => sink.emit(&r),
                    None => self.receipts.push(r),
                },
            }
        }
    }
}

/// The lease operations that [`drive`] runs report straight here, in the order they happen
/// (as [`Recorder::absorb`] would apply their events).
impl Emit for Recorder {
    fn bump(&mut self, c: Counter) {
        self.metrics.bump(c);
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
        let Some(sink) = self.sink.as_mut() else {
            self.receipts.push(HeartReceipt::new(event, run_id, owner, lease_expires_at, effect_key, at));
            return;
        };
        let receipt = match &mut self.sink_receipt {
            Some(r) => {
                r.rebuild(event, run_id, owner, lease_expires_at, effect_key, at);
                r
            }
            None => self.sink_receipt.insert(HeartReceipt::new(event, run_id, owner, lease_expires_at, effect_key, at)),
        };
        sink.emit(receipt);
    }
}

/// The reference's in-process effect ledger: a set of `(runId, effectKey)`.
#[derive(Debug, Clone, Default)]
pub struct MemoryEffectLedger {
    seen: HashSet<(String, String)>,
}

impl MemoryEffectLedger {
    /// `recordOnce`: true the first time.
    pub fn record_once(&mut self, run_id: &str, effect_key: &str) -> bool {
        self.seen.insert((run_id.to_owned(), effect_key.to_owned()))
    }
}

/// Which ledger guards an effect.
#[derive(Debug)]
pub enum Ledger<'a> {
    /// An in-process set (lost on restart).
    Memory(&'a mut MemoryEffectLedger),
    /// The store's `effect_intents` table (`DurableEffectLedger`).
    Durable,
}

/// Answers the non-store needs of a machine in the sync driver.
pub trait Host {
    /// Records an effect key once.
    fn record_once(&mut self, run_id: &str, effect_key: &str) -> Result<bool, StoreError>;
    /// Runs the effect; its value is the result (or `external_ref` for send-once).
    fn effect(&mut self, effect_key: &str, epoch: Option<i64>) -> Result<serde_json::Value, String>;
    /// Probes a dispatched intent's channel.
    fn probe(&mut self, intent: &IntentRow) -> Result<ProbeVerdict, String>;
}

/// A host for operations that need nothing but the store.
#[derive(Debug, Default)]
pub struct NoHost;

impl Host for NoHost {
    fn record_once(&mut self, _: &str, _: &str) -> Result<bool, StoreError> {
        Err(StoreError("this operation has no effect ledger".into()))
    }
    fn effect(&mut self, _: &str, _: Option<i64>) -> Result<serde_json::Value, String> {
        Err("this operation has no effect".into())
    }
    fn probe(&mut self, _: &IntentRow) -> Result<ProbeVerdict, String> {
        Ok(ProbeVerdict::Unknown)
    }
}

/// The sync driving loop (the numbered steps in the crate docs). A lease operation (acquire,
/// renew, release, verify) runs as its plain state machine instead, reporting its counters
/// and receipts to `recorder` as it makes them.
pub fn drive<T: 'static, S: LeaseStore + ?Sized>(
    mut machine: Machine<T>,
    store: &mut S,
    recorder: &mut Recorder,
    host: &mut dyn Host,
) -> Result<T, HeartError> {
    let mut before = recorder.metrics;
    if let Some(result) = machine.run_lease(store, recorder) {
        return settled(store, recorder, before, result);
    }
    let mut step = machine.start();
    loop {
        recorder.absorb(machine.drain_events());
        let need = match step {
            Step::Done(result) => return settled(store, recorder, before, result),
            Step::Need(need) => need,
        };
        if !matches!(need, Need::Store(_)) {
            // The host's turn (an effect may take long): what was written is committed first.
            settled(store, recorder, before, Ok(()))?;
            before = recorder.metrics;
        }
        let answer = match need {
            Need::Store(req) => Answer::Store(store.execute(req)),
            Need::RecordOnce { run_id, effect_key } => Answer::Recorded(host.record_once(&run_id, &effect_key)),
            Need::Effect { effect_key, epoch } => Answer::Effect(host.effect(&effect_key, epoch)),
            Need::Probe { intent } => Answer::Probe(host.probe(&intent)),
        };
        step = machine.resume(answer);
    }
}

/// The async driving loop: store requests are awaited on `store`; other needs go to
/// `other`, which must answer them.
pub async fn drive_async<T: 'static, S: AsyncLeaseStore>(
    mut machine: Machine<T>,
    store: &S,
    recorder: &mut Recorder,
    mut other: impl AsyncFnMut(Need) -> Answer,
) -> Result<T, HeartError> {
    let mut step = machine.start();
    loop {
        recorder.absorb(machine.drain_events());
        let need = match step {
            Step::Done(result) => return result,
            Step::Need(need) => need,
        };
        let answer = match need {
            Need::Store(req) => Answer::Store(store.execute(req).await),
            need => other(need).await,
        };
        step = machine.resume(answer);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::memory::MemoryStore;
    use crate::model::RunRow;
    use crate::ops::{self, FleetConfig};
    use crate::time::Timestamp;

    /// An async store whose every call yields once before answering, like a network store.
    struct YieldingStore(RefCell<MemoryStore>);

    struct YieldOnce(bool);
    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                Poll::Ready(())
            } else {
                self.0 = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    impl AsyncLeaseStore for YieldingStore {
        async fn execute(&self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
            YieldOnce(false).await;
            self.0.borrow_mut().execute(req)
        }
    }

    fn block_on<F: Future>(f: F) -> (F::Output, u32) {
        let mut f = pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        let mut polls = 0;
        loop {
            polls += 1;
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return (v, polls);
            }
        }
    }

    #[test]
    fn the_async_driver_runs_the_same_machine_and_yields_at_every_store_call() {
        let t0 = Timestamp(1_785_369_600_000);
        let mut mem = MemoryStore::new(t0);
        mem.insert(RunRow::ready("r", "k", t0)).unwrap();
        let store = YieldingStore(RefCell::new(mem));
        let mut rec = Recorder::default();
        let (acq, polls) =
            block_on(drive_async(ops::acquire(FleetConfig::default(), "r", "w", 60), &store, &mut rec, async |_| {
                Answer::Store(Err(StoreError("unexpected".into())))
            }));
        let acq = acq.unwrap();
        assert!(acq.acquired);
        assert!(polls >= 2, "the driver must suspend while the store works (polls = {polls})");
        assert_eq!(rec.metrics.acquire_wins, 1);
        assert_eq!(rec.receipts.len(), 1);
        let fence = acq.fence.unwrap();
        let (ok, _) = block_on(drive_async(ops::verify_fence(&fence), &store, &mut rec, async |_| {
            Answer::Store(Err(StoreError("unexpected".into())))
        }));
        assert!(ok.unwrap());
        store.0.borrow_mut().fail_next("update_run", 1);
        let (err, _) = block_on(drive_async(ops::verify_fence(&fence), &store, &mut rec, async |_| {
            Answer::Store(Err(StoreError("unexpected".into())))
        }));
        assert_eq!(err.unwrap_err().code, crate::error::ErrorCode::StoreUnavailable);
    }
}

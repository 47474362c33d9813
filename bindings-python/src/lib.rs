//! # heart-fleet for Python
//!
//! The native half of the Python package `heart_fleet` (`heart_fleet._native`): a thin pyo3
//! layer over [`heart_fleet_core::bridge`]. It holds no lease logic of its own; the Python
//! half (`python/heart_fleet/`) is the public API. This module gives it:
//!
//! * [`NativeFleet`] and [`NativeOp`]: the sans-I/O operation class. `NativeFleet.begin`
//!   builds one of the core's machines from JSON arguments and starts it; with a
//!   [`NativeMemoryStore`] attached, store requests are answered inside Rust. Every other
//!   need is handed to Python as JSON, and the Python driving loop (sync or asyncio)
//!   resumes the [`NativeOp`] with the answer.
//! * The lease cycle on an attached memory store without JSON: `NativeFleet.acquire`,
//!   `renew`, `release` and `verify_fence` take plain arguments and answer the record
//!   classes of the `records` module (`FencingToken`, `RunRow`, `HeartReceipt`,
//!   `AcquireResult`, `FencedOutcome`, which the package exports), handing the receipts to
//!   the fleet's sink on the way ([`deliver_receipts`], the package's one delivery rule).
//! * [`NativeMemoryStore`]: the core's deterministic memory store; [`MemoryEffectLedger`]:
//!   the core's in-process effect ledger.
//! * [`NativeLeaseSession`]: the core's execute-with-lease state (Python owns the heartbeat
//!   thread or task).
//! * The core's rules as functions (the expiry and liveness rules, the heartbeat cadence),
//!   canonical JSON, receipt verification, and SQL rendering/decoding for the SQL stores
//!   written in Python (`sqlite3`, psycopg).
//!
//! * The store contract's values (the `store` module): `StoreRequest`, what a store
//!   object's `execute` is handed (the core's request, taken out of the waiting
//!   operation), and `StoreAnswer`, what the memory store's `execute` answers; an operation
//!   resumes with a `StoreAnswer` as it is, so a store that forwards costs no JSON.
//!
//! Apart from the records and the store values, what crosses the boundary is JSON text, a
//! `str`, an `int` or a `bool`. Failures are raised as the package's exception class for the core's stable code
//! (`heart_fleet.errors.error_for_code`); nothing here panics. Every class is `Send + Sync`
//! (a mutex around the bridge value), so a heartbeat thread may use a fleet.

mod records;
mod sql;
mod store;

use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use heart_fleet_core::bridge::{self, TypedOutcome};
use heart_fleet_core::{ErrorCode, HeartError};
use pyo3::PyTraverseError;
use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyString, PyType};

use records::{AcquireResult, FencedCore, FencedOutcome, FencingToken, HeartReceipt};
use store::{StoreAnswer, StoreRequest};

/// A core error as the Python exception of its code.
fn py_err(e: HeartError) -> PyErr {
    coded(e.code, &e.message)
}

fn coded(code: ErrorCode, message: &str) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("heart_fleet.errors")
            .and_then(|m| m.getattr("error_for_code"))
            .and_then(|f| f.call1((code.as_str(), message)));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            // The package is not importable (the module used on its own): keep the code in the text.
            Err(_) => PyRuntimeError::new_err(format!("[{}] {message}", code.as_str())),
        }
    })
}

fn locked<T>(m: &Mutex<T>) -> PyResult<MutexGuard<'_, T>> {
    m.lock().map_err(|_| coded(ErrorCode::StoreUnavailable, "a heart-fleet object was poisoned by a panic"))
}

/// The counters, retry ceiling and receipts of one `HeartFleet`, and the factory of its
/// operations.
#[pyclass(module = "heart_fleet._native", frozen)]
pub struct NativeFleet {
    inner: Mutex<bridge::BridgeFleet>,
    /// The fleet's receipt sink and the package's scheduler of what a sink returns.
    sink: std::sync::OnceLock<(Py<PyAny>, Py<PyAny>)>,
    /// The store object the lease cycle's operations are driven through, when bound.
    store: std::sync::OnceLock<BoundStore>,
}

/// A store object as [`NativeOp::drive_store`] and [`NativeOp::drive_store_async`] call it:
/// its method (`execute`, or `execute_json`), the package's `settle` for each (the blocking
/// one only for a blocking store), and whether the method takes a `StoreRequest` (else the
/// request's text).
struct BoundStore {
    method: Py<PyAny>,
    settle: Option<Py<PyAny>>,
    settle_awaited: Py<PyAny>,
    typed: bool,
    /// The `StoreRequest` object the store handed back last, which the next request refills.
    spare: Spare,
}

/// A `StoreRequest` object kept for the next request, once its store let go of it: one
/// object per fleet instead of one made and freed per request.
type Spare = Mutex<Option<Py<StoreRequest>>>;

#[pymethods]
impl NativeFleet {
    /// A fleet with retry ceiling `max_retries` (`None`: never quarantine). With `sink`,
    /// receipts are handed to Python with each step instead of being kept.
    #[new]
    #[pyo3(signature = (max_retries, sink))]
    fn new(max_retries: Option<u32>, sink: bool) -> NativeFleet {
        NativeFleet {
            inner: Mutex::new(bridge::BridgeFleet::new(max_retries, sink)),
            sink: std::sync::OnceLock::new(),
            store: std::sync::OnceLock::new(),
        }
    }

    /// Where every operation's receipts go, as records built here (see [`deliver_receipts`]):
    /// the steps no longer carry them as JSON. Set once.
    fn set_sink(&self, sink: Py<PyAny>, schedule: Py<PyAny>) -> PyResult<()> {
        self.sink
            .set((sink, schedule))
            .map_err(|_| coded(ErrorCode::InvalidState, "the fleet's sink is already set"))?;
        locked(&self.inner)?.take_receipts_apart();
        Ok(())
    }

    /// Answers store requests of this fleet's operations from a Rust memory store.
    fn attach_memory_store(&self, store: &NativeMemoryStore) -> PyResult<()> {
        locked(&self.inner)?.attach_memory_store(&store.inner);
        Ok(())
    }

    /// The store object whose requests the lease cycle's operations are answered with inside
    /// Rust, for a fleet whose receipts are not held: `method` as `drive_store` takes it with
    /// `settle` (`None` for an asyncio store) when `acquire`, `renew`, `release` and
    /// `verify_fence` are called (the blocking API), and as `drive_store_async` takes it with
    /// `settle_awaited` when their `start_` twins are (the asyncio API). Set once.
    #[pyo3(signature = (method, settle, settle_awaited, typed))]
    fn bind_store(
        &self,
        method: Py<PyAny>,
        settle: Option<Py<PyAny>>,
        settle_awaited: Py<PyAny>,
        typed: bool,
    ) -> PyResult<()> {
        self.store
            .set(BoundStore { method, settle, settle_awaited, typed, spare: Mutex::new(None) })
            .map_err(|_| coded(ErrorCode::InvalidState, "the fleet's store is already bound"))
    }

    /// Builds operation `kind` from `args` (JSON) and starts it: the final step (JSON text)
    /// when it finished inside Rust, else the [`NativeOp`] to resume.
    fn begin(&self, py: Python<'_>, kind: &str, args: &str) -> PyResult<Py<PyAny>> {
        let (begun, fleet) = {
            let fleet = locked(&self.inner)?;
            (fleet.begin(kind, args), fleet.clone())
        };
        let sink = self.sink.get().map(|(s, d)| (s.clone_ref(py), d.clone_ref(py)));
        hand_over(py, &fleet, sink.as_ref())?;
        match begun {
            bridge::Begun::Done(text) => Ok(text.into_pyobject(py)?.into_any().unbind()),
            bridge::Begun::Pending(op) => Ok(Py::new(py, NativeOp::new(op, fleet, sink))?.into_any()),
        }
    }

    /// `acquire` with plain arguments (two `str`s without a lone surrogate, an `int` that
    /// fits 64 bits) on the attached memory store, or through the bound store when it is a
    /// blocking one (`bind_store`): the `AcquireResult`, after handing its receipts to the
    /// fleet's sink (`set_sink`). `None` without either store or for any other argument: the
    /// package's checked path (`begin`) then answers, so what bad input gives is decided in
    /// one place. Through the store, an operation that needs more than the store is
    /// given as the `NativeOp` to drive on (none of these four does).
    fn acquire(
        &self,
        py: Python<'_>,
        run_id: &Bound<'_, PyAny>,
        owner: &Bound<'_, PyAny>,
        ttl_seconds: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (Some(run_id), Some(owner), Some(ttl)) = (plain_text(run_id), plain_text(owner), plain_int(ttl_seconds))
        else {
            return Ok(None);
        };
        if let Some(store) = self.blocking_store() {
            let call = bridge::Call::Acquire { run_id: run_id.to_owned(), owner: owner.to_owned(), ttl_seconds: ttl };
            return self.through(py, store, call);
        }
        let outcome = locked(&self.inner)?.acquire_typed(run_id, owner, ttl);
        typed(py, outcome, self.sink.get(), |r| record(py, AcquireResult::from_core(py, r)?))
    }

    /// `try_renew` as [`NativeFleet::acquire`] runs `acquire`: the `FencedOutcome`, or
    /// `None` as for `acquire` (a fence that is not a plain `FencingToken` included).
    fn renew(
        &self,
        py: Python<'_>,
        fence: &Bound<'_, PyAny>,
        ttl_seconds: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (Some(fence), Some(ttl)) = (plain_token(fence), plain_int(ttl_seconds)) else { return Ok(None) };
        if !(1..=heart_fleet_core::ops::MAX_TTL_SECONDS).contains(&ttl) {
            return Ok(None); // the checked path names the package's argument
        }
        if let Some(store) = self.blocking_store() {
            return self.through(py, store, bridge::Call::Renew { fence: fence.into_owned(), ttl_seconds: ttl });
        }
        let outcome = locked(&self.inner)?.renew_typed(&fence, ttl);
        typed(py, outcome, self.sink.get(), |f| record(py, FencedOutcome::from_core(py, FencedCore::Token(f))?))
    }

    /// `try_release` as [`NativeFleet::acquire`] runs `acquire`: the `FencedOutcome`, or
    /// `None` as for [`NativeFleet::renew`] (a next status that is not one of the four
    /// included).
    fn release(
        &self,
        py: Python<'_>,
        fence: &Bound<'_, PyAny>,
        next_status: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (Some(fence), Some(to)) = (plain_token(fence), plain_text(next_status)) else { return Ok(None) };
        let Ok(next_status) = heart_fleet_core::ops::ReleaseTo::parse(to) else { return Ok(None) };
        if let Some(store) = self.blocking_store() {
            return self.through(py, store, bridge::Call::Release { fence: fence.into_owned(), next_status });
        }
        let outcome = locked(&self.inner)?.release_typed(&fence, to);
        typed(py, outcome, self.sink.get(), |f| record(py, FencedOutcome::from_core(py, FencedCore::Row(f))?))
    }

    /// `acquire` started for the asyncio API with plain arguments (as for
    /// [`NativeFleet::acquire`]) and driven through the bound store while it answers without
    /// suspending ([`NativeFleet::start_driven`]): the `AcquireResult` once done, else the
    /// operation to drive on, whose [`NativeOp::result`] is the `AcquireResult`; `None` for
    /// any other argument (the package's checked path answers).
    fn start_acquire(
        &self,
        py: Python<'_>,
        run_id: &Bound<'_, PyAny>,
        owner: &Bound<'_, PyAny>,
        ttl_seconds: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (Some(run_id), Some(owner), Some(ttl_seconds)) =
            (plain_text(run_id), plain_text(owner), plain_int(ttl_seconds))
        else {
            return Ok(None);
        };
        self.start_driven(py, bridge::Call::Acquire { run_id: run_id.to_owned(), owner: owner.to_owned(), ttl_seconds })
            .map(Some)
    }

    /// `try_renew` started as [`NativeFleet::start_acquire`] starts `acquire`: the
    /// `FencedOutcome`, or the operation whose result it is, or `None` as for
    /// [`NativeFleet::renew`].
    fn start_renew(
        &self,
        py: Python<'_>,
        fence: &Bound<'_, PyAny>,
        ttl_seconds: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (Some(fence), Some(ttl_seconds)) = (plain_token(fence), plain_int(ttl_seconds)) else { return Ok(None) };
        if !(1..=heart_fleet_core::ops::MAX_TTL_SECONDS).contains(&ttl_seconds) {
            return Ok(None); // the checked path names the package's argument
        }
        self.start_driven(py, bridge::Call::Renew { fence: fence.into_owned(), ttl_seconds }).map(Some)
    }

    /// `try_release` started as [`NativeFleet::start_acquire`] starts `acquire`: the
    /// `FencedOutcome`, or the operation whose result it is, or `None` as for
    /// [`NativeFleet::release`].
    fn start_release(
        &self,
        py: Python<'_>,
        fence: &Bound<'_, PyAny>,
        next_status: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (Some(fence), Some(to)) = (plain_token(fence), plain_text(next_status)) else { return Ok(None) };
        let Ok(next_status) = heart_fleet_core::ops::ReleaseTo::parse(to) else { return Ok(None) };
        self.start_driven(py, bridge::Call::Release { fence: fence.into_owned(), next_status }).map(Some)
    }

    /// `verify_fence` started as [`NativeFleet::start_acquire`] starts `acquire`: whether
    /// the token is live, or the operation whose result that is, or `None` as for
    /// [`NativeFleet::renew`].
    fn start_verify_fence(&self, py: Python<'_>, fence: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        let Some(fence) = plain_token(fence) else { return Ok(None) };
        self.start_driven(py, bridge::Call::VerifyFence { fence: fence.into_owned() }).map(Some)
    }

    /// `verify_fence` as [`NativeFleet::acquire`] runs `acquire`: whether the token is live,
    /// or `None` as for [`NativeFleet::renew`].
    fn verify_fence(&self, py: Python<'_>, fence: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
        let Some(fence) = plain_token(fence) else { return Ok(None) };
        if let Some(store) = self.blocking_store() {
            return self.through(py, store, bridge::Call::VerifyFence { fence: fence.into_owned() });
        }
        let outcome = locked(&self.inner)?.verify_fence_typed(&fence);
        typed(py, outcome, self.sink.get(), |live| Ok(PyBool::new(py, live).to_owned().into_any().unbind()))
    }

    /// The 13 counters, in the reference's order.
    fn metrics(&self) -> PyResult<Vec<u64>> {
        let m = locked(&self.inner)?.metrics();
        Ok(vec![
            m.acquire_attempts,
            m.acquire_wins,
            m.acquire_collisions,
            m.renews,
            m.renew_failures,
            m.releases,
            m.release_failures,
            m.reclaims,
            m.quarantines,
            m.fence_verifications,
            m.fence_rejections,
            m.effect_commits,
            m.effect_dedupes,
        ])
    }

    /// Takes back `delta` (the 13 counters, in the reference's order): what an operation
    /// counted for writes its store rolled back with their receipts (a held transaction).
    fn uncount(&self, delta: Vec<u64>) -> PyResult<()> {
        use heart_fleet_core::metrics::{Counter, HeartMetrics};
        if delta.len() != Counter::ALL.len() {
            return Err(PyTypeError::new_err("uncount: the 13 counters"));
        }
        let mut m = HeartMetrics::default();
        for (c, v) in Counter::ALL.into_iter().zip(delta) {
            m.set(c, v);
        }
        locked(&self.inner)?.uncount(&m);
        Ok(())
    }

    /// The counters in the Prometheus text exposition format.
    fn prometheus(&self) -> PyResult<String> {
        Ok(locked(&self.inner)?.prometheus())
    }

    /// The receipts kept so far (JSON array).
    fn receipts_json(&self) -> PyResult<String> {
        Ok(locked(&self.inner)?.receipts_json())
    }

    /// How many receipts are kept.
    fn receipt_count(&self) -> PyResult<usize> {
        Ok(locked(&self.inner)?.receipt_count())
    }

    /// The Python objects the fleet holds (its sink and scheduler, its bound store's method
    /// and `settle`s), for the garbage collector: a store or a sink that refers back to its
    /// `HeartFleet` makes a cycle through this object, which the collector can then free
    /// (by clearing the `HeartFleet`'s slots; nothing here needs clearing).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some((sink, schedule)) = self.sink.get() {
            visit.call(sink)?;
            visit.call(schedule)?;
        }
        if let Some(store) = self.store.get() {
            visit.call(&store.method)?;
            visit.call(&store.settle)?;
            visit.call(&store.settle_awaited)?;
        }
        Ok(())
    }
}

impl NativeFleet {
    /// The bound store, when the blocking API may call it (a blocking store: it has the
    /// blocking `settle`).
    fn blocking_store(&self) -> Option<(&BoundStore, &Py<PyAny>)> {
        let store = self.store.get()?;
        Some((store, store.settle.as_ref()?))
    }

    /// Starts `call` with its result kept as the core's value, hands over the receipts that
    /// produced, and gives the operation to drive.
    fn start(&self, py: Python<'_>, call: bridge::Call) -> PyResult<NativeOp> {
        let (op, fleet) = {
            let fleet = locked(&self.inner)?;
            (fleet.start_kept(call), fleet.clone())
        };
        let sink = self.sink.get().map(|(s, d)| (s.clone_ref(py), d.clone_ref(py)));
        hand_over(py, &fleet, sink.as_ref())?;
        Ok(NativeOp::new(op, fleet, sink))
    }

    /// Starts `call` and drives it through `store` with its blocking `settle`, as
    /// `NativeOp.drive_store` does: its result (its error raised), or the operation when it
    /// needs more than the store. The operation becomes a Python object only then.
    fn through(
        &self,
        py: Python<'_>,
        (store, settle): (&BoundStore, &Py<PyAny>),
        call: bridge::Call,
    ) -> PyResult<Option<Py<PyAny>>> {
        let op = self.start(py, call)?;
        op.answer_store(py, store.method.bind(py), settle.bind(py), store.typed, Some(&store.spare))?;
        match op.finished(py)? {
            Some(result) => Ok(Some(result)),
            None => Ok(Some(Py::new(py, op)?.into_any())),
        }
    }

    /// Starts `call` for the asyncio API and, with a store bound, answers its requests as
    /// `drive_store_async` does while the store answers without suspending: the result once
    /// done (its error raised), else the operation, which keeps the store call that
    /// suspended, or what driving it raised, for the package's loop to take up
    /// (`drive_store_async` gives it first).
    fn start_driven(&self, py: Python<'_>, call: bridge::Call) -> PyResult<Py<PyAny>> {
        let op = self.start(py, call)?;
        if let Some(store) = self.store.get() {
            match op.drive_async(
                py,
                store.method.bind(py),
                store.settle_awaited.bind(py),
                store.typed,
                Some(&store.spare),
            ) {
                Ok(None) => {
                    if let Some(result) = op.finished(py)? {
                        return Ok(result);
                    }
                }
                Ok(Some(suspended)) => *locked(&op.left)? = Some(Ok(suspended)),
                Err(e) => *locked(&op.left)? = Some(Err(e)),
            }
        }
        Ok(Py::new(py, op)?.into_any())
    }
}

/// A record as the Python object it becomes.
fn record<T: pyo3::PyClass + Into<pyo3::PyClassInitializer<T>>>(py: Python<'_>, value: T) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, value)?.into_any())
}

/// A `str` without a lone surrogate, as the core takes it.
fn plain_text<'a>(v: &'a Bound<'_, PyAny>) -> Option<&'a str> {
    v.cast::<PyString>().ok()?.to_str().ok()
}

/// An `int` (not a `bool`) that fits 64 bits.
pub(crate) fn plain_int(v: &Bound<'_, PyAny>) -> Option<i64> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return None;
    }
    v.extract().ok()
}

/// A [`FencingToken`] whose fields are plain values, as the core's token (borrowed when the
/// record was made from one).
fn plain_token<'a>(v: &'a Bound<'_, PyAny>) -> Option<Cow<'a, heart_fleet_core::FencingToken>> {
    v.cast::<FencingToken>().ok()?.get().to_core(v.py())
}

/// A typed outcome for Python: `None` without a memory store; else the receipts handed to
/// the fleet's sink (when it has receipts for one), then the error raised as its exception
/// or the converted result.
fn typed<T, R>(
    py: Python<'_>,
    outcome: Option<TypedOutcome<T>>,
    sink: Option<&(Py<PyAny>, Py<PyAny>)>,
    convert: impl FnOnce(T) -> PyResult<R>,
) -> PyResult<Option<R>> {
    let Some((result, receipts)) = outcome else { return Ok(None) };
    if let Some((sink, schedule)) = sink {
        for r in receipts {
            let record = Py::new(py, HeartReceipt::from_core(r))?.into_any();
            deliver(sink.bind(py), schedule.bind(py), record.bind(py))?;
        }
    }
    Ok(Some(convert(result.map_err(py_err)?)?))
}

/// Hands one receipt to a sink as the reference does: a sink's `Exception` is swallowed
/// (anything else, a `KeyboardInterrupt` say, goes on), and what it returns other than
/// `None` goes to `schedule` (the package runs an awaitable in the background).
fn deliver(sink: &Bound<'_, PyAny>, schedule: &Bound<'_, PyAny>, receipt: &Bound<'_, PyAny>) -> PyResult<()> {
    match sink.call1((receipt,)) {
        Ok(out) if out.is_none() => Ok(()),
        Ok(out) => schedule.call1((out,)).map(drop),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyException>(sink.py()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Hands the receipts `fleet` has waiting to the sink, in order, as records (a fleet with a
/// sink takes them apart from the steps). Called after every call that begins or resumes an
/// operation, without the fleet's lock held: a sink may call the fleet.
fn hand_over(py: Python<'_>, fleet: &bridge::BridgeFleet, sink: Option<&(Py<PyAny>, Py<PyAny>)>) -> PyResult<()> {
    let Some((sink, schedule)) = sink else { return Ok(()) };
    for r in fleet.take_receipts() {
        let record = Py::new(py, HeartReceipt::from_core(r))?.into_any();
        deliver(sink.bind(py), schedule.bind(py), record.bind(py))?;
    }
    Ok(())
}

/// Hands `receipts` to `sink` in order, each as [`deliver`] does: the package's one delivery
/// rule, for the receipts of operations its own loop drives.
#[pyfunction]
fn deliver_receipts(
    sink: &Bound<'_, PyAny>,
    schedule: &Bound<'_, PyAny>,
    receipts: Vec<Bound<'_, PyAny>>,
) -> PyResult<()> {
    receipts.iter().try_for_each(|r| deliver(sink, schedule, r))
}

/// One operation waiting for Python. Resume it with the answer to its current need; every
/// resume returns the next step (JSON text).
#[pyclass(module = "heart_fleet._native", frozen)]
pub struct NativeOp {
    inner: Mutex<bridge::BridgeOp>,
    /// The fleet that began it, whose receipts each resume hands to `sink`.
    fleet: bridge::BridgeFleet,
    sink: Option<(Py<PyAny>, Py<PyAny>)>,
    /// What driving it when it started left for the package's loop: the store call that
    /// suspended, or what it raised (see [`NativeFleet::start_driven`]).
    left: Mutex<Option<PyResult<Suspended>>>,
}

impl NativeOp {
    fn new(op: bridge::BridgeOp, fleet: bridge::BridgeFleet, sink: Option<(Py<PyAny>, Py<PyAny>)>) -> NativeOp {
        NativeOp { inner: Mutex::new(op), fleet, sink, left: Mutex::new(None) }
    }

    /// Resumes the operation with `answer`, then hands over the receipts that produced.
    fn resume(&self, py: Python<'_>, answer: impl FnOnce(&mut bridge::BridgeOp) -> String) -> PyResult<String> {
        let step = answer(&mut *locked(&self.inner)?);
        hand_over(py, &self.fleet, self.sink.as_ref())?;
        Ok(step)
    }

    /// The request of the current need as the store takes it (a `StoreRequest` handed out
    /// when `typed`, else its text), or `None` when the operation is done or needs something
    /// other than the store. A typed request goes out in the object kept in `spare`, when
    /// there is one.
    fn next_request<'py>(
        &self,
        py: Python<'py>,
        typed: bool,
        spare: Option<&Spare>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut op = locked(&self.inner)?;
        if op.is_done() || op.store_request().is_none() {
            return Ok(None);
        }
        // Typed, the request is handed out (the check above says there is one).
        let Some(mut taken) = (if typed { op.take_store_request() } else { None }) else {
            return Ok(Some(PyString::new(py, op.request()).into_any()));
        };
        if let Some(shell) = spare.and_then(|s| locked(s).ok()?.take()) {
            match StoreRequest::refill(shell.bind(py), taken) {
                None => return Ok(Some(shell.into_bound(py).into_any())),
                Some(back) => taken = back,
            }
        }
        Ok(Some(Bound::new(py, StoreRequest::from_core(taken))?.into_any()))
    }

    /// Answers the store requests with `method` while the operation needs the store (see
    /// [`NativeOp::drive_store`]).
    fn answer_store(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        settle: &Bound<'_, PyAny>,
        typed: bool,
        spare: Option<&Spare>,
    ) -> PyResult<()> {
        while let Some(request) = self.next_request(py, typed, spare)? {
            let outcome = method.call1((&request,));
            self.give_back(&request, spare)?;
            self.resume_with(py, method, settle, outcome)?;
        }
        Ok(())
    }

    /// Hands a typed request back to the operation once its store is done with it, when
    /// nothing else holds it (the store kept no reference): the operation's next of its kind
    /// refits it instead of building it anew, and the emptied object is kept in `spare`,
    /// when given, for the fleet's next request.
    fn give_back(&self, request: &Bound<'_, PyAny>, spare: Option<&Spare>) -> PyResult<()> {
        if let Ok(typed) = request.cast::<StoreRequest>()
            && let Some(core) = StoreRequest::take_unshared(typed)
        {
            locked(&self.inner)?.give_back_request(core);
            if let Some(spare) = spare {
                *locked(spare)? = Some(typed.clone().unbind());
            }
        }
        Ok(())
    }

    /// [`NativeOp::drive_store_async`]'s loop, its requests handed out in `spare` when there
    /// is one (see [`NativeOp::next_request`]).
    fn drive_async(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        settle: &Bound<'_, PyAny>,
        typed: bool,
        spare: Option<&Spare>,
    ) -> PyResult<Option<Suspended>> {
        let coroutine = COROUTINE_TYPE.import(py, "types", "CoroutineType")?;
        loop {
            let Some(request) = self.next_request(py, typed, spare)? else { return Ok(None) };
            let called = Instant::now();
            let outcome = match method.call1((&request,)) {
                Ok(v) if v.get_type().is(coroutine) => match send_none(&v) {
                    Ok(Sent::Yielded(signal)) => {
                        return Ok(Some((v.unbind(), signal.unbind(), called.elapsed().as_secs_f64())));
                    }
                    Ok(Sent::Returned(answer)) => Ok(answer),
                    Err(e) => Err(e),
                },
                Ok(v)
                    if !v.is_instance_of::<StoreAnswer>()
                        && !v.is_instance_of::<PyString>()
                        && ISAWAITABLE.import(py, "inspect", "isawaitable")?.call1((&v,))?.is_truthy()? =>
                {
                    return Ok(Some((v.unbind(), py.None(), called.elapsed().as_secs_f64())));
                }
                other => other,
            };
            self.give_back(&request, spare)?;
            self.resume_with(py, method, settle, outcome)?;
        }
    }

    /// Resumes the operation with what its store's method gave: a `StoreAnswer` or text as
    /// it is, anything else or an `Exception` as `settle` says (see `drive_store`); what is not
    /// an `Exception` propagates with nothing recorded.
    fn resume_with(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        settle: &Bound<'_, PyAny>,
        outcome: PyResult<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let settled = match outcome {
            Ok(answer) => {
                if let Ok(typed) = answer.cast::<StoreAnswer>() {
                    let answer = StoreAnswer::take_or_copy(typed);
                    self.resume(py, |op| op.resume_store_answer(answer))?;
                    return Ok(());
                }
                if let Ok(text) = answer.cast::<PyString>() {
                    self.resume_store(py, text.to_str()?)?;
                    return Ok(());
                }
                settle.call1((method, answer, false))?
            }
            Err(e) if e.is_instance_of::<PyException>(py) => settle.call1((method, e.value(py), true))?,
            Err(e) => return Err(e),
        };
        let (failure, answer): (Option<String>, String) = settled.extract()?;
        self.resume(py, |op| match &failure {
            None => op.resume_store(&answer),
            Some(code) => op.resume_store_failure(code, &answer),
        })?;
        Ok(())
    }
}

/// What a coroutine did when sent `None`: stopped at an `await` with a signal for its loop,
/// or returned.
enum Sent<'py> {
    Yielded(Bound<'py, PyAny>),
    Returned(Bound<'py, PyAny>),
}

/// `coroutine.send(None)`, as `await` runs a coroutine's step, through `PyIter_Send`: a
/// coroutine that returns gives its value without a `StopIteration` made and caught (most of
/// what answering an asyncio store's request cost, since its `execute` rarely suspends).
fn send_none<'py>(coroutine: &Bound<'py, PyAny>) -> PyResult<Sent<'py>> {
    let py = coroutine.py();
    let mut out: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: both arguments are live objects the GIL (`py`) keeps alive for the call;
    // PyIter_Send only borrows them. It writes a new reference to `out` when it answers
    // PYGEN_NEXT or PYGEN_RETURN, and sets the error indicator when it answers PYGEN_ERROR.
    let sent = unsafe { pyo3::ffi::PyIter_Send(coroutine.as_ptr(), pyo3::ffi::Py_None(), &mut out) };
    match sent {
        pyo3::ffi::PySendResult::PYGEN_ERROR => Err(PyErr::fetch(py)),
        // SAFETY: `out` is the new reference PyIter_Send handed over (non-null on these two).
        pyo3::ffi::PySendResult::PYGEN_NEXT => Ok(Sent::Yielded(unsafe { Bound::from_owned_ptr(py, out) })),
        pyo3::ffi::PySendResult::PYGEN_RETURN => Ok(Sent::Returned(unsafe { Bound::from_owned_ptr(py, out) })),
    }
}

/// A store call that suspended: `(awaitable, signal, seconds since the call)`
/// ([`NativeOp::drive_store_async`]).
type Suspended = (Py<PyAny>, Py<PyAny>, f64);

/// `types.CoroutineType`, looked up once.
static COROUTINE_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `inspect.isawaitable`, looked up once: an answer that is awaitable in any of the ways
/// `await` accepts is awaited, as `run_async` awaits it.
static ISAWAITABLE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

#[pymethods]
impl NativeOp {
    /// The current step (JSON text): the need, or once done, the final step.
    fn need(&self) -> PyResult<String> {
        Ok(locked(&self.inner)?.need().to_owned())
    }

    /// The store request of the current need (StoreRequest JSON text; empty otherwise).
    fn request(&self) -> PyResult<String> {
        Ok(locked(&self.inner)?.request().to_owned())
    }

    /// The store's answer (StoreAnswer JSON text).
    fn resume_store(&self, py: Python<'_>, answer: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_store(answer))
    }

    /// The store request of the current need as a `StoreRequest`, what a store object's
    /// `execute` is handed: taken out of the operation (`None` when the need is not a store
    /// request, or it was taken).
    fn take_store_request(&self) -> PyResult<Option<StoreRequest>> {
        Ok(locked(&self.inner)?.take_store_request().map(StoreRequest::from_core))
    }

    /// The store's answer as a Rust store gave it (a `StoreAnswer`).
    fn resume_store_answer(&self, py: Python<'_>, answer: &StoreAnswer) -> PyResult<String> {
        self.resume(py, |op| op.resume_store_answer(answer.core.get().clone()))
    }

    /// The store failed: the operation ends with `store-unavailable`.
    fn resume_store_error(&self, py: Python<'_>, message: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_store_error(message))
    }

    /// The effect ledger's answer.
    fn resume_recorded(&self, py: Python<'_>, first: bool) -> PyResult<String> {
        self.resume(py, |op| op.resume_recorded(first))
    }

    /// The effect ledger failed.
    fn resume_recorded_error(&self, py: Python<'_>, message: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_recorded_error(message))
    }

    /// The effect's result (JSON text).
    fn resume_effect(&self, py: Python<'_>, value: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_effect(value))
    }

    /// The effect raised.
    fn resume_effect_error(&self, py: Python<'_>, message: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_effect_error(message))
    }

    /// The probe's verdict (JSON text).
    fn resume_probe(&self, py: Python<'_>, verdict: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_probe(verdict))
    }

    /// The probe raised.
    fn resume_probe_error(&self, py: Python<'_>, message: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_probe_error(message))
    }

    /// The result of a finished operation started by one of the fleet's `start_*` methods, as
    /// the package's record (`AcquireResult`, `FencedOutcome`) or a `bool`. Taken once; an
    /// operation that ended in an error raises it (the exception of its code).
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        use bridge::KeptResult;
        let kept = {
            let mut op = locked(&self.inner)?;
            match op.take_result() {
                Some(kept) => kept,
                None => {
                    return Err(op.failure().map_or_else(
                        || coded(ErrorCode::InvalidState, "the operation has no result: not finished, or taken"),
                        |e| coded(e.code, &e.message),
                    ));
                }
            }
        };
        Ok(match kept {
            KeptResult::Acquired(r) => Py::new(py, AcquireResult::from_core(py, r)?)?.into_any(),
            KeptResult::Renewed(f) => Py::new(py, FencedOutcome::from_core(py, FencedCore::Token(f))?)?.into_any(),
            KeptResult::Released(f) => Py::new(py, FencedOutcome::from_core(py, FencedCore::Row(f))?)?.into_any(),
            KeptResult::Verified(live) => PyBool::new(py, live).to_owned().into_any().unbind(),
        })
    }

    /// The store's answer was not one (`store-protocol`), or the store failed with another
    /// code (`store-unavailable` unless it is `invalid-input`): the operation ends with it.
    fn resume_store_failure(&self, py: Python<'_>, code: &str, message: &str) -> PyResult<String> {
        self.resume(py, |op| op.resume_store_failure(code, message))
    }

    /// Answers the operation's store requests with `method(request)` until it is done or
    /// needs something else, and gives that step (JSON text): the blocking loop for a store
    /// object, without a Python frame per step. With `typed`, `request` is a `StoreRequest`
    /// (a store with `execute`), else its JSON text (`execute_json`). An answer that is a
    /// `StoreAnswer` or text resumes the operation as it is; for anything else, or an
    /// `Exception` raised, `settle(method, outcome, raised)` (the package's) says what the
    /// operation is resumed with: `(None, answer text)`, or `(code, message)` when the store
    /// failed or its answer was not one (see `resume_store_failure`). What is not an
    /// `Exception` (a `KeyboardInterrupt`, say) propagates with nothing recorded: the
    /// operation stays unfinished, its request handed out (drop it; the package does). The
    /// operation's lock is not held while `method` runs.
    fn drive_store(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        settle: &Bound<'_, PyAny>,
        typed: bool,
    ) -> PyResult<String> {
        self.answer_store(py, method, settle, typed, None)?;
        Ok(locked(&self.inner)?.need().to_owned())
    }

    /// The result once the operation is done, as [`NativeOp::result`] gives it (its error
    /// raised); `None` while it needs something.
    fn finished(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !locked(&self.inner)?.is_done() {
            return Ok(None);
        }
        self.result(py).map(Some)
    }

    /// [`NativeOp::drive_store`] for an asyncio store: answers the requests its store answers
    /// without suspending (a `StoreAnswer`, text, or a coroutine that returns at its first
    /// step, run here as `await` would run it), and stops at the first one that suspends:
    /// `(awaitable, signal, seconds)`, the store's coroutine run to its first suspension
    /// (which gave `signal`) or another awaitable (`signal` None), and the seconds since the
    /// store was called (its deadline counts from the call). The caller awaits it and resumes
    /// the operation. `None` once the operation needs something other than the store. What
    /// `settle` gets and what propagates are as for `drive_store`. An operation its
    /// `start_` method left suspended, or whose driving raised, gives that first.
    fn drive_store_async(
        &self,
        py: Python<'_>,
        method: &Bound<'_, PyAny>,
        settle: &Bound<'_, PyAny>,
        typed: bool,
    ) -> PyResult<Option<Suspended>> {
        if let Some(left) = locked(&self.left)?.take() {
            return left.map(Some);
        }
        self.drive_async(py, method, settle, typed, None)
    }

    /// Whether the operation finished.
    fn is_done(&self) -> PyResult<bool> {
        Ok(locked(&self.inner)?.is_done())
    }
}

/// The core's memory store: an injectable clock (milliseconds since the Unix epoch), runs,
/// intents, the dispatch log and instances, with injectable failures for tests.
#[pyclass(module = "heart_fleet._native", frozen)]
pub struct NativeMemoryStore {
    inner: bridge::BridgeMemoryStore,
}

#[pymethods]
impl NativeMemoryStore {
    /// A store whose clock starts at `now_ms`.
    #[new]
    fn new(now_ms: i64) -> NativeMemoryStore {
        NativeMemoryStore { inner: bridge::BridgeMemoryStore::new(now_ms) }
    }

    /// The store seeded by a conformance scenario (JSON text).
    #[staticmethod]
    fn from_scenario(scenario: &str) -> PyResult<NativeMemoryStore> {
        bridge::BridgeMemoryStore::from_scenario(scenario).map(|inner| NativeMemoryStore { inner }).map_err(py_err)
    }

    /// The clock.
    fn now_ms(&self) -> PyResult<i64> {
        self.inner.now_ms().map_err(py_err)
    }

    /// Sets the clock.
    fn set_now(&self, now_ms: i64) -> PyResult<()> {
        self.inner.set_now(now_ms).map_err(py_err)
    }

    /// Moves the clock by `ms`.
    fn advance(&self, ms: i64) -> PyResult<()> {
        self.inner.advance(ms).map_err(py_err)
    }

    /// Inserts a run (a full row as JSON text).
    fn insert(&self, run: &str) -> PyResult<()> {
        self.inner.insert(run).map_err(py_err)
    }

    /// Inserts an instance row (JSON text).
    fn insert_instance(&self, row: &str) -> PyResult<()> {
        self.inner.insert_instance(row).map_err(py_err)
    }

    /// Inserts an intent row (JSON text).
    fn insert_intent(&self, row: &str) -> PyResult<()> {
        self.inner.insert_intent(row).map_err(py_err)
    }

    /// Lets `after` requests named `request` through, then fails the next `times`.
    fn fail_after(&self, request: &str, after: u32, times: u32) -> PyResult<()> {
        self.inner.fail_after(request, after, times).map_err(py_err)
    }

    /// Executes one `StoreRequest` as it is and returns its `StoreAnswer`, without JSON.
    fn execute<'py>(&self, py: Python<'py>, request: &StoreRequest) -> PyResult<Bound<'py, StoreAnswer>> {
        let answer = self.inner.execute(&request.core.get()).map_err(py_err)?;
        StoreAnswer::object(py, answer)
    }

    /// Executes one StoreRequest (JSON text) and returns the StoreAnswer (JSON text).
    fn execute_json(&self, request: &str) -> PyResult<String> {
        self.inner.execute_json(request).map_err(py_err)
    }

    /// One run (JSON), or `null`.
    fn run_json(&self, run_id: &str) -> PyResult<String> {
        self.inner.run_json(run_id).map_err(py_err)
    }

    /// Every run (JSON array).
    fn runs_json(&self) -> PyResult<String> {
        self.inner.runs_json().map_err(py_err)
    }

    /// Every intent (JSON array).
    fn intents_json(&self) -> PyResult<String> {
        self.inner.intents_json().map_err(py_err)
    }

    /// The dispatch log (JSON array).
    fn dispatch_log_json(&self) -> PyResult<String> {
        self.inner.dispatch_log_json().map_err(py_err)
    }

    /// Every instance (JSON array).
    fn instances_json(&self) -> PyResult<String> {
        self.inner.instances_json().map_err(py_err)
    }

    /// How many requests the store answered (or failed).
    fn request_count(&self) -> PyResult<i64> {
        self.inner.request_count().map_err(py_err)
    }
}

/// The lease state of one `execute_with_lease` (heartbeat schedule, newest token, lost cause).
#[pyclass(module = "heart_fleet._native", frozen)]
pub struct NativeLeaseSession {
    inner: Mutex<bridge::BridgeSession>,
}

#[pymethods]
impl NativeLeaseSession {
    /// A session for a lease of `ttl_seconds` renewed every `renew_every_ms` (default: the
    /// reference's cadence). Bad values raise `InvalidInputError`.
    #[staticmethod]
    #[pyo3(signature = (ttl_seconds, renew_every_ms=None))]
    fn create(ttl_seconds: i64, renew_every_ms: Option<i64>) -> PyResult<NativeLeaseSession> {
        bridge::BridgeSession::new(ttl_seconds, renew_every_ms)
            .map(|s| NativeLeaseSession { inner: Mutex::new(s) })
            .map_err(py_err)
    }

    /// The heartbeat period in milliseconds.
    fn interval_ms(&self) -> PyResult<i64> {
        Ok(locked(&self.inner)?.interval_ms())
    }

    /// Records the acquired token (JSON) at host time `started_ms`.
    fn on_acquired(&self, fence: &str, started_ms: i64) -> PyResult<()> {
        locked(&self.inner)?.on_acquired(fence, started_ms).map_err(py_err)
    }

    /// The newest token (JSON), if any.
    fn fence_json(&self) -> PyResult<Option<String>> {
        Ok(locked(&self.inner)?.fence_json())
    }

    /// Why the lease was lost, once it was.
    fn lost(&self) -> PyResult<Option<String>> {
        Ok(locked(&self.inner)?.lost().map(str::to_owned))
    }

    /// Whether a beat should renew now.
    fn should_renew(&self) -> PyResult<bool> {
        Ok(locked(&self.inner)?.should_renew())
    }

    /// Records a renew that started at `started_ms`, given its final step (JSON); returns
    /// the cause when this renew lost the lease.
    fn on_renewed(&self, done: &str, started_ms: i64) -> PyResult<Option<String>> {
        locked(&self.inner)?.on_renewed(done, started_ms).map(|c| c.map(str::to_owned)).map_err(py_err)
    }

    /// Loses the lease (`store-unavailable`) if the held expiry passed at `now_ms` without a
    /// successful renew; returns the cause when it did.
    fn check_expiry(&self, now_ms: i64) -> PyResult<Option<String>> {
        Ok(locked(&self.inner)?.check_expiry(now_ms).map(str::to_owned))
    }

    /// Whether the final release is worth sending.
    fn should_release(&self) -> PyResult<bool> {
        Ok(locked(&self.inner)?.should_release())
    }
}

/// Where execute-with-lease leaves the run once the work is done: `completed` (`ready` with
/// `release_to_ready`) when it succeeded, `failed` when it raised.
#[pyfunction]
fn release_status(work_succeeded: bool, release_to_ready: bool) -> &'static str {
    bridge::release_status(work_succeeded, release_to_ready)
}

/// The heartbeat cadence: `renew_every_ms` or `max(1000, ttl_seconds * 1000 / 2)`.
#[pyfunction]
#[pyo3(signature = (ttl_seconds, renew_every_ms=None))]
fn heartbeat_interval(ttl_seconds: i64, renew_every_ms: Option<i64>) -> i64 {
    bridge::heartbeat_interval(ttl_seconds, renew_every_ms)
}

/// `is_lease_expired` at a clock reading (milliseconds; `None`: no expiry): the core's one
/// expiry rule.
#[pyfunction]
#[pyo3(signature = (expires_at_ms, now_ms))]
fn lease_expired_ms(expires_at_ms: Option<f64>, now_ms: f64) -> bool {
    bridge::lease_expired_ms(expires_at_ms, now_ms)
}

/// `can_acquire` at a clock reading: `ready`, or a held status with an expired lease.
#[pyfunction]
#[pyo3(signature = (status, expires_at_ms, now_ms))]
fn can_acquire_ms(status: &str, expires_at_ms: Option<f64>, now_ms: f64) -> bool {
    bridge::can_acquire_ms(status, expires_at_ms, now_ms)
}

/// `is_instance_expired` at a clock reading: `dead`, or silent for strictly more than `ttl_ms`.
#[pyfunction]
fn instance_expired_ms(status: &str, last_heartbeat_ms: f64, now_ms: f64, ttl_ms: f64) -> bool {
    bridge::instance_expired_ms(status, last_heartbeat_ms, now_ms, ttl_ms)
}

/// The reference's in-process effect ledger (the core's `MemoryEffectLedger`): each
/// `(run_id, effect_key)` is recorded once. Lost on restart; safe to share between threads.
#[pyclass(module = "heart_fleet._native", frozen)]
pub struct MemoryEffectLedger {
    inner: Mutex<heart_fleet_core::MemoryEffectLedger>,
}

#[pymethods]
impl MemoryEffectLedger {
    #[new]
    fn new() -> MemoryEffectLedger {
        MemoryEffectLedger { inner: Mutex::new(heart_fleet_core::MemoryEffectLedger::default()) }
    }

    /// `True` the first time `(run_id, effect_key)` is recorded, `False` afterwards. Each is
    /// a non-empty `str` without a lone surrogate (`InvalidTypeError` / `InvalidInputError`).
    fn record_once(&self, run_id: &Bound<'_, PyAny>, effect_key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let (run_id, effect_key) = (checked_text("run_id", run_id)?, checked_text("effect_key", effect_key)?);
        Ok(locked(&self.inner)?.record_once(run_id, effect_key))
    }
}

/// A non-empty `str` without a lone surrogate, or the package's coded error naming `name`.
fn checked_text<'a>(name: &str, v: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let Ok(s) = v.cast::<PyString>() else {
        return Err(typed_error(&format!("{name} must be a str, got {}", describe(v))));
    };
    match s.to_str() {
        Ok("") => Err(coded(ErrorCode::InvalidInput, &format!("{name} must be a non-empty string"))),
        Ok(text) => Ok(text),
        Err(_) => Err(coded(
            ErrorCode::InvalidInput,
            &format!("{name} must be a well-formed string, got one with a lone surrogate (no UTF-8 form)"),
        )),
    }
}

/// A value for an error message, as the package describes one: its type and its `repr`, cut at 60 characters.
fn describe(v: &Bound<'_, PyAny>) -> String {
    let kind = v.get_type().name().map(|n| n.to_string()).unwrap_or_default();
    let text = v.repr().map(|r| r.to_string()).unwrap_or_default();
    let text =
        if text.chars().count() > 60 { format!("{}...", text.chars().take(57).collect::<String>()) } else { text };
    format!("{kind} {text}")
}

/// The package's `InvalidTypeError` (a `TypeError` with code `invalid-input`).
fn typed_error(message: &str) -> PyErr {
    Python::attach(|py| {
        match py
            .import("heart_fleet.errors")
            .and_then(|m| m.getattr("InvalidTypeError"))
            .and_then(|c| c.call1((message,)))
        {
            Ok(exc) => PyErr::from_value(exc),
            Err(_) => PyTypeError::new_err(format!("[invalid-input] {message}")),
        }
    })
}

/// The fleet configuration of a conformance scenario (JSON `{"maxRetries": n | null}`).
#[pyfunction]
fn scenario_config(scenario: &str) -> PyResult<String> {
    bridge::scenario_config(scenario).map_err(py_err)
}

/// Replays a conformance scenario on the native Rust engine; returns the replay (JSON).
#[pyfunction]
fn native_replay(py: Python<'_>, scenario: &str) -> PyResult<String> {
    py.detach(|| bridge::native_replay(scenario)).map_err(py_err)
}

/// A store request that is not part of an operation (JSON text).
#[pyfunction]
fn store_request(kind: &str, args: &str) -> PyResult<String> {
    bridge::store_request(kind, args).map_err(py_err)
}

/// The contract's constants (JSON; `bridge::contract_json` in the core): error codes, run
/// statuses, channels, limits, operation names, defaults, the error code of each lost cause
/// and why execute-with-lease did not run the work, for Python to take instead of copying.
#[pyfunction]
fn contract() -> String {
    bridge::contract_json()
}

/// A PostgreSQL store's deadlines (JSON: `statementTimeoutMs`, `maxStatementTimeoutMs`,
/// `connectTimeoutMs`, `cancelGraceMs`), the same in every driver.
#[pyfunction]
fn postgres_deadlines() -> String {
    bridge::postgres_deadlines_json()
}

/// The server-side `statement_timeout` for a statement deadline of `client_ms` (a fifth
/// shorter, by at most 100 ms): the core's `sql::deadlines::server_statement_timeout_ms`.
#[pyfunction]
fn server_statement_timeout_ms(client_ms: u64) -> u64 {
    heart_fleet_core::sql::deadlines::server_statement_timeout_ms(client_ms)
}

/// The row `id` of `table` (`agent_runs` or `agent_instances`) with every other column at the
/// value a partial row leaves it (JSON; `at`: ISO text): what `MemoryLeaseStore`'s inserts
/// fill a row in from.
#[pyfunction]
fn seeded_row_json(table: &str, id: &str, at: &str) -> PyResult<String> {
    bridge::seeded_row_json(table, id, at).map_err(py_err)
}

/// What a send records as its evidence when its result cannot be stored as JSON (JSON text).
#[pyfunction]
fn unstorable_evidence(kind: &str, reason: &str) -> String {
    bridge::unstorable_evidence_json(kind, reason)
}

/// The schema migrations of a dialect (JSON `[[name, sql], ...]`).
#[pyfunction]
fn sql_migration_plan(dialect: &str) -> PyResult<String> {
    bridge::sql_migration_plan(dialect).map_err(py_err)
}

/// The insert of one receipt (JSON) into `heart_receipts`, as `{sql, params}` JSON.
#[pyfunction]
fn sql_receipt_insert(dialect: &str, receipt: &str) -> PyResult<String> {
    bridge::sql_receipt_insert(dialect, receipt).map_err(py_err)
}

/// `canonicalize` of JSON text.
#[pyfunction]
fn canonicalize_json(json: &str) -> PyResult<String> {
    bridge::canonicalize_json(json).map_err(py_err)
}

/// The digest of the canonical form of JSON text.
#[pyfunction]
fn digest_json(json: &str) -> PyResult<String> {
    bridge::digest_json(json).map_err(py_err)
}

/// sha256 hex of the canonical form of JSON text.
#[pyfunction]
fn canonical_sha256_json(json: &str) -> PyResult<String> {
    bridge::canonical_sha256_json(json).map_err(py_err)
}

/// sha256 hex of the UTF-8 bytes of `text`.
#[pyfunction]
fn sha256_hex(text: &str) -> String {
    bridge::sha256_hex(text)
}

/// `heart:resource:` + sha256 hex of the canonical `{kind, key}`.
#[pyfunction]
fn deterministic_resource_id(kind: &str, key: &str) -> PyResult<String> {
    bridge::deterministic_resource_id(kind, key).map_err(py_err)
}

/// `prefix:` + sha256 hex of the canonical form of `identity` (JSON text).
#[pyfunction]
fn effect_key_json(prefix: &str, identity: &str) -> PyResult<String> {
    bridge::effect_key_json(prefix, identity).map_err(py_err)
}

/// Checks a receipt (JSON text).
#[pyfunction]
fn verify_receipt_json(receipt: &str) -> PyResult<()> {
    bridge::verify_receipt_json(receipt).map_err(py_err)
}

/// Checks a receipt log (JSON Lines bytes) with the options' JSON text: the report's JSON
/// text (`heart_fleet_core::chain::verify_receipts_json`).
#[pyfunction]
fn verify_receipts_json(log: &[u8], options: &str) -> PyResult<String> {
    heart_fleet_core::chain::verify_receipts_json(log, options).map_err(py_err)
}

/// Every stable error code of the core's registry.
#[pyfunction]
fn error_codes() -> Vec<String> {
    bridge::error_codes().into_iter().map(|c| c.to_owned()).collect()
}

/// Appends receipts to `heart_receipts` chained per run (and signed): the core's
/// `receipt_table::TableAppender`, driven by the Python stores' receipt sinks, which run each
/// statement it gives and hand back the rows.
#[pyclass(module = "heart_fleet._native", frozen)]
pub struct NativeReceiptAppender {
    inner: Mutex<heart_fleet_core::receipt_table::JsonTableAppender>,
}

#[pymethods]
impl NativeReceiptAppender {
    /// An appender for `dialect` signing with `signing_keys` (JSON array of key texts); a bad
    /// key raises `InvalidInputError` naming its index, never its bytes.
    #[staticmethod]
    fn create(dialect: &str, signing_keys: &str) -> PyResult<NativeReceiptAppender> {
        heart_fleet_core::receipt_table::JsonTableAppender::new(dialect, signing_keys)
            .map(|a| NativeReceiptAppender { inner: Mutex::new(a) })
            .map_err(py_err)
    }

    /// Starts appending a receipt (JSON): the first statement's `{sql, params}` JSON.
    fn begin(&self, receipt: &str) -> PyResult<String> {
        locked(&self.inner)?.begin(receipt).map_err(py_err)
    }

    /// The rows the last statement returned (JSON): the next statement's JSON, or `None`.
    fn answer(&self, rows: &str) -> PyResult<Option<String>> {
        locked(&self.inner)?.answer(rows).map_err(py_err)
    }

    /// The last statement failed: the run's head is read again before its next receipt.
    fn failed(&self) -> PyResult<()> {
        locked(&self.inner)?.failed();
        Ok(())
    }

    /// The store rolled back receipts this appender wrote: every run's head is read again.
    fn forget_heads(&self) -> PyResult<()> {
        locked(&self.inner)?.forget_heads();
        Ok(())
    }
}

/// The module `heart_fleet._native`.
#[pymodule]
#[pyo3(name = "_native")]
fn native_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    records::add(m)?;
    store::add(m)?;
    m.add_class::<NativeFleet>()?;
    m.add_class::<NativeOp>()?;
    m.add_class::<NativeMemoryStore>()?;
    m.add_class::<NativeLeaseSession>()?;
    m.add_class::<NativeReceiptAppender>()?;
    m.add_class::<MemoryEffectLedger>()?;
    m.add_function(wrap_pyfunction!(deliver_receipts, m)?)?;
    m.add_function(wrap_pyfunction!(lease_expired_ms, m)?)?;
    m.add_function(wrap_pyfunction!(can_acquire_ms, m)?)?;
    m.add_function(wrap_pyfunction!(instance_expired_ms, m)?)?;
    m.add_function(wrap_pyfunction!(heartbeat_interval, m)?)?;
    m.add_function(wrap_pyfunction!(release_status, m)?)?;
    m.add_function(wrap_pyfunction!(scenario_config, m)?)?;
    m.add_function(wrap_pyfunction!(native_replay, m)?)?;
    m.add_function(wrap_pyfunction!(store_request, m)?)?;
    m.add_function(wrap_pyfunction!(contract, m)?)?;
    m.add_function(wrap_pyfunction!(server_statement_timeout_ms, m)?)?;
    m.add_function(wrap_pyfunction!(postgres_deadlines, m)?)?;
    m.add_function(wrap_pyfunction!(seeded_row_json, m)?)?;
    m.add_function(wrap_pyfunction!(unstorable_evidence, m)?)?;
    m.add_function(wrap_pyfunction!(sql::sql_statements, m)?)?;
    m.add_function(wrap_pyfunction!(sql::sql_answer, m)?)?;
    m.add_function(wrap_pyfunction!(sql::parse_store_request, m)?)?;
    m.add_function(wrap_pyfunction!(sql_migration_plan, m)?)?;
    m.add_function(wrap_pyfunction!(sql_receipt_insert, m)?)?;
    m.add_function(wrap_pyfunction!(canonicalize_json, m)?)?;
    m.add_function(wrap_pyfunction!(digest_json, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_sha256_json, m)?)?;
    m.add_function(wrap_pyfunction!(sha256_hex, m)?)?;
    m.add_function(wrap_pyfunction!(deterministic_resource_id, m)?)?;
    m.add_function(wrap_pyfunction!(effect_key_json, m)?)?;
    m.add_function(wrap_pyfunction!(verify_receipt_json, m)?)?;
    m.add_function(wrap_pyfunction!(verify_receipts_json, m)?)?;
    m.add_function(wrap_pyfunction!(error_codes, m)?)?;
    Ok(())
}

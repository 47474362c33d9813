//! The store contract's typed values: [`StoreRequest`], what an operation asks of a store
//! object's `execute`, and [`StoreAnswer`], what a Rust store (the memory store's
//! `execute`) answers. Both hold the core's value as it is, so a store object that forwards
//! a request to a Rust store costs no JSON either way; both read as a mapping in the request
//! language's JSON shape (`request["op"]`, `to_dict()`, `to_json()`) for a store written in
//! Python. The value itself never changes: the mapping's reads share one parsed copy, whose
//! nested lists and dicts a store should not change (it would change only what later reads
//! of that copy see, never what the core executes or resumes with); `to_dict()` gives a copy
//! of its own.

use std::sync::{Mutex, MutexGuard, PoisonError};

use heart_fleet_core::memory::op_name;
use heart_fleet_core::{StoreAnswer as CoreAnswer, StoreReply as CoreReply, StoreRequest as CoreRequest};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};
use serde::Serialize;

/// The JSON shape of a typed value, read lazily: `json.loads` of its text, so the keys come
/// in the order the JSON text has them, as the dict of the text contract did. Cleared when
/// the object is reused ([`refill`]).
struct Shape(Mutex<Option<Py<PyDict>>>);

impl Shape {
    fn new() -> Shape {
        Shape(Mutex::new(None))
    }

    fn read(&self) -> MutexGuard<'_, Option<Py<PyDict>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fresh<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyDict>> {
        let text = text_of(value);
        Ok(py.import("json")?.call_method1("loads", (text,))?.cast_into::<PyDict>()?)
    }

    fn get<'py>(&self, py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyDict>> {
        if let Some(d) = &*self.read() {
            return Ok(d.bind(py).clone());
        }
        // Made without the lock held (json.loads is Python). Another thread may have read it
        // first; either dict has the same content.
        let d = Shape::fresh(py, value)?;
        Ok(self.read().get_or_insert_with(|| d.unbind()).bind(py).clone())
    }
}

/// The core's value a [`StoreRequest`] or [`StoreAnswer`] holds. Behind a lock only so that
/// whoever holds the last reference to the Python object may take the value out
/// ([`StoreRequest::take_unshared`], [`StoreAnswer::take_or_copy`]): a request handed back
/// to its operation, an answer's rows moved into it instead of copied. Nothing changes it
/// while the object can still be read.
pub(crate) struct Held<T>(Mutex<T>);

impl<T> Held<T> {
    fn new(value: T) -> Held<T> {
        Held(Mutex::new(value))
    }

    /// The value. The lock is never held across a call that could panic, so a poisoned
    /// one still holds a whole value.
    pub(crate) fn get(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `object` is referred to by its holder alone: with the GIL held, nothing else can
/// then read it, so its value may be taken out (these classes support no weak references).
/// The count is exact here: the package is built for the stable ABI, which only
/// GIL-holding CPython builds load (a free-threaded build's counts are split).
fn unshared<T: pyo3::PyClass>(object: &Bound<'_, T>) -> bool {
    // SAFETY: `object` is a live object (the Bound holds a reference, the GIL is held);
    // Py_REFCNT only reads its count.
    unsafe { pyo3::ffi::Py_REFCNT(object.as_ptr()) == 1 }
}

/// Puts `value` in an object its holder alone refers to, in place of what it held, and
/// forgets the old value's shape: how both classes' objects are reused.
fn refill<T>(core: &Held<T>, shape: &Shape, value: T) {
    *core.get() = value;
    *shape.read() = None;
}

fn text_of(value: &impl Serialize) -> String {
    // The core's requests and answers are plain data: serializing them cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

/// The mapping methods both classes share (each has `core`, the core's value, and `shape`),
/// and a class's own methods (`$extra`).
macro_rules! mapping_methods {
    ($ty:ident $($extra:tt)*) => {
        #[pymethods]
        impl $ty {
            $($extra)*

            /// The JSON shape, as a new dict.
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                Shape::fresh(py, &*self.core.get())
            }

            /// The JSON text (the text contract's form).
            fn to_json(&self) -> String {
                text_of(&*self.core.get())
            }

            fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &*self.core.get())?.as_any().get_item(key)
            }

            #[pyo3(signature = (key, default=None))]
            fn get<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'py, PyAny>,
                default: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let found = self.shape.get(py, &*self.core.get())?.get_item(key)?;
                Ok(found.or(default).unwrap_or_else(|| py.None().into_bound(py)))
            }

            fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
                self.shape.get(py, &*self.core.get())?.contains(key)
            }

            fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
                Ok(self.shape.get(py, &*self.core.get())?.len())
            }

            fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &*self.core.get())?.as_any().try_iter().map(Bound::into_any)
            }

            fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &*self.core.get())?.call_method0("keys")
            }

            fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &*self.core.get())?.call_method0("values")
            }

            fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &*self.core.get())?.call_method0("items")
            }

            /// Equal to the same value, or to a mapping with its JSON shape.
            fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                let equal = if let Ok(other) = other.cast::<$ty>() {
                    // The same object's lock is not taken twice.
                    std::ptr::eq(self, other.get()) || *self.core.get() == *other.get().core.get()
                } else if other.cast::<PyDict>().is_ok() || other.is_instance(&mapping(py)?)? {
                    self.shape.get(py, &*self.core.get())?.as_any().eq(other)?
                } else {
                    return Ok(py.NotImplemented());
                };
                Ok(PyBool::new(py, equal).to_owned().into_any().unbind())
            }

            fn __repr__(&self) -> String {
                format!("{}({})", stringify!($ty), text_of(&*self.core.get()))
            }
        }
    };
}

fn mapping(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import("collections.abc")?.getattr("Mapping")
}

/// One store request as the core made it: the argument of a store object's `execute`.
/// Hand it to a Rust store (`MemoryLeaseStore.execute`) as it is, or read it as the
/// request's JSON shape (an immutable mapping: `request["op"]`, `to_dict()`, `to_json()`).
#[pyclass(module = "heart_fleet", frozen, mapping)]
pub struct StoreRequest {
    pub(crate) core: Held<CoreRequest>,
    shape: Shape,
}

impl StoreRequest {
    pub(crate) fn from_core(core: CoreRequest) -> StoreRequest {
        StoreRequest { core: Held::new(core), shape: Shape::new() }
    }

    /// Puts `core` in `shell`, a request object its holder alone refers to (see [`Held`]),
    /// in place of what it held: the next request of a store object goes out in the object
    /// the last one came back in. `core` comes back (`Some`) when something else refers to
    /// `shell`.
    pub(crate) fn refill(shell: &Bound<'_, StoreRequest>, core: CoreRequest) -> Option<CoreRequest> {
        if !unshared(shell) {
            return Some(core);
        }
        refill(&shell.get().core, &shell.get().shape, core);
        None
    }

    /// The request, taken out when `request` is referred to by its holder alone (see
    /// [`Held`]).
    pub(crate) fn take_unshared(request: &Bound<'_, StoreRequest>) -> Option<CoreRequest> {
        unshared(request).then(|| std::mem::replace(&mut *request.get().core.get(), CoreRequest::Now))
    }
}

mapping_methods!(StoreRequest
    /// The request's kind (`"update_run"`, `"find_runs"`, ...).
    #[getter]
    fn op(&self) -> &'static str {
        op_name(&self.core.get())
    }
);

/// One store answer as the core made it (the memory store's or a SQL store's `execute` of a
/// [`StoreRequest`]): return it from a store object's `execute` as it is. Reads as the
/// answer's JSON shape (an immutable mapping: `answer["reply"]`, `to_dict()`, `to_json()`).
#[pyclass(module = "heart_fleet", frozen, mapping)]
pub struct StoreAnswer {
    pub(crate) core: Held<CoreAnswer>,
    shape: Shape,
}

/// One emptied `StoreAnswer` object, kept for the next answer a Rust store makes: an answer
/// whose rows an operation took goes here instead of being freed (a free list of one, as
/// CPython keeps for its own small objects). Only ever touched with the GIL held.
static SPARE_ANSWER: Mutex<Option<Py<StoreAnswer>>> = Mutex::new(None);

fn spare_answer() -> MutexGuard<'static, Option<Py<StoreAnswer>>> {
    SPARE_ANSWER.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StoreAnswer {
    /// `core` as a Python object: the spare one refilled when there is one (see
    /// [`SPARE_ANSWER`]), else a new one.
    pub(crate) fn object(py: Python<'_>, core: CoreAnswer) -> PyResult<Bound<'_, StoreAnswer>> {
        let spare = spare_answer().take().map(|shell| shell.into_bound(py));
        match spare {
            // Nothing else refers to it (a store that kept the answer keeps its own object).
            Some(shell) if unshared(&shell) => {
                refill(&shell.get().core, &shell.get().shape, core);
                Ok(shell)
            }
            _ => Bound::new(py, StoreAnswer { core: Held::new(core), shape: Shape::new() }),
        }
    }

    /// The answer: moved out when `answer` is referred to by its holder alone (see
    /// [`Held`]), the emptied object then kept as the spare; else a copy.
    pub(crate) fn take_or_copy(answer: &Bound<'_, StoreAnswer>) -> CoreAnswer {
        if !unshared(answer) {
            return answer.get().core.get().clone();
        }
        let taken = {
            let mut held = answer.get().core.get();
            let reply = std::mem::replace(&mut held.reply, CoreReply::Now);
            CoreAnswer { now: held.now, reply }
        };
        *spare_answer() = Some(answer.clone().unbind());
        taken
    }
}

mapping_methods!(StoreAnswer);

/// Registers the classes (and, in `heart_fleet`, as `collections.abc.Mapping`).
pub(crate) fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StoreRequest>()?;
    m.add_class::<StoreAnswer>()?;
    let register = mapping(m.py())?.getattr("register")?;
    register.call1((m.py().get_type::<StoreRequest>(),))?;
    register.call1((m.py().get_type::<StoreAnswer>(),))?;
    Ok(())
}

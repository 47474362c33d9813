//! The store contract's typed values: [`StoreRequest`], what an operation asks of a store
//! object's `execute`, and [`StoreAnswer`], what a Rust store (the memory store's
//! `execute`) answers. Both hold the core's value as it is, so a store object that forwards
//! a request to a Rust store costs no JSON either way; both read as a mapping in the request
//! language's JSON shape (`request["op"]`, `to_dict()`, `to_json()`) for a store written in
//! Python. The value itself never changes: the mapping's reads share one parsed copy, whose
//! nested lists and dicts a store should not change (it would change only what later reads
//! of that copy see, never what the core executes or resumes with); `to_dict()` gives a copy
//! of its own.

use std::sync::OnceLock;

use heart_fleet_core::memory::op_name;
use heart_fleet_core::{StoreAnswer as CoreAnswer, StoreRequest as CoreRequest};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};
use serde::Serialize;

/// The JSON shape of a typed value, read lazily: `json.loads` of its text, so the keys come
/// in the order the JSON text has them, as the dict of the text contract did.
struct Shape(OnceLock<Py<PyDict>>);

impl Shape {
    fn new() -> Shape {
        Shape(OnceLock::new())
    }

    fn fresh<'py>(py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyDict>> {
        let text = text_of(value);
        Ok(py.import("json")?.call_method1("loads", (text,))?.cast_into::<PyDict>()?)
    }

    fn get<'py>(&self, py: Python<'py>, value: &impl Serialize) -> PyResult<Bound<'py, PyDict>> {
        if let Some(d) = self.0.get() {
            return Ok(d.bind(py).clone());
        }
        let d = Shape::fresh(py, value)?;
        // Another thread may have read it first; either dict has the same content.
        Ok(self.0.get_or_init(|| d.clone().unbind()).bind(py).clone())
    }
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
                Shape::fresh(py, &self.core)
            }

            /// The JSON text (the text contract's form).
            fn to_json(&self) -> String {
                text_of(&self.core)
            }

            fn __getitem__<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &self.core)?.as_any().get_item(key)
            }

            #[pyo3(signature = (key, default=None))]
            fn get<'py>(
                &self,
                py: Python<'py>,
                key: &Bound<'py, PyAny>,
                default: Option<Bound<'py, PyAny>>,
            ) -> PyResult<Bound<'py, PyAny>> {
                let found = self.shape.get(py, &self.core)?.get_item(key)?;
                Ok(found.or(default).unwrap_or_else(|| py.None().into_bound(py)))
            }

            fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
                self.shape.get(py, &self.core)?.contains(key)
            }

            fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
                Ok(self.shape.get(py, &self.core)?.len())
            }

            fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &self.core)?.as_any().try_iter().map(Bound::into_any)
            }

            fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &self.core)?.call_method0("keys")
            }

            fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &self.core)?.call_method0("values")
            }

            fn items<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.shape.get(py, &self.core)?.call_method0("items")
            }

            /// Equal to the same value, or to a mapping with its JSON shape.
            fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                let equal = if let Ok(other) = other.cast::<$ty>() {
                    self.core == other.get().core
                } else if other.cast::<PyDict>().is_ok() || other.is_instance(&mapping(py)?)? {
                    self.shape.get(py, &self.core)?.as_any().eq(other)?
                } else {
                    return Ok(py.NotImplemented());
                };
                Ok(PyBool::new(py, equal).to_owned().into_any().unbind())
            }

            fn __repr__(&self) -> String {
                format!("{}({})", stringify!($ty), text_of(&self.core))
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
    pub(crate) core: CoreRequest,
    shape: Shape,
}

impl StoreRequest {
    pub(crate) fn from_core(core: CoreRequest) -> StoreRequest {
        StoreRequest { core, shape: Shape::new() }
    }
}

mapping_methods!(StoreRequest
    /// The request's kind (`"update_run"`, `"find_runs"`, ...).
    #[getter]
    fn op(&self) -> &'static str {
        op_name(&self.core)
    }
);

/// One store answer as the core made it (the memory store's or a SQL store's `execute` of a
/// [`StoreRequest`]): return it from a store object's `execute` as it is. Reads as the
/// answer's JSON shape (an immutable mapping: `answer["reply"]`, `to_dict()`, `to_json()`).
#[pyclass(module = "heart_fleet", frozen, mapping)]
pub struct StoreAnswer {
    pub(crate) core: CoreAnswer,
    shape: Shape,
}

impl StoreAnswer {
    pub(crate) fn from_core(core: CoreAnswer) -> StoreAnswer {
        StoreAnswer { core, shape: Shape::new() }
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

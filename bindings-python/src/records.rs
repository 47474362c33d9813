//! The lease cycle's values as Python classes built in Rust: [`FencingToken`], [`RunRow`],
//! [`HeartReceipt`], [`AcquireResult`] and [`FencedOutcome`] (the package exports them under
//! those names).
//!
//! Each is immutable and behaves as the frozen dataclass it replaces: positional or keyword
//! construction in field order (the optional fields default to `None`), `==` and `hash` by
//! value, a `repr` naming every field, `to_dict()` in the reference's JSON shape (camelCase
//! keys for tokens, receipts and results, the table's snake_case column names for rows; an
//! optional field left out when it is `None`), `from_json(mapping)` back from that shape,
//! pickling and `copy`. The lease cycle on the Rust memory store builds them straight from
//! the core's values (`from_core`), with no JSON in between; every other path builds them
//! with `from_json` from the core's JSON.
//!
//! A record keeps its fields as Python objects in field order, so the methods above are
//! written once ([`Spec`]) for all five; a class's own code is its field list and the
//! conversion from the core's type.

use heart_fleet_core::HeartReceipt as CoreReceipt;
use heart_fleet_core::ops::{AcquireResult as CoreAcquire, Fenced};
use heart_fleet_core::{FencingToken as CoreToken, RunRow as CoreRow};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple, PyType};
use serde_json::Value;

/// One field: its Python name, its key in the JSON shape, and whether it is optional
/// (defaults to `None` and is left out of `to_dict` when `None`).
type FieldSpec = (&'static str, &'static str, bool);

/// What the shared methods need to know of a record class.
struct Spec {
    class: &'static str,
    fields: &'static [FieldSpec],
}

impl Spec {
    /// Binds constructor arguments to the fields, as a dataclass's `__init__` would.
    fn bind(&self, args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<Py<PyAny>>> {
        let py = args.py();
        let n = self.fields.len();
        if args.len() > n {
            return Err(PyTypeError::new_err(format!(
                "{}() takes {n} positional arguments but {} were given",
                self.class,
                args.len()
            )));
        }
        let mut values: Vec<Option<Py<PyAny>>> = args.iter().map(|a| Some(a.unbind())).collect();
        values.resize_with(n, || None);
        if let Some(kwargs) = kwargs {
            for (k, v) in kwargs.iter() {
                let key = k.cast::<PyString>()?.to_str()?.to_owned();
                let Some(i) = self.fields.iter().position(|f| f.0 == key) else {
                    return Err(PyTypeError::new_err(format!(
                        "{}() got an unexpected keyword argument '{key}'",
                        self.class
                    )));
                };
                if values[i].is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "{}() got multiple values for argument '{key}'",
                        self.class
                    )));
                }
                values[i] = Some(v.unbind());
            }
        }
        let mut out = Vec::with_capacity(n);
        for (v, (name, _, optional)) in values.into_iter().zip(self.fields) {
            match v {
                Some(v) => out.push(v),
                None if *optional => out.push(py.None()),
                None => {
                    return Err(PyTypeError::new_err(format!("{}() missing required argument: '{name}'", self.class)));
                }
            }
        }
        Ok(out)
    }

    /// The fields of `data` (a mapping in the JSON shape); a missing key is `None`.
    fn read(
        &self,
        data: &Bound<'_, PyAny>,
        nested: impl Fn(usize, Bound<'_, PyAny>) -> PyResult<Py<PyAny>>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let py = data.py();
        let get = data.getattr("get")?;
        let mut out = Vec::with_capacity(self.fields.len());
        for (i, (_, key, _)) in self.fields.iter().enumerate() {
            let v = get.call1((key,))?;
            out.push(if v.is_none() { py.None() } else { nested(i, v)? });
        }
        Ok(out)
    }

    fn to_dict<'py>(&self, py: Python<'py>, values: &[Py<PyAny>]) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for (v, (_, key, optional)) in values.iter().zip(self.fields) {
            let v = v.bind(py);
            if *optional && v.is_none() {
                continue;
            }
            out.set_item(key, nested_dict(v)?)?;
        }
        Ok(out)
    }

    fn repr(&self, py: Python<'_>, values: &[Py<PyAny>]) -> PyResult<String> {
        let mut out = format!("{}(", self.class);
        for (i, (v, (name, _, _))) in values.iter().zip(self.fields).enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(name);
            out.push('=');
            out.push_str(v.bind(py).repr()?.to_str()?);
        }
        out.push(')');
        Ok(out)
    }

    fn tuple<'py>(py: Python<'py>, values: &[Py<PyAny>]) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, values.iter().map(|v| v.bind(py)))
    }

    fn match_args<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.fields.iter().map(|f| f.0))
    }
}

/// A nested record as its dict (`to_dict`), anything else as it is.
fn nested_dict<'py>(v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(r) = v.cast::<RunRow>() {
        return Ok(r.get().to_dict(v.py())?.into_any());
    }
    if let Ok(t) = v.cast::<FencingToken>() {
        return Ok(t.get().to_dict(v.py())?.into_any());
    }
    Ok(v.clone())
}

/// Generates the shared methods of a record class over its `values` and `SPEC`.
macro_rules! record_methods {
    ($ty:ident { $($getter:ident = $index:literal),* $(,)? } $($extra:tt)*) => {
        #[pymethods]
        impl $ty {
            #[new]
            #[pyo3(signature = (*args, **kwargs))]
            fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<$ty> {
                Ok($ty { values: $ty::SPEC.bind(args, kwargs)? })
            }

            /// The record from a mapping in its JSON shape (a missing key is `None`).
            #[classmethod]
            fn from_json(_cls: &Bound<'_, PyType>, data: &Bound<'_, PyAny>) -> PyResult<$ty> {
                $ty::from_mapping(data)
            }

            /// The reference's JSON shape of this value (nested records converted too).
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                $ty::SPEC.to_dict(py, &self.values)
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                $ty::SPEC.repr(py, &self.values)
            }

            fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                let Ok(other) = other.cast::<$ty>() else {
                    return Ok(py.NotImplemented());
                };
                let equal = Spec::tuple(py, &self.values)?.eq(Spec::tuple(py, &other.get().values)?)?;
                Ok(PyBool::new(py, equal).to_owned().into_any().unbind())
            }

            fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
                Spec::tuple(py, &self.values)?.hash()
            }

            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
                Ok((slf.get_type(), Spec::tuple(slf.py(), &slf.get().values)?))
            }

            #[classattr]
            fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
                Ok($ty::SPEC.match_args(py)?.unbind())
            }

            $(
                #[getter]
                fn $getter(&self, py: Python<'_>) -> Py<PyAny> {
                    self.values[$index].clone_ref(py)
                }
            )*

            $($extra)*
        }
    };
}

fn text(py: Python<'_>, v: &str) -> Py<PyAny> {
    PyString::new(py, v).into_any().unbind()
}

fn opt_text(py: Python<'_>, v: Option<&str>) -> Py<PyAny> {
    v.map_or_else(|| py.None(), |v| text(py, v))
}

fn int(py: Python<'_>, v: i64) -> PyResult<Py<PyAny>> {
    Ok(v.into_pyobject(py)?.into_any().unbind())
}

fn opt_int(py: Python<'_>, v: Option<i64>) -> PyResult<Py<PyAny>> {
    v.map_or_else(|| Ok(py.None()), |v| int(py, v))
}

/// A JSON value (a row's `budget`) as `json.loads` would give it.
fn json_value(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => int(py, i)?,
            (None, Some(u)) => u.into_pyobject(py)?.into_any().unbind(),
            _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any().unbind(),
        },
        Value::String(s) => text(py, s),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_value(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, json_value(py, item)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

/// A fencing token: proof of a lease (`runId`, `owner`, `leaseExpiresAt`, `epoch`). A token
/// without `epoch` (minted by an old node) is checked by the three-field equality.
#[pyclass(module = "heart_fleet", frozen)]
pub struct FencingToken {
    values: Vec<Py<PyAny>>,
}

impl FencingToken {
    const SPEC: Spec = Spec {
        class: "FencingToken",
        fields: &[
            ("run_id", "runId", false),
            ("owner", "owner", false),
            ("lease_expires_at", "leaseExpiresAt", false),
            ("epoch", "epoch", true),
        ],
    };

    fn from_mapping(data: &Bound<'_, PyAny>) -> PyResult<FencingToken> {
        Ok(FencingToken { values: Self::SPEC.read(data, |_, v| Ok(v.unbind()))? })
    }

    pub(crate) fn from_core(py: Python<'_>, t: &CoreToken) -> PyResult<FencingToken> {
        Ok(FencingToken {
            values: vec![
                text(py, &t.run_id),
                text(py, &t.owner),
                text(py, &t.lease_expires_at.to_iso()),
                opt_int(py, t.epoch)?,
            ],
        })
    }

    /// The core's token, when every field is a plain value of its type (`None` otherwise:
    /// the caller's checked path then names what is wrong). A lone surrogate, an epoch that
    /// is a bool or out of range, or an expiry that is not an ISO-8601 instant is not plain.
    pub(crate) fn to_core(&self, py: Python<'_>) -> Option<CoreToken> {
        let s = |i: usize| -> Option<String> {
            let v = self.values[i].bind(py);
            v.cast::<PyString>().ok()?.to_str().ok().map(str::to_owned)
        };
        let epoch = self.values[3].bind(py);
        let epoch = if epoch.is_none() {
            None
        } else if epoch.is_instance_of::<PyBool>() {
            return None;
        } else {
            Some(epoch.extract::<i64>().ok()?)
        };
        let expires = s(2)?;
        heart_fleet_core::bridge::token_of(s(0)?, s(1)?, &expires, epoch).ok()
    }
}

record_methods!(FencingToken { run_id = 0, owner = 1, lease_expires_at = 2, epoch = 3 });

/// An `agent_runs` row (timestamps as `toISOString()` text).
#[pyclass(module = "heart_fleet", frozen)]
pub struct RunRow {
    values: Vec<Py<PyAny>>,
}

impl RunRow {
    const SPEC: Spec = Spec {
        class: "RunRow",
        fields: &[
            ("id", "id", false),
            ("task_id", "task_id", false),
            ("assignment_id", "assignment_id", false),
            ("objective", "objective", false),
            ("required_capabilities", "required_capabilities", false),
            ("status", "status", false),
            ("assigned_agent", "assigned_agent", false),
            ("lease_owner", "lease_owner", false),
            ("lease_expires_at", "lease_expires_at", false),
            ("retries", "retries", false),
            ("budget", "budget", false),
            ("approval_state", "approval_state", false),
            ("visibility", "visibility", false),
            ("idempotency_key", "idempotency_key", false),
            ("created_by", "created_by", false),
            ("created_at", "created_at", false),
            ("updated_at", "updated_at", false),
            ("fencing_epoch", "fencing_epoch", false),
        ],
    };

    fn from_mapping(data: &Bound<'_, PyAny>) -> PyResult<RunRow> {
        Ok(RunRow { values: Self::SPEC.read(data, |_, v| Ok(v.unbind()))? })
    }

    pub(crate) fn from_core(py: Python<'_>, r: &CoreRow) -> PyResult<RunRow> {
        let capabilities = PyList::new(py, &r.required_capabilities)?.into_any().unbind();
        let expires = r.lease_expires_at.map(|t| t.to_iso());
        Ok(RunRow {
            values: vec![
                text(py, &r.id),
                opt_text(py, r.task_id.as_deref()),
                text(py, &r.assignment_id),
                text(py, &r.objective),
                capabilities,
                text(py, r.status.as_str()),
                opt_text(py, r.assigned_agent.as_deref()),
                opt_text(py, r.lease_owner.as_deref()),
                opt_text(py, expires.as_deref()),
                int(py, r.retries)?,
                r.budget.as_ref().map_or_else(|| Ok(py.None()), |b| json_value(py, b))?,
                text(py, &r.approval_state),
                text(py, &r.visibility),
                text(py, &r.idempotency_key),
                text(py, &r.created_by),
                text(py, &r.created_at.to_iso()),
                text(py, &r.updated_at.to_iso()),
                int(py, r.fencing_epoch)?,
            ],
        })
    }
}

record_methods!(RunRow {
    id = 0,
    task_id = 1,
    assignment_id = 2,
    objective = 3,
    required_capabilities = 4,
    status = 5,
    assigned_agent = 6,
    lease_owner = 7,
    lease_expires_at = 8,
    retries = 9,
    budget = 10,
    approval_state = 11,
    visibility = 12,
    idempotency_key = 13,
    created_by = 14,
    created_at = 15,
    updated_at = 16,
    fencing_epoch = 17,
});

/// A tamper-evident receipt (`schemaVersion` `zao.heart.receipt.v1`).
#[pyclass(module = "heart_fleet", frozen)]
pub struct HeartReceipt {
    values: Vec<Py<PyAny>>,
}

impl HeartReceipt {
    const SPEC: Spec = Spec {
        class: "HeartReceipt",
        fields: &[
            ("schema_version", "schemaVersion", false),
            ("event", "event", false),
            ("run_id", "runId", false),
            ("owner", "owner", false),
            ("lease_expires_at", "leaseExpiresAt", false),
            ("effect_key", "effectKey", false),
            ("at", "at", false),
            ("digest", "digest", false),
        ],
    };

    fn from_mapping(data: &Bound<'_, PyAny>) -> PyResult<HeartReceipt> {
        Ok(HeartReceipt { values: Self::SPEC.read(data, |_, v| Ok(v.unbind()))? })
    }

    pub(crate) fn from_core(py: Python<'_>, r: &CoreReceipt) -> HeartReceipt {
        HeartReceipt {
            values: vec![
                text(py, &r.schema_version),
                text(py, r.event.as_str()),
                text(py, &r.run_id),
                text(py, &r.owner),
                opt_text(py, r.lease_expires_at.as_deref()),
                opt_text(py, r.effect_key.as_deref()),
                text(py, &r.at),
                text(py, &r.digest),
            ],
        }
    }
}

record_methods!(HeartReceipt {
    schema_version = 0,
    event = 1,
    run_id = 2,
    owner = 3,
    lease_expires_at = 4,
    effect_key = 5,
    at = 6,
    digest = 7,
});

/// `acquire`'s result: `acquired`, the `run`, the `fence` on success, else `reason` and `code`.
#[pyclass(module = "heart_fleet", frozen)]
pub struct AcquireResult {
    values: Vec<Py<PyAny>>,
}

impl AcquireResult {
    const SPEC: Spec = Spec {
        class: "AcquireResult",
        fields: &[
            ("acquired", "acquired", false),
            ("run", "run", false),
            ("fence", "fence", true),
            ("reason", "reason", true),
            ("code", "code", true),
        ],
    };

    fn from_mapping(data: &Bound<'_, PyAny>) -> PyResult<AcquireResult> {
        let values = Self::SPEC.read(data, |i, v| match i {
            1 => Ok(Py::new(v.py(), RunRow::from_mapping(&v)?)?.into_any()),
            2 => Ok(Py::new(v.py(), FencingToken::from_mapping(&v)?)?.into_any()),
            _ => Ok(v.unbind()),
        })?;
        Ok(AcquireResult { values })
    }

    pub(crate) fn from_core(py: Python<'_>, r: &CoreAcquire) -> PyResult<AcquireResult> {
        let run = match &r.run {
            Some(row) => Py::new(py, RunRow::from_core(py, row)?)?.into_any(),
            None => py.None(),
        };
        let fence = match &r.fence {
            Some(t) => Py::new(py, FencingToken::from_core(py, t)?)?.into_any(),
            None => py.None(),
        };
        Ok(AcquireResult {
            values: vec![
                PyBool::new(py, r.acquired).to_owned().into_any().unbind(),
                run,
                fence,
                opt_text(py, r.reason.as_deref()),
                opt_text(py, r.code.map(|c| c.as_str())),
            ],
        })
    }
}

record_methods!(AcquireResult { acquired = 0, run = 1, fence = 2, reason = 3, code = 4 });

/// A fenced write's outcome: `outcome` `ok` with the `value` (a token or a row), or
/// `rejected` with the `cause` (superseded, expired, released, not-found) and `code`
/// `fence-rejected`.
#[pyclass(module = "heart_fleet", frozen)]
pub struct FencedOutcome {
    values: Vec<Py<PyAny>>,
}

impl FencedOutcome {
    const SPEC: Spec = Spec {
        class: "FencedOutcome",
        fields: &[
            ("outcome", "outcome", false),
            ("value", "value", true),
            ("cause", "cause", true),
            ("code", "code", true),
        ],
    };

    fn from_mapping(data: &Bound<'_, PyAny>) -> PyResult<FencedOutcome> {
        Ok(FencedOutcome { values: Self::SPEC.read(data, |_, v| Ok(v.unbind()))? })
    }

    /// The outcome of a fenced write whose value `convert` builds.
    pub(crate) fn from_core<T>(
        py: Python<'_>,
        f: &Fenced<T>,
        convert: impl FnOnce(&T) -> PyResult<Py<PyAny>>,
    ) -> PyResult<FencedOutcome> {
        let values = match f {
            Fenced::Ok { value } => vec![text(py, "ok"), convert(value)?, py.None(), py.None()],
            Fenced::Rejected { cause } => {
                vec![
                    text(py, "rejected"),
                    py.None(),
                    text(py, cause.as_str()),
                    text(py, heart_fleet_core::ErrorCode::FenceRejected.as_str()),
                ]
            }
        };
        Ok(FencedOutcome { values })
    }
}

record_methods!(FencedOutcome { outcome = 0, value = 1, cause = 2, code = 3 }
    /// Whether the write went through.
    #[getter]
    fn ok(&self, py: Python<'_>) -> PyResult<bool> {
        self.values[0].bind(py).eq("ok")
    }
);

/// Registers the record classes.
pub(crate) fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FencingToken>()?;
    m.add_class::<RunRow>()?;
    m.add_class::<HeartReceipt>()?;
    m.add_class::<AcquireResult>()?;
    m.add_class::<FencedOutcome>()?;
    Ok(())
}

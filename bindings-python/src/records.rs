//! The lease cycle's values as Python classes built in Rust: [`FencingToken`], [`RunRow`],
//! [`HeartReceipt`], [`AcquireResult`] and [`FencedOutcome`] (the package exports them under
//! those names).
//!
//! Each is immutable and keeps what its users relied on from the frozen dataclass it
//! replaces: positional or keyword construction in field order (the optional fields default
//! to `None`), `==` and `hash` by value, a `repr` naming every field, `match` patterns,
//! `to_dict()` in the reference's JSON shape (camelCase keys for tokens, receipts and results,
//! the table's snake_case column names for rows; an optional field left out when it is
//! `None`), `from_json(mapping)` back from that shape, pickling and `copy`. They are not
//! dataclasses: `dataclasses.replace` and `asdict` do not take them (`to_dict`/`from_json`
//! do that work), assigning a field raises `AttributeError`, and a pickle of the old
//! dataclasses does not load.
//!
//! A record made in Python (its constructor, `from_json`) keeps the values it was given. The
//! lease cycle on the Rust memory store makes its records from the core's values instead
//! (`from_core`, no JSON in between) and builds each field's Python object the first time it
//! is read, then keeps it ([`Fields`]): a sink that only counts receipts, or a caller that
//! reads a row's status and not its timestamps, pays for no string it does not read. A
//! nested record (a result's run and token, an outcome's value) is made with its parent,
//! its own fields again on first read. The methods
//! above are written once, over a class's field list ([`Spec`]) and its `build` of one field
//! from the core's value.

use heart_fleet_core::HeartReceipt as CoreReceipt;
use heart_fleet_core::ops::{AcquireResult as CoreAcquire, Fenced, LostCause};
use heart_fleet_core::{ErrorCode, FencingToken as CoreToken, RunRow as CoreRow};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyList, PyString, PyTuple, PyType};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::OnceLock;

/// One field: its Python name, its key in the JSON shape, and whether it is optional
/// (defaults to `None` and is left out of `to_dict` when `None`).
type FieldSpec = (&'static str, &'static str, bool);

/// What the shared methods need to know of a record class.
struct Spec {
    class: &'static str,
    fields: &'static [FieldSpec],
}

impl Spec {
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

/// A record's field values: given by Python (all set), or built from the core's value `C`,
/// each the first time it is read and kept from then on (so a field is one object, as a
/// dataclass's is).
struct Fields<C, const N: usize> {
    core: Option<C>,
    cells: [OnceLock<Py<PyAny>>; N],
}

/// Builds field `i` of a record from the core's value.
type Build<C> = fn(&C, usize, Python<'_>) -> PyResult<Py<PyAny>>;

impl<C, const N: usize> Fields<C, N> {
    /// `values` holds one value per field (the constructor and `Spec::read` make it so).
    fn given(values: Vec<Py<PyAny>>) -> Fields<C, N> {
        let mut values = values.into_iter();
        Fields { core: None, cells: std::array::from_fn(|_| values.next().map_or_else(OnceLock::new, OnceLock::from)) }
    }

    fn of_core(core: C) -> Fields<C, N> {
        Fields { core: Some(core), cells: std::array::from_fn(|_| OnceLock::new()) }
    }

    fn get(&self, py: Python<'_>, i: usize, build: Build<C>) -> PyResult<Py<PyAny>> {
        if let Some(v) = self.cells[i].get() {
            return Ok(v.clone_ref(py));
        }
        // Every cell of a record given by Python is set, so an empty one has a core value.
        let Some(core) = &self.core else { return Ok(py.None()) };
        let v = build(core, i, py)?;
        Ok(self.cells[i].get_or_init(|| v).clone_ref(py))
    }

    /// Sets field `i` to an object made with the record (a nested record moved out of `core`).
    fn preset(&self, i: usize, v: Py<PyAny>) {
        let _ = self.cells[i].set(v);
    }

    fn all(&self, py: Python<'_>, build: Build<C>) -> PyResult<Vec<Py<PyAny>>> {
        (0..N).map(|i| self.get(py, i, build)).collect()
    }

    /// A field as `&str`, when it is one (without building it from the core's value).
    fn given_text(&self, py: Python<'_>, i: usize) -> Option<String> {
        let v = self.cells[i].get()?.bind(py);
        v.cast::<PyString>().ok()?.to_str().ok().map(str::to_owned)
    }
}

/// A nested record (any of the package's results: an instance of `heart_fleet.types.Record`)
/// as its dict, a list of them as a list of dicts, anything else as it is.
fn nested_dict<'py>(v: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = v.py();
    let record = py.import("heart_fleet.types").and_then(|m| m.getattr("Record"));
    let Ok(record) = record else { return Ok(v.clone()) };
    if v.is_instance(&record)? {
        return v.call_method0("to_dict");
    }
    if let Ok(list) = v.cast::<PyList>()
        && let Ok(first) = list.get_item(0)
        && first.is_instance(&record)?
    {
        let items = list.iter().map(|x| x.call_method0("to_dict")).collect::<PyResult<Vec<_>>>()?;
        return Ok(PyList::new(py, items)?.into_any());
    }
    Ok(v.clone())
}

/// Generates the shared methods of a record class from its `SPEC`, its `fields` and its
/// `build`.
macro_rules! record_methods {
    ($ty:ident { $($getter:ident = $index:literal $(= $default:ident)?),* $(,)? } $($extra:tt)*) => {
        impl $ty {
            fn values(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
                self.fields.all(py, $ty::build)
            }

            fn from_mapping(data: &Bound<'_, PyAny>) -> PyResult<$ty> {
                Ok($ty { fields: Fields::given($ty::SPEC.read(data, <$ty as Nested>::nested)?) })
            }
        }

        #[pymethods]
        impl $ty {
            /// The record from its fields, in order or by name (the optional ones default to `None`).
            #[new]
            #[allow(clippy::too_many_arguments, reason = "one argument per field, as the dataclass's")]
            #[pyo3(signature = ($($getter $(= $default)?),*))]
            fn new(py: Python<'_>, $($getter: Option<Bound<'_, PyAny>>),*) -> $ty {
                $ty { fields: Fields::given(vec![$($getter.map_or_else(|| py.None(), Bound::unbind)),*]) }
            }

            /// The record from a mapping in its JSON shape (a missing key is `None`).
            #[classmethod]
            fn from_json(_cls: &Bound<'_, PyType>, data: &Bound<'_, PyAny>) -> PyResult<$ty> {
                $ty::from_mapping(data)
            }

            /// The reference's JSON shape of this value (nested records converted too).
            fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                $ty::SPEC.to_dict(py, &self.values(py)?)
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                $ty::SPEC.repr(py, &self.values(py)?)
            }

            fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
                let Ok(other) = other.cast::<$ty>() else {
                    return Ok(py.NotImplemented());
                };
                let equal = Spec::tuple(py, &self.values(py)?)?.eq(Spec::tuple(py, &other.get().values(py)?)?)?;
                Ok(PyBool::new(py, equal).to_owned().into_any().unbind())
            }

            fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
                Spec::tuple(py, &self.values(py)?)?.hash()
            }

            fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyType>, Bound<'py, PyTuple>)> {
                Ok((slf.get_type(), Spec::tuple(slf.py(), &slf.get().values(slf.py())?)?))
            }

            #[classattr]
            fn __match_args__(py: Python<'_>) -> PyResult<Py<PyTuple>> {
                Ok($ty::SPEC.match_args(py)?.unbind())
            }

            $(
                #[getter]
                fn $getter(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                    self.fields.get(py, $index, $ty::build)
                }
            )*

            $($extra)*
        }
    };
}

/// How a record reads the value of field `i` from a mapping: as it is, unless the field
/// holds a nested record.
trait Nested {
    fn nested(_i: usize, v: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        Ok(v.unbind())
    }
}

impl Nested for FencingToken {}
impl Nested for RunRow {}
impl Nested for HeartReceipt {}
impl Nested for FencedOutcome {}

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
    fields: Fields<CoreToken, 4>,
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

    pub(crate) fn from_core(t: CoreToken) -> FencingToken {
        FencingToken { fields: Fields::of_core(t) }
    }

    fn build(t: &CoreToken, i: usize, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match i {
            0 => text(py, &t.run_id),
            1 => text(py, &t.owner),
            2 => text(py, &t.lease_expires_at.to_iso()),
            _ => opt_int(py, t.epoch)?,
        })
    }

    /// The core's token, when every field is a plain value of its type (`None` otherwise:
    /// the caller's checked path then names what is wrong). A lone surrogate, an epoch that
    /// is a bool or out of range, or an expiry that is not an ISO-8601 instant is not plain.
    pub(crate) fn to_core(&self, py: Python<'_>) -> Option<Cow<'_, CoreToken>> {
        if let Some(core) = &self.fields.core {
            return Some(Cow::Borrowed(core));
        }
        let epoch = self.fields.cells[3].get()?.bind(py);
        let epoch = if epoch.is_none() { None } else { Some(crate::plain_int(epoch)?) };
        let f = &self.fields;
        let expires = f.given_text(py, 2)?;
        heart_fleet_core::bridge::token_of(f.given_text(py, 0)?, f.given_text(py, 1)?, &expires, epoch)
            .ok()
            .map(Cow::Owned)
    }
}

record_methods!(FencingToken { run_id = 0, owner = 1, lease_expires_at = 2, epoch = 3 = None });

/// An `agent_runs` row (timestamps as `toISOString()` text).
#[pyclass(module = "heart_fleet", frozen)]
pub struct RunRow {
    fields: Fields<CoreRow, 18>,
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

    pub(crate) fn from_core(r: CoreRow) -> RunRow {
        RunRow { fields: Fields::of_core(r) }
    }

    fn build(r: &CoreRow, i: usize, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match i {
            0 => text(py, &r.id),
            1 => opt_text(py, r.task_id.as_deref()),
            2 => text(py, &r.assignment_id),
            3 => text(py, &r.objective),
            4 => PyList::new(py, &r.required_capabilities)?.into_any().unbind(),
            5 => text(py, r.status.as_str()),
            6 => opt_text(py, r.assigned_agent.as_deref()),
            7 => opt_text(py, r.lease_owner.as_deref()),
            8 => opt_text(py, r.lease_expires_at.map(|t| t.to_iso()).as_deref()),
            9 => int(py, r.retries)?,
            10 => r.budget.as_ref().map_or_else(|| Ok(py.None()), |b| json_value(py, b))?,
            11 => text(py, &r.approval_state),
            12 => text(py, &r.visibility),
            13 => text(py, &r.idempotency_key),
            14 => text(py, &r.created_by),
            15 => text(py, &r.created_at.to_iso()),
            16 => text(py, &r.updated_at.to_iso()),
            _ => int(py, r.fencing_epoch)?,
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
    fields: Fields<CoreReceipt, 8>,
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

    pub(crate) fn from_core(r: CoreReceipt) -> HeartReceipt {
        HeartReceipt { fields: Fields::of_core(r) }
    }

    fn build(r: &CoreReceipt, i: usize, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match i {
            0 => text(py, &r.schema_version),
            1 => text(py, r.event.as_str()),
            2 => text(py, &r.run_id),
            3 => text(py, &r.owner),
            4 => opt_text(py, r.lease_expires_at.as_deref()),
            5 => opt_text(py, r.effect_key.as_deref()),
            6 => text(py, &r.at),
            _ => text(py, &r.digest),
        })
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
    fields: Fields<AcquireRest, 5>,
}

/// What an [`AcquireResult`] keeps of the core's result once its run and token are records
/// of their own: small, so making and freeing a result moves no row-sized value.
pub(crate) struct AcquireRest {
    acquired: bool,
    reason: Option<String>,
    code: Option<ErrorCode>,
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

    /// The result with its run and token moved into records of their own (most callers
    /// read the token, so it is made now rather than copied later).
    pub(crate) fn from_core(py: Python<'_>, r: CoreAcquire) -> PyResult<AcquireResult> {
        let CoreAcquire { acquired, run, fence, reason, code } = r;
        let fields = Fields::of_core(AcquireRest { acquired, reason, code });
        let run = match run {
            Some(row) => Py::new(py, RunRow::from_core(row))?.into_any(),
            None => py.None(),
        };
        let fence = match fence {
            Some(t) => Py::new(py, FencingToken::from_core(t))?.into_any(),
            None => py.None(),
        };
        fields.preset(1, run);
        fields.preset(2, fence);
        Ok(AcquireResult { fields })
    }

    fn build(r: &AcquireRest, i: usize, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match i {
            0 => PyBool::new(py, r.acquired).to_owned().into_any().unbind(),
            // The run and the token were moved into their own records (`from_core`).
            1 | 2 => py.None(),
            3 => opt_text(py, r.reason.as_deref()),
            _ => opt_text(py, r.code.map(|c| c.as_str())),
        })
    }
}

record_methods!(AcquireResult { acquired = 0, run = 1, fence = 2 = None, reason = 3 = None, code = 4 = None });

impl Nested for AcquireResult {
    /// The run and the token of a mapping as records.
    fn nested(i: usize, v: Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match i {
            1 => Ok(Py::new(v.py(), RunRow::from_mapping(&v)?)?.into_any()),
            2 => Ok(Py::new(v.py(), FencingToken::from_mapping(&v)?)?.into_any()),
            _ => Ok(v.unbind()),
        }
    }
}

/// The core's outcome of a fenced write: renew's (a token) or release's (a row).
#[allow(clippy::large_enum_variant, reason = "moved once, into FencedOutcome::from_core")]
pub(crate) enum FencedCore {
    Token(Fenced<CoreToken>),
    Row(Fenced<CoreRow>),
}

/// A fenced write's outcome: `outcome` `ok` with the `value` (a token or a row), or
/// `rejected` with the `cause` (superseded, expired, released, not-found) and `code`
/// `fence-rejected`.
#[pyclass(module = "heart_fleet", frozen)]
pub struct FencedOutcome {
    /// The core value kept is the cause of a rejection (`None`: it went through); the value
    /// is a record of its own, made with the outcome.
    fields: Fields<Option<LostCause>, 4>,
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

    /// The outcome with its value moved into a record of its own.
    pub(crate) fn from_core(py: Python<'_>, f: FencedCore) -> PyResult<FencedOutcome> {
        let (cause, value) = match f {
            FencedCore::Token(Fenced::Ok { value }) => (None, Py::new(py, FencingToken::from_core(value))?.into_any()),
            FencedCore::Row(Fenced::Ok { value }) => (None, Py::new(py, RunRow::from_core(value))?.into_any()),
            FencedCore::Token(Fenced::Rejected { cause }) | FencedCore::Row(Fenced::Rejected { cause }) => {
                (Some(cause), py.None())
            }
        };
        let fields = Fields::of_core(cause);
        fields.preset(1, value);
        Ok(FencedOutcome { fields })
    }

    fn build(cause: &Option<LostCause>, i: usize, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match i {
            0 => text(py, if cause.is_some() { "rejected" } else { "ok" }),
            2 => opt_text(py, cause.map(|c| c.as_str())),
            3 => opt_text(py, cause.map(|_| ErrorCode::FenceRejected.as_str())),
            // The value was moved into its own record (`from_core`).
            _ => py.None(),
        })
    }
}

record_methods!(FencedOutcome { outcome = 0, value = 1 = None, cause = 2 = None, code = 3 = None }
    /// Whether the write went through.
    #[getter]
    fn ok(&self, py: Python<'_>) -> PyResult<bool> {
        match &self.fields.core {
            Some(cause) => Ok(cause.is_none()),
            None => self.fields.get(py, 0, FencedOutcome::build)?.bind(py).eq("ok"),
        }
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

//! The SQL stores' typed path: the statements the core renders for a [`StoreRequest`] as
//! Python values, and the driver's rows back into the core's [`StoreAnswer`], with no JSON
//! either way. `SqliteLeaseStore` and `PsycopgLeaseStore` (and their asyncio twins) run
//! the statements on their connection; which statements, and what the rows mean, is the
//! core's (`heart_fleet_core::sql`).

use heart_fleet_core::sql::{self, SqlParam, SqlRow, SqlValue};
use heart_fleet_core::{ErrorCode, HeartError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString};

use crate::py_err;
use crate::store::{StoreAnswer, StoreRequest};

fn protocol(message: String) -> PyErr {
    py_err(HeartError::new(ErrorCode::StoreProtocol, message))
}

/// The statements of `request` in `dialect` (`"sqlite"` or `"postgres"`), in order, each
/// `(sql, params)`: a parameter is an `int` or a `str`, or `None` for SQLite's `now` (bind
/// the `now` column of the row the first statement, the clock read, returned).
#[pyfunction]
pub(crate) fn sql_statements<'py>(
    py: Python<'py>,
    request: &StoreRequest,
    dialect: &str,
) -> PyResult<Vec<(String, Bound<'py, PyList>)>> {
    let statements = sql::render(&request.core.get(), heart_fleet_core::bridge::dialect(dialect).map_err(py_err)?)
        .map_err(py_err)?;
    statements
        .into_iter()
        .map(|st| {
            let params = st.params.into_iter().map(|p| -> PyResult<Bound<'py, PyAny>> {
                Ok(match p {
                    SqlParam::Int(n) => n.into_pyobject(py)?.into_any(),
                    SqlParam::Text(s) => PyString::new(py, &s).into_any(),
                    SqlParam::Now => py.None().into_bound(py),
                })
            });
            Ok((st.sql, PyList::new(py, params.collect::<PyResult<Vec<_>>>()?)?))
        })
        .collect()
}

/// What one statement returned: its column names and its rows.
type StatementRows<'py> = (Vec<Bound<'py, PyString>>, Vec<Bound<'py, PyAny>>);

/// One cell as the core reads it: `None`, `bool`, `int` (64-bit), `float` or `str`.
fn cell(dialect: &str, v: &Bound<'_, PyAny>) -> PyResult<SqlValue> {
    if v.is_none() {
        Ok(SqlValue::Null)
    } else if let Ok(s) = v.cast::<PyString>() {
        let text =
            s.to_str().map_err(|_| protocol(format!("{dialect}: text with no UTF-8 form (a lone surrogate)")))?;
        Ok(SqlValue::Text(text.to_owned()))
    } else if let Ok(b) = v.cast::<PyBool>() {
        Ok(SqlValue::Bool(b.is_true()))
    } else if let Ok(n) = v.cast::<PyInt>() {
        n.extract::<i64>()
            .map(SqlValue::Int)
            .map_err(|_| protocol(format!("{dialect}: an integer column outside 64 bits ({n})")))
    } else if let Ok(f) = v.cast::<PyFloat>() {
        Ok(SqlValue::Real(f.value()))
    } else {
        let type_name = v.get_type().name().map(|n| n.to_string()).unwrap_or_default();
        Err(protocol(format!(
            "{dialect}: a column of type {type_name} (the core reads text, integers, booleans and reals)"
        )))
    }
}

/// The answer to `request` from what its statements returned: `results` holds, per
/// statement in order, `(column names, rows)`, each row a sequence (a tuple or a list) of cells in the names'
/// order. Rows the core cannot read are a `StoreProtocolError`.
#[pyfunction]
pub(crate) fn sql_answer<'py>(
    py: Python<'py>,
    request: &StoreRequest,
    dialect: &str,
    results: Vec<StatementRows<'_>>,
) -> PyResult<Bound<'py, StoreAnswer>> {
    let dialect_of = heart_fleet_core::bridge::dialect(dialect).map_err(py_err)?;
    let mut sets = Vec::with_capacity(results.len());
    for (names, rows) in results {
        let names = names
            .iter()
            .map(|n| n.to_str().map(str::to_owned))
            .collect::<PyResult<Vec<String>>>()
            .map_err(|_| protocol(format!("{dialect}: a column name with no UTF-8 form (a lone surrogate)")))?;
        let mut set: Vec<SqlRow> = Vec::with_capacity(rows.len());
        for row in rows {
            let row: Vec<Bound<'_, PyAny>> = row.extract().map_err(|_| {
                let type_name = row.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                protocol(format!("{dialect}: a row is a sequence of cells, got {type_name}"))
            })?;
            if row.len() != names.len() {
                return Err(protocol(format!("{dialect}: a row of {} cells for {} columns", row.len(), names.len())));
            }
            set.push(names.iter().zip(&row).map(|(n, v)| Ok((n.clone(), cell(dialect, v)?))).collect::<PyResult<_>>()?);
        }
        sets.push(set);
    }
    let answer = sql::decode(&request.core.get(), dialect_of, sets).map_err(py_err)?;
    StoreAnswer::object(py, answer)
}

/// The [`StoreRequest`] of a request's JSON text (a SQL store's `execute_json`); text that
/// is not a StoreRequest is a `StoreProtocolError`.
#[pyfunction]
pub(crate) fn parse_store_request(text: &str) -> PyResult<StoreRequest> {
    serde_json::from_str(text).map(StoreRequest::from_core).map_err(|e| protocol(format!("not a StoreRequest: {e}")))
}

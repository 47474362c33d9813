//! SQL rendering and decoding for SQL stores written in JavaScript (`PgLeaseStore`): the
//! core renders each store request into one parameterized statement and decodes the rows
//! the driver hands back. The JS store holds no SQL of its own beyond connecting.

use heart_fleet_core::StoreRequest;
use heart_fleet_core::sql::{self, Dialect, SqlRow, SqlValue};
use napi_derive::napi;
use serde_json::{Map, Value};

use crate::{Code, CodedResult, coded, from_heart, invalid};

fn dialect(name: &str) -> napi::Result<Dialect, Code> {
    match name {
        "postgres" => Ok(Dialect::Postgres),
        "sqlite" => Ok(Dialect::Sqlite),
        other => Err(invalid(format!("unknown SQL dialect {other:?} (postgres or sqlite)"))),
    }
}

fn request(text: &str) -> napi::Result<StoreRequest, Code> {
    serde_json::from_str(text)
        .map_err(|e| coded(heart_fleet_core::ErrorCode::StoreProtocol, format!("not a StoreRequest: {e}")))
}

/// The statements (JSON array of `{sql, params}`; a param is `{"int": n}`, `{"text": s}` or
/// `"now"`) that a store of `dialect` runs for a request (StoreRequest JSON).
#[napi]
pub fn sql_render(request_json: String, dialect_name: String) -> napi::Result<String, Code> {
    let req = request(&request_json)?;
    let statements = sql::render(&req, dialect(&dialect_name)?).map_err(from_heart)?;
    serde_json::to_string(&statements).map_err(|e| invalid(e.to_string()))
}

fn cell(v: Value) -> napi::Result<SqlValue, Code> {
    Ok(match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Bool(b),
        Value::String(s) => SqlValue::Text(s),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Int(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        other => {
            return Err(coded(
                heart_fleet_core::ErrorCode::StoreProtocol,
                format!("a SQL cell must be null, a boolean, a number or text, got {other}"),
            ));
        }
    })
}

/// A row: an object `{column: value}`, or a list of `[column, value]` pairs (what a driver's
/// array row mode gives with the field names; it keeps duplicate names apart).
fn row(v: Value) -> CodedResult<SqlRow> {
    let protocol = |m: &str| coded(heart_fleet_core::ErrorCode::StoreProtocol, m.to_owned());
    match v {
        Value::Object(map) => {
            let map: Map<String, Value> = map;
            map.into_iter().map(|(k, v)| Ok((k, cell(v)?))).collect()
        }
        Value::Array(pairs) => pairs
            .into_iter()
            .map(|pair| match pair {
                Value::Array(mut kv) if kv.len() == 2 => {
                    let v = kv.pop().unwrap_or(Value::Null);
                    match kv.pop() {
                        Some(Value::String(k)) => Ok((k, cell(v)?)),
                        _ => Err(protocol("a SQL row pair must be [column name, value]")),
                    }
                }
                _ => Err(protocol("a SQL row pair must be [column name, value]")),
            })
            .collect(),
        _ => Err(protocol("a SQL row must be an object or a list of [column, value] pairs")),
    }
}

/// Decodes the rows a driver returned (JSON: one array of rows per statement, each row an
/// object or a list of `[column, value]` pairs) into
/// the StoreAnswer JSON. Malformed rows are `store-protocol` errors.
#[napi]
pub fn sql_decode(request_json: String, dialect_name: String, results_json: String) -> napi::Result<String, Code> {
    let req = request(&request_json)?;
    let results: Vec<Vec<Value>> = serde_json::from_str(&results_json)
        .map_err(|e| coded(heart_fleet_core::ErrorCode::StoreProtocol, format!("not a list of row sets: {e}")))?;
    let results = results
        .into_iter()
        .map(|set| set.into_iter().map(row).collect::<CodedResult<Vec<SqlRow>>>())
        .collect::<CodedResult<Vec<_>>>()?;
    let answer = sql::decode(&req, dialect(&dialect_name)?, results).map_err(from_heart)?;
    serde_json::to_string(&answer).map_err(|e| invalid(e.to_string()))
}

/// The schema migrations of a dialect, in order (JSON array of `[name, sql]`). Each is
/// idempotent; run each as one batch.
#[napi]
pub fn sql_migrations(dialect_name: String) -> napi::Result<String, Code> {
    let list = sql::migrations(dialect(&dialect_name)?);
    serde_json::to_string(list).map_err(|e| invalid(e.to_string()))
}

/// The insert of one receipt (JSON) into `heart_receipts`, as `{sql, params}` JSON.
#[napi]
pub fn sql_receipt_insert(dialect_name: String, receipt_json: String) -> napi::Result<String, Code> {
    let receipt: Value = serde_json::from_str(&receipt_json).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let stmt = sql::receipt_insert(dialect(&dialect_name)?, &receipt).map_err(from_heart)?;
    serde_json::to_string(&stmt).map_err(|e| invalid(e.to_string()))
}

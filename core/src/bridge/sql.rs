//! SQL rendering and decoding for SQL stores written in the host language (node-postgres,
//! psycopg, Python's `sqlite3`): the core renders each store request into parameterized
//! statements and decodes the rows the driver hands back. Such a store holds no SQL of its
//! own beyond connecting.

use serde_json::{Map, Value};

use super::{BridgeResult, invalid, parse_json, protocol, to_text};
use crate::StoreRequest;
use crate::sql::{self, Dialect, SqlRow, SqlValue};

/// The dialect named `name`: `postgres` or `sqlite`.
pub fn dialect(name: &str) -> BridgeResult<Dialect> {
    match name {
        "postgres" => Ok(Dialect::Postgres),
        "sqlite" => Ok(Dialect::Sqlite),
        other => Err(invalid(format!("unknown SQL dialect {other:?} (postgres or sqlite)"))),
    }
}

fn request(text: &str) -> BridgeResult<StoreRequest> {
    serde_json::from_str(text).map_err(|e| protocol(format!("not a StoreRequest: {e}")))
}

/// The statements of one store request (JSON array of `{sql, params}`), in `dialect_name`.
/// PostgreSQL gets one statement; SQLite a short list to run in one `BEGIN IMMEDIATE`.
pub fn sql_render(request_json: &str, dialect_name: &str) -> BridgeResult<String> {
    let req = request(request_json)?;
    let statements = sql::render(&req, dialect(dialect_name)?)?;
    Ok(to_text(&statements))
}

fn cell(v: Value) -> BridgeResult<SqlValue> {
    Ok(match v {
        Value::Null => SqlValue::Null,
        Value::Bool(b) => SqlValue::Bool(b),
        Value::String(s) => SqlValue::Text(s),
        Value::Number(n) => match n.as_i64() {
            Some(i) => SqlValue::Int(i),
            None => SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        other => {
            return Err(protocol(format!("a SQL cell must be null, a boolean, a number or text, got {other}")));
        }
    })
}

fn row(v: Value) -> BridgeResult<SqlRow> {
    let pair_error = || protocol("a SQL row pair must be [column name, value]");
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
                        _ => Err(pair_error()),
                    }
                }
                _ => Err(pair_error()),
            })
            .collect(),
        _ => Err(protocol("a SQL row must be an object or a list of [column, value] pairs")),
    }
}

/// One statement's rows as a driver returned them (JSON: a list of rows, each an object or a
/// list of `[column, value]` pairs), as the core's rows. Malformed rows are `store-protocol`.
pub fn sql_rows(rows_json: &str) -> BridgeResult<Vec<SqlRow>> {
    let rows: Vec<Value> = serde_json::from_str(rows_json).map_err(|e| protocol(format!("not a list of rows: {e}")))?;
    rows.into_iter().map(row).collect()
}

/// Decodes the rows a driver returned (JSON: one array of rows per statement, each row an
/// object or a list of `[column, value]` pairs) into the StoreAnswer JSON. Malformed rows
/// are `store-protocol` errors.
pub fn sql_decode(request_json: &str, dialect_name: &str, results_json: &str) -> BridgeResult<String> {
    let req = request(request_json)?;
    let results: Vec<Vec<Value>> =
        serde_json::from_str(results_json).map_err(|e| protocol(format!("not a list of row sets: {e}")))?;
    let results = results
        .into_iter()
        .map(|set| set.into_iter().map(row).collect::<BridgeResult<Vec<SqlRow>>>())
        .collect::<BridgeResult<Vec<_>>>()?;
    let answer = sql::decode(&req, dialect(dialect_name)?, results)?;
    Ok(to_text(&answer))
}

/// The migration protocol of a dialect ([`sql::MigrationPlan`]) as JSON: `{begin, lock,
/// createRecordTable, isApplied, record, commit, rollback, migrations: [[name, script]]}`.
pub fn sql_migration_plan(dialect_name: &str) -> BridgeResult<String> {
    Ok(to_text(&sql::migration_plan(dialect(dialect_name)?)))
}

/// The insert of one receipt (JSON) into `heart_receipts`, as `{sql, params}` JSON.
pub fn sql_receipt_insert(dialect_name: &str, receipt_json: &str) -> BridgeResult<String> {
    let receipt: Value = parse_json(receipt_json, "not JSON")?;
    let stmt = sql::receipt_insert(dialect(dialect_name)?, &receipt)?;
    Ok(to_text(&stmt))
}

//! SQL rendering and decoding for SQL stores written in JavaScript (`PgLeaseStore`): the
//! core renders each store request into one parameterized statement and decodes the rows
//! the driver hands back. The JS store holds no SQL of its own beyond connecting. Thin napi
//! wrappers over [`heart_fleet_core::bridge`].

use heart_fleet_core::bridge;
use napi_derive::napi;

use crate::{Code, from_heart};

/// The statements of one store request (JSON array of `{sql, params}`), in `dialect_name`
/// (`postgres` or `sqlite`).
#[napi]
pub fn sql_render(request_json: String, dialect_name: String) -> napi::Result<String, Code> {
    bridge::sql_render(&request_json, &dialect_name).map_err(from_heart)
}

/// Decodes the rows a driver returned (JSON: one array of rows per statement, each row an
/// object or a list of `[column, value]` pairs) into the StoreAnswer JSON. Malformed rows
/// are `store-protocol` errors.
#[napi]
pub fn sql_decode(request_json: String, dialect_name: String, results_json: String) -> napi::Result<String, Code> {
    bridge::sql_decode(&request_json, &dialect_name, &results_json).map_err(from_heart)
}

/// The schema migrations of a dialect, in order (JSON array of `[name, sql]`). Each is
/// idempotent; run each as one batch.
#[napi]
pub fn sql_migration_plan(dialect_name: String) -> napi::Result<String, Code> {
    bridge::sql_migration_plan(&dialect_name).map_err(from_heart)
}

/// The insert of one receipt (JSON) into `heart_receipts`, as `{sql, params}` JSON.
#[napi]
pub fn sql_receipt_insert(dialect_name: String, receipt_json: String) -> napi::Result<String, Code> {
    bridge::sql_receipt_insert(&dialect_name, &receipt_json).map_err(from_heart)
}

/// Appends receipts to `heart_receipts` chained per run (and signed): the core's
/// `receipt_table::TableAppender`, driven by `PgLeaseStore.receiptSink`, which runs each
/// statement it gives and hands back the rows.
#[napi]
pub struct NativeReceiptAppender {
    inner: heart_fleet_core::receipt_table::JsonTableAppender,
}

#[napi]
impl NativeReceiptAppender {
    /// An appender for `dialect_name` signing with `signing_keys_json` (a JSON array of key
    /// texts). A bad key is `invalid-input` naming its index, never its bytes.
    #[napi(factory)]
    pub fn create(dialect_name: String, signing_keys_json: String) -> napi::Result<NativeReceiptAppender, Code> {
        heart_fleet_core::receipt_table::JsonTableAppender::new(&dialect_name, &signing_keys_json)
            .map(|inner| NativeReceiptAppender { inner })
            .map_err(from_heart)
    }

    /// Starts appending a receipt (JSON): the first statement's `{sql, params}` JSON.
    #[napi]
    pub fn begin(&mut self, receipt_json: String) -> napi::Result<String, Code> {
        self.inner.begin(&receipt_json).map_err(from_heart)
    }

    /// The rows the last statement returned (JSON, `[[column, value], ...]` per row): the next
    /// statement's JSON, or null when the receipt is in.
    #[napi]
    pub fn answer(&mut self, rows_json: String) -> napi::Result<Option<String>, Code> {
        self.inner.answer(&rows_json).map_err(from_heart)
    }

    /// The last statement failed: the run's head is read again before its next receipt.
    #[napi]
    pub fn failed(&mut self) {
        self.inner.failed();
    }

    /// The store rolled back receipts this appender wrote: every run's head is read again.
    #[napi]
    pub fn forget_heads(&mut self) {
        self.inner.forget_heads();
    }
}

/// A PostgreSQL store's deadlines (JSON: `statementTimeoutMs`, `maxStatementTimeoutMs`,
/// `connectTimeoutMs`, `cancelGraceMs`), the same in every driver.
#[napi]
pub fn postgres_deadlines() -> String {
    bridge::postgres_deadlines_json()
}

/// The server-side `statement_timeout` for a statement deadline of `client_ms` (a fifth
/// shorter, by at most 100 ms): the core's `sql::deadlines::server_statement_timeout_ms`.
#[napi]
pub fn server_statement_timeout_ms(client_ms: u32) -> u32 {
    let ms = heart_fleet_core::sql::deadlines::server_statement_timeout_ms(u64::from(client_ms));
    u32::try_from(ms).unwrap_or(client_ms)
}

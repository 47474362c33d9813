//! The `heart_receipts` table: a sink that appends every receipt a fleet emits
//! ([`ReceiptTableSink`], one INSERT rendered by [`heart_fleet_core::sql::receipt_insert`]),
//! and reading and verifying what is there ([`AnyStore::verify_receipts`]).
//!
//! A receipt is written after the store write it describes, by the process that made it; a
//! process killed between the two leaves the write without its receipt (never a receipt
//! without its write). Sink failures cannot fail a lease operation (the core's rule): each
//! lost receipt is kept in [`TableSinkHealth`] for the host to report.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::sql::{self, SqlValue, Statement};
use heart_fleet_core::{ErrorCode, HeartReceipt, StoreError, verify_receipt};
use serde::Serialize;
use serde_json::Value;

use crate::AnyStore;

#[derive(Debug, Default)]
struct Health {
    written: u64,
    error: Option<String>,
    lost: Vec<LostReceipt>,
}

/// A receipt the sink could not insert, and why. (The write it describes did happen: a
/// receipt is emitted only after its write succeeded.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostReceipt {
    /// The receipt.
    pub receipt: HeartReceipt,
    /// The store's error.
    pub error: String,
}

/// What a [`ReceiptTableSink`] managed to do.
#[derive(Debug, Clone, Default)]
pub struct TableSinkHealth {
    state: Arc<Mutex<Health>>,
}

impl TableSinkHealth {
    /// Receipts inserted so far.
    pub fn written(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).written
    }

    /// The first insert error, if any.
    pub fn error(&self) -> Option<String> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).error.clone()
    }

    /// The receipts that could not be inserted, in order, from the `from`-th on (a host that
    /// journals them asks for the ones it has not seen yet).
    pub fn lost_since(&self, from: usize) -> Vec<LostReceipt> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.lost.get(from..).map(<[LostReceipt]>::to_vec).unwrap_or_default()
    }
}

/// Appends receipts to `heart_receipts` through a clone of a store (sharing its connection;
/// the fleet emits receipts between store requests, never during one).
///
/// A failed insert loses that receipt only: the sink goes on with the next one (a store that
/// failed once, a lost connection, usually answers the next request, and an audit trail that
/// stopped at the first hiccup would lose everything after it). The insert is not retried,
/// since its outcome is unknown when the connection died under it, and a retry could write
/// the receipt twice. Every loss is kept in [`TableSinkHealth`] for the host to report.
#[derive(Debug)]
pub struct ReceiptTableSink {
    store: AnyStore,
    health: TableSinkHealth,
}

impl ReceiptTableSink {
    /// A sink writing through `store`'s connection, and its health handle.
    pub fn new(store: &AnyStore) -> (ReceiptTableSink, TableSinkHealth) {
        let health = TableSinkHealth::default();
        (ReceiptTableSink { store: store.clone(), health: health.clone() }, health)
    }
}

impl ReceiptSink for ReceiptTableSink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        let outcome = self.store.append_receipt(receipt);
        let mut state = self.health.state.lock().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(()) => state.written += 1,
            Err(e) => {
                let error = format!("cannot append to heart_receipts: {e}");
                state.error.get_or_insert_with(|| error.clone());
                state.lost.push(LostReceipt { receipt: receipt.clone(), error });
            }
        }
    }
}

/// One row of `heart_receipts`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredReceipt {
    /// The row id (insertion order).
    pub id: i64,
    /// The receipt as written (the `receipt` column).
    pub receipt: Value,
    /// The row's columns disagree with the receipt they were written from.
    pub columns_differ: bool,
}

/// Counts of a verification of the receipts table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TableVerifySummary {
    /// Rows.
    pub receipts: u64,
    /// Rows whose receipt verifies and whose columns match it.
    pub ok: u64,
    /// Rows whose digest does not match, or whose columns disagree with the receipt.
    pub tampered: u64,
    /// Rows whose receipt is not a receipt at all.
    pub malformed: u64,
}

impl TableVerifySummary {
    /// Whether every row verified.
    pub fn all_ok(&self) -> bool {
        self.ok == self.receipts
    }
}

const COLUMNS: [(&str, &str); 8] = [
    ("schema_version", "schemaVersion"),
    ("event", "event"),
    ("run_id", "runId"),
    ("owner", "owner"),
    ("lease_expires_at", "leaseExpiresAt"),
    ("effect_key", "effectKey"),
    ("at", "at"),
    ("digest", "digest"),
];

impl AnyStore {
    /// Appends one receipt to `heart_receipts`.
    pub fn append_receipt(&mut self, receipt: &HeartReceipt) -> Result<(), StoreError> {
        let value = serde_json::to_value(receipt).map_err(|e| StoreError(format!("receipt to JSON: {e}")))?;
        let stmt = sql::receipt_insert(self.dialect(), &value).map_err(|e| StoreError(e.to_string()))?;
        self.query(&stmt).map(|_| ())
    }

    /// Reads `heart_receipts` in insertion order, from row id `after` (exclusive) on, at most
    /// `limit` rows.
    pub fn read_receipts(&mut self, after: i64, limit: u32) -> Result<Vec<StoredReceipt>, StoreError> {
        let cols = COLUMNS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ");
        let stmt = match self.dialect() {
            sql::Dialect::Sqlite => Statement {
                sql: format!("SELECT id, {cols}, receipt FROM heart_receipts WHERE id > ?1 ORDER BY id LIMIT ?2"),
                params: vec![sql::SqlParam::Int(after), sql::SqlParam::Int(i64::from(limit))],
            },
            sql::Dialect::Postgres => Statement {
                sql: format!(
                    "SELECT id, {cols}, receipt::text AS receipt FROM heart_receipts WHERE id > $1::bigint \
                     ORDER BY id LIMIT $2::bigint"
                ),
                params: vec![sql::SqlParam::Int(after), sql::SqlParam::Int(i64::from(limit))],
            },
        };
        let rows = self.query(&stmt)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let cell = |name: &str| row.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            let id = match cell("id") {
                Some(SqlValue::Int(n)) => n,
                other => return Err(StoreError(format!("heart_receipts: id is {other:?}"))),
            };
            let receipt = match cell("receipt") {
                Some(SqlValue::Text(t)) => serde_json::from_str(&t).unwrap_or(Value::String(t)),
                other => return Err(StoreError(format!("heart_receipts row {id}: receipt is {other:?}"))),
            };
            let columns_differ = COLUMNS.iter().any(|(col, field)| {
                let column = match cell(col) {
                    Some(SqlValue::Text(t)) => Value::String(t),
                    _ => Value::Null,
                };
                receipt.get(field).cloned().unwrap_or(Value::Null) != column
            });
            out.push(StoredReceipt { id, receipt, columns_differ });
        }
        Ok(out)
    }

    /// Checks every row of `heart_receipts` with the core's `verify_receipt`, and that the
    /// row's columns match its receipt. For each row that does not verify, `report` gets
    /// `row ID: CODE: MESSAGE`.
    pub fn verify_receipts(&mut self, report: &mut dyn FnMut(String)) -> Result<TableVerifySummary, StoreError> {
        let mut summary = TableVerifySummary::default();
        let mut after = 0;
        loop {
            let page = self.read_receipts(after, 1000)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for row in page {
                summary.receipts += 1;
                match verify_receipt(&row.receipt) {
                    Ok(()) if !row.columns_differ => summary.ok += 1,
                    Ok(()) => {
                        summary.tampered += 1;
                        report(format!(
                            "row {}: {}: the row's columns disagree with its receipt",
                            row.id,
                            ErrorCode::ReceiptTampered
                        ));
                    }
                    Err(e) => {
                        if e.code == ErrorCode::ReceiptTampered {
                            summary.tampered += 1;
                        } else {
                            summary.malformed += 1;
                        }
                        report(format!("row {}: {}: {}", row.id, e.code, e.message));
                    }
                }
            }
        }
        Ok(summary)
    }

    /// Receipts in `heart_receipts` by event.
    pub fn receipt_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError> {
        let stmt = Statement {
            sql: "SELECT event, count(*) AS n FROM heart_receipts GROUP BY event ORDER BY event".into(),
            params: vec![],
        };
        let mut out = BTreeMap::new();
        for row in self.query(&stmt)? {
            match (row.first().map(|c| &c.1), row.get(1).map(|c| &c.1)) {
                (Some(SqlValue::Text(event)), Some(SqlValue::Int(n))) => {
                    out.insert(event.clone(), u64::try_from(*n).unwrap_or(0));
                }
                other => return Err(StoreError(format!("heart_receipts counts: unexpected row {other:?}"))),
            }
        }
        Ok(out)
    }
}

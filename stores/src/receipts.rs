//! The `heart_receipts` table: a sink that appends every receipt a fleet emits, chained per
//! run ([`ReceiptTableSink`], one INSERT rendered by [`heart_fleet_core::sql::receipt_insert`]),
//! and reading and verifying what is there ([`AnyStore::verify_receipts`]).
//!
//! A receipt is written in the same transaction as the store write it records
//! ([`crate::held`]): the sink makes its store hold each operation's writes open until the
//! operation settles, and inserts the receipts inside. A process killed before the commit
//! leaves neither; a receipt that cannot be inserted rolls its write back and fails the
//! operation (a receipt of a lease or recovery step records a write: even a verify touches
//! the run's `updated_at`). A receipt emitted while no write is held (guard's
//! `effect_committed` / `effect_deduped`, which follow the host's ledger after the settle) is
//! inserted on its own; when that fails, only the receipt is lost, and it is kept in
//! [`TableSinkHealth`] for the host to report.
//!
//! Every receipt goes at the next position of its run's chain ([`heart_fleet_core::chain`]):
//! the sink keeps the head of each run it wrote to, and when another process appended in
//! between (the insert finds the position taken, migration 0003's unique index), it reads the
//! new head from the table and chains again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use heart_fleet_core::chain::{self, LogEntry, LogExpectations, LogReport, Signer, VerifyKeys};
use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::receipt_table::TableAppender;
use heart_fleet_core::sql::{self, SqlValue, Statement};
use heart_fleet_core::{HeartError, HeartReceipt, StoreError};
use serde::Serialize;
use serde_json::Value;

use crate::AnyStore;

#[derive(Debug, Default)]
struct Health {
    written: u64,
    rolled_back: u64,
    error: Option<String>,
    lost: Vec<LostReceipt>,
}

/// A receipt the sink could not insert while no write was held, and why.
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

    /// Receipts that could not be inserted inside their write's transaction, so that the
    /// write was rolled back with them and its operation failed.
    pub fn rolled_back(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).rolled_back
    }

    /// The first error of a lost receipt, if any.
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

/// Appends receipts to `heart_receipts` through a clone of a store (sharing its connection
/// and its held transaction; the fleet emits receipts between store requests, never during
/// one), each chained after the head of its run and signed with the sink's [`Signer`], by
/// the core's [`TableAppender`] (the same rule the Node and Python sinks run).
///
/// Making the sink makes the store hold writes ([`crate::held`]): a failed insert inside a
/// held write dooms it, and the operation fails when it settles. A failed insert of a receipt
/// emitted while no write is held loses that receipt only: the sink goes on with the next one (a
/// store that failed once, a lost connection, usually answers the next request, and an audit
/// trail that stopped at the first hiccup would lose everything after it). The insert is not
/// retried, since its outcome is unknown when the connection died under it; the head of that
/// run is read from the table again before its next receipt. Every loss is kept in
/// [`TableSinkHealth`] for the host to report.
#[derive(Debug)]
pub struct ReceiptTableSink {
    store: AnyStore,
    health: TableSinkHealth,
    appender: TableAppender,
    /// The store's rollbacks when the chain heads were last known good.
    rollbacks_seen: u64,
}

impl ReceiptTableSink {
    /// A sink writing unsigned chains through `store`'s connection, and its health handle.
    pub fn new(store: &AnyStore) -> (ReceiptTableSink, TableSinkHealth) {
        ReceiptTableSink::signed(store, Arc::new(Signer::unsigned()))
    }

    /// A sink signing every receipt's link with `signer`'s keys.
    pub fn signed(store: &AnyStore, signer: Arc<Signer>) -> (ReceiptTableSink, TableSinkHealth) {
        let health = TableSinkHealth::default();
        let appender = TableAppender::new(store.dialect(), signer);
        store.hold_writes();
        let rollbacks_seen = store.held_rollbacks();
        (ReceiptTableSink { store: store.clone(), health: health.clone(), appender, rollbacks_seen }, health)
    }

    fn append(&mut self, receipt: &HeartReceipt) -> Result<(), String> {
        let rollbacks = self.store.held_rollbacks();
        if rollbacks != self.rollbacks_seen {
            // Receipts this sink chained may have been rolled back with their writes.
            self.appender.forget_heads();
            self.rollbacks_seen = rollbacks;
        }
        let mut statement = self.appender.begin(receipt.clone()).map_err(|e| e.to_string())?;
        loop {
            let rows = match self.store.query(&statement) {
                Ok(rows) => rows,
                Err(e) => {
                    self.appender.failed();
                    return Err(e.to_string());
                }
            };
            match self.appender.answer(&rows).map_err(|e| e.to_string())? {
                Some(next) => statement = next,
                None => return Ok(()),
            }
        }
    }
}

impl ReceiptSink for ReceiptTableSink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        let outcome = self.append(receipt);
        let mut state = self.health.state.lock().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(()) => state.written += 1,
            Err(e) => {
                let error = format!("cannot append to heart_receipts: {e}");
                if self.store.doom_held(&error) {
                    state.rolled_back += 1;
                } else {
                    state.error.get_or_insert_with(|| error.clone());
                    state.lost.push(LostReceipt { receipt: receipt.clone(), error });
                }
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
    /// Appends one receipt to `heart_receipts` as it is, without chain fields (as a TypeScript
    /// node's receipt would be).
    pub fn append_receipt(&mut self, receipt: &HeartReceipt) -> Result<(), StoreError> {
        let value = serde_json::to_value(receipt).map_err(|e| StoreError(format!("receipt to JSON: {e}")))?;
        let stmt = sql::receipt_insert(self.dialect(), &value).map_err(|e| StoreError(e.to_string()))?;
        self.query(&stmt).map(|_| ())
    }

    /// Reads `heart_receipts` in insertion order, from row id `after` (exclusive) on, at most
    /// `limit` rows.
    pub fn read_receipts(&mut self, after: i64, limit: u32) -> Result<Vec<StoredReceipt>, StoreError> {
        self.read_receipts_of(None, after, limit)
    }

    /// [`read_receipts`](AnyStore::read_receipts) of one run only when `run` is given (by
    /// the index `idx_heart_receipts_run`, not a scan of the table).
    pub fn read_receipts_of(
        &mut self,
        run: Option<&str>,
        after: i64,
        limit: u32,
    ) -> Result<Vec<StoredReceipt>, StoreError> {
        let cols = COLUMNS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ");
        let mut params = vec![sql::SqlParam::Int(after), sql::SqlParam::Int(i64::from(limit))];
        params.extend(run.map(|r| sql::SqlParam::Text(r.to_owned())));
        // The dialects differ in placeholders and casts only.
        let (receipt, after, limit, of_run) = match self.dialect() {
            sql::Dialect::Sqlite => ("receipt", "?1", "?2", " AND run_id = ?3"),
            sql::Dialect::Postgres => {
                ("receipt::text AS receipt", "$1::bigint", "$2::bigint", " AND run_id = $3::text")
            }
        };
        let of_run = if run.is_some() { of_run } else { "" };
        let stmt = Statement {
            sql: format!(
                "SELECT id, {cols}, {receipt} FROM heart_receipts WHERE id > {after}{of_run} ORDER BY id LIMIT {limit}"
            ),
            params,
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

    /// Checks every row of `heart_receipts`, in insertion order, with the core's
    /// [`chain::verify_log`] (each receipt's digest, link and signatures, then each run's
    /// chain), and that each row's columns match its receipt (a column that disagrees is a
    /// `receipt-tampered` finding). Positions are row ids; with [`LogExpectations::run`], only
    /// that run's rows are checked. `Err` with `invalid-input` for bad input (a receipt of an
    /// unknown schema version), `store-unavailable` when the store fails.
    pub fn verify_receipts(&mut self, keys: &VerifyKeys, expect: &LogExpectations) -> Result<LogReport, HeartError> {
        let mut rows = Vec::new();
        let mut after = 0;
        loop {
            // The whole table even for one run: a row whose run_id column was edited away
            // from the run is still that run's receipt (the filter below reads the receipt).
            let page = self.read_receipts(after, 1000).map_err(|e| HeartError::store("reading heart_receipts", &e))?;
            let Some(last) = page.last() else { break };
            after = last.id;
            // The log of one run (`expect.run`) is that run's rows.
            rows.extend(page.into_iter().filter(|row| {
                expect.run.as_deref().is_none_or(|run| row.receipt.get("runId").and_then(Value::as_str) == Some(run))
            }));
        }
        verify_rows(&rows, keys, expect)
    }

    /// The rows of one run (by its `run_id` column, oldest first, at most `limit`) and their
    /// verification as one log, with no key: what a console shows as the run's timeline.
    /// Findings name each row by its id.
    pub fn run_receipts(&mut self, run_id: &str, limit: u32) -> Result<(Vec<StoredReceipt>, LogReport), HeartError> {
        let rows = self
            .read_receipts_of(Some(run_id), 0, limit)
            .map_err(|e| HeartError::store("reading heart_receipts", &e))?;
        let report = verify_rows(&rows, &VerifyKeys::none(), &LogExpectations::default())?;
        Ok((rows, report))
    }

    /// Receipts in `heart_receipts` by event.
    pub fn receipt_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut out = BTreeMap::new();
        for row in self.query(&heart_fleet_core::sql::readout::receipt_counts())? {
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

/// [`chain::verify_log`] over table rows (positions are row ids), with a `receipt-tampered`
/// finding for each row whose columns disagree with its receipt.
fn verify_rows(rows: &[StoredReceipt], keys: &VerifyKeys, expect: &LogExpectations) -> Result<LogReport, HeartError> {
    let entries: Vec<LogEntry> = rows
        .iter()
        .map(|row| LogEntry { position: u64::try_from(row.id).unwrap_or(0), value: row.receipt.clone() })
        .collect();
    let mut report =
        chain::verify_log(&entries, keys, expect).map_err(|e| HeartError::invalid(format!("row {}", e.message)))?;
    for row in rows.iter().filter(|r| r.columns_differ) {
        let position = u64::try_from(row.id).unwrap_or(0);
        // A row whose receipt verified is now counted tampered; one already found wrong keeps
        // its count and gains the finding.
        let already = report.findings.iter().any(|f| f.position == Some(position) && f.code.is_about_the_receipt());
        if !already {
            report.tampered += 1;
            report.ok = report.ok.saturating_sub(1);
        }
        report.findings.push(chain::Finding {
            position: Some(position),
            run_id: row.receipt.get("runId").and_then(Value::as_str).map(str::to_owned),
            code: chain::FindingCode::Tampered,
            message: "the row's columns disagree with its receipt".into(),
        });
    }
    report.sort_findings();
    Ok(report)
}

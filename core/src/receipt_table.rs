//! Appending receipts to `heart_receipts`, each at the next position of its run's chain: a
//! sans-I/O machine ([`TableAppender`]) that every host drives with its own connection (the
//! Rust stores' `ReceiptTableSink`, the Node and Python stores' receipt sinks), so the rule
//! exists once.
//!
//! One append: [`TableAppender::begin`] gives the first statement (the run's head, unless this
//! appender wrote to the run before and knows it; else the chained insert); the host runs it
//! and hands the rows to [`TableAppender::answer`], which gives the next statement or `None`
//! when the receipt is in. An insert that finds its position taken (another writer appended to
//! the run in between: the insert returns no row, migration 0003's unique index settles a
//! race) reads the head again and chains after it, at most [`CHAIN_ATTEMPTS`] times. A
//! statement that failed is reported with [`TableAppender::failed`]: its outcome is unknown,
//! so the run's head is read from the table before its next receipt.

use std::collections::HashMap;
use std::sync::Arc;

use crate::chain::{ChainLink, FleetKey, Signer, chained_json};
use crate::error::{ErrorCode, HeartError};
use crate::receipt::{HeartReceipt, verify_receipt};
use crate::sql::{self, Dialect, SqlRow, SqlValue, Statement};

/// How often an append re-reads a head and chains again when other writers keep taking the
/// position it chained for, before it gives the receipt up (`store-unavailable`).
pub const CHAIN_ATTEMPTS: usize = 8;

struct Pending {
    receipt: HeartReceipt,
    attempts: usize,
    /// The link of the insert in flight; `None` while the head is being read.
    inserting: Option<ChainLink>,
}

/// Appends receipts to `heart_receipts` chained per run and signed with a [`Signer`].
pub struct TableAppender {
    dialect: Dialect,
    signer: Arc<Signer>,
    /// The head `(seq, link)` of each run this appender wrote to.
    heads: HashMap<String, (u64, String)>,
    pending: Option<Pending>,
}

impl std::fmt::Debug for TableAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableAppender").field("dialect", &self.dialect).field("runs", &self.heads.len()).finish()
    }
}

impl TableAppender {
    /// An appender for a store of `dialect`, signing with `signer`.
    pub fn new(dialect: Dialect, signer: Arc<Signer>) -> TableAppender {
        TableAppender { dialect, signer, heads: HashMap::new(), pending: None }
    }

    /// Starts appending `receipt`: the first statement to run. A receipt that does not verify
    /// is refused (`invalid-input`, `receipt-tampered`). An append left unfinished is
    /// abandoned as [`TableAppender::failed`] would.
    pub fn begin(&mut self, receipt: HeartReceipt) -> Result<Statement, HeartError> {
        self.failed();
        let value = serde_json::to_value(&receipt).map_err(|e| HeartError::invalid(format!("the receipt: {e}")))?;
        verify_receipt(&value)?;
        let head = self.heads.get(&receipt.run_id).cloned();
        let mut pending = Pending { receipt, attempts: 0, inserting: None };
        let statement = match head {
            Some(head) => self.insert(&mut pending, Some(head))?,
            None => sql::receipt_chain_head(self.dialect, &pending.receipt.run_id),
        };
        self.pending = Some(pending);
        Ok(statement)
    }

    /// The rows the last statement returned: the next statement, or `None` when the receipt
    /// is in. Rows of the wrong shape are `store-protocol`; a position taken
    /// [`CHAIN_ATTEMPTS`] times is `store-unavailable` (the receipt is lost).
    pub fn answer(&mut self, rows: &[SqlRow]) -> Result<Option<Statement>, HeartError> {
        let Some(mut pending) = self.pending.take() else {
            return Err(HeartError::new(ErrorCode::InvalidState, "no receipt is being appended"));
        };
        match pending.inserting.take() {
            None => {
                let head = head_of(&pending.receipt.run_id, rows)?;
                let statement = self.insert(&mut pending, head)?;
                self.pending = Some(pending);
                Ok(Some(statement))
            }
            Some(link) if !rows.is_empty() => {
                self.heads.insert(pending.receipt.run_id, (link.seq, link.link));
                Ok(None)
            }
            Some(_) => {
                pending.attempts += 1;
                if pending.attempts >= CHAIN_ATTEMPTS {
                    return Err(HeartError::new(
                        ErrorCode::StoreUnavailable,
                        format!(
                            "run {}: another writer took the next position of its receipt chain {CHAIN_ATTEMPTS} times",
                            pending.receipt.run_id
                        ),
                    ));
                }
                let statement = sql::receipt_chain_head(self.dialect, &pending.receipt.run_id);
                self.pending = Some(pending);
                Ok(Some(statement))
            }
        }
    }

    /// Forgets the head of every run: the store rolled back receipts this appender wrote,
    /// so each run's head is read from the table again before its next receipt.
    pub fn forget_heads(&mut self) {
        self.heads.clear();
    }

    /// The last statement failed: the append is abandoned and the run's head forgotten (the
    /// statement's outcome is unknown).
    pub fn failed(&mut self) {
        if let Some(p) = self.pending.take() {
            self.heads.remove(&p.receipt.run_id);
        }
    }

    fn insert(&self, pending: &mut Pending, head: Option<(u64, String)>) -> Result<Statement, HeartError> {
        let (seq, prev) = head.map_or((1, None), |(seq, link)| (seq + 1, Some(link)));
        let link = self.signer.link(&pending.receipt, seq, prev.as_deref());
        let statement = sql::receipt_insert(self.dialect, &chained_json(&pending.receipt, &link))?;
        pending.inserting = Some(link);
        Ok(statement)
    }
}

/// The head `(seq, link)` in the rows of [`sql::receipt_chain_head`].
fn head_of(run_id: &str, rows: &[SqlRow]) -> Result<Option<(u64, String)>, HeartError> {
    let Some(row) = rows.first() else { return Ok(None) };
    let cell = |name: &str| row.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    // A driver may hand a bigint over as text (node-postgres does).
    let seq = match cell("seq") {
        Some(SqlValue::Int(n)) => u64::try_from(*n).ok(),
        Some(SqlValue::Text(t)) => t.parse::<u64>().ok(),
        _ => None,
    };
    match (seq, cell("link")) {
        (Some(seq), Some(SqlValue::Text(link))) if seq >= 1 => Ok(Some((seq, link.clone()))),
        other => Err(HeartError::new(
            ErrorCode::StoreProtocol,
            format!("heart_receipts chain head of run {run_id}: unexpected row {other:?}"),
        )),
    }
}

/// [`TableAppender`] over JSON text, for the bindings' receipt sinks (node-postgres, psycopg,
/// sqlite3): statements out as `{sql, params}` JSON (as `sqlReceiptInsert` renders them), rows
/// in as a driver returns them (`[[column, value], ...]` per row).
#[derive(Debug)]
pub struct JsonTableAppender(TableAppender);

impl JsonTableAppender {
    /// An appender for `dialect` (`postgres`, `sqlite`) signing with the keys of
    /// `signing_keys_json` (a JSON array of key texts, as key files hold them; `[]`: unsigned).
    /// A bad key is `invalid-input` naming its index, never its bytes.
    pub fn new(dialect: &str, signing_keys_json: &str) -> Result<JsonTableAppender, HeartError> {
        let dialect = crate::bridge::dialect(dialect)?;
        let keys: Vec<String> = serde_json::from_str(signing_keys_json)
            .map_err(|_| HeartError::invalid("signing keys: a list of key texts"))?;
        let mut signer = Signer::unsigned();
        for (i, text) in keys.iter().enumerate() {
            let key =
                FleetKey::parse(text).map_err(|e| HeartError::invalid(format!("signing key {i}: {}", e.message)))?;
            signer =
                signer.with_key(key).map_err(|e| HeartError::invalid(format!("signing key {i}: {}", e.message)))?;
        }
        Ok(JsonTableAppender(TableAppender::new(dialect, Arc::new(signer))))
    }

    /// [`TableAppender::begin`] of a receipt given as JSON.
    pub fn begin(&mut self, receipt_json: &str) -> Result<String, HeartError> {
        let receipt: HeartReceipt =
            serde_json::from_str(receipt_json).map_err(|e| HeartError::invalid(format!("not a receipt: {e}")))?;
        self.0.begin(receipt).map(|st| statement_json(&st))
    }

    /// [`TableAppender::answer`] with the rows as JSON: the next statement's JSON, or `None`.
    pub fn answer(&mut self, rows_json: &str) -> Result<Option<String>, HeartError> {
        let rows = match crate::bridge::sql_rows(rows_json) {
            Ok(rows) => rows,
            Err(e) => {
                self.0.failed();
                return Err(e);
            }
        };
        Ok(self.0.answer(&rows)?.map(|st| statement_json(&st)))
    }

    /// [`TableAppender::failed`].
    pub fn failed(&mut self) {
        self.0.failed();
    }

    /// [`TableAppender::forget_heads`]: the store rolled back receipts this appender wrote.
    pub fn forget_heads(&mut self) {
        self.0.forget_heads();
    }
}

fn statement_json(st: &Statement) -> String {
    serde_json::to_string(st).unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::chain::{LogEntry, LogExpectations, VerifyKeys, verify_log};
    use crate::receipt::HeartEvent;
    use crate::time::Timestamp;

    fn receipt(run: &str, owner: &str) -> HeartReceipt {
        HeartReceipt::new(HeartEvent::Released, run, owner, None, None, Timestamp(0))
    }

    fn inserted(st: &Statement) -> serde_json::Value {
        assert!(st.sql.starts_with("INSERT INTO heart_receipts"), "{}", st.sql);
        let json = st.params.iter().find_map(|p| match p {
            sql::SqlParam::Text(t) if t.starts_with('{') => serde_json::from_str(t).ok(),
            _ => None,
        });
        json.expect("the receipt parameter")
    }

    fn head_row(seq: SqlValue, link: &str) -> Vec<SqlRow> {
        vec![vec![("seq".into(), seq), ("link".into(), SqlValue::Text(link.into()))]]
    }

    #[test]
    fn an_append_reads_the_head_once_inserts_after_it_and_chains_again_when_the_position_is_taken() {
        let mut a = TableAppender::new(Dialect::Sqlite, Arc::new(Signer::unsigned()));
        // A new run: the head first, then the insert at seq 1.
        let st = a.begin(receipt("r1", "a")).unwrap();
        assert!(st.sql.starts_with("SELECT"), "{}", st.sql);
        let st = a.answer(&[]).unwrap().unwrap();
        let first = inserted(&st);
        assert_eq!((first["seq"].as_u64(), &first["prev"]), (Some(1), &serde_json::Value::Null));
        assert_eq!(a.answer(&[vec![("id".into(), SqlValue::Int(1))]]).unwrap(), None);
        // The head is known now: straight to the insert at seq 2.
        let st = a.begin(receipt("r1", "b")).unwrap();
        let second = inserted(&st);
        assert_eq!((second["seq"].as_u64(), &second["prev"]), (Some(2), &first["link"]));
        // Taken by another writer: the head again (a driver's bigint as text), then seq 6.
        let st = a.answer(&[]).unwrap().unwrap();
        assert!(st.sql.starts_with("SELECT"));
        let st = a.answer(&head_row(SqlValue::Text("5".into()), "sha256:heart-chain:v1:x")).unwrap().unwrap();
        let sixth = inserted(&st);
        assert_eq!((sixth["seq"].as_u64(), sixth["prev"].as_str()), (Some(6), Some("sha256:heart-chain:v1:x")));
        assert_eq!(a.answer(&[vec![("id".into(), SqlValue::Int(9))]]).unwrap(), None);
        // A failed statement forgets the head: the next receipt reads it again.
        a.begin(receipt("r1", "c")).unwrap();
        a.failed();
        assert!(a.begin(receipt("r1", "d")).unwrap().sql.starts_with("SELECT"));
        // Taken CHAIN_ATTEMPTS times: store-unavailable.
        let mut e = None;
        for _ in 0..CHAIN_ATTEMPTS {
            a.answer(&head_row(SqlValue::Int(7), "l")).unwrap().unwrap();
            match a.answer(&[]) {
                Ok(next) => assert!(next.unwrap().sql.starts_with("SELECT")),
                Err(err) => e = Some(err),
            }
        }
        assert_eq!(e.unwrap().code, ErrorCode::StoreUnavailable);
        assert_eq!(a.answer(&[]).unwrap_err().code, ErrorCode::InvalidState);
        // A head row of the wrong shape, and a receipt that does not verify.
        a.begin(receipt("r2", "a")).unwrap();
        let bad = vec![vec![("seq".into(), SqlValue::Bool(true))]];
        assert_eq!(a.answer(&bad).unwrap_err().code, ErrorCode::StoreProtocol);
        let mut forged = receipt("r2", "a");
        forged.owner = "mallory".into();
        assert_eq!(a.begin(forged).unwrap_err().code, ErrorCode::ReceiptTampered);
    }

    #[test]
    fn what_the_json_appender_writes_verifies_signed() {
        let key = FleetKey::hmac_from_random([4; 32]).to_key_file_text();
        let keys = serde_json::json!([key]).to_string();
        let mut a = JsonTableAppender::new("postgres", &keys).unwrap();
        let mut log = Vec::new();
        for (i, owner) in ["a", "b", "c"].iter().enumerate() {
            let text = serde_json::to_string(&receipt("r1", owner)).unwrap();
            let mut st: Statement = serde_json::from_str(&a.begin(&text).unwrap()).unwrap();
            let rows = if i == 0 { "[]" } else { r#"[[["id", 1]]]"# };
            if i == 0 {
                st = serde_json::from_str(&a.answer(rows).unwrap().unwrap()).unwrap();
            }
            log.push(LogEntry { position: i as u64 + 1, value: inserted(&st) });
            assert_eq!(a.answer(r#"[[["id", 1]]]"#).unwrap(), None);
        }
        let keys = VerifyKeys::none().with_hmac(FleetKey::parse(&key).unwrap()).unwrap();
        let report = verify_log(&log, &keys, &LogExpectations::default()).unwrap();
        assert!(report.passed(), "{:?}", report.findings);
        assert_eq!((report.chained, report.signed), (3, 3));
        let e = JsonTableAppender::new("postgres", r#"["heart-fleet-hmac-sha256-key:00"]"#).unwrap_err();
        assert!(e.message.starts_with("signing key 0: "), "{}", e.message);
        assert_eq!(JsonTableAppender::new("oracle", "[]").unwrap_err().code, ErrorCode::InvalidInput);
        assert_eq!(a.answer("{").unwrap_err().code, ErrorCode::StoreProtocol);
    }
}

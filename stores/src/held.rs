//! Receipts in the same transaction as the writes they record.
//!
//! A store whose receipts go to its own `heart_receipts` table (a
//! [`crate::receipts::ReceiptTableSink`] made over a clone of it) holds each operation's writes
//! in one transaction: opened by the operation's first write, with every request after it
//! (the sink's receipt inserts among them, since the core emits a receipt right after the
//! write it records) run inside it, and committed when the core settles the operation
//! ([`heart_fleet_core::LeaseStore::settle`]: at its end, and before the host's turn, an
//! effect or a probe, so no effect runs inside a transaction). So a process killed before the
//! commit leaves neither the writes nor their receipts, and a receipt that cannot be inserted
//! rolls its writes back and fails the operation with a store error. On PostgreSQL the run
//! row's lock, taken by the write, orders the receipts of one run: a second writer of the run
//! waits for the commit, then chains after the receipts the first one wrote.
//!
//! A store without such a sink runs each request in a transaction of its own, as before.

use heart_fleet_core::StoreError;

/// The transaction calls of one connection.
pub(crate) trait TxConn {
    /// Opens a transaction.
    fn begin(&mut self) -> Result<(), StoreError>;
    /// Commits the open transaction.
    fn commit(&mut self) -> Result<(), StoreError>;
    /// Rolls the open transaction back (best effort: a connection that is gone has lost it
    /// already).
    fn rollback(&mut self);
}

/// The held transaction of one store, shared by its clones (the sink writes through one).
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Writes are held until settled (set by the receipts-table sink).
    pub enabled: bool,
    /// A transaction is open.
    open: bool,
    /// Why the open transaction must roll back: a receipt insert failed inside it.
    doomed: Option<String>,
    /// Why a transaction was rolled back since the last settle, for `settle` to report.
    rolled_back: Option<String>,
    /// Transactions rolled back so far: the sink's chain heads may name receipts that are gone.
    pub rollbacks: u64,
}

impl Held {
    /// Before a request: whether it runs inside the held transaction, which a write opens.
    pub fn enter(&mut self, conn: &mut dyn TxConn, write: bool) -> Result<bool, StoreError> {
        if self.open {
            return Ok(true);
        }
        if !(self.enabled && write) {
            return Ok(false);
        }
        conn.begin()?;
        self.open = true;
        Ok(true)
    }

    /// Whether a transaction is open (a statement of the sink runs inside it).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// A request inside the transaction failed with `e`: everything in it is rolled back now
    /// (on PostgreSQL the transaction is aborted anyway), and `e` is handed back.
    pub fn abort(&mut self, conn: &mut dyn TxConn, e: StoreError) -> StoreError {
        if self.open {
            self.roll_back(conn, format!("a request of the operation failed: {}", e.0));
        }
        e
    }

    /// A receipt could not be inserted inside the open transaction: it will roll back at the
    /// settle. `false` when no transaction is open (the receipt records no held write, so it
    /// is lost alone: guard's effect receipts, which follow the host's ledger, not a write).
    pub fn doom(&mut self, reason: &str) -> bool {
        if self.open {
            self.doomed.get_or_insert_with(|| reason.to_owned());
        }
        self.open
    }

    /// Commits the open transaction, or rolls it back when it is doomed or the commit fails;
    /// `Err` when anything was rolled back since the last settle.
    pub fn settle(&mut self, conn: &mut dyn TxConn) -> Result<(), StoreError> {
        if self.open {
            match self.doomed.take() {
                Some(reason) => self.roll_back(conn, format!("a receipt could not be written: {reason}")),
                None => {
                    if let Err(e) = conn.commit() {
                        self.roll_back(conn, format!("the commit failed: {}", e.0));
                    }
                    self.open = false;
                }
            }
        }
        match self.rolled_back.take() {
            Some(reason) => Err(StoreError(reason)),
            None => Ok(()),
        }
    }

    /// The operation was cut short: the open transaction rolls back, and nothing is left
    /// for the next settle to report.
    pub fn abandon(&mut self, conn: &mut dyn TxConn) {
        if self.open {
            self.roll_back(conn, String::new());
        }
        self.rolled_back = None;
    }

    fn roll_back(&mut self, conn: &mut dyn TxConn, reason: String) {
        conn.rollback();
        self.open = false;
        self.doomed = None;
        self.rollbacks += 1;
        self.rolled_back.get_or_insert(reason);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Calls(Vec<&'static str>, bool);

    impl TxConn for Calls {
        fn begin(&mut self) -> Result<(), StoreError> {
            self.0.push("begin");
            Ok(())
        }
        fn commit(&mut self) -> Result<(), StoreError> {
            self.0.push("commit");
            if self.1 { Err(StoreError("disk full".into())) } else { Ok(()) }
        }
        fn rollback(&mut self) {
            self.0.push("rollback");
        }
    }

    #[test]
    fn a_write_opens_the_transaction_and_the_settle_commits_it() {
        let (mut held, mut conn) = (Held { enabled: true, ..Held::default() }, Calls::default());
        assert!(!held.enter(&mut conn, false).unwrap(), "a read opens nothing");
        assert!(held.enter(&mut conn, true).unwrap());
        assert!(held.enter(&mut conn, false).unwrap(), "a read after the write runs inside");
        held.settle(&mut conn).unwrap();
        held.settle(&mut conn).unwrap();
        assert_eq!(conn.0, ["begin", "commit"]);
        assert_eq!(held.rollbacks, 0);
    }

    #[test]
    fn nothing_is_held_unless_enabled() {
        let (mut held, mut conn) = (Held::default(), Calls::default());
        assert!(!held.enter(&mut conn, true).unwrap());
        assert!(!held.doom("no table"), "with nothing open a receipt is lost alone");
        held.settle(&mut conn).unwrap();
        assert!(conn.0.is_empty());
    }

    #[test]
    fn a_doomed_transaction_or_a_failed_commit_rolls_back_and_fails_the_settle_once() {
        let (mut held, mut conn) = (Held { enabled: true, ..Held::default() }, Calls::default());
        held.enter(&mut conn, true).unwrap();
        assert!(held.doom("no such table: heart_receipts"));
        let e = held.settle(&mut conn).unwrap_err();
        assert!(e.0.contains("no such table: heart_receipts"), "{e}");
        held.settle(&mut conn).unwrap();
        conn.1 = true;
        held.enter(&mut conn, true).unwrap();
        assert!(held.settle(&mut conn).unwrap_err().0.contains("disk full"));
        let failed = StoreError("lost".into());
        held.enter(&mut conn, true).unwrap();
        assert_eq!(held.abort(&mut conn, failed).0, "lost");
        assert!(!held.is_open());
        assert!(held.settle(&mut conn).unwrap_err().0.contains("lost"));
        assert_eq!(conn.0, ["begin", "rollback", "begin", "commit", "rollback", "begin", "rollback"]);
        assert_eq!(held.rollbacks, 3);
    }

    #[test]
    fn an_abandoned_transaction_rolls_back_and_the_next_settle_reports_nothing() {
        let (mut held, mut conn) = (Held { enabled: true, ..Held::default() }, Calls::default());
        held.enter(&mut conn, true).unwrap();
        held.abandon(&mut conn);
        assert!(!held.is_open());
        held.settle(&mut conn).unwrap();
        held.abandon(&mut conn);
        assert_eq!(conn.0, ["begin", "rollback"]);
        assert_eq!(held.rollbacks, 1, "the sink re-reads its chain heads");
    }
}

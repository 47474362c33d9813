//! The stores through their public entry points: URLs, the schema check, migrations, the
//! store conformance suite on stores made by `open`, WAL sharing between connections, and
//! the receipts table.
//!
//! PostgreSQL tests need `DATABASE_URL`; without it they print a SKIPPED line and pass,
//! unless `CI` is set, where they fail. Each works in a schema of its own (selected with the
//! URL's `options=-csearch_path=…`), dropped at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use heart_fleet_core::chain::{LogExpectations, LogReport, VerifyKeys};
use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::store_suite::{StoreFixture, run_store_suite};
use heart_fleet_core::{HeartEvent, HeartFleet, HeartReceipt, InstanceRow, IntentRow, RunRow, StoreError, Timestamp};
use heart_fleet_stores::receipts::ReceiptTableSink;
use heart_fleet_stores::{AnyStore, StoreOpenError, StoreTarget, connect, migrate, open, redact};

static N: AtomicUsize = AtomicUsize::new(0);

fn temp_db(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("heart-stores-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn urls_parse_and_unknown_schemes_are_named() {
    assert_eq!(StoreTarget::parse("sqlite::memory:").unwrap(), StoreTarget::SqliteMemory);
    assert_eq!(StoreTarget::parse("sqlite:a/b.db").unwrap(), StoreTarget::SqliteFile("a/b.db".into()));
    assert_eq!(StoreTarget::parse("sqlite:///tmp/x.db").unwrap(), StoreTarget::SqliteFile("/tmp/x.db".into()));
    assert!(matches!(StoreTarget::parse("postgresql://h/db").unwrap(), StoreTarget::Postgres(_)));
    for bad in ["mysql://u:p@h/db", "heart-fleet.db", "sqlite:", ""] {
        let e = StoreTarget::parse(bad).unwrap_err();
        assert!(matches!(e, StoreOpenError::UnknownScheme { .. }), "{bad}");
        assert!(!e.to_string().contains(":p@"), "{e}");
        assert_eq!(e.to_string().lines().count(), 1);
    }
    assert_eq!(redact("postgres://heart:secret@127.0.0.1:5432/db"), "postgres://heart:****@127.0.0.1:5432/db");
    assert_eq!(redact("postgres://heart@h/db"), "postgres://heart@h/db");
}

#[test]
fn open_refuses_missing_files_directories_and_tables() {
    let path = temp_db("fresh.db");
    let url = format!("sqlite:{}", path.display());
    let e = open(&url).unwrap_err();
    assert!(matches!(&e, StoreOpenError::NotMigrated { missing, .. } if missing == "database file"), "{e}");
    assert!(e.to_string().contains("heart-fleet migrate"), "{e}");
    assert!(!path.exists(), "open must not create the file");

    // An empty database: the first missing table is named.
    let mut store = connect(&url).unwrap();
    drop(store);
    let e = open(&url).unwrap_err();
    assert!(matches!(&e, StoreOpenError::NotMigrated { missing, .. } if missing == "table agent_runs"), "{e}");

    store = connect(&url).unwrap();
    let first = migrate(&mut store).unwrap();
    assert!(first.iter().all(|m| m.applied), "{first:?}");
    let second = migrate(&mut store).unwrap();
    assert!(second.iter().all(|m| !m.applied), "{second:?}");
    open(&url).unwrap();

    let e = open("sqlite:/no/such/dir/x.db").unwrap_err();
    assert!(matches!(e, StoreOpenError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn an_unreachable_postgres_is_one_clear_error() {
    let e = open("postgres://heart:secret@127.0.0.1:1/nowhere").unwrap_err();
    assert!(matches!(e, StoreOpenError::Unreachable { .. }), "{e}");
    let text = e.to_string();
    assert!(text.starts_with("cannot open store postgres://heart:****@127.0.0.1:1/nowhere: "), "{text}");
    assert_eq!(text.lines().count(), 1);
}

/// Fresh SQLite files (WAL) opened with `open` after `migrate`, seeded with the stores' helpers.
struct FileFixture;

impl StoreFixture for FileFixture {
    type Store = AnyStore;

    fn fresh(&mut self) -> Result<AnyStore, StoreError> {
        let url = format!("sqlite:{}", temp_db("suite.db").display());
        let mut store = connect(&url).map_err(|e| StoreError(e.to_string()))?;
        migrate(&mut store)?;
        open(&url).map_err(|e| StoreError(e.to_string()))
    }
    fn seed_run(&mut self, store: &mut AnyStore, row: &RunRow) -> Result<(), StoreError> {
        store.insert_run(row)
    }
    fn seed_instance(&mut self, store: &mut AnyStore, row: &InstanceRow) -> Result<(), StoreError> {
        store.insert_instance(row)
    }
    fn seed_intent(&mut self, store: &mut AnyStore, row: &IntentRow) -> Result<(), StoreError> {
        store.insert_intent(row)
    }
}

#[test]
fn a_sqlite_file_store_passes_the_store_suite() {
    let report = run_store_suite(&mut FileFixture);
    assert!(report.ok(), "{:#?}", report.failed);
    assert_eq!(report.passed.len(), 10);
}

#[test]
fn two_connections_share_one_wal_file() {
    let url = format!("sqlite:{}", temp_db("shared.db").display());
    let mut store = connect(&url).unwrap();
    migrate(&mut store).unwrap();
    let AnyStore::Sqlite(s) = &store else { panic!() };
    let mode: String = s.connection().query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let mut a = HeartFleet::new(open(&url).unwrap());
    let mut b = HeartFleet::new(open(&url).unwrap());
    let (run, created) = a.ensure_resource_run("mutex", "printer", "a printer", "test").unwrap();
    assert!(created);
    let (same, created) = b.ensure_resource_run("mutex", "printer", "a printer", "test").unwrap();
    assert!(!created && same.id == run.id);
    assert!(a.acquire(&run.id, "A", 60).unwrap().acquired);
    let lost = b.acquire(&run.id, "B", 60).unwrap();
    assert!(!lost.acquired);
    assert_eq!(lost.code, Some(heart_fleet_core::ErrorCode::LeaseHeld));
}

fn verify_table(store: &mut AnyStore) -> LogReport {
    store.verify_receipts(&VerifyKeys::none(), &LogExpectations::default()).unwrap()
}

fn codes(report: &LogReport) -> Vec<&'static str> {
    report.findings.iter().map(|f| f.code.as_str()).collect()
}

/// The receipts table: each receipt chained after its run's head, the chain intact across two
/// sinks on two connections that append to one run in turn (the second's head is stale every
/// time, so each of its inserts finds the position taken and chains again), and every kind of
/// tampering found.
fn check_receipt_table(mut store: AnyStore, second: AnyStore) {
    let (sink, health) = ReceiptTableSink::new(&store);
    let mut heart = HeartFleet::new(store.clone()).with_sink(Box::new(sink));
    let (other_sink, other_health) = ReceiptTableSink::new(&second);
    let mut other = HeartFleet::new(second).with_sink(Box::new(other_sink));
    let (run, _) = heart.ensure_resource_run("mutex", "receipts", "receipts", "test").unwrap();
    for _ in 0..2 {
        let fence = heart.acquire(&run.id, "A", 60).unwrap().fence.unwrap();
        heart.release(&fence, heart_fleet_core::ops::ReleaseTo::Ready).unwrap();
        let fence = other.acquire(&run.id, "B", 60).unwrap().fence.unwrap();
        other.release(&fence, heart_fleet_core::ops::ReleaseTo::Ready).unwrap();
    }
    assert_eq!((health.written(), other_health.written()), (4, 4));
    assert!(health.error().is_none() && other_health.error().is_none());
    let r = verify_table(&mut store);
    assert!(r.passed(), "{:?}", r.findings);
    assert_eq!((r.receipts, r.ok, r.chained, r.unchained), (8, 8, 8, 0));
    assert_eq!(r.runs[&run.id].last_seq, Some(8));
    let counts = store.receipt_counts().unwrap();
    assert_eq!(counts.get("acquired"), Some(&4));
    assert_eq!(counts.get("released"), Some(&4));
    // An old, unchained receipt (as a TypeScript node writes it) is counted, not failed.
    let old = HeartReceipt::new(HeartEvent::Released, &run.id, "A", None, None, Timestamp(0));
    store.append_receipt(&old).unwrap();
    let r = verify_table(&mut store);
    assert!(r.passed(), "{:?}", r.findings);
    assert_eq!((r.receipts, r.ok, r.unchained), (9, 9, 1));
    // A forged receipt (digest of other fields) is caught, and so is a column edited behind
    // the receipt's back, a deleted row and a row inserted twice.
    let mut forged = HeartReceipt::new(HeartEvent::Released, &run.id, "A", None, None, Timestamp(0));
    forged.owner = "mallory".into();
    store.append_receipt(&forged).unwrap();
    store.batch("UPDATE heart_receipts SET owner = 'eve' WHERE event = 'acquired' AND id = (SELECT min(id) FROM heart_receipts)").unwrap();
    let r = verify_table(&mut store);
    assert_eq!((r.receipts, r.ok, r.tampered, r.malformed), (10, 8, 2, 0), "{:?}", r.findings);
    assert_eq!(codes(&r), ["receipt-tampered", "receipt-tampered"]);
    store.batch("DELETE FROM heart_receipts WHERE event = 'released' AND id = (SELECT min(id) FROM heart_receipts WHERE event = 'released')").unwrap();
    let r = verify_table(&mut store);
    assert_eq!(codes(&r), ["receipt-tampered", "chain-gap", "receipt-tampered"], "{:?}", r.findings);
    store
        .batch(
            "INSERT INTO heart_receipts (schema_version, event, run_id, owner, lease_expires_at, effect_key, at, digest, receipt) \
             SELECT schema_version, event, run_id, owner, lease_expires_at, effect_key, at, digest, receipt FROM heart_receipts \
             WHERE id = (SELECT max(id) FROM heart_receipts WHERE event = 'acquired')",
        )
        .unwrap_err();
}

#[test]
fn receipts_go_to_the_table_and_verify_on_sqlite() {
    let url = format!("sqlite:{}", temp_db("receipts.db").display());
    let mut store = connect(&url).unwrap();
    migrate(&mut store).unwrap();
    check_receipt_table(store, connect(&url).unwrap());
}

/// A receipt that cannot be inserted rolls back the write it records: the operation fails
/// with a store error, the run is as it was (no lease, the same epoch), the counters did not
/// count it, and the table has no receipt of it. With the table back, the next acquire goes
/// through, and its receipt is the run's first; nothing is counted as lost.
fn check_a_failed_receipt_insert_rolls_its_write_back(mut store: AnyStore) {
    let (sink, health) = ReceiptTableSink::new(&store);
    let mut heart = HeartFleet::new(store.clone()).with_sink(Box::new(sink));
    let (run, _) = heart.ensure_resource_run("mutex", "lost", "lost", "test").unwrap();
    let before = heart.get_run(&run.id).unwrap().unwrap();
    let metrics = *heart.metrics();
    store.batch("ALTER TABLE heart_receipts RENAME TO heart_receipts_away").unwrap();
    let e = heart.acquire(&run.id, "A", 60).unwrap_err();
    assert_eq!(e.code, heart_fleet_core::ErrorCode::StoreUnavailable, "{e}");
    assert!(e.message.contains("rolled back") && e.message.contains("heart_receipts"), "{e}");
    store.batch("ALTER TABLE heart_receipts_away RENAME TO heart_receipts").unwrap();
    assert_eq!(heart.get_run(&run.id).unwrap().unwrap(), before, "the acquire's write was rolled back");
    assert_eq!(*heart.metrics(), metrics, "a rolled-back acquire is not counted");
    assert_eq!((health.written(), health.rolled_back()), (0, 1));
    assert!(health.lost_since(0).is_empty() && health.error().is_none());
    assert!(store.read_receipts_of(Some(&run.id), 0, 100).unwrap().is_empty());

    let fence = heart.acquire(&run.id, "A", 60).unwrap().fence.unwrap();
    assert_eq!(fence.epoch, Some(before.fencing_epoch + 1));
    // A verify writes too (it touches `updated_at` under the store's clock): without its
    // receipt it fails, and the touch is undone.
    let held = heart.get_run(&run.id).unwrap().unwrap();
    store.batch("ALTER TABLE heart_receipts RENAME TO heart_receipts_away").unwrap();
    assert_eq!(heart.verify_fence(&fence).unwrap_err().code, heart_fleet_core::ErrorCode::StoreUnavailable);
    store.batch("ALTER TABLE heart_receipts_away RENAME TO heart_receipts").unwrap();
    assert_eq!(heart.get_run(&run.id).unwrap().unwrap(), held);
    heart.release(&fence, heart_fleet_core::ops::ReleaseTo::Ready).unwrap();
    assert_eq!((health.written(), health.rolled_back()), (2, 2));
    assert!(health.lost_since(0).is_empty() && health.error().is_none());
    let events: Vec<String> = store
        .read_receipts_of(Some(&run.id), 0, 100)
        .unwrap()
        .iter()
        .map(|r| r.receipt["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(events, ["acquired", "released"]);
    let r = verify_table(&mut store);
    assert!(r.passed(), "{:?}", r.findings);
    assert_eq!((r.runs[&run.id].receipts, r.runs[&run.id].last_seq), (2, Some(2)));
}

/// A process that dies between a write and its receipt (here: its connection closes with
/// the write's transaction open, which is what the database sees of a killed process)
/// leaves neither: the write is rolled back with the receipt.
fn check_a_write_dies_with_its_uncommitted_receipt(url: &str) {
    let mut other = connect(url).unwrap();
    let (run, _) = HeartFleet::new(other.clone()).ensure_resource_run("mutex", "killed", "killed", "test").unwrap();
    let receipts = other.receipt_counts().unwrap();
    {
        let store = connect(url).unwrap();
        let (sink, _health) = ReceiptTableSink::new(&store);
        // The process "dies" right after its receipt went to the table sink: the sink below
        // runs after the table's and ends the connection before the operation can settle.
        let dying = store.clone();
        let die = move |_: &HeartReceipt| match &dying {
            AnyStore::Sqlite(s) => {
                let conn = s.connection();
                // What the database keeps of an open transaction when its process dies.
                conn.execute_batch("ROLLBACK").unwrap();
            }
            AnyStore::Postgres(p) => p.disconnect(),
        };
        let mut heart = HeartFleet::new(store).with_sink(Box::new(Both(Box::new(sink), Box::new(die))));
        assert_eq!(heart.acquire(&run.id, "A", 60).unwrap_err().code, heart_fleet_core::ErrorCode::StoreUnavailable);
    }
    let row = HeartFleet::new(other.clone()).get_run(&run.id).unwrap().unwrap();
    assert_eq!(row, run, "the write died with its receipt");
    assert_eq!(other.receipt_counts().unwrap(), receipts);
}

/// Writers on their own connections take turns on one run as fast as they can: every
/// receipt lands at the next position of the run's chain (the write's row lock, or SQLite's
/// write lock, holds the next writer until the receipt is in), the chain verifies whole, and
/// the run's fencing epoch equals its `acquired` receipts.
fn check_concurrent_writers_keep_one_chain(url: &str) {
    let mut store = connect(url).unwrap();
    let (run, _) =
        HeartFleet::new(store.clone()).ensure_resource_run("mutex", "contended", "contended", "test").unwrap();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (url, run_id) = (url.to_owned(), run.id.clone());
            std::thread::spawn(move || {
                let store = connect(&url).unwrap();
                let (sink, health) = ReceiptTableSink::new(&store);
                let mut heart = HeartFleet::new(store).with_sink(Box::new(sink));
                for _ in 0..40 {
                    if let Some(fence) = heart.acquire(&run_id, &format!("w{w}"), 60).unwrap().fence {
                        assert!(heart.verify_fence(&fence).unwrap());
                        heart.release(&fence, heart_fleet_core::ops::ReleaseTo::Ready).unwrap();
                    }
                }
                assert!(health.error().is_none() && health.rolled_back() == 0);
                health.written()
            })
        })
        .collect();
    let written: u64 = writers.into_iter().map(|t| t.join().unwrap()).sum();
    let report = verify_table(&mut store);
    assert!(report.passed(), "{:?}", report.findings);
    let chain = &report.runs[&run.id];
    assert_eq!(chain.last_seq, Some(written), "{chain:?}");
    let acquired = store
        .read_receipts(0, 100_000)
        .unwrap()
        .iter()
        .filter(|r| r.receipt["runId"] == run.id.as_str() && r.receipt["event"] == "acquired")
        .count() as i64;
    let row = HeartFleet::new(store).get_run(&run.id).unwrap().unwrap();
    assert_eq!(row.fencing_epoch, acquired);
}

/// Two sinks, in order.
struct Both(Box<dyn ReceiptSink>, Box<dyn ReceiptSink>);

impl ReceiptSink for Both {
    fn emit(&mut self, receipt: &HeartReceipt) {
        self.0.emit(receipt);
        self.1.emit(receipt);
    }
}

#[test]
fn a_failed_receipt_insert_rolls_its_write_back_on_sqlite() {
    let url = format!("sqlite:{}", temp_db("receipts-lost.db").display());
    let mut store = connect(&url).unwrap();
    migrate(&mut store).unwrap();
    check_a_failed_receipt_insert_rolls_its_write_back(store);
    check_a_write_dies_with_its_uncommitted_receipt(&url);
    check_concurrent_writers_keep_one_chain(&url);
}

// ------------------------------------------------------------------------------------------
// PostgreSQL
// ------------------------------------------------------------------------------------------

fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(std::env::var_os("CI").is_none(), "DATABASE_URL is not set, and CI is: PostgreSQL tests must run");
            eprintln!("SKIPPED: heart-fleet-stores PostgreSQL tests (set DATABASE_URL to run them)");
            None
        }
    }
}

/// A schema of its own, dropped on drop; `url` selects it through `options`.
struct PgSchema {
    admin: postgres::Client,
    name: String,
    url: String,
}

impl PgSchema {
    fn new(base: &str) -> PgSchema {
        let name = format!("heart_stores_{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let mut admin = postgres::Client::connect(base, postgres::NoTls).unwrap();
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}")).unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{name}");
        PgSchema { admin, name, url }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let _ = self.admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

struct PgFixture {
    base: String,
    schemas: Vec<PgSchema>,
}

impl StoreFixture for PgFixture {
    type Store = AnyStore;

    fn fresh(&mut self) -> Result<AnyStore, StoreError> {
        let schema = PgSchema::new(&self.base);
        let mut store = connect(&schema.url).map_err(|e| StoreError(e.to_string()))?;
        migrate(&mut store)?;
        let store = open(&schema.url).map_err(|e| StoreError(e.to_string()))?;
        self.schemas.push(schema);
        Ok(store)
    }
    fn seed_run(&mut self, store: &mut AnyStore, row: &RunRow) -> Result<(), StoreError> {
        store.insert_run(row)
    }
    fn seed_instance(&mut self, store: &mut AnyStore, row: &InstanceRow) -> Result<(), StoreError> {
        store.insert_instance(row)
    }
    fn seed_intent(&mut self, store: &mut AnyStore, row: &IntentRow) -> Result<(), StoreError> {
        store.insert_intent(row)
    }
}

#[test]
fn postgres_open_migrate_suite_and_receipts() {
    let Some(base) = database_url() else { return };
    let schema = PgSchema::new(&base);
    let e = open(&schema.url).unwrap_err();
    assert!(matches!(&e, StoreOpenError::NotMigrated { missing, .. } if missing == "table agent_runs"), "{e}");
    assert!(e.to_string().contains("heart-fleet migrate"), "{e}");
    let mut store = connect(&schema.url).unwrap();
    assert!(migrate(&mut store).unwrap().iter().all(|m| m.applied));
    assert!(migrate(&mut store).unwrap().iter().all(|m| !m.applied));
    check_receipt_table(open(&schema.url).unwrap(), open(&schema.url).unwrap());
    // A schema whose table has no tampered receipts.
    let held = PgSchema::new(&base);
    migrate(&mut connect(&held.url).unwrap()).unwrap();
    check_a_failed_receipt_insert_rolls_its_write_back(open(&held.url).unwrap());
    check_a_write_dies_with_its_uncommitted_receipt(&held.url);
    check_concurrent_writers_keep_one_chain(&held.url);

    let mut fixture = PgFixture { base, schemas: Vec::new() };
    let report = run_store_suite(&mut fixture);
    assert!(report.ok(), "{:#?}", report.failed);
    assert_eq!(report.passed.len(), 10);
}

//! `PgStore` under faults, against the real server: a statement that gets no answer fails at
//! its client-side deadline (the server holds a lock the statement waits for), directly and
//! through the pooler, a killed
//! backend fails one request and the next one reconnects (the failed write is not retried),
//! TLS with a self-signed certificate (`sslmode=require&sslrootcert=…`, and refused without
//! the root), and the pooler mode (`pgbouncer=true`) through a PgBouncer in transaction mode
//! with 2 server connections for 4 concurrent workers, migrations included.
//!
//! Needs `DATABASE_URL`; the TLS test `HEART_PG_TLS_CA` (the server certificate's root) and
//! the pooler test `HEART_PGBOUNCER_URL`, which `scripts/test-all.sh` sets up. Without them a
//! test prints SKIPPED, except under `CI`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod pg_route;

use std::time::{Duration, Instant};

use heart_fleet_core::model::RunRow;
use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::sql::{SqlValue, Statement};
use heart_fleet_core::time::Timestamp;
use heart_fleet_core::{ErrorCode, HeartFleet, LeaseStore, StoreAnswer, StoreError, StoreRequest};
use heart_fleet_stores::receipts::ReceiptTableSink;
use heart_fleet_stores::{AnyStore, PgStore};
use pg_route::{Namespace, Route, env, terminate, with};
use postgres::{Client, NoTls};

fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// Seeds a ready run by hand, through the namespace's direct instrument.
fn seed(ns: &Namespace, id: &str) {
    let t0 = Timestamp::parse_iso("2026-07-30T00:00:00.000Z").unwrap();
    let mut store = AnyStore::Postgres(PgStore::connect(&ns.direct_url).unwrap());
    store.insert_run(&RunRow::ready(id, format!("faults:{id}"), t0)).unwrap();
}

#[test]
fn a_statement_without_an_answer_fails_at_its_deadline_and_the_next_request_reconnects() {
    statement_deadline(Route::Direct);
}

#[test]
fn through_the_pooler_a_statement_without_an_answer_fails_at_its_deadline() {
    statement_deadline(Route::Pooler);
}

fn statement_deadline(route: Route) {
    let Some(schema) = Namespace::migrated(route, "PostgreSQL faults") else { return };
    let run = uuid(1);
    seed(&schema, &run);
    let store = PgStore::connect(&with(&schema.url, "heart_statement_timeout_ms=300")).unwrap();
    let mut fleet = HeartFleet::new(store);
    // Another session holds the row: the acquire's UPDATE waits for the lock, with no answer.
    let mut blocker = schema.instrument();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute(&format!("SELECT 1 FROM agent_runs WHERE id = '{run}' FOR UPDATE")).unwrap();
    let started = Instant::now();
    let err = fleet.acquire(&run, "w", 60).unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.code, ErrorCode::StoreUnavailable, "{err}");
    // The server's statement_timeout (a little shorter: at startup directly, with SET LOCAL in
    // the statement's own transaction through a pooler) cancels it first; the client's own
    // deadline is the backstop for a server that does not answer at all.
    assert!(err.message.contains("statement timeout") || err.message.contains("no answer within 300 ms"), "{err}");
    assert!(took < Duration::from_secs(3), "the deadline took {took:?}");
    tx.rollback().unwrap();
    // The connection was dropped with the missed statement; the next request connects again
    // and sees the run untouched by the abandoned one (its session was terminated with it).
    let acquired = (0..20)
        .find_map(|_| match fleet.acquire(&run, "w", 60) {
            Ok(a) => Some(a),
            Err(_) => {
                std::thread::sleep(Duration::from_millis(100));
                None
            }
        })
        .expect("a later acquire works");
    assert!(acquired.acquired, "{acquired:?}");
    assert_eq!(acquired.fence.unwrap().epoch, Some(1), "the abandoned acquire did not commit");
}

/// Direct only (as the next test): through a transaction pooler a server connection killed
/// between transactions is the pooler's to replace, and the client never sees it.
#[test]
fn a_backend_killed_while_idle_costs_no_request() {
    let Some(base) = env("DATABASE_URL", "PostgreSQL faults") else { return };
    let Some(schema) = Namespace::migrated(Route::Direct, "PostgreSQL faults") else { return };
    let run = uuid(2);
    seed(&schema, &run);
    let app = format!("heart-faults-idle-{}", std::process::id());
    let mut fleet = HeartFleet::new(PgStore::connect(&with(&schema.url, &format!("application_name={app}"))).unwrap());
    let a = fleet.acquire(&run, "w", 60).unwrap();
    let fence = a.fence.unwrap();
    let mut admin = Client::connect(&base, NoTls).unwrap();
    assert_eq!(terminate(&mut admin, &app), 1);
    std::thread::sleep(Duration::from_millis(100));
    // The dead connection is noticed before anything is sent on it: the request goes out on
    // a new one and succeeds (the lease is still there).
    assert!(fleet.verify_fence(&fence).unwrap());
    assert_eq!(terminate(&mut admin, &app), 1, "the store is on a new connection");
    std::thread::sleep(Duration::from_millis(100));
    assert!(matches!(fleet.release(&fence, ReleaseTo::Completed).unwrap(), Fenced::Ok { .. }));
}

#[test]
fn a_backend_killed_under_a_request_fails_it_and_the_next_one_reconnects() {
    let Some(base) = env("DATABASE_URL", "PostgreSQL faults") else { return };
    let Some(schema) = Namespace::migrated(Route::Direct, "PostgreSQL faults") else { return };
    let run = uuid(3);
    seed(&schema, &run);
    let app = format!("heart-faults-busy-{}", std::process::id());
    let url = with(&schema.url, &format!("application_name={app}"));
    // Another session holds the row, so the acquire is in flight when its backend is killed.
    let mut blocker = schema.instrument();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute(&format!("SELECT 1 FROM agent_runs WHERE id = '{run}' FOR UPDATE")).unwrap();
    let worker = std::thread::spawn({
        let run = run.clone();
        move || {
            let mut fleet = HeartFleet::new(PgStore::connect(&url).unwrap());
            let failed = fleet.acquire(&run, "w", 60).map(|a| a.acquired);
            (fleet, failed)
        }
    });
    let mut admin = Client::connect(&base, NoTls).unwrap();
    let waiting = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        admin
            .query_one(
                "SELECT count(*)::int FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .unwrap()
            .get::<_, i32>(0)
            == 1
    });
    assert!(waiting, "the acquire waits for the lock");
    assert_eq!(terminate(&mut admin, &app), 1);
    let (mut fleet, failed) = worker.join().unwrap();
    tx.rollback().unwrap();
    // The request on the dead connection fails (never retried: its outcome would be unknown)…
    let err = failed.unwrap_err();
    assert_eq!(err.code, ErrorCode::StoreUnavailable, "{err}");
    assert!(err.message.contains("connection"), "{err}");
    // … and the next one reconnects: the run was not taken by the killed statement.
    let a = fleet.acquire(&run, "w", 60).unwrap();
    assert!(a.acquired, "{a:?}");
    assert_eq!(a.fence.unwrap().epoch, Some(1));
}

/// A store whose backend is terminated right after the first run write answered once
/// `armed`: a connection lost between an operation's write and its receipt, inside the held
/// transaction.
struct KilledAfterWrite {
    inner: AnyStore,
    admin: Client,
    app: String,
    armed: bool,
}

impl LeaseStore for KilledAfterWrite {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let write = matches!(req, StoreRequest::UpdateRun { .. });
        let answer = self.inner.execute(req);
        if write && std::mem::take(&mut self.armed) {
            assert_eq!(terminate(&mut self.admin, &self.app), 1);
            // Long enough for the farewell to reach the socket: the store sees it closed.
            std::thread::sleep(Duration::from_millis(100));
        }
        answer
    }
    fn settle(&mut self) -> Result<(), StoreError> {
        self.inner.settle()
    }
    fn abandon(&mut self) {
        self.inner.abandon();
    }
}

/// The connection lost inside an operation's held transaction (the release written, its
/// receipt not yet inserted): the server rolled the write back, so the receipt must not be
/// inserted on a new connection, where it would land alone and claim a release that never
/// was (the lease would look ended while it is still held). The operation fails, the run and
/// the receipt table are as they were, and the next operation reconnects.
#[test]
fn a_connection_lost_inside_a_held_transaction_lands_nothing_of_it() {
    let Some(base) = env("DATABASE_URL", "PostgreSQL faults") else { return };
    let Some(schema) = Namespace::migrated(Route::Direct, "PostgreSQL faults") else { return };
    let run = uuid(5);
    seed(&schema, &run);
    let app = format!("heart-faults-held-{}", std::process::id());
    let store = AnyStore::Postgres(PgStore::connect(&with(&schema.url, &format!("application_name={app}"))).unwrap());
    let (sink, health) = ReceiptTableSink::new(&store);
    let admin = Client::connect(&base, NoTls).unwrap();
    let killing = KilledAfterWrite { inner: store.clone(), admin, app, armed: false };
    let mut fleet = HeartFleet::new(killing).with_sink(Box::new(sink));
    // A first receipt: the sink knows the run's chain head, so the next receipt is one INSERT.
    let fence = fleet.acquire(&run, "A", 60).unwrap().fence.unwrap();
    let held = fleet.get_run(&run).unwrap().unwrap();
    let events = |store: &AnyStore| -> Vec<String> {
        store
            .clone()
            .read_receipts_of(Some(&run), 0, 10)
            .unwrap()
            .iter()
            .map(|r| r.receipt["event"].as_str().unwrap_or("?").to_owned())
            .collect()
    };
    assert_eq!(events(&store), ["acquired"]);
    fleet.store_mut().armed = true;
    let err = fleet.release(&fence, ReleaseTo::Completed).unwrap_err();
    assert_eq!(err.code, ErrorCode::StoreUnavailable, "{err}");
    assert!(err.message.contains("rolled back"), "{err}");
    assert_eq!(events(&store), ["acquired"], "no receipt of the lost release landed");
    assert_eq!(fleet.get_run(&run).unwrap().unwrap(), held, "the release was rolled back");
    assert_eq!((health.written(), health.rolled_back()), (1, 1));
    // The next operation runs on a new connection, its write and receipt together.
    assert!(matches!(fleet.release(&fence, ReleaseTo::Completed).unwrap(), Fenced::Ok { .. }));
    assert_eq!(events(&store), ["acquired", "released"]);
}

#[test]
fn tls_with_a_self_signed_certificate_is_verified_against_sslrootcert() {
    let Some(base) = env("DATABASE_URL", "PostgreSQL TLS") else { return };
    let Some(ca) = env("HEART_PG_TLS_CA", "PostgreSQL TLS") else { return };
    let url = with(&base, &format!("sslmode=require&sslrootcert={ca}"));
    let store = PgStore::connect(&url).unwrap();
    let rows = store
        .query(&Statement {
            sql: "SELECT ssl::int AS on FROM pg_stat_ssl WHERE pid = pg_backend_pid()".into(),
            params: vec![],
        })
        .unwrap();
    assert_eq!(rows[0][0].1, SqlValue::Int(1), "the connection is encrypted");
    // verify-full is accepted too (same checks).
    PgStore::connect(&with(&base, &format!("sslmode=verify-full&sslrootcert={ca}"))).unwrap();
    // Without the root the certificate is unknown: refused, with a message that says so and
    // never shows the password.
    let err = PgStore::connect(&with(&base, "sslmode=require")).unwrap_err().0;
    assert!(err.contains("certificate") || err.contains("Certificate"), "{err}");
    assert!(!err.contains(":heart@"), "{err}");
    let err = PgStore::connect(&with(&base, "sslmode=require&sslrootcert=/nonexistent/ca.pem")).unwrap_err().0;
    assert!(err.contains("sslrootcert /nonexistent/ca.pem"), "{err}");
}

#[test]
fn through_a_transaction_pooler_four_workers_share_two_server_connections() {
    // Migrated twice through the pooler: the second run finds every migration recorded (the
    // advisory lock is transaction-scoped).
    let Some(ns) = Namespace::migrated(Route::Pooler, "PgBouncer") else { return };
    let url = ns.url.clone();
    let again = heart_fleet_stores::migrate(&mut AnyStore::Postgres(ns.store())).unwrap();
    assert!(again.iter().all(|m| !m.applied), "{again:?}");
    // One resource run per worker (find-or-create through the pooler), released back to ready.
    let tag = std::process::id().to_string();
    let mut setup = HeartFleet::new(PgStore::connect(&url).unwrap());
    let runs: Vec<String> = (0..4)
        .map(|i| setup.ensure_resource_run("pooler-test", &format!("{tag}-{i}"), "pooler", "test").unwrap().0.id)
        .collect();
    let cycles: usize = std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|id| {
                let url = url.clone();
                s.spawn(move || {
                    let mut fleet = HeartFleet::new(PgStore::connect(&url).unwrap());
                    for n in 0..40 {
                        let a = fleet.acquire(id, "w", 60).unwrap_or_else(|e| panic!("cycle {n}: {e}"));
                        let fence = a.fence.unwrap_or_else(|| panic!("cycle {n}: {:?}", a.reason));
                        assert!(fleet.verify_fence(&fence).unwrap(), "cycle {n}");
                        let released = fleet.release(&fence, ReleaseTo::Ready).unwrap();
                        assert!(matches!(released, Fenced::Ok { .. }), "cycle {n}: {released:?}");
                    }
                    40
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(cycles, 160);
}

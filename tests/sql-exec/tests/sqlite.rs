//! The SQLite statements `heart_fleet_core::sql` renders, executed by a real (bundled)
//! SQLite and compared with the core's pure evaluator. SQLite takes the store's `now` as a
//! parameter, so these tests also pin the exact boundaries: a lease expiring exactly at
//! `now`, one millisecond before and after, a heartbeat exactly 90 s old.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{
    Db, World, ask, check_epoch_trigger, check_instances, check_intent_scans, check_intent_writes, check_lifecycle,
    check_run_scans, instance_grid, intent_grid, run_grid,
};
use heart_fleet_core::model::{InstanceRow, RunRow};
use heart_fleet_core::request::{Cond, Expr, RunCol, StoreReply, StoreRequest};
use heart_fleet_core::sql::{Dialect, SqlParam, SqlRow, SqlValue, Statement, migrations};
use heart_fleet_core::time::Timestamp;
use heart_fleet_core::{HeartFleet, ops::ReleaseTo};
use heart_fleet_sql_exec::SqliteStore;
use rusqlite::Connection;
use rusqlite::types::{Value, ValueRef};

struct Lite {
    conn: Connection,
}

impl Lite {
    fn open() -> Lite {
        let conn = Connection::open_in_memory().unwrap();
        for _ in 0..2 {
            for (name, sql) in migrations(Dialect::Sqlite) {
                conn.execute_batch(&format!("BEGIN; {sql} COMMIT;")).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        Lite { conn }
    }

    fn query(&self, sql: &str, params: Vec<Value>) -> Vec<SqlRow> {
        let mut stmt = self.conn.prepare(sql).unwrap_or_else(|e| panic!("{e}: {sql}"));
        let names: Vec<String> = stmt.column_names().iter().map(|s| (*s).to_owned()).collect();
        let mut rows = stmt.query(rusqlite::params_from_iter(params)).unwrap_or_else(|e| panic!("{e}: {sql}"));
        let mut out = Vec::new();
        while let Some(row) = rows.next().unwrap_or_else(|e| panic!("{e}: {sql}")) {
            let mut cells = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let v = match row.get_ref(i).unwrap() {
                    ValueRef::Null => SqlValue::Null,
                    ValueRef::Integer(i) => SqlValue::Int(i),
                    ValueRef::Real(f) => SqlValue::Real(f),
                    ValueRef::Text(t) => SqlValue::Text(String::from_utf8(t.to_vec()).unwrap()),
                    ValueRef::Blob(_) => panic!("blob in column {name}"),
                };
                cells.push((name.clone(), v));
            }
            out.push(cells);
        }
        out
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

impl Db for Lite {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
    fn begin(&mut self) {
        self.conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    }
    fn commit(&mut self) {
        self.conn.execute_batch("COMMIT").unwrap();
    }
    fn rollback(&mut self) {
        self.conn.execute_batch("ROLLBACK").unwrap();
    }
    fn run(&mut self, stmts: &[Statement], now: Option<Timestamp>) -> Vec<Vec<SqlRow>> {
        let mut out: Vec<Vec<SqlRow>> = Vec::new();
        let mut clock: Option<String> = None;
        for (i, s) in stmts.iter().enumerate() {
            if i == 0 {
                assert!(s.params.is_empty());
                let rows = match now {
                    Some(t) => vec![vec![("now".to_owned(), SqlValue::Text(t.to_iso()))]],
                    None => self.query(&s.sql, vec![]),
                };
                let [row] = rows.as_slice() else { panic!("clock: {rows:?}") };
                let Some((_, SqlValue::Text(t))) = row.iter().find(|(n, _)| n == "now") else { panic!("{row:?}") };
                clock = Some(t.clone());
                out.push(rows);
                continue;
            }
            let params = s
                .params
                .iter()
                .map(|p| match p {
                    SqlParam::Int(i) => Value::Integer(*i),
                    SqlParam::Text(t) => text(t),
                    SqlParam::Now => text(clock.as_deref().unwrap()),
                })
                .collect();
            out.push(self.query(&s.sql, params));
        }
        out
    }
    fn batch(&mut self, sql: &str) {
        self.conn.execute_batch(sql).unwrap_or_else(|e| panic!("{e}: {sql}"));
    }
    fn exec(&mut self, stmt: &Statement) -> Vec<SqlRow> {
        let params = stmt
            .params
            .iter()
            .map(|p| match p {
                SqlParam::Int(i) => Value::Integer(*i),
                SqlParam::Text(t) => text(t),
                SqlParam::Now => panic!("a statement outside the request protocol takes no clock"),
            })
            .collect();
        self.query(&stmt.sql, params)
    }
}

fn base() -> Timestamp {
    Timestamp::parse_iso("2026-07-30T10:00:00.000Z").unwrap()
}

/// The run grid with every exact boundary, the instances its owners name.
fn seeded() -> (Lite, World, Vec<RunRow>, Vec<InstanceRow>) {
    let mut db = Lite::open();
    let rows = run_grid(base(), true);
    let instances = instance_grid(base(), true);
    let mut world = World::default();
    for r in &rows {
        db.insert_run(r);
        world.runs.insert(r.id.clone(), r.clone());
    }
    for i in &instances {
        db.insert_instance(i);
        world.instances.insert(i.instance_id.clone(), i.clone());
    }
    (db, world, rows, instances)
}

#[test]
fn migrations_are_idempotent_and_create_every_table() {
    let db = Lite::open();
    let tables = db.query("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') ORDER BY name", vec![]);
    let names: Vec<String> = tables
        .iter()
        .map(|r| match &r[0].1 {
            SqlValue::Text(t) => t.clone(),
            other => panic!("{other:?}"),
        })
        .filter(|n| !n.starts_with("sqlite_"))
        .collect();
    assert_eq!(
        names,
        [
            "agent_instances",
            "agent_runs",
            "effect_intents",
            "heart_clock",
            "heart_fencing_epoch_monotonic",
            "heart_receipts",
            "outbox_dispatch_log"
        ]
    );
}

/// The clock read of every request: the later of this process's clock and the latest instant a
/// request used, kept as the new latest, so processes whose clocks disagree never take the
/// store's clock backwards.
#[test]
fn the_store_clock_never_goes_backwards() {
    let db = Lite::open();
    let now = |db: &Lite| match db.query(heart_fleet_core::sql::SQLITE_CLOCK, vec![]).first().map(|r| r[0].1.clone()) {
        Some(SqlValue::Text(t)) => t,
        other => panic!("{other:?}"),
    };
    let first = now(&db);
    let second = now(&db);
    assert!(second >= first, "{first} then {second}");
    // A process whose clock is ahead moved the clock: everyone else reads that instant now.
    db.query("UPDATE heart_clock SET now = '2999-01-01T00:00:00.000Z'", vec![]);
    assert_eq!(now(&db), "2999-01-01T00:00:00.000Z");
    assert_eq!(now(&db), "2999-01-01T00:00:00.000Z");
    // A stored instant in the past: this process's clock, stored as the latest.
    db.query("UPDATE heart_clock SET now = '2000-01-01T00:00:00.000Z'", vec![]);
    let fresh = now(&db);
    assert!(fresh.as_str() > "2026-01-01", "{fresh}");
    let stored = db.query("SELECT now FROM heart_clock", vec![]);
    assert_eq!(stored[0][0].1, SqlValue::Text(fresh));
}

#[test]
fn run_writes_agree_with_the_evaluator_at_every_boundary() {
    let (mut db, world, rows, _) = seeded();
    let cases = common::check_run_writes(&mut db, &rows, &world, base(), true);
    eprintln!("sqlite: {cases} run-write cases ({} rows)", rows.len());
    assert!(cases > 10_000);
}

#[test]
fn run_scans_agree_with_the_evaluator() {
    let (mut db, world, rows, _) = seeded();
    let cases = check_run_scans(&mut db, &rows, &world, Some(base()));
    eprintln!("sqlite: {cases} run-scan cases");
}

#[test]
fn intent_writes_and_scans_agree_with_the_evaluator() {
    let mut db = Lite::open();
    let (runs, intents) = intent_grid(base(), true);
    let mut world = World::default();
    for r in &runs {
        db.insert_run(r);
        world.runs.insert(r.id.clone(), r.clone());
    }
    for i in &intents {
        db.insert_intent(i);
    }
    let writes = check_intent_writes(&mut db, &runs, &intents, &world, base(), true);
    let scans = check_intent_scans(&mut db, &intents, &world, Some(base()));
    eprintln!("sqlite: {writes} intent-write cases, {scans} intent-scan cases ({} intents)", intents.len());
}

#[test]
fn instance_writes_and_scans_agree_with_the_evaluator() {
    let (mut db, world, _, instances) = seeded();
    let cases = check_instances(&mut db, &instances, &world, Some(base()));
    eprintln!("sqlite: {cases} instance cases");
}

#[test]
fn stateful_requests_in_sequence() {
    let mut db = Lite::open();
    check_lifecycle(&mut db, Some(base()));
    let mut db = Lite::open();
    check_lifecycle(&mut db, None);
}

#[test]
fn the_epoch_trigger_follows_its_rule() {
    let mut db = Lite::open();
    check_epoch_trigger(&mut db);
}

#[test]
fn the_clock_is_sqlites_in_whole_milliseconds() {
    let mut db = Lite::open();
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let now = ask(&mut db, &StoreRequest::Now, None).now;
    let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!(before - 5 <= now.0 && now.0 <= after + 5, "{before} {now:?} {after}");
}

/// `now + ms` in SQLite date arithmetic equals `Timestamp::plus_millis`, over random clocks
/// (years 1970-2400) and shifts up to 100 years either way.
#[test]
fn clock_arithmetic_is_exact() {
    let mut db = Lite::open();
    let mut row = RunRow::ready("r", "job:r", base());
    row.status = heart_fleet_core::model::RunStatus::Leased;
    db.insert_run(&row);
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..3_000 {
        let now = Timestamp((next() % 13_569_465_600_000) as i64);
        let shift = match i % 4 {
            0 => (next() % 2_000) as i64 - 1_000,
            1 => (next() % 31_536_000_000) as i64,
            2 => -((next() % 3_155_760_000_000) as i64),
            _ => (next() % 3_155_760_000_000) as i64,
        };
        let req = StoreRequest::UpdateRun {
            run_id: "r".into(),
            when: Cond::True,
            set: vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(shift)), (RunCol::UpdatedAt, Expr::Now)],
            want_before: false,
            want_after: true,
        };
        let got = ask(&mut db, &req, Some(now));
        let StoreReply::RunWrite { after: Some(after), .. } = got.reply else { panic!() };
        assert_eq!(after.lease_expires_at, now.plus_millis(shift), "{} + {shift}", now.to_iso());
        assert_eq!(after.updated_at, now);
    }
}

#[test]
fn the_fleet_runs_on_sqlite() {
    // The library's `SqliteStore`: render, run in `BEGIN IMMEDIATE`, decode.
    let mut heart = HeartFleet::new(SqliteStore::new(Lite::open().conn));
    let (run, created) = heart.ensure_resource_run("mutex", "printer", "a printer mutex", "sql-exec").unwrap();
    assert!(created);
    assert!(run.idempotency_key.starts_with("heart:resource:"));
    let (same, created) = heart.ensure_resource_run("mutex", "printer", "a printer mutex", "sql-exec").unwrap();
    assert!(!created);
    assert_eq!(same.id, run.id);
    let acq = heart.acquire(&run.id, "worker-A", 60).unwrap();
    assert!(acq.acquired, "{acq:?}");
    let fence = acq.fence.unwrap();
    assert_eq!(fence.epoch, Some(1));
    assert!(heart.verify_fence(&fence).unwrap());
    let lost = heart.acquire(&run.id, "worker-B", 60).unwrap();
    assert!(!lost.acquired);
    heart.release(&fence, ReleaseTo::Ready).unwrap();
    let again = heart.acquire(&run.id, "worker-B", 60).unwrap();
    assert_eq!(again.fence.unwrap().epoch, Some(2));
    assert!(!heart.verify_fence(&fence).unwrap());
    assert_eq!(heart.metrics().acquire_wins, 2);
    let n: i64 = heart.store().connection().query_row("SELECT count(*) FROM agent_runs", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn receipts_go_to_their_table() {
    let mut db = Lite::open();
    common::check_receipts(&mut db);
}

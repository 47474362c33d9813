//! The PostgreSQL statement `heart_fleet_core::sql` renders for every request, executed by a
//! real server and compared with the core's pure evaluator, plus the races a single
//! statement must win: find-or-create and claim-once against a concurrent insert, and the
//! row-before of a conditional write against a concurrent update.
//!
//! Needs `DATABASE_URL` (e.g. `postgres://heart:heart@127.0.0.1:5432/heart_test`). Without
//! it every test prints a SKIPPED line and passes, unless `CI` is set, where it fails. Each
//! test creates a schema of its own, applies the migrations there twice, and drops it.
//!
//! These run directly only: they check what the statements mean, which a pooler cannot
//! change. How the statements travel through a transaction pooler (unnamed, typed, no
//! session state) is checked by `store_suite.rs`, `pg_faults.rs` and the CLI's tests, which run
//! the store on both routes (`pg_route`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    Db, World, ask, check_epoch_trigger, check_instances, check_intent_scans, check_intent_writes, check_lifecycle,
    check_run_scans, check_run_writes, instance_grid, intent_grid, run_grid, uuid,
};
use heart_fleet_core::model::{InstanceRow, RunRow, RunStatus};
use heart_fleet_core::request::{Cond, Expr, NewIntent, NewRun, RunCol, StoreReply, StoreRequest, Val};
use heart_fleet_core::sql::{
    Dialect, PgColumns, SqlParam, SqlRow, SqlValue, Statement, decode, migrations, render, render_pg_for,
};
use heart_fleet_core::time::Timestamp;
use heart_fleet_stores::pg::sql_rows;
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls};

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

struct Pg {
    client: Client,
    schema: String,
    owner: bool,
    /// How statements select their columns: as text for every driver ([`render`]), or in
    /// their own types for one that reads them in binary and converts them, as `PgStore`
    /// does (`sql_rows`).
    columns: PgColumns,
}

fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL is not set, and CI is: the PostgreSQL tests must run in CI"
            );
            eprintln!("SKIPPED: heart-fleet-sql-exec PostgreSQL tests (set DATABASE_URL to run them)");
            None
        }
    }
}

impl Pg {
    /// A connection working in a fresh schema with the migrations applied twice.
    fn connect() -> Option<Pg> {
        let url = database_url()?;
        let mut client = Client::connect(&url, NoTls).unwrap_or_else(|e| panic!("connect {url}: {e}"));
        let schema = format!("heart_sqlexec_{}_{}", std::process::id(), SCHEMAS.fetch_add(1, Ordering::SeqCst));
        client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).unwrap();
        client.batch_execute(&format!("SET search_path TO {schema}")).unwrap();
        for _ in 0..2 {
            for (name, sql) in migrations(Dialect::Postgres) {
                client.batch_execute(&format!("BEGIN; {sql}\n; COMMIT;")).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        Some(Pg { client, schema, owner: true, columns: PgColumns::Text })
    }

    /// Another connection to the same schema.
    fn second(&self) -> Pg {
        let mut client = Client::connect(&database_url().unwrap(), NoTls).unwrap();
        client.batch_execute(&format!("SET search_path TO {}", self.schema)).unwrap();
        Pg { client, schema: self.schema.clone(), owner: false, columns: self.columns }
    }

    fn query(&mut self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Vec<SqlRow> {
        let rows = self.client.query(sql, params).unwrap_or_else(|e| panic!("{e:?}\n{sql}"));
        if self.columns == PgColumns::Native {
            return sql_rows(&rows).unwrap_or_else(|e| panic!("{e}\n{sql}"));
        }
        rows.iter()
            .map(|row| {
                row.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, col)| {
                        let t = col.type_();
                        let v = if *t == Type::TEXT {
                            row.get::<_, Option<String>>(i).map_or(SqlValue::Null, SqlValue::Text)
                        } else if *t == Type::INT4 {
                            row.get::<_, Option<i32>>(i).map_or(SqlValue::Null, |v| SqlValue::Int(i64::from(v)))
                        } else if *t == Type::INT8 {
                            row.get::<_, Option<i64>>(i).map_or(SqlValue::Null, SqlValue::Int)
                        } else if *t == Type::BOOL {
                            row.get::<_, Option<bool>>(i).map_or(SqlValue::Null, SqlValue::Bool)
                        } else {
                            panic!(
                                "column {} has type {t}: drivers should only see text, integers and booleans",
                                col.name()
                            )
                        };
                        (col.name().to_owned(), v)
                    })
                    .collect()
            })
            .collect()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        if self.owner {
            let _ = self.client.batch_execute(&format!("ROLLBACK; DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

impl Db for Pg {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }
    fn render(&self, req: &StoreRequest) -> Vec<Statement> {
        vec![render_pg_for(req, self.columns).unwrap_or_else(|e| panic!("render {req:?}: {e}"))]
    }
    fn begin(&mut self) {
        self.client.batch_execute("BEGIN").unwrap();
    }
    fn commit(&mut self) {
        self.client.batch_execute("COMMIT").unwrap();
    }
    fn rollback(&mut self) {
        self.client.batch_execute("ROLLBACK").unwrap();
    }
    fn run(&mut self, stmts: &[Statement], now: Option<Timestamp>) -> Vec<Vec<SqlRow>> {
        assert!(now.is_none(), "PostgreSQL evaluates its own clock");
        assert_eq!(stmts.len(), 1);
        let s = &stmts[0];
        let params: Vec<Box<dyn ToSql + Sync>> = s
            .params
            .iter()
            .map(|p| match p {
                SqlParam::Int(i) => Box::new(*i) as Box<dyn ToSql + Sync>,
                SqlParam::Text(t) => Box::new(t.clone()),
                SqlParam::Now => panic!("SqlParam::Now in a PostgreSQL statement"),
            })
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|b| b.as_ref()).collect();
        vec![self.query(&s.sql, &refs)]
    }
    fn batch(&mut self, sql: &str) {
        self.client.batch_execute(sql).unwrap_or_else(|e| panic!("{e:?}\n{sql}"));
    }
    fn exec(&mut self, stmt: &Statement) -> Vec<SqlRow> {
        self.run(std::slice::from_ref(stmt), None).remove(0)
    }
}

/// The run grid around the database's clock, and the instances its owners name.
fn seeded(db: &mut Pg) -> (World, Vec<RunRow>, Vec<InstanceRow>, Timestamp) {
    let base = db.clock();
    let rows = run_grid(base, false);
    let instances = instance_grid(base, false);
    let mut world = World::default();
    for r in &rows {
        db.insert_run(r);
        world.runs.insert(r.id.clone(), r.clone());
    }
    for i in &instances {
        db.insert_instance(i);
        world.instances.insert(i.instance_id.clone(), i.clone());
    }
    (world, rows, instances, base)
}

#[test]
fn migrations_are_idempotent_and_additive() {
    let Some(mut db) = Pg::connect() else { return };
    let schema = db.schema.clone();
    let rows = db.query(
        "SELECT table_name::text AS t, column_name::text AS c FROM information_schema.columns \
         WHERE table_schema = $1::text AND column_name IN ('fencing_epoch', 'fence_epoch', 'seq', 'receipt') \
         ORDER BY 1, 2",
        &[&schema],
    );
    let found: Vec<(String, String)> = rows
        .iter()
        .map(|r| match (&r[0].1, &r[1].1) {
            (SqlValue::Text(t), SqlValue::Text(c)) => (t.clone(), c.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    let want = [
        ("agent_runs", "fencing_epoch"),
        ("effect_intents", "fence_epoch"),
        ("heart_receipts", "receipt"),
        ("outbox_dispatch_log", "seq"),
    ];
    assert_eq!(found, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
    let triggers =
        db.query("SELECT count(*)::int AS n FROM pg_trigger WHERE tgname = 'heart_fencing_epoch_monotonic'", &[]);
    assert!(matches!(triggers[0][0].1, SqlValue::Int(n) if n >= 1));
    let indexes = db.query(
        "SELECT count(*)::int AS n FROM pg_indexes WHERE schemaname = $1::text AND indexname LIKE 'idx_%'",
        &[&schema],
    );
    // 11 from 0001-0003, and 0004's idx_heart_receipts_event_at (the console's activity read).
    assert_eq!(indexes[0][0].1, SqlValue::Int(12));
}

#[test]
fn run_writes_agree_with_the_evaluator() {
    let Some(mut db) = Pg::connect() else { return };
    let (world, rows, _, base) = seeded(&mut db);
    let cases = check_run_writes(&mut db, &rows, &world, base, false);
    eprintln!("postgres: {cases} run-write cases ({} rows)", rows.len());
}

/// The run writes again with their columns selected in their own types and converted by
/// `PgStore`'s reader: every answer (rows before and after, timestamps to the millisecond)
/// equals the evaluator's, as the text statements' do.
#[test]
fn run_writes_with_native_columns_agree_with_the_evaluator() {
    let Some(mut db) = Pg::connect() else { return };
    let (world, rows, _, base) = seeded(&mut db);
    db.columns = PgColumns::Native;
    let cases = check_run_writes(&mut db, &rows, &world, base, false);
    eprintln!("postgres, native columns: {cases} run-write cases ({} rows)", rows.len());
}

/// A `timestamptz`, `uuid` or `jsonb` column read in its own type (binary) becomes the text
/// the text statements select for it: for instants with microseconds, before 2000 and before
/// 1970 (where PostgreSQL's and Unix's epochs count negative), the milliseconds truncated as
/// `to_char` truncates them.
#[test]
fn native_columns_read_as_the_text_statements_format_them() {
    let Some(mut db) = Pg::connect() else { return };
    let sql = "SELECT v.ts AS native, to_char(v.ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS text, \
               v.id AS native_id, v.id::text AS text_id, v.doc AS native_doc, v.doc::text AS text_doc \
               FROM (VALUES \
                 ('2026-07-30 00:00:01.123999+00'::timestamptz, '0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab'::uuid, \
                  '{\"b\": [1, 2.5], \"a\": \"ü\"}'::jsonb), \
                 ('1999-12-31 23:59:59.999999+00', 'ffffffff-0000-4000-8000-00000000000f', 'null'), \
                 ('1969-07-20 20:17:40.000001+00', '00000000-0000-0000-0000-000000000000', '[]'), \
                 ('1900-01-01 00:00:00.0005+00', '12345678-9abc-def0-1234-56789abcdef0', '\"x\"'), \
                 ('9999-12-31 23:59:59.999999+00', '0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab', '1e3'), \
                 ('2000-01-01 00:00:00+00', '0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab', '{}') \
               ) AS v(ts, id, doc)";
    let rows = db.client.query(sql, &[]).unwrap();
    let rows = sql_rows(&rows).unwrap();
    assert_eq!(rows.len(), 6);
    for row in &rows {
        let [native, text, native_id, text_id, native_doc, text_doc] = row.as_slice() else { panic!("{row:?}") };
        assert_eq!(native.1, text.1, "{row:?}");
        assert_eq!(native_id.1, text_id.1, "{row:?}");
        assert_eq!(native_doc.1, text_doc.1, "{row:?}");
    }
    // Infinity and instants past year 9999 are no `toISOString()` text: the decoder refuses them.
    let rows = db
        .client
        .query("SELECT 'infinity'::timestamptz AS a, '10000-01-01 00:00:00+00'::timestamptz AS b", &[])
        .unwrap();
    let rows = sql_rows(&rows).unwrap();
    for (name, value) in &rows[0] {
        let SqlValue::Text(t) = value else { panic!("{name}: {value:?}") };
        assert!(Timestamp::parse_iso(t).is_err(), "{name}: {t}");
    }
}

#[test]
fn run_scans_agree_with_the_evaluator() {
    let Some(mut db) = Pg::connect() else { return };
    let (world, rows, _, _) = seeded(&mut db);
    let cases = check_run_scans(&mut db, &rows, &world, None);
    eprintln!("postgres: {cases} run-scan cases");
}

#[test]
fn intent_writes_and_scans_agree_with_the_evaluator() {
    let Some(mut db) = Pg::connect() else { return };
    let base = db.clock();
    let (runs, intents) = intent_grid(base, false);
    let mut world = World::default();
    for r in &runs {
        db.insert_run(r);
        world.runs.insert(r.id.clone(), r.clone());
    }
    for i in &intents {
        db.insert_intent(i);
    }
    let writes = check_intent_writes(&mut db, &runs, &intents, &world, base, false);
    let scans = check_intent_scans(&mut db, &intents, &world, None);
    eprintln!("postgres: {writes} intent-write cases, {scans} intent-scan cases ({} intents)", intents.len());
}

#[test]
fn instance_writes_and_scans_agree_with_the_evaluator() {
    let Some(mut db) = Pg::connect() else { return };
    let (world, _, instances, _) = seeded(&mut db);
    let cases = check_instances(&mut db, &instances, &world, None);
    eprintln!("postgres: {cases} instance cases");
}

#[test]
fn stateful_requests_in_sequence() {
    let Some(mut db) = Pg::connect() else { return };
    check_lifecycle(&mut db, None);
}

#[test]
fn the_epoch_trigger_follows_its_rule() {
    let Some(mut db) = Pg::connect() else { return };
    check_epoch_trigger(&mut db);
}

#[test]
fn the_clock_is_the_servers_in_whole_milliseconds() {
    let Some(mut db) = Pg::connect() else { return };
    let rows =
        db.query("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS t", &[]);
    let SqlValue::Text(micro) = &rows[0][0].1 else { panic!() };
    let server = Timestamp::parse_iso(micro).unwrap();
    let now = ask(&mut db, &StoreRequest::Now, None).now;
    assert!(server <= now && now.0 - server.0 < 5_000, "{server:?} {now:?}");
    // Every shift lands on `now + ms` exactly.
    let mut row = RunRow::ready(uuid(1), "job:clock", now);
    row.status = RunStatus::Leased;
    db.insert_run(&row);
    for shift in [0, 1, -1, 999, 1_000, 60_000, 31_536_000_000, -31_536_000_001, 3_155_760_000_000] {
        let req = StoreRequest::UpdateRun {
            run_id: uuid(1),
            when: Cond::True,
            set: vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(shift)), (RunCol::UpdatedAt, Expr::Now)],
            want_before: false,
            want_after: true,
        };
        let got = ask(&mut db, &req, None);
        let StoreReply::RunWrite { after: Some(after), .. } = got.reply else { panic!() };
        assert_eq!(after.lease_expires_at, got.now.plus_millis(shift), "{shift}");
        assert_eq!(after.updated_at, got.now);
    }
}

/// The run-id check `render` does must accept exactly what PostgreSQL's `uuid` input accepts.
#[test]
fn uuid_texts_are_judged_as_postgres_does() {
    let Some(mut db) = Pg::connect() else { return };
    let candidates = [
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab",
        "0B3F5C1E-9D2A-4C1B-8E7F-1234567890AB",
        "0b3f5c1e9d2a4c1b8e7f1234567890ab",
        "{0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab}",
        "{0b3f5c1e9d2a4c1b8e7f1234567890ab}",
        "0b3f-5c1e-9d2a-4c1b-8e7f-1234-5678-90ab",
        "0b3f5c1e-9d2a-4c1b-8e7f-12345678-90ab",
        "0b3f5c1e-9d2a4c1b-8e7f-1234567890ab",
        "",
        "run-1",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890a",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab-",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890abc",
        "0b3f5c1-e9d2a-4c1b-8e7f-1234567890ab",
        "{0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab",
        "0b3f5c1e-9d2a-4c1b-8e7f-1234567890ab}",
        "-0b3f5c1e9d2a4c1b8e7f1234567890ab",
        " 0b3f5c1e9d2a4c1b8e7f1234567890ab",
        "0b3f5c1e9d2a4c1b8e7f1234567890ab ",
        "0b3f5c1e--9d2a-4c1b-8e7f-1234567890ab",
        "0g3f5c1e-9d2a-4c1b-8e7f-1234567890ab",
        "０b3f5c1e-9d2a-4c1b-8e7f-1234567890ab",
    ];
    for c in candidates {
        let accepted_by_render =
            !render(&StoreRequest::ReadRun { run_id: c.to_owned() }, Dialect::Postgres).unwrap()[0].params.is_empty();
        let accepted_by_pg = db.client.query("SELECT $1::text::uuid", &[&c]).is_ok();
        assert_eq!(accepted_by_render, accepted_by_pg, "{c:?}");
        let got = ask(&mut db, &StoreRequest::ReadRun { run_id: c.to_owned() }, None);
        assert_eq!(got.reply, StoreReply::Run { run: None });
    }
}

/// Runs `stmt` on `db` in a thread; returns once the thread is blocked (or done).
fn spawn_blocked(mut db: Pg, req: StoreRequest) -> std::thread::JoinHandle<(Pg, heart_fleet_core::StoreAnswer)> {
    let handle = std::thread::spawn(move || {
        let answer = ask(&mut db, &req, None);
        (db, answer)
    });
    std::thread::sleep(Duration::from_millis(400));
    assert!(!handle.is_finished(), "the second statement should wait for the first transaction");
    handle
}

/// Find-or-create and claim-once racing a concurrent insert of the same key that commits
/// after the second statement's snapshot: the second statement waits, then answers with the
/// committed row and `created`/`claimed` false.
#[test]
fn find_or_create_and_claim_once_win_their_races() {
    let Some(mut a) = Pg::connect() else { return };
    let b = a.second();
    let ensure = StoreRequest::EnsureRun(NewRun {
        idempotency_key: "heart:resource:race".into(),
        objective: "race".into(),
        created_by: "a".into(),
    });
    a.begin();
    let rows = a.run(&render(&ensure, Dialect::Postgres).unwrap(), None);
    let mine = decode(&ensure, Dialect::Postgres, rows).unwrap();
    let handle = spawn_blocked(b, ensure.clone());
    a.commit();
    let (b, theirs) = handle.join().unwrap();
    let StoreReply::Ensured { run: first, created: true } = mine.reply else { panic!("{:?}", mine.reply) };
    assert_eq!(theirs.reply, StoreReply::Ensured { run: first.clone(), created: false });

    let claim = StoreRequest::ClaimIntent(NewIntent {
        run_id: first.id.clone(),
        effect_key: "mail:race".into(),
        channel: "mail".into(),
        payload_digest: "d".into(),
    });
    a.begin();
    let rows = a.run(&render(&claim, Dialect::Postgres).unwrap(), None);
    let mine = decode(&claim, Dialect::Postgres, rows).unwrap();
    let handle = spawn_blocked(b, claim.clone());
    a.commit();
    let (_b, theirs) = handle.join().unwrap();
    let StoreReply::Claim { intent, claimed: true } = mine.reply else { panic!("{:?}", mine.reply) };
    assert_eq!(theirs.reply, StoreReply::Claim { intent, claimed: false });
    let log = ask(&mut a, &StoreRequest::ReadLog { run_id: first.id.clone(), effect_key: "mail:race".into() }, None);
    let StoreReply::Log { entries } = log.reply else { panic!() };
    let outcomes: Vec<&str> = entries.iter().map(|e| e.outcome.as_str()).collect();
    assert_eq!(outcomes, ["claimed", "deduped"]);
    let count = a.query("SELECT count(*)::int AS n FROM effect_intents", &[]);
    assert_eq!(count[0][0].1, SqlValue::Int(1));
}

/// A conditional write with `want_before` racing a concurrent update of the row: it waits,
/// and both its condition and the `before` it reports are the committed new version.
#[test]
fn the_row_before_is_the_row_the_write_saw() {
    let Some(mut a) = Pg::connect() else { return };
    let mut b = a.second();
    let base = a.clock();
    let id = uuid(42);
    let mut row = RunRow::ready(id.clone(), "job:before", base);
    row.fencing_epoch = 4;
    a.insert_run(&row);
    let was_ready = Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready));
    let acquire = StoreRequest::UpdateRun {
        run_id: id.clone(),
        when: was_ready.clone(),
        set: vec![
            (RunCol::Status, Expr::Val(Val::status(RunStatus::Leased))),
            (RunCol::LeaseOwner, Expr::Val(Val::Text("b".into()))),
            (RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)),
            (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
            (RunCol::Retries, Expr::Add(RunCol::Retries, 10)),
            (RunCol::UpdatedAt, Expr::Now),
        ],
        want_before: true,
        want_after: true,
    };
    // 1. The concurrent writer keeps the run ready but changes it: B's write hits, and both
    //    `before` and the assignments see A's committed version.
    a.begin();
    a.batch(&format!("UPDATE agent_runs SET retries = 3, objective = 'changed' WHERE id = '{id}'::uuid"));
    let handle = spawn_blocked(b, acquire.clone());
    a.commit();
    let (b2, got) = handle.join().unwrap();
    b = b2;
    let StoreReply::RunWrite { before: Some(before), after: Some(after) } = got.reply else {
        panic!("{:?}", got.reply)
    };
    assert_eq!((before.retries, before.objective.as_str(), before.status), (3, "changed", RunStatus::Ready));
    assert_eq!((after.retries, after.fencing_epoch, after.status), (13, 5, RunStatus::Leased));
    // 2. The concurrent writer takes the lease: B's write re-checks its condition on the new
    //    version and misses.
    a.batch(&format!(
        "UPDATE agent_runs SET status = 'ready', lease_owner = NULL, lease_expires_at = NULL WHERE id = '{id}'::uuid"
    ));
    a.begin();
    a.batch(&format!(
        "UPDATE agent_runs SET status = 'leased', lease_owner = 'a', lease_expires_at = now() + interval '1 hour', \
         fencing_epoch = fencing_epoch + 1 WHERE id = '{id}'::uuid"
    ));
    let handle = spawn_blocked(b, acquire);
    a.commit();
    let (_b, got) = handle.join().unwrap();
    assert_eq!(got.reply, StoreReply::RunWrite { before: None, after: None });
}

/// The sweep and the reconciler's scan can use the partial indexes of the migrations even
/// with a generic plan (a driver's cached prepared statement): their status and state
/// values are rendered as literals that imply the indexes' predicates.
#[test]
fn the_hot_scans_can_use_their_partial_indexes() {
    let Some(mut db) = Pg::connect() else { return };
    let sweep = StoreRequest::ScanRuns {
        when: Cond::And(vec![heart_fleet_core::request::held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]),
        order: heart_fleet_core::request::RunOrder::ExpiresAt,
        limit: 100,
    };
    let stale = StoreRequest::ScanIntents {
        when: Cond::And(vec![
            Cond::Eq(heart_fleet_core::request::IntentCol::State, Val::Text("dispatched".into())),
            Cond::ExpiredAt(heart_fleet_core::request::IntentCol::FenceExpiresAt),
        ]),
        limit: 50,
    };
    db.batch("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; SET enable_bitmapscan = off");
    for (name, req, index) in
        [("sweep", sweep, "idx_agent_runs_lease_sweep"), ("stale", stale, "idx_effect_intents_reconcile")]
    {
        let stmt = &render(&req, Dialect::Postgres).unwrap()[0];
        assert_eq!(stmt.params.len(), 1, "{}", stmt.sql);
        db.batch(&format!("PREPARE {name}(bigint) AS {}", stmt.sql));
        let plan = db.query(&format!("EXPLAIN EXECUTE {name}(100)"), &[]);
        let plan: Vec<String> = plan
            .iter()
            .map(|r| match &r[0].1 {
                SqlValue::Text(t) => t.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(plan.iter().any(|l| l.contains(index)), "{name}: {}", plan.join("\n"));
    }
}

#[test]
fn receipts_go_to_their_table() {
    let Some(mut db) = Pg::connect() else { return };
    common::check_receipts(&mut db);
}

/// The text of the one-row, one-column answer of `sql` (simple query protocol).
fn simple_text(db: &mut Pg, sql: &str) -> String {
    let msgs = db.client.simple_query(sql).unwrap_or_else(|e| panic!("{e:?}\n{sql}"));
    msgs.iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no row: {sql}"))
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan.
fn plan_nodes<'a>(node: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
    out.push(node);
    for child in node.get("Plans").and_then(serde_json::Value::as_array).into_iter().flatten() {
        plan_nodes(child, out);
    }
}

/// An idle sweep (held leases, none expired) and an idle stale-dispatch scan bound their
/// index scans by the clock: every scan of the partial index has an `Index Cond` on the
/// expiry (`IS NULL`, or `<= now`) and returns no row, so the scan's cost does not grow
/// with the live leases (or live fences). Checked with custom and generic plans, with
/// sequential and bitmap scans off so the small tables use their indexes.
#[test]
fn an_idle_sweep_does_not_read_the_live_leases() {
    use heart_fleet_core::request::{IntentCol, RunOrder, held};
    let Some(mut db) = Pg::connect() else { return };
    db.batch(
        "INSERT INTO agent_runs (id, assignment_id, objective, status, lease_owner, lease_expires_at, idempotency_key, created_by) \
         SELECT gen_random_uuid(), gen_random_uuid(), 'o', CASE WHEN g % 2 = 0 THEN 'leased' ELSE 'running' END, 'w', \
         now() + interval '1 hour' + g * interval '1 second', 'k' || g, 't' FROM generate_series(1, 300) g; \
         INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, fence_expires_at, attempts) \
         SELECT id, 'e', 'dispatched', 'mail', 'd', 'w', lease_expires_at, 0 FROM agent_runs; \
         ANALYZE agent_runs; ANALYZE effect_intents",
    );
    let sweep = StoreRequest::ScanRuns {
        when: Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]),
        order: RunOrder::ExpiresAt,
        limit: 100,
    };
    let stale = StoreRequest::ScanIntents {
        when: Cond::And(vec![
            Cond::Eq(IntentCol::State, Val::Text("dispatched".into())),
            Cond::ExpiredAt(IntentCol::FenceExpiresAt),
        ]),
        limit: 100,
    };
    db.batch("SET enable_seqscan = off; SET enable_bitmapscan = off");
    for (name, req, index, col) in [
        ("sweep", &sweep, "idx_agent_runs_lease_sweep", "lease_expires_at"),
        ("stale", &stale, "idx_effect_intents_reconcile", "fence_expires_at"),
    ] {
        // Nothing is expired: the scan finds nothing.
        let answer = ask(&mut db, req, None);
        match &answer.reply {
            StoreReply::Runs { runs } => assert!(runs.is_empty(), "{name}: {runs:?}"),
            StoreReply::Intents { intents } => assert!(intents.is_empty(), "{name}: {intents:?}"),
            other => panic!("{name}: {other:?}"),
        }
        let stmt = &render(req, Dialect::Postgres).unwrap()[0];
        assert_eq!(stmt.params, vec![SqlParam::Int(100)], "{}", stmt.sql);
        db.batch(&format!("PREPARE {name}(bigint) AS {}", stmt.sql));
        for mode in ["force_custom_plan", "force_generic_plan"] {
            db.batch(&format!("SET plan_cache_mode = {mode}"));
            let text = simple_text(&mut db, &format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE {name}(100)"));
            let json: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut nodes = Vec::new();
            plan_nodes(&json[0]["Plan"], &mut nodes);
            let scans: Vec<_> = nodes.iter().filter(|n| n["Index Name"].as_str() == Some(index)).collect();
            let why = format!("{name} ({mode}): {}", serde_json::to_string_pretty(&json).unwrap());
            assert!(!scans.is_empty(), "{why}");
            for scan in scans {
                let cond = scan["Index Cond"].as_str().unwrap_or_default();
                assert!(cond.contains(col) && (cond.contains("IS NULL") || cond.contains("<=")), "{why}");
                assert_eq!(scan["Actual Rows"].as_i64(), Some(0), "{why}");
            }
            for n in &nodes {
                for key in ["Rows Removed by Filter", "Rows Removed by Join Filter", "Rows Removed by Index Recheck"] {
                    assert!(n[key].as_i64().unwrap_or(0) == 0, "{why}");
                }
            }
        }
        db.batch(&format!("DEALLOCATE {name}; RESET plan_cache_mode"));
    }
}

/// An expiry with sub-millisecond digits (written by another tool: PostgreSQL keeps
/// microseconds) is reclaimed: the scan reads it back in whole milliseconds, and the
/// recovery write's `lease_expires_at = <that value>` compares at millisecond precision.
#[test]
fn sub_millisecond_expiries_are_reclaimed() {
    let Some(mut db) = Pg::connect() else { return };
    let id = uuid(7);
    db.batch(&format!(
        "INSERT INTO agent_runs (id, assignment_id, objective, status, lease_owner, lease_expires_at, retries, \
         idempotency_key, created_by) VALUES ('{id}', gen_random_uuid(), 'o', 'running', 'w1', \
         '2020-01-02 03:04:00.123456+00', 0, 'k-sub-ms', 't')"
    ));
    let url = database_url().unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let store =
        heart_fleet_sql_exec::PgStore::connect(&format!("{url}{sep}options=-csearch_path%3D{}", db.schema)).unwrap();
    let mut fleet = heart_fleet_core::HeartFleet::new(store);
    let summary = fleet.reclaim_expired(10).unwrap();
    assert!(summary.errors.is_empty(), "{summary:?}");
    assert_eq!(summary.reclaimed_ids, vec![id.clone()], "{summary:?}");
    let row = db.query("SELECT status, lease_owner FROM agent_runs WHERE id = $1::text::uuid", &[&id]);
    assert_eq!(row[0][0].1, SqlValue::Text("ready".into()), "{row:?}");
    assert_eq!(row[0][1].1, SqlValue::Null, "{row:?}");
    // Nothing is left to reclaim.
    let again = fleet.reclaim_expired(10).unwrap();
    assert!(again.reclaimed_ids.is_empty() && again.errors.is_empty(), "{again:?}");
}

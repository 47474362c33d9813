//! What the SQLite and PostgreSQL test binaries share: a tiny driver interface, the grids of
//! rows and requests, and the comparisons with the core's pure evaluator.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use heart_fleet_core::model::{
    DispatchLogEntry, FencingToken, InstanceRow, InstanceStatus, IntentRow, IntentState, RunRow, RunStatus,
};
use heart_fleet_core::request::{
    Assign, Cond, Expr, InstanceCol, IntentCol, Lookup, RunCol, RunOrder, StoreAnswer, StoreReply, StoreRequest, Val,
    apply_update, held, holds_token,
};
use heart_fleet_core::sql::{Dialect, SqlRow, Statement, decode, render};
use heart_fleet_core::time::Timestamp;
use serde_json::json;

/// The little a test needs from a database connection.
pub trait Db {
    fn dialect(&self) -> Dialect;
    /// The statements of `req` as this database's driver runs them.
    fn render(&self, req: &StoreRequest) -> Vec<Statement> {
        render(req, self.dialect()).unwrap_or_else(|e| panic!("render {req:?}: {e}"))
    }
    fn begin(&mut self);
    fn commit(&mut self);
    fn rollback(&mut self);
    /// Executes `stmts` in the open transaction and returns every statement's rows. With
    /// `now` (SQLite only), the clock read is skipped and [`SqlParam::Now`] binds `now`.
    fn run(&mut self, stmts: &[Statement], now: Option<Timestamp>) -> Vec<Vec<SqlRow>>;
    /// Runs a batch of plain SQL (several statements, no parameters).
    fn batch(&mut self, sql: &str);
    /// Runs one statement that takes no [`SqlParam::Now`], outside the request protocol.
    fn exec(&mut self, stmt: &Statement) -> Vec<SqlRow>;
    /// Seeds a run exactly as given (the core's seeding statement).
    fn insert_run(&mut self, r: &RunRow) {
        let stmt = heart_fleet_core::sql::seed_run(self.dialect(), r);
        self.exec(&stmt);
    }
    /// Seeds an instance exactly as given.
    fn insert_instance(&mut self, i: &InstanceRow) {
        let stmt = heart_fleet_core::sql::seed_instance(self.dialect(), i);
        self.exec(&stmt);
    }
    /// Seeds an intent exactly as given.
    fn insert_intent(&mut self, i: &IntentRow) {
        let stmt = heart_fleet_core::sql::seed_intent(self.dialect(), i);
        self.exec(&stmt);
    }
    /// The database's clock, whole milliseconds.
    fn clock(&mut self) -> Timestamp {
        ask(self, &StoreRequest::Now, None).now
    }
    fn clear(&mut self) {
        self.batch(
            "DELETE FROM agent_runs; DELETE FROM agent_instances; DELETE FROM effect_intents; \
             DELETE FROM outbox_dispatch_log;",
        );
    }
}

/// Renders, executes in its own transaction, commits and decodes.
pub fn ask<D: Db + ?Sized>(db: &mut D, req: &StoreRequest, now: Option<Timestamp>) -> StoreAnswer {
    let stmts = db.render(req);
    db.begin();
    let rows = db.run(&stmts, now);
    db.commit();
    let answer = decode(req, db.dialect(), rows).unwrap_or_else(|e| panic!("decode {req:?}: {e}"));
    if let Some(now) = now {
        assert_eq!(answer.now, now);
    }
    answer
}

/// Renders and executes `req` in a transaction, calls `inspect` inside it, then rolls back.
pub fn probe<D: Db + ?Sized, T>(
    db: &mut D,
    req: &StoreRequest,
    now: Option<Timestamp>,
    inspect: impl FnOnce(&mut D, Timestamp) -> T,
) -> (StoreAnswer, T) {
    let stmts = db.render(req);
    db.begin();
    let rows = db.run(&stmts, now);
    let answer = decode(req, db.dialect(), rows).unwrap_or_else(|e| panic!("decode {req:?}: {e}"));
    let seen = inspect(db, answer.now);
    db.rollback();
    (answer, seen)
}

/// Runs a request inside the caller's open transaction.
pub fn ask_in_tx<D: Db + ?Sized>(db: &mut D, req: &StoreRequest, now: Timestamp) -> StoreAnswer {
    let stmts = db.render(req);
    let fixed = (db.dialect() == Dialect::Sqlite).then_some(now);
    let rows = db.run(&stmts, fixed);
    decode(req, db.dialect(), rows).unwrap()
}

pub fn read_run<D: Db + ?Sized>(db: &mut D, id: &str, now: Timestamp) -> Option<RunRow> {
    match ask_in_tx(db, &StoreRequest::ReadRun { run_id: id.to_owned() }, now).reply {
        StoreReply::Run { run } => run,
        other => panic!("{other:?}"),
    }
}

pub fn read_log<D: Db + ?Sized>(db: &mut D, run_id: &str, key: &str, now: Timestamp) -> Vec<DispatchLogEntry> {
    match ask_in_tx(db, &StoreRequest::ReadLog { run_id: run_id.to_owned(), effect_key: key.to_owned() }, now).reply {
        StoreReply::Log { entries } => entries,
        other => panic!("{other:?}"),
    }
}

/// UUID text for test rows.
pub fn uuid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

pub fn ms(t: Timestamp, d: i64) -> Timestamp {
    Timestamp(t.0 + d)
}

/// The evaluator's view of the other tables.
#[derive(Default)]
pub struct World {
    pub runs: BTreeMap<String, RunRow>,
    pub instances: BTreeMap<String, InstanceRow>,
}

impl Lookup for World {
    fn run(&self, run_id: &str) -> Option<&RunRow> {
        self.runs.get(run_id)
    }
    fn instance(&self, instance_id: &str) -> Option<&InstanceRow> {
        self.instances.get(instance_id)
    }
}

pub const OWNERS: [Option<&str>; 5] = [None, Some("w1"), Some("w2"), Some("w3"), Some("ghost")];

/// Lease expiry offsets from the clock: the exact boundary (SQLite, where `now` is fixed) or
/// far enough that the unknown statement time cannot matter (PostgreSQL).
pub fn expiry_offsets(tight: bool) -> Vec<Option<i64>> {
    if tight {
        vec![None, Some(-1), Some(0), Some(1), Some(-3_600_000), Some(3_600_000)]
    } else {
        vec![None, Some(-3_600_000), Some(3_600_000)]
    }
}

/// Every status × owner × expiry × retries (0 and 4, below and at the ceiling of 5).
pub fn run_grid(base: Timestamp, tight: bool) -> Vec<RunRow> {
    let mut out = Vec::new();
    let mut n = 0u64;
    for status in RunStatus::ALL {
        for owner in OWNERS {
            for off in expiry_offsets(tight) {
                for retries in [0, 4] {
                    n += 1;
                    let id = uuid(n);
                    let key = if n.is_multiple_of(3) { format!("heart:resource:{n}") } else { format!("job:{n}") };
                    let mut r = RunRow::ready(id.clone(), key, ms(base, -100_000));
                    r.assignment_id = uuid(1_000_000 + n);
                    r.status = status;
                    r.lease_owner = owner.map(str::to_owned);
                    r.lease_expires_at = off.map(|o| ms(base, o));
                    r.retries = retries;
                    r.fencing_epoch = (n % 5) as i64;
                    // Around the 10 s mark, so OlderThan(updated_at, 10_000) splits the grid.
                    r.updated_at = ms(base, -9_995 - (n % 10) as i64);
                    r.task_id = n.is_multiple_of(4).then(|| format!("task-{n}"));
                    r.assigned_agent = n.is_multiple_of(6).then(|| "zoe".to_owned());
                    r.budget = (n % 4 == 1).then(|| json!({"computeLimit": n, "deadline": "soon"}));
                    r.required_capabilities =
                        if n.is_multiple_of(2) { vec!["read".into(), "post \"x\"".into()] } else { vec![] };
                    r.objective = format!("objective {n} ünïcødé");
                    out.push(r);
                }
            }
        }
    }
    out
}

/// The instances the grid's owners name, plus one per status × heartbeat age.
pub fn instance_grid(base: Timestamp, tight: bool) -> Vec<InstanceRow> {
    let inst = |id: &str, status: InstanceStatus, hb: i64| InstanceRow {
        instance_id: id.to_owned(),
        hostname: Some(format!("{id}.local")),
        pid: Some(4242),
        status,
        started_at: ms(base, -7_200_000),
        last_heartbeat: ms(base, hb),
        metadata: Some(json!({"v": id})),
    };
    let (live, stale) = if tight { (-90_000, -90_001) } else { (-1_000, -3_600_000) };
    let mut out = vec![
        inst("w1", InstanceStatus::Alive, live),
        inst("w2", InstanceStatus::Alive, stale),
        inst("w3", InstanceStatus::Dead, 0),
    ];
    let ages: Vec<i64> = if tight { vec![0, -89_999, -90_000, -90_001, -3_600_000] } else { vec![-1_000, -3_600_000] };
    for (i, status) in [InstanceStatus::Alive, InstanceStatus::Draining, InstanceStatus::Dead].into_iter().enumerate() {
        for (j, age) in ages.iter().enumerate() {
            let mut row = inst(&format!("i-{i}-{j}"), status, *age);
            if j % 2 == 1 {
                row.hostname = None;
                row.pid = None;
                row.metadata = None;
            }
            out.push(row);
        }
    }
    out
}

/// `retries + 1 > 5`, as `ops` writes it.
fn at_ceiling() -> Cond<RunCol> {
    Cond::Not(Box::new(Cond::AtMost(RunCol::Retries, 4)))
}

fn recovery_set() -> Vec<Assign<RunCol>> {
    vec![
        (
            RunCol::Status,
            Expr::Case(
                Box::new(at_ceiling()),
                Box::new(Expr::Val(Val::status(RunStatus::Quarantined))),
                Box::new(Expr::Val(Val::status(RunStatus::Ready))),
            ),
        ),
        (RunCol::LeaseOwner, Expr::Val(Val::Null)),
        (RunCol::LeaseExpiresAt, Expr::Val(Val::Null)),
        (RunCol::Retries, Expr::Add(RunCol::Retries, 1)),
        (RunCol::UpdatedAt, Expr::Now),
    ]
}

fn acquire_write(owner: &str, ttl_ms: i64, ceiling: bool) -> (Cond<RunCol>, Vec<Assign<RunCol>>) {
    let was_ready = Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready));
    let mut takeover = vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)];
    if ceiling {
        takeover.push(Cond::Not(Box::new(at_ceiling())));
    }
    let when = Cond::Or(vec![was_ready.clone(), Cond::And(takeover)]);
    let set = vec![
        (RunCol::LeaseOwner, Expr::Val(Val::Text(owner.to_owned()))),
        (RunCol::LeaseExpiresAt, Expr::NowPlus(ttl_ms)),
        (RunCol::Status, Expr::Val(Val::status(RunStatus::Leased))),
        (RunCol::UpdatedAt, Expr::Now),
        (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
        (
            RunCol::Retries,
            Expr::Case(
                Box::new(was_ready),
                Box::new(Expr::Add(RunCol::Retries, 0)),
                Box::new(Expr::Add(RunCol::Retries, 1)),
            ),
        ),
    ];
    (when, set)
}

/// The conditional writes of runs the test tries on `row`: every operation's write in
/// `ops`, plus conditions that use each remaining [`Cond`] variant.
pub fn run_writes(row: &RunRow, base: Timestamp) -> Vec<(Cond<RunCol>, Vec<Assign<RunCol>>, bool)> {
    let expiry = row.lease_expires_at.unwrap_or(ms(base, 60_000));
    let token = |owner: &str, epoch: Option<i64>| FencingToken {
        run_id: row.id.clone(),
        owner: owner.to_owned(),
        lease_expires_at: expiry,
        epoch,
    };
    let mut out = Vec::new();
    let (w, s) = acquire_write("w1", 60_000, true);
    out.push((w, s, true));
    let (w, s) = acquire_write("w2", 31_536_000_000, false);
    out.push((w, s, true));
    // renew (with and without the epoch), verify
    let renew = vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(30_000)), (RunCol::UpdatedAt, Expr::Now)];
    out.push((holds_token(&token("w1", Some(row.fencing_epoch))), renew.clone(), false));
    out.push((holds_token(&token("w1", None)), renew, false));
    out.push((holds_token(&token("w2", Some(row.fencing_epoch + 1))), vec![(RunCol::UpdatedAt, Expr::Now)], false));
    // release to completed; release to ready (resource runs only)
    let release = |status: RunStatus| {
        vec![
            (RunCol::LeaseOwner, Expr::Val(Val::Null)),
            (RunCol::LeaseExpiresAt, Expr::Val(Val::Null)),
            (RunCol::Status, Expr::Val(Val::status(status))),
            (RunCol::UpdatedAt, Expr::Now),
        ]
    };
    out.push((holds_token(&token("w1", None)), release(RunStatus::Completed), false));
    let mut to_ready = release(RunStatus::Ready);
    to_ready.push((RunCol::Retries, Expr::Val(Val::Int(0))));
    out.push((
        Cond::And(vec![
            holds_token(&token("w2", None)),
            Cond::StartsWith(RunCol::IdempotencyKey, "heart:resource:".to_owned()),
        ]),
        to_ready,
        false,
    ));
    // the sweep's write, the quarantine at the ceiling, the liveness reclaim
    out.push((
        Cond::And(vec![
            held(),
            Cond::Eq(RunCol::LeaseExpiresAt, Val::opt_time(row.lease_expires_at)),
            Cond::ExpiredAt(RunCol::LeaseExpiresAt),
        ]),
        recovery_set(),
        false,
    ));
    out.push((
        Cond::And(vec![
            held(),
            Cond::Eq(RunCol::Status, Val::status(row.status)),
            Cond::Eq(RunCol::LeaseOwner, Val::opt_text(row.lease_owner.as_deref())),
            Cond::Eq(RunCol::LeaseExpiresAt, Val::opt_time(row.lease_expires_at)),
            Cond::ExpiredAt(RunCol::LeaseExpiresAt),
        ]),
        recovery_set(),
        true,
    ));
    out.push((Cond::And(vec![held(), Cond::OwnerInstanceDead { ttl_ms: 90_000 }]), recovery_set(), false));
    // operator: requeue, force release
    out.push((
        Cond::Eq(RunCol::Status, Val::status(RunStatus::Quarantined)),
        vec![
            (RunCol::Status, Expr::Val(Val::status(RunStatus::Ready))),
            (RunCol::Retries, Expr::Val(Val::Int(0))),
            (RunCol::UpdatedAt, Expr::Now),
        ],
        true,
    ));
    out.push((held(), release(RunStatus::Ready), true));
    // the remaining condition forms
    out.push((
        Cond::Or(vec![
            Cond::Not(Box::new(Cond::In(
                RunCol::LeaseOwner,
                vec![Val::Text("w1".into()), Val::Text("w2".into()), Val::Null, Val::Int(7)],
            ))),
            Cond::And(vec![Cond::OlderThan(RunCol::UpdatedAt, 10_000), Cond::AtMost(RunCol::FencingEpoch, 2)]),
        ]),
        vec![(RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 0)), (RunCol::UpdatedAt, Expr::NowPlus(-1))],
        false,
    ));
    out.push((
        Cond::And(vec![
            Cond::Eq(RunCol::Id, Val::Text(row.id.clone())),
            Cond::StartsWith(RunCol::Id, "00000000-0000-4000-8000-0000000000".to_owned()),
            Cond::Not(Box::new(Cond::LiveAt(RunCol::LeaseExpiresAt))),
            Cond::Not(Box::new(Cond::Eq(RunCol::LeaseOwner, Val::Null))),
            Cond::Eq(RunCol::Retries, Val::Text("0".into())),
        ]),
        vec![(RunCol::UpdatedAt, Expr::Now)],
        false,
    ));
    out.push((
        Cond::Or(vec![
            Cond::RunHeldBy { owner: "w1".into(), lease_expires_at: expiry, epoch: None },
            Cond::Not(Box::new(Cond::Or(vec![Cond::ExpiredAt(RunCol::Status), Cond::True]))),
        ]),
        vec![],
        true,
    ));
    out.push((Cond::Not(Box::new(Cond::OlderThan(RunCol::LeaseExpiresAt, -1))), vec![], false));
    out
}

/// Inserts `rows` and checks every write of [`run_writes`] on every row against
/// `apply_update`: the answer (after, and before when asked) and the row left in the table.
/// Each case runs in a transaction that is rolled back. Returns the number of cases.
pub fn check_run_writes<D: Db>(db: &mut D, rows: &[RunRow], world: &World, base: Timestamp, fixed: bool) -> usize {
    let mut cases = 0;
    let mut hits = 0;
    for row in rows {
        for (when, set, want_before) in run_writes(row, base) {
            // Each write as it wants the row after it, and (without the row before) as it
            // wants only whether it hit, as verifyFence's does.
            for want_after in if want_before { &[true][..] } else { &[true, false][..] } {
                let want_after = *want_after;
                let req = StoreRequest::UpdateRun {
                    run_id: row.id.clone(),
                    when: when.clone(),
                    set: set.clone(),
                    want_before,
                    want_after,
                };
                let now_arg = fixed.then_some(base);
                let (answer, stored) = probe(db, &req, now_arg, |db, now| read_run(db, &row.id, now));
                let expected = apply_update(row, &when, &set, answer.now, world).unwrap();
                let ctx = || format!("row {row:?}\nwhen {when:?}\nset {set:?}\nnow {}", answer.now);
                match answer.reply {
                    StoreReply::RunWrite { before, after } if want_after => {
                        assert_eq!(after, expected, "after: {}", ctx());
                        let want = if want_before && expected.is_some() { Some(row.clone()) } else { None };
                        assert_eq!(before, want, "before: {}", ctx());
                    }
                    StoreReply::RunHit { hit } if !want_after => assert_eq!(hit, expected.is_some(), "hit: {}", ctx()),
                    other => panic!("want_after {want_after}: {other:?}"),
                }
                assert_eq!(stored.as_ref(), Some(expected.as_ref().unwrap_or(row)), "stored: {}", ctx());
                hits += usize::from(expected.is_some());
                cases += 1;
            }
        }
        // A run that does not exist: a miss, not an error.
    }
    assert!(hits > cases / 10 && hits < cases, "hits {hits} of {cases}: the grid should both hit and miss");
    cases
}

/// Scans of runs compared with the memory store's filter, order and limit.
pub fn check_run_scans<D: Db>(db: &mut D, rows: &[RunRow], world: &World, now: Option<Timestamp>) -> usize {
    let conds: Vec<Cond<RunCol>> = vec![
        Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]),
        Cond::And(vec![held(), Cond::OwnerInstanceDead { ttl_ms: 90_000 }]),
        Cond::True,
        Cond::Not(Box::new(Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready)))),
        Cond::Or(vec![
            Cond::StartsWith(RunCol::IdempotencyKey, "heart:resource:".into()),
            Cond::LiveAt(RunCol::LeaseExpiresAt),
        ]),
        Cond::OlderThan(RunCol::UpdatedAt, 10_000),
        Cond::Eq(RunCol::Status, Val::status(RunStatus::Quarantined)),
    ];
    let mut cases = 0;
    for when in &conds {
        for order in [RunOrder::ExpiresAt, RunOrder::UpdatedAtDesc] {
            for limit in [0, 7, 100_000] {
                let req = StoreRequest::ScanRuns { when: when.clone(), order, limit };
                let answer = ask(db, &req, now);
                let mut want: Vec<RunRow> = rows.iter().filter(|r| when.eval(*r, answer.now, world)).cloned().collect();
                match order {
                    RunOrder::ExpiresAt => {
                        want.sort_by(|a, b| (a.lease_expires_at, &a.id).cmp(&(b.lease_expires_at, &b.id)))
                    }
                    RunOrder::UpdatedAtDesc => {
                        want.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)))
                    }
                }
                want.truncate(limit as usize);
                assert_eq!(answer.reply, StoreReply::Runs { runs: want }, "{when:?} {order:?} {limit}");
                cases += 1;
            }
        }
    }
    cases
}

/// Runs, and intents of them, for the intent transitions (mark-dispatched needs the run).
pub fn intent_grid(base: Timestamp, tight: bool) -> (Vec<RunRow>, Vec<IntentRow>) {
    let mut runs = Vec::new();
    let mut intents = Vec::new();
    let mut n = 5_000u64;
    let fences: Vec<Option<i64>> =
        if tight { vec![None, Some(-1), Some(0), Some(1)] } else { vec![None, Some(-3_600_000), Some(3_600_000)] };
    for status in [RunStatus::Leased, RunStatus::Running, RunStatus::Ready] {
        for owner in [None, Some("w1"), Some("w2")] {
            for off in expiry_offsets(tight) {
                n += 1;
                let mut run = RunRow::ready(uuid(n), format!("job:{n}"), ms(base, -100_000));
                run.assignment_id = uuid(2_000_000 + n);
                run.status = status;
                run.lease_owner = owner.map(str::to_owned);
                run.lease_expires_at = off.map(|o| ms(base, o));
                run.fencing_epoch = 3;
                for state in
                    [IntentState::Intent, IntentState::Dispatched, IntentState::Committed, IntentState::Abandoned]
                {
                    for (k, fence) in fences.iter().enumerate() {
                        intents.push(IntentRow {
                            run_id: run.id.clone(),
                            effect_key: format!("telegram:{}:{k}", state.as_str()),
                            state,
                            channel: "telegram".into(),
                            payload_digest: "sha256:dreamnet-sorted-json:v0:00".into(),
                            fence_owner: fence.map(|_| "w1".to_owned()),
                            fence_expires_at: fence.map(|o| ms(base, o)),
                            fence_epoch: fence.map(|_| 3),
                            external_ref: (k == 1).then(|| json!({"message_id": 7})),
                            attempts: k as i64,
                            last_error: None,
                            created_at: ms(base, -50_000),
                            committed_at: (state == IntentState::Committed).then(|| ms(base, -40_000)),
                        });
                    }
                }
                runs.push(run);
            }
        }
    }
    (runs, intents)
}

fn state(s: IntentState) -> Val {
    Val::Text(s.as_str().to_owned())
}

/// A condition, assignments and the log entry appended on a hit.
pub type IntentWrite = (Cond<IntentCol>, Vec<Assign<IntentCol>>, Option<DispatchLogEntry>);

/// The intent writes of `ops` (dispatch with each token shape, commit, reopen, abandon, note
/// unresolved), with their log entries.
pub fn intent_writes(intent: &IntentRow, run: &RunRow, base: Timestamp) -> Vec<IntentWrite> {
    let expiry = run.lease_expires_at.unwrap_or(ms(base, 60_000));
    let entry = |attempt: i64, outcome: &str, detail: Option<serde_json::Value>| DispatchLogEntry {
        run_id: intent.run_id.clone(),
        effect_key: intent.effect_key.clone(),
        attempt,
        outcome: outcome.to_owned(),
        at: None,
        detail,
    };
    let mut out = Vec::new();
    for epoch in [Some(3), None, Some(4)] {
        out.push((
            Cond::And(vec![
                Cond::Eq(IntentCol::State, state(IntentState::Intent)),
                Cond::RunHeldBy { owner: "w1".into(), lease_expires_at: expiry, epoch },
            ]),
            vec![
                (IntentCol::State, Expr::Val(state(IntentState::Dispatched))),
                (IntentCol::FenceOwner, Expr::Val(Val::Text("w1".into()))),
                (IntentCol::FenceExpiresAt, Expr::Val(Val::Time(expiry))),
                (IntentCol::FenceEpoch, Expr::Val(epoch.map_or(Val::Null, Val::Int))),
            ],
            None,
        ));
    }
    let evidence = json!({"message_id": 42, "chat": "ops"});
    out.push((
        Cond::Eq(IntentCol::State, state(IntentState::Dispatched)),
        vec![
            (IntentCol::State, Expr::Val(state(IntentState::Committed))),
            (IntentCol::ExternalRef, Expr::Val(Val::Json(evidence.clone()))),
            (IntentCol::CommittedAt, Expr::Now),
        ],
        Some(entry(1, "sent", Some(evidence))),
    ));
    out.push((
        Cond::Eq(IntentCol::State, state(IntentState::Dispatched)),
        vec![
            (IntentCol::State, Expr::Val(state(IntentState::Intent))),
            (IntentCol::FenceOwner, Expr::Val(Val::Null)),
            (IntentCol::FenceExpiresAt, Expr::Val(Val::Null)),
            (IntentCol::LastError, Expr::Val(Val::Text("reconciler: provably not sent".into()))),
        ],
        Some(entry(0, "reconciled", Some(json!({"reopened": true})))),
    ));
    out.push((
        Cond::In(IntentCol::State, vec![state(IntentState::Intent), state(IntentState::Dispatched)]),
        vec![
            (IntentCol::State, Expr::Val(state(IntentState::Abandoned))),
            (IntentCol::LastError, Expr::Val(Val::Text("gave up".into()))),
        ],
        Some(entry(0, "abandoned", Some(json!({"reason": "gave up"})))),
    ));
    out.push((
        Cond::And(vec![
            Cond::Eq(IntentCol::State, state(IntentState::Dispatched)),
            Cond::ExpiredAt(IntentCol::FenceExpiresAt),
        ]),
        vec![(IntentCol::Attempts, Expr::Add(IntentCol::Attempts, 1))],
        None,
    ));
    out.push((
        Cond::Or(vec![
            Cond::Not(Box::new(Cond::LiveAt(IntentCol::FenceExpiresAt))),
            Cond::Eq(IntentCol::ExternalRef, Val::Json(json!({"message_id": 7}))),
            Cond::OlderThan(IntentCol::CommittedAt, 39_999),
            Cond::AtMost(IntentCol::FenceEpoch, 2),
            Cond::OwnerInstanceDead { ttl_ms: 0 },
        ]),
        vec![(
            IntentCol::FenceEpoch,
            Expr::Case(
                Box::new(Cond::Eq(IntentCol::FenceEpoch, Val::Null)),
                Box::new(Expr::Val(Val::Int(9))),
                Box::new(Expr::Add(IntentCol::FenceEpoch, 1)),
            ),
        )],
        None,
    ));
    out
}

/// Checks every intent write on every intent: the answer, the stored row, and that the log
/// entry is appended (with `at = now`) exactly when the write hits.
pub fn check_intent_writes<D: Db>(
    db: &mut D,
    runs: &[RunRow],
    intents: &[IntentRow],
    world: &World,
    base: Timestamp,
    fixed: bool,
) -> usize {
    let mut cases = 0;
    let mut hits = 0;
    let by_id: BTreeMap<&str, &RunRow> = runs.iter().map(|r| (r.id.as_str(), r)).collect();
    for intent in intents {
        let run = by_id[intent.run_id.as_str()];
        for (when, set, log) in intent_writes(intent, run, base) {
            let req = StoreRequest::UpdateIntent {
                run_id: intent.run_id.clone(),
                effect_key: intent.effect_key.clone(),
                when: when.clone(),
                set: set.clone(),
                log: log.clone(),
            };
            let (answer, (stored, entries)) = probe(db, &req, fixed.then_some(base), |db, now| {
                // A write with no assignments reads the row back.
                let read = StoreRequest::UpdateIntent {
                    run_id: intent.run_id.clone(),
                    effect_key: intent.effect_key.clone(),
                    when: Cond::True,
                    set: vec![],
                    log: None,
                };
                let StoreReply::Intent { intent: stored } = ask_in_tx(db, &read, now).reply else { panic!() };
                (stored, read_log(db, &intent.run_id, &intent.effect_key, now))
            });
            let expected = apply_update(intent, &when, &set, answer.now, world).unwrap();
            let ctx = || format!("intent {intent:?}\nrun {run:?}\nwhen {when:?}\nnow {}", answer.now);
            assert_eq!(answer.reply, StoreReply::Intent { intent: expected.clone() }, "{}", ctx());
            assert_eq!(stored.as_ref(), Some(expected.as_ref().unwrap_or(intent)), "stored: {}", ctx());
            let want_log: Vec<DispatchLogEntry> = match (&expected, log) {
                (Some(_), Some(mut e)) => {
                    e.at = Some(answer.now);
                    vec![e]
                }
                _ => vec![],
            };
            assert_eq!(entries, want_log, "log: {}", ctx());
            hits += usize::from(expected.is_some());
            cases += 1;
        }
    }
    assert!(hits > cases / 10 && hits < cases, "hits {hits} of {cases}");
    cases
}

pub fn check_intent_scans<D: Db>(db: &mut D, intents: &[IntentRow], world: &World, now: Option<Timestamp>) -> usize {
    let conds: Vec<Cond<IntentCol>> = vec![
        Cond::And(vec![
            Cond::Eq(IntentCol::State, state(IntentState::Dispatched)),
            Cond::ExpiredAt(IntentCol::FenceExpiresAt),
        ]),
        Cond::True,
        Cond::Not(Box::new(Cond::LiveAt(IntentCol::FenceExpiresAt))),
        Cond::StartsWith(IntentCol::State, "dis".into()),
    ];
    let mut cases = 0;
    for when in &conds {
        for limit in [0, 5, 100_000] {
            let answer = ask(db, &StoreRequest::ScanIntents { when: when.clone(), limit }, now);
            let mut want: Vec<IntentRow> =
                intents.iter().filter(|r| when.eval(*r, answer.now, world)).cloned().collect();
            want.sort_by(|a, b| {
                (a.fence_expires_at, &a.run_id, &a.effect_key).cmp(&(b.fence_expires_at, &b.run_id, &b.effect_key))
            });
            want.truncate(limit as usize);
            assert_eq!(answer.reply, StoreReply::Intents { intents: want }, "{when:?} {limit}");
            cases += 1;
        }
    }
    cases
}

/// Instance writes and scans against the evaluator.
pub fn check_instances<D: Db>(db: &mut D, instances: &[InstanceRow], world: &World, now: Option<Timestamp>) -> usize {
    let text = |s: &str| Val::Text(s.to_owned());
    let dead = Cond::Eq(InstanceCol::Status, text("dead"));
    let conds: Vec<(Cond<InstanceCol>, Vec<Assign<InstanceCol>>)> = vec![
        (
            Cond::Or(vec![dead.clone(), Cond::OlderThan(InstanceCol::LastHeartbeat, 90_000)]),
            vec![(InstanceCol::Status, Expr::Val(text("dead")))],
        ),
        (
            Cond::And(vec![Cond::Eq(InstanceCol::InstanceId, text("w1")), Cond::Not(Box::new(dead.clone()))]),
            vec![(InstanceCol::LastHeartbeat, Expr::Now), (InstanceCol::Status, Expr::Val(text("alive")))],
        ),
        (
            Cond::In(InstanceCol::InstanceId, vec![text("i-0-1"), text("i-2-0"), text("nobody")]),
            vec![(InstanceCol::Status, Expr::Val(text("draining")))],
        ),
        (Cond::Not(Box::new(dead.clone())), vec![]),
        (
            Cond::StartsWith(InstanceCol::InstanceId, "i-1".into()),
            vec![(InstanceCol::LastHeartbeat, Expr::NowPlus(-90_000))],
        ),
    ];
    let mut cases = 0;
    for (when, set) in &conds {
        let req = StoreRequest::UpdateInstances { when: when.clone(), set: set.clone() };
        let (answer, stored) = probe(db, &req, now, |db, now| {
            match ask_in_tx(db, &StoreRequest::ScanInstances { when: Cond::True }, now).reply {
                StoreReply::Instances { instances } => instances,
                other => panic!("{other:?}"),
            }
        });
        let mut written = Vec::new();
        let mut after = Vec::new();
        for row in instances {
            match apply_update(row, when, set, answer.now, world).unwrap() {
                Some(next) => {
                    written.push(next.clone());
                    after.push(next);
                }
                None => after.push(row.clone()),
            }
        }
        written.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        after.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        assert_eq!(answer.reply, StoreReply::Instances { instances: written }, "{when:?}");
        assert_eq!(stored, after, "{when:?}");
        let scan = ask(db, &StoreRequest::ScanInstances { when: when.clone() }, now);
        let mut want: Vec<InstanceRow> = instances.iter().filter(|r| when.eval(*r, scan.now, world)).cloned().collect();
        want.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        assert_eq!(scan.reply, StoreReply::Instances { instances: want }, "{when:?}");
        cases += 2;
    }
    cases
}

/// Find-or-create, claim-once with its log, upsert of instances, reading the log: the
/// stateful requests, in sequence.
pub fn check_lifecycle<D: Db>(db: &mut D, now: Option<Timestamp>) -> usize {
    let ensure = StoreRequest::EnsureRun(heart_fleet_core::request::NewRun {
        idempotency_key: "heart:resource:feafc855".into(),
        objective: "a mutex".into(),
        created_by: "sql-exec".into(),
    });
    let first = ask(db, &ensure, now);
    let StoreReply::Ensured { run, created: true } = first.reply else { panic!("{:?}", first.reply) };
    assert!(is_uuid_v4(&run.id) && is_uuid_v4(&run.assignment_id) && run.id != run.assignment_id, "{run:?}");
    assert_eq!((run.status, run.retries, run.fencing_epoch), (RunStatus::Ready, 0, 0));
    assert_eq!((run.approval_state.as_str(), run.visibility.as_str()), ("auto", "team"));
    assert_eq!((run.objective.as_str(), run.created_by.as_str()), ("a mutex", "sql-exec"));
    assert_eq!((run.created_at, run.updated_at), (first.now, first.now));
    assert!(run.required_capabilities.is_empty() && run.budget.is_none() && run.lease_owner.is_none());
    let again = ask(db, &ensure, now);
    assert_eq!(again.reply, StoreReply::Ensured { run: run.clone(), created: false });

    let claim = StoreRequest::ClaimIntent(heart_fleet_core::request::NewIntent {
        run_id: run.id.clone(),
        effect_key: "telegram:78100bc3".into(),
        channel: "telegram".into(),
        payload_digest: "sha256:dreamnet-sorted-json:v0:ab".into(),
    });
    let c1 = ask(db, &claim, now);
    let StoreReply::Claim { intent, claimed: true } = c1.reply else { panic!("{:?}", c1.reply) };
    assert_eq!(intent.state, IntentState::Intent);
    assert_eq!((intent.attempts, intent.created_at, intent.channel.as_str()), (0, c1.now, "telegram"));
    let c2 = ask(db, &claim, now);
    assert_eq!(c2.reply, StoreReply::Claim { intent: intent.clone(), claimed: false });
    let log = ask(db, &StoreRequest::ReadLog { run_id: run.id.clone(), effect_key: "telegram:78100bc3".into() }, now);
    let entry = |outcome: &str, detail: Option<serde_json::Value>, at| DispatchLogEntry {
        run_id: run.id.clone(),
        effect_key: "telegram:78100bc3".into(),
        attempt: 0,
        outcome: outcome.into(),
        at: Some(at),
        detail,
    };
    assert_eq!(
        log.reply,
        StoreReply::Log {
            entries: vec![
                entry("claimed", Some(json!({"channel": "telegram"})), c1.now),
                entry("deduped", None, c2.now)
            ]
        }
    );
    let empty = ask(db, &StoreRequest::ReadLog { run_id: run.id.clone(), effect_key: "nope".into() }, now);
    assert_eq!(empty.reply, StoreReply::Log { entries: vec![] });

    let upsert = |host: Option<&str>, pid, meta| StoreRequest::UpsertInstance {
        instance_id: "worker-up".into(),
        hostname: host.map(str::to_owned),
        pid,
        metadata: meta,
    };
    let u1 = ask(db, &upsert(Some("h1"), Some(7), Some(json!({"role": "bot"}))), now);
    let want1 = InstanceRow {
        instance_id: "worker-up".into(),
        hostname: Some("h1".into()),
        pid: Some(7),
        status: InstanceStatus::Alive,
        started_at: u1.now,
        last_heartbeat: u1.now,
        metadata: Some(json!({"role": "bot"})),
    };
    assert_eq!(u1.reply, StoreReply::Instances { instances: vec![want1] });
    let kill = StoreRequest::UpdateInstances {
        when: Cond::Eq(InstanceCol::InstanceId, Val::Text("worker-up".into())),
        set: vec![(InstanceCol::Status, Expr::Val(Val::Text("dead".into())))],
    };
    ask(db, &kill, now);
    let u2 = ask(db, &upsert(None, None, None), now);
    let want2 = InstanceRow {
        instance_id: "worker-up".into(),
        hostname: None,
        pid: None,
        status: InstanceStatus::Alive,
        started_at: u2.now,
        last_heartbeat: u2.now,
        metadata: None,
    };
    assert_eq!(u2.reply, StoreReply::Instances { instances: vec![want2] });

    // Misses still report the clock.
    let missing = uuid(999_999_999);
    let miss = ask(db, &StoreRequest::ReadRun { run_id: missing.clone() }, now);
    assert_eq!(miss.reply, StoreReply::Run { run: None });
    let write = |want_before, want_after| StoreRequest::UpdateRun {
        run_id: missing.clone(),
        when: Cond::True,
        set: vec![(RunCol::UpdatedAt, Expr::Now)],
        want_before,
        want_after,
    };
    let miss = ask(db, &write(true, true), now);
    assert_eq!(miss.reply, StoreReply::RunWrite { before: None, after: None });
    let miss = ask(db, &write(false, false), now);
    assert_eq!(miss.reply, StoreReply::RunHit { hit: false });
    let miss = ask(
        db,
        &StoreRequest::UpdateIntent {
            run_id: run.id.clone(),
            effect_key: "nope".into(),
            when: Cond::True,
            set: vec![],
            log: Some(entry("abandoned", None, first.now)),
        },
        now,
    );
    assert_eq!(miss.reply, StoreReply::Intent { intent: None });
    let log = ask(db, &StoreRequest::ReadLog { run_id: run.id.clone(), effect_key: "nope".into() }, now);
    assert_eq!(log.reply, StoreReply::Log { entries: vec![] });
    10
}

pub fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        })
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

/// Old TypeScript nodes write rows without knowing the epoch: the trigger keeps it monotonic
/// and raises it on their acquires. `now` is the database's clock (the trigger reads it).
pub fn check_epoch_trigger<D: Db>(db: &mut D) {
    let base = db.clock();
    let iso = |t: Timestamp| t.to_iso();
    let mut row = RunRow::ready(uuid(77), "job:trigger", ms(base, -60_000));
    row.fencing_epoch = 5;
    db.insert_run(&row);
    let epoch = |db: &mut D| {
        db.begin();
        let r = read_run(db, &uuid(77), base).unwrap();
        db.commit();
        r.fencing_epoch
    };
    let q = |db: &mut D, set: &str| {
        let id =
            if db.dialect() == Dialect::Postgres { format!("'{}'::uuid", uuid(77)) } else { format!("'{}'", uuid(77)) };
        db.batch(&format!("UPDATE agent_runs SET {set} WHERE id = {id}"));
    };
    let ts = |db: &D, t: Timestamp| {
        if db.dialect() == Dialect::Postgres { format!("'{}'::timestamptz", iso(t)) } else { format!("'{}'", iso(t)) }
    };
    let (future, past, now_s) = (ts(db, ms(base, 3_600_000)), ts(db, ms(base, -3_600_000)), ts(db, base));
    // An old node acquires a ready run: +1.
    q(db, &format!("status = 'leased', lease_owner = 'old-a', lease_expires_at = {future}, updated_at = {now_s}"));
    assert_eq!(epoch(db), 6);
    // It renews (same owner, live lease): unchanged.
    let later = ts(db, ms(base, 3_700_000));
    q(db, &format!("lease_expires_at = {later}, updated_at = {now_s}"));
    assert_eq!(epoch(db), 6);
    // Its lease is found expired and another old node takes it over: +1.
    q(db, &format!("lease_expires_at = {past}"));
    assert_eq!(epoch(db), 6, "moving the expiry of the same owner's lease is not an acquire");
    q(db, &format!("status = 'leased', lease_owner = 'old-b', lease_expires_at = {future}, updated_at = {now_s}"));
    assert_eq!(epoch(db), 7);
    // The same owner re-acquires its own expired lease: +1.
    q(db, &format!("lease_expires_at = {past}, updated_at = {past}"));
    assert_eq!(epoch(db), 7);
    q(db, &format!("status = 'leased', lease_owner = 'old-b', lease_expires_at = {future}, updated_at = {now_s}"));
    assert_eq!(epoch(db), 8);
    // Nobody lowers it; a no-op write changes nothing.
    q(db, "fencing_epoch = 1");
    assert_eq!(epoch(db), 8);
    q(db, "status = status");
    assert_eq!(epoch(db), 8);
    // A release and a status change to running do not bump.
    q(db, "status = 'running'");
    q(db, &format!("status = 'completed', lease_owner = NULL, lease_expires_at = NULL, updated_at = {now_s}"));
    assert_eq!(epoch(db), 8);
    // heart-fleet's own acquire raises it by exactly one (the trigger adds nothing), and its
    // renew leaves it.
    q(db, "status = 'ready'");
    let (when, set) = acquire_write("new-node", 60_000, true);
    let req = StoreRequest::UpdateRun { run_id: uuid(77), when, set, want_before: true, want_after: true };
    let got = ask(db, &req, None);
    let StoreReply::RunWrite { after: Some(after), .. } = got.reply else { panic!("{:?}", got.reply) };
    assert_eq!(after.fencing_epoch, 9);
    assert_eq!(epoch(db), 9);
    let token = FencingToken {
        run_id: uuid(77),
        owner: "new-node".into(),
        lease_expires_at: after.lease_expires_at.unwrap(),
        epoch: Some(9),
    };
    let renew = StoreRequest::UpdateRun {
        run_id: uuid(77),
        when: holds_token(&token),
        set: vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)), (RunCol::UpdatedAt, Expr::Now)],
        want_before: false,
        want_after: true,
    };
    let got = ask(db, &renew, None);
    assert!(
        matches!(got.reply, StoreReply::RunWrite { after: Some(ref r), .. } if r.fencing_epoch == 9),
        "{:?}",
        got.reply
    );
    assert_eq!(epoch(db), 9);
}

/// The receipts table sink: a receipt inserted with `receipt_insert` reads back field for
/// field, and its stored JSON is the receipt, which still verifies.
pub fn check_receipts<D: Db>(db: &mut D) {
    use heart_fleet_core::receipt::{HeartEvent, HeartReceipt, verify_receipt};
    let at = Timestamp::parse_iso("2026-07-30T10:00:00.000Z").unwrap();
    let receipts = [
        HeartReceipt::new(HeartEvent::Acquired, &uuid(9), "worker-A", Some(ms(at, 60_000)), None, at),
        HeartReceipt::new(
            HeartEvent::EffectCommitted,
            &uuid(9),
            "worker-A",
            Some(ms(at, 60_000)),
            Some("telegram:ab"),
            at,
        ),
        HeartReceipt::new(HeartEvent::Reclaimed, &uuid(9), "unknown", None, None, ms(at, 1)),
    ];
    for r in &receipts {
        let stmt = heart_fleet_core::sql::receipt_insert(db.dialect(), &serde_json::to_value(r).unwrap()).unwrap();
        assert!(db.exec(&stmt).is_empty());
    }
    let rows = db.exec(&Statement {
        sql: "SELECT schema_version, event, run_id, owner, lease_expires_at, effect_key, at, digest, \
              CAST(receipt AS TEXT) AS receipt FROM heart_receipts ORDER BY id"
            .to_owned(),
        params: vec![],
    });
    assert_eq!(rows.len(), receipts.len());
    for (row, r) in rows.iter().zip(&receipts) {
        let text = |i: usize| match &row[i].1 {
            heart_fleet_core::sql::SqlValue::Text(t) => Some(t.clone()),
            heart_fleet_core::sql::SqlValue::Null => None,
            other => panic!("{other:?}"),
        };
        assert_eq!(text(0).as_deref(), Some(r.schema_version.as_ref()));
        assert_eq!(text(1).as_deref(), Some(r.event.as_str()));
        assert_eq!((text(2), text(3)), (Some(r.run_id.clone()), Some(r.owner.clone())));
        assert_eq!((text(4), text(5)), (r.lease_expires_at.clone(), r.effect_key.clone()));
        assert_eq!((text(6), text(7)), (Some(r.at.clone()), Some(r.digest.clone())));
        let stored: serde_json::Value = serde_json::from_str(&text(8).unwrap()).unwrap();
        verify_receipt(&stored).unwrap();
        assert_eq!(serde_json::from_value::<HeartReceipt>(stored).unwrap(), *r);
    }
}

//! The store conformance suite: checks any [`LeaseStore`] against the semantics of the
//! request language ([`crate::request`]), so the memory store, SQLite, PostgreSQL, Deno KV
//! and a store someone writes all mean the same thing by every request.
//!
//! A store joins by implementing [`StoreFixture`] (fresh empty tables, and seeding rows
//! exactly as given) and calling [`run_store_suite`]. The suite works with real clocks: it
//! reads the store's `now` first and places every expiry far from it, then checks each
//! answer against the pure evaluator at the `now` the answer reports.

use serde_json::json;

use crate::driver::LeaseStore;
use crate::error::StoreError;
use crate::fleet::HeartFleet;
use crate::model::{
    DispatchLogEntry, FencingToken, InstanceRow, InstanceStatus, IntentRow, IntentState, RunRow, RunStatus,
};
use crate::ops::{self, Fenced, FleetConfig, ReleaseTo};
use crate::request::{
    Assign, Cond, Expr, InstanceCol, IntentCol, Lookup, NewIntent, NewRun, RunCol, RunOrder, StoreAnswer, StoreReply,
    StoreRequest, Val, apply_update, held, holds_token,
};
use crate::time::Timestamp;

/// What a store provides to be checked.
pub trait StoreFixture {
    /// The store under test.
    type Store: LeaseStore;
    /// A store over empty tables.
    fn fresh(&mut self) -> Result<Self::Store, StoreError>;
    /// Inserts a run exactly as given (all columns, including timestamps and epoch).
    fn seed_run(&mut self, store: &mut Self::Store, row: &RunRow) -> Result<(), StoreError>;
    /// Inserts an instance exactly as given.
    fn seed_instance(&mut self, store: &mut Self::Store, row: &InstanceRow) -> Result<(), StoreError>;
    /// Inserts an intent exactly as given.
    fn seed_intent(&mut self, store: &mut Self::Store, row: &IntentRow) -> Result<(), StoreError>;
}

/// The outcome of the suite.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SuiteReport {
    /// Checks that passed.
    pub passed: Vec<&'static str>,
    /// Checks that failed, with why.
    pub failed: Vec<(&'static str, String)>,
}

impl SuiteReport {
    /// True when every check passed (and there were some).
    pub fn ok(&self) -> bool {
        self.failed.is_empty() && !self.passed.is_empty()
    }
}

type Check<F> = fn(&mut F) -> Result<(), String>;

/// Runs every check on fresh stores from `fixture`.
pub fn run_store_suite<F: StoreFixture>(fixture: &mut F) -> SuiteReport {
    let checks: [(&'static str, Check<F>); 10] = [
        ("clock-is-whole-milliseconds", clock),
        ("read-run-round-trips", read_run),
        ("conditional-writes-match-the-evaluator", conditional_writes),
        ("scan-expired-runs", scan_expired),
        ("ensure-run-is-idempotent", ensure_run),
        ("claim-intent-dedupes-and-logs", claim_intent),
        ("update-intent-is-fenced-and-logs-on-hit", update_intent),
        ("scan-stale-intents", scan_intents),
        ("instances-and-dead-owner-scan", instances),
        ("lease-cycle-through-the-fleet", fleet_cycle),
    ];
    let mut report = SuiteReport::default();
    for (name, check) in checks {
        match check(fixture) {
            Ok(()) => report.passed.push(name),
            Err(e) => report.failed.push((name, e)),
        }
    }
    report
}

/// A UUID-shaped run id (PostgreSQL's `agent_runs.id` is a UUID).
pub fn run_id(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

const HOUR: i64 = 3_600_000;

fn exec<S: LeaseStore>(store: &mut S, req: StoreRequest) -> Result<StoreAnswer, String> {
    store.execute(req).map_err(|e| format!("store failed: {e}"))
}

fn now_of<S: LeaseStore>(store: &mut S) -> Result<Timestamp, String> {
    Ok(exec(store, StoreRequest::Now)?.now)
}

fn at(t: Timestamp, ms: i64) -> Timestamp {
    Timestamp(t.0 + ms)
}

fn base_row(n: u32, now: Timestamp) -> RunRow {
    let mut r = RunRow::ready(run_id(n), format!("suite:{n}"), at(now, -2 * HOUR));
    r.assignment_id = run_id(100_000 + n);
    r
}

fn seeded<F: StoreFixture>(f: &mut F) -> Result<(F::Store, Timestamp), String> {
    let mut store = f.fresh().map_err(|e| format!("fresh store: {e}"))?;
    let now = now_of(&mut store)?;
    Ok((store, now))
}

fn seed_run<F: StoreFixture>(f: &mut F, store: &mut F::Store, row: &RunRow) -> Result<(), String> {
    f.seed_run(store, row).map_err(|e| format!("seed run {}: {e}", row.id))
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want { Ok(()) } else { Err(format!("{what}: got {got:?}, want {want:?}")) }
}

fn clock<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, t1) = seeded(f)?;
    let t2 = now_of(&mut store)?;
    if t2 < t1 {
        return Err(format!("the clock went backwards: {t1} then {t2}"));
    }
    expect_eq("now round-trips through toISOString", Timestamp::parse_iso(&t1.to_iso()).ok(), Some(t1))
}

fn read_run<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    let mut row = base_row(1, now);
    row.task_id = Some("task-7".into());
    row.required_capabilities = vec!["send".into(), "ünïcode ✓".into()];
    row.status = RunStatus::Running;
    row.assigned_agent = Some("agent-1".into());
    row.lease_owner = Some("worker-A".into());
    row.lease_expires_at = Some(at(now, HOUR));
    row.retries = 3;
    row.budget = Some(json!({ "usd": 1.5, "nested": { "k": [1, 2] } }));
    row.fencing_epoch = 42;
    seed_run(f, &mut store, &row)?;
    match exec(&mut store, StoreRequest::ReadRun { run_id: row.id.clone() })?.reply {
        StoreReply::Run { run } => expect_eq("read run", run, Some(row))?,
        other => return Err(format!("wrong reply {other:?}")),
    }
    match exec(&mut store, StoreRequest::ReadRun { run_id: run_id(999) })?.reply {
        StoreReply::Run { run } => expect_eq("missing run", run, None),
        other => Err(format!("wrong reply {other:?}")),
    }
}

struct NoTables;
impl Lookup for NoTables {
    fn run(&self, _: &str) -> Option<&RunRow> {
        None
    }
    fn instance(&self, _: &str) -> Option<&InstanceRow> {
        None
    }
}

/// A conditional write of a run: (name, when, set, want_before, want_after).
type WriteShape = (&'static str, Cond<RunCol>, Vec<Assign<RunCol>>, bool, bool);

/// The conditions and assignments the operations use.
fn write_shapes(token: &FencingToken) -> Vec<WriteShape> {
    let cfg = FleetConfig { max_retries: Some(2) };
    let acquire_like = vec![
        (RunCol::LeaseOwner, Expr::Val(Val::Text("worker-B".into()))),
        (RunCol::LeaseExpiresAt, Expr::NowPlus(60_000)),
        (RunCol::Status, Expr::Val(Val::status(RunStatus::Leased))),
        (RunCol::UpdatedAt, Expr::Now),
        (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
        (
            RunCol::Retries,
            Expr::Case(
                Box::new(Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready))),
                Box::new(Expr::Add(RunCol::Retries, 0)),
                Box::new(Expr::Add(RunCol::Retries, 1)),
            ),
        ),
    ];
    let acquirable = Cond::Or(vec![
        Cond::Eq(RunCol::Status, Val::status(RunStatus::Ready)),
        Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt), Cond::AtMost(RunCol::Retries, 1)]),
    ]);
    let recovery = vec![
        (
            RunCol::Status,
            Expr::Case(
                Box::new(Cond::Not(Box::new(Cond::AtMost(
                    RunCol::Retries,
                    i64::from(cfg.max_retries.unwrap_or(0)) - 1,
                )))),
                Box::new(Expr::Val(Val::status(RunStatus::Quarantined))),
                Box::new(Expr::Val(Val::status(RunStatus::Ready))),
            ),
        ),
        (RunCol::LeaseOwner, Expr::Val(Val::Null)),
        (RunCol::LeaseExpiresAt, Expr::Val(Val::Null)),
        (RunCol::Retries, Expr::Add(RunCol::Retries, 1)),
        (RunCol::UpdatedAt, Expr::Now),
    ];
    vec![
        ("acquire", acquirable, acquire_like, true, true),
        (
            "renew",
            holds_token(token),
            vec![(RunCol::LeaseExpiresAt, Expr::NowPlus(30_000)), (RunCol::UpdatedAt, Expr::Now)],
            false,
            true,
        ),
        // verifyFence's write: only whether it hit, no row.
        ("verify", holds_token(token), vec![(RunCol::UpdatedAt, Expr::Now)], false, false),
        ("reclaim", Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]), recovery, false, true),
        (
            "resource-release",
            Cond::And(vec![holds_token(token), Cond::StartsWith(RunCol::IdempotencyKey, "suite:".into())]),
            vec![(RunCol::Status, Expr::Val(Val::status(RunStatus::Ready))), (RunCol::Retries, Expr::Val(Val::Int(0)))],
            false,
            true,
        ),
    ]
}

fn conditional_writes<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    let statuses =
        [RunStatus::Ready, RunStatus::Leased, RunStatus::Running, RunStatus::Completed, RunStatus::Quarantined];
    let expiries = [None, Some(at(now, -HOUR)), Some(at(now, HOUR))];
    let mut rows = Vec::new();
    let mut n = 10;
    for status in statuses {
        for expiry in expiries {
            for (owner, retries) in [(None, 0), (Some("worker-A"), 1), (Some("worker-A"), 2)] {
                n += 1;
                let mut row = base_row(n, now);
                row.status = status;
                row.lease_expires_at = expiry;
                row.lease_owner = owner.map(str::to_owned);
                row.retries = retries;
                row.fencing_epoch = 5;
                seed_run(f, &mut store, &row)?;
                rows.push(row);
            }
        }
    }
    let mut checked = 0;
    for row in &rows {
        let token = FencingToken {
            run_id: row.id.clone(),
            owner: "worker-A".into(),
            lease_expires_at: row.lease_expires_at.unwrap_or(at(now, HOUR)),
            epoch: Some(5),
        };
        for (name, when, set, want_before, want_after) in write_shapes(&token) {
            // Each shape on a fresh copy of the row, so shapes do not see each other's writes.
            n += 1;
            let mut copy = row.clone();
            copy.id = run_id(n);
            copy.assignment_id = run_id(100_000 + n);
            copy.idempotency_key = format!("suite:{n}");
            seed_run(f, &mut store, &copy)?;
            let req = StoreRequest::UpdateRun {
                run_id: copy.id.clone(),
                when: when.clone(),
                set: set.clone(),
                want_before,
                want_after,
            };
            let answer = exec(&mut store, req)?;
            let want = apply_update(&copy, &when, &set, answer.now, &NoTables).map_err(|e| e.to_string())?;
            let ctx = format!(
                "{name} on {:?}/{:?}/{:?}/retries {}",
                row.status, row.lease_expires_at, row.lease_owner, row.retries
            );
            match answer.reply {
                StoreReply::RunWrite { before, after } if want_after => {
                    expect_eq(&format!("{ctx}: after"), &after, &want)?;
                    let want_before = if want_before && want.is_some() { Some(copy.clone()) } else { None };
                    expect_eq(&format!("{ctx}: before"), &before, &want_before)?;
                }
                StoreReply::RunHit { hit } if !want_after => {
                    expect_eq(&format!("{ctx}: hit"), &hit, &want.is_some())?;
                    // The write happened (or not) all the same: the row as read now.
                    let read = exec(&mut store, StoreRequest::ReadRun { run_id: copy.id.clone() })?;
                    let StoreReply::Run { run } = read.reply else {
                        return Err(format!("{ctx}: read: wrong reply kind"));
                    };
                    expect_eq(&format!("{ctx}: the row after"), &run, &Some(want.unwrap_or_else(|| copy.clone())))?;
                }
                _ => return Err(format!("{ctx}: wrong reply kind (want_after {want_after})")),
            }
            checked += 1;
        }
    }
    // A missing run is a miss, not an error.
    let answer = exec(
        &mut store,
        StoreRequest::UpdateRun {
            run_id: run_id(999_999),
            when: Cond::True,
            set: vec![],
            want_before: true,
            want_after: true,
        },
    )?;
    expect_eq("write to a missing run", answer.reply, StoreReply::RunWrite { before: None, after: None })?;
    let answer = exec(
        &mut store,
        StoreRequest::UpdateRun {
            run_id: run_id(999_999),
            when: Cond::True,
            set: vec![(RunCol::UpdatedAt, Expr::Now)],
            want_before: false,
            want_after: false,
        },
    )?;
    expect_eq("a hit-only write to a missing run", answer.reply, StoreReply::RunHit { hit: false })?;
    if checked < 100 {
        return Err(format!("only {checked} writes checked"));
    }
    Ok(())
}

fn scan_expired<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    let cases = [
        (1, RunStatus::Leased, Some(at(now, -3 * HOUR))),
        (2, RunStatus::Running, None),
        (3, RunStatus::Leased, Some(at(now, -HOUR))),
        (4, RunStatus::Leased, Some(at(now, HOUR))),
        (5, RunStatus::Completed, Some(at(now, -HOUR))),
        (6, RunStatus::Running, Some(at(now, -2 * HOUR))),
    ];
    for (n, status, expiry) in cases {
        let mut row = base_row(n, now);
        row.status = status;
        row.lease_expires_at = expiry;
        row.lease_owner = Some("w".into());
        seed_run(f, &mut store, &row)?;
    }
    let when = Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]);
    let answer =
        exec(&mut store, StoreRequest::ScanRuns { when: when.clone(), order: RunOrder::ExpiresAt, limit: 10 })?;
    let StoreReply::Runs { runs } = answer.reply else { return Err("wrong reply kind".into()) };
    let ids: Vec<String> = runs.into_iter().map(|r| r.id).collect();
    expect_eq(
        "expired scan order (null expiry first, then oldest)",
        ids,
        vec![run_id(2), run_id(1), run_id(6), run_id(3)],
    )?;
    let answer = exec(&mut store, StoreRequest::ScanRuns { when, order: RunOrder::ExpiresAt, limit: 2 })?;
    let StoreReply::Runs { runs } = answer.reply else { return Err("wrong reply kind".into()) };
    expect_eq("limit", runs.len(), 2)
}

fn ensure_run<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, _) = seeded(f)?;
    let new =
        NewRun { idempotency_key: "heart:resource:suite".into(), objective: "o".into(), created_by: "suite".into() };
    let first = exec(&mut store, StoreRequest::EnsureRun(new.clone()))?;
    let StoreReply::Ensured { run: a, created: true } = first.reply else {
        return Err(format!("first ensure did not create: {:?}", first.reply));
    };
    let second = exec(&mut store, StoreRequest::EnsureRun(new))?;
    let StoreReply::Ensured { run: b, created: false } = second.reply else {
        return Err(format!("second ensure created again: {:?}", second.reply));
    };
    expect_eq("same row", &b, &a)?;
    expect_eq("status", a.status, RunStatus::Ready)?;
    expect_eq("visibility", a.visibility.as_str(), "team")?;
    expect_eq("created_at = now", a.created_at, first.now)?;
    if a.id.len() != 36 || a.assignment_id.len() != 36 || a.id == a.assignment_id {
        return Err(format!("id and assignment_id must be distinct UUIDs: {} {}", a.id, a.assignment_id));
    }
    Ok(())
}

fn new_intent(key: &str) -> NewIntent {
    NewIntent {
        run_id: run_id(1),
        effect_key: key.into(),
        channel: "telegram".into(),
        payload_digest: "sha256:x".into(),
    }
}

fn claim_intent<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, _) = seeded(f)?;
    let a = exec(&mut store, StoreRequest::ClaimIntent(new_intent("k1")))?;
    let StoreReply::Claim { intent, claimed: true } = a.reply else {
        return Err(format!("first claim: {:?}", a.reply));
    };
    expect_eq("state", intent.state, IntentState::Intent)?;
    expect_eq("created_at", intent.created_at, a.now)?;
    let b = exec(&mut store, StoreRequest::ClaimIntent(new_intent("k1")))?;
    let StoreReply::Claim { intent: again, claimed: false } = b.reply else {
        return Err(format!("second claim: {:?}", b.reply));
    };
    expect_eq("existing row", again, intent)?;
    let log = exec(&mut store, StoreRequest::ReadLog { run_id: run_id(1), effect_key: "k1".into() })?;
    let StoreReply::Log { entries } = log.reply else { return Err("wrong reply kind".into()) };
    let outcomes: Vec<(i64, String)> = entries.iter().map(|e| (e.attempt, e.outcome.clone())).collect();
    expect_eq("log", outcomes, vec![(0, "claimed".into()), (0, "deduped".into())])?;
    expect_eq("claimed detail", entries.first().and_then(|e| e.detail.clone()), Some(json!({ "channel": "telegram" })))
}

fn update_intent<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    let mut run = base_row(1, now);
    run.status = RunStatus::Leased;
    run.lease_owner = Some("worker-A".into());
    run.lease_expires_at = Some(at(now, HOUR));
    run.fencing_epoch = 3;
    seed_run(f, &mut store, &run)?;
    exec(&mut store, StoreRequest::ClaimIntent(new_intent("k1")))?;
    let dispatch = |owner: &str, epoch: i64| StoreRequest::UpdateIntent {
        run_id: run_id(1),
        effect_key: "k1".into(),
        when: Cond::And(vec![
            Cond::Eq(IntentCol::State, Val::Text("intent".into())),
            Cond::RunHeldBy { owner: owner.into(), lease_expires_at: at(now, HOUR), epoch: Some(epoch) },
        ]),
        set: vec![
            (IntentCol::State, Expr::Val(Val::Text("dispatched".into()))),
            (IntentCol::FenceOwner, Expr::Val(Val::Text(owner.into()))),
            (IntentCol::FenceExpiresAt, Expr::Val(Val::Time(at(now, HOUR)))),
            (IntentCol::FenceEpoch, Expr::Val(Val::Int(epoch))),
        ],
        log: Some(DispatchLogEntry {
            run_id: run_id(1),
            effect_key: "k1".into(),
            attempt: 0,
            outcome: "reconciled".into(),
            at: None,
            detail: Some(json!({ "probe": true })),
        }),
    };
    for (owner, epoch) in [("worker-B", 3), ("worker-A", 2)] {
        let miss = exec(&mut store, dispatch(owner, epoch))?;
        expect_eq(
            &format!("dispatch by a stale token ({owner}, epoch {epoch})"),
            miss.reply,
            StoreReply::Intent { intent: None },
        )?;
    }
    let hit = exec(&mut store, dispatch("worker-A", 3))?;
    let StoreReply::Intent { intent: Some(row) } = hit.reply else {
        return Err("the live token's dispatch missed".into());
    };
    expect_eq("state", row.state, IntentState::Dispatched)?;
    expect_eq("fence epoch", row.fence_epoch, Some(3))?;
    let log = exec(&mut store, StoreRequest::ReadLog { run_id: run_id(1), effect_key: "k1".into() })?;
    let StoreReply::Log { entries } = log.reply else { return Err("wrong reply kind".into()) };
    expect_eq("log entries (one claim, one hit)", entries.len(), 2)?;
    expect_eq("log at = the write's now", entries.get(1).and_then(|e| e.at), Some(hit.now))?;
    let commit = StoreRequest::UpdateIntent {
        run_id: run_id(1),
        effect_key: "k1".into(),
        when: Cond::Eq(IntentCol::State, Val::Text("dispatched".into())),
        set: vec![
            (IntentCol::State, Expr::Val(Val::Text("committed".into()))),
            (IntentCol::ExternalRef, Expr::Val(Val::Json(json!({ "message_id": 42, "s": "é" })))),
            (IntentCol::CommittedAt, Expr::Now),
            (IntentCol::Attempts, Expr::Add(IntentCol::Attempts, 1)),
        ],
        log: None,
    };
    let c = exec(&mut store, commit)?;
    let StoreReply::Intent { intent: Some(row) } = c.reply else { return Err("commit missed".into()) };
    expect_eq("external_ref", row.external_ref, Some(json!({ "message_id": 42, "s": "é" })))?;
    expect_eq("committed_at", row.committed_at, Some(c.now))?;
    expect_eq("attempts", row.attempts, 1)
}

fn scan_intents<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    for (k, state, expiry) in [
        ("a", IntentState::Dispatched, at(now, -HOUR)),
        ("b", IntentState::Dispatched, at(now, HOUR)),
        ("c", IntentState::Committed, at(now, -HOUR)),
        ("d", IntentState::Dispatched, at(now, -2 * HOUR)),
    ] {
        let row = IntentRow {
            run_id: run_id(1),
            effect_key: k.into(),
            state,
            channel: "mail".into(),
            payload_digest: "sha256:y".into(),
            fence_owner: Some("w".into()),
            fence_expires_at: Some(expiry),
            fence_epoch: None,
            external_ref: None,
            attempts: 0,
            last_error: None,
            created_at: at(now, -3 * HOUR),
            committed_at: None,
        };
        f.seed_intent(&mut store, &row).map_err(|e| format!("seed intent: {e}"))?;
    }
    let when = Cond::And(vec![
        Cond::Eq(IntentCol::State, Val::Text("dispatched".into())),
        Cond::ExpiredAt(IntentCol::FenceExpiresAt),
    ]);
    let a = exec(&mut store, StoreRequest::ScanIntents { when, limit: 10 })?;
    let StoreReply::Intents { intents } = a.reply else { return Err("wrong reply kind".into()) };
    let keys: Vec<String> = intents.into_iter().map(|i| i.effect_key).collect();
    expect_eq("stale dispatched intents, oldest fence first", keys, vec!["d".to_owned(), "a".to_owned()])
}

fn instances<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    for (id, status, silent_ms) in [
        ("i-alive", InstanceStatus::Alive, 5_000),
        ("i-stale", InstanceStatus::Alive, 200_000),
        ("i-dead", InstanceStatus::Dead, 1_000),
        ("i-draining", InstanceStatus::Draining, 5_000),
    ] {
        let row = InstanceRow {
            instance_id: id.into(),
            hostname: Some("h".into()),
            pid: Some(7),
            status,
            started_at: at(now, -HOUR),
            last_heartbeat: at(now, -silent_ms),
            metadata: Some(json!({ "v": 1 })),
        };
        f.seed_instance(&mut store, &row).map_err(|e| format!("seed instance: {e}"))?;
    }
    for (n, owner) in [(1, "i-alive"), (2, "i-stale"), (3, "i-dead"), (4, "i-draining"), (5, "unregistered")] {
        let mut run = base_row(n, now);
        run.status = RunStatus::Leased;
        run.lease_owner = Some(owner.into());
        run.lease_expires_at = Some(at(now, HOUR));
        seed_run(f, &mut store, &run)?;
    }
    let when = Cond::And(vec![held(), Cond::OwnerInstanceDead { ttl_ms: 90_000 }]);
    let a = exec(&mut store, StoreRequest::ScanRuns { when, order: RunOrder::ExpiresAt, limit: 10 })?;
    let StoreReply::Runs { runs } = a.reply else { return Err("wrong reply kind".into()) };
    let mut ids: Vec<String> = runs.into_iter().map(|r| r.id).collect();
    ids.sort();
    expect_eq("runs of dead or silent instances", ids, vec![run_id(2), run_id(3)])?;
    let mark = StoreRequest::UpdateInstances {
        when: Cond::And(vec![
            Cond::Not(Box::new(Cond::Eq(InstanceCol::Status, Val::Text("dead".into())))),
            Cond::OlderThan(InstanceCol::LastHeartbeat, 90_000),
        ]),
        set: vec![(InstanceCol::Status, Expr::Val(Val::Text("dead".into())))],
    };
    let a = exec(&mut store, mark)?;
    let StoreReply::Instances { instances } = a.reply else { return Err("wrong reply kind".into()) };
    let ids: Vec<String> = instances.into_iter().map(|i| i.instance_id).collect();
    expect_eq("newly dead", ids, vec!["i-stale".to_owned()])?;
    let up = exec(
        &mut store,
        StoreRequest::UpsertInstance { instance_id: "i-dead".into(), hostname: None, pid: Some(9), metadata: None },
    )?;
    let StoreReply::Instances { instances } = up.reply else { return Err("wrong reply kind".into()) };
    let row = instances.into_iter().next().ok_or("upsert returned no row")?;
    expect_eq("re-registered", (row.status, row.last_heartbeat, row.pid), (InstanceStatus::Alive, up.now, Some(9)))?;
    let all = exec(&mut store, StoreRequest::ScanInstances { when: Cond::True })?;
    let StoreReply::Instances { instances } = all.reply else { return Err("wrong reply kind".into()) };
    expect_eq("instance count", instances.len(), 4)
}

fn fleet_cycle<F: StoreFixture>(f: &mut F) -> Result<(), String> {
    let (mut store, now) = seeded(f)?;
    let row = base_row(1, now);
    seed_run(f, &mut store, &row)?;
    let mut heart = HeartFleet::new(store);
    let e = |e: crate::error::HeartError| e.to_string();
    let acq = heart.acquire(&row.id, "worker-A", 60).map_err(e)?;
    let fence = acq.fence.ok_or("acquire lost on a ready run")?;
    expect_eq("epoch", fence.epoch, Some(1))?;
    let other = heart.acquire(&row.id, "worker-B", 60).map_err(e)?;
    expect_eq("second acquire", other.acquired, false)?;
    expect_eq("verify", heart.verify_fence(&fence).map_err(e)?, true)?;
    let fence = match heart.renew(&fence, 120).map_err(e)? {
        Fenced::Ok { value } => value,
        Fenced::Rejected { cause } => return Err(format!("renew refused: {cause:?}")),
    };
    let payload = json!({ "chatId": 1, "text": "suite" });
    let key = crate::canonical::effect_key("telegram", &payload);
    let sent = heart.send_once(&fence, "telegram", &key, &payload, |_| Ok(json!({ "message_id": 1 }))).map_err(e)?;
    expect_eq("sent", (sent.sent, sent.committed), (true, Some(true)))?;
    let again = heart.send_once(&fence, "telegram", &key, &payload, |_| Ok(json!({}))).map_err(e)?;
    expect_eq("deduped", again.reason.as_deref(), Some("deduped"))?;
    let released = heart.release(&fence, ReleaseTo::Completed).map_err(e)?;
    let Fenced::Ok { value: done } = released else { return Err("release refused".into()) };
    expect_eq("released row", (done.status, done.lease_owner), (RunStatus::Completed, None))?;
    let stale = heart.verify_fence(&fence).map_err(e)?;
    expect_eq("verify after release", stale, false)?;
    let m = heart.metrics();
    expect_eq(
        "metrics",
        (m.acquire_wins, m.acquire_collisions, m.renews, m.releases, m.effect_commits, m.effect_dedupes),
        (1, 1, 1, 1, 1, 1),
    )?;
    let s = heart.run(ops::reclaim_expired(FleetConfig::default(), 10)).map_err(e)?;
    expect_eq("nothing to reclaim", s.reclaimed_count, 0)
}

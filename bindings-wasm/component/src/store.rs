//! The imported `lease-store`, typed: each [`StoreRequest`] goes to the host as the WIT
//! `store-request` (conditions and expressions as flat node lists, root first), and the
//! host's typed `store-answer` comes back checked into a [`StoreAnswer`]. No JSON crosses
//! except the free-form `jsonb` columns.
//!
//! What the host answers is checked like any input from outside: a timestamp outside years
//! 0000-9999 or a `jsonb` column that is not JSON is a `store-protocol` failure, as is a
//! `protocol` store error; `unavailable` and `other` are `store-unavailable`.

use heart_fleet_core::model::DispatchLogEntry;
use heart_fleet_core::request::{
    Assign, Cond, Expr, InstanceCol, IntentCol, NewIntent, NewRun, RunCol, RunOrder, StoreReply, Val,
};
use heart_fleet_core::{
    ErrorCode, HeartError, InstanceRow, InstanceStatus, IntentRow, IntentState, RunRow, StoreAnswer, StoreError,
    StoreRequest, Timestamp,
};
use serde_json::Value;

use crate::bindings::heart::fleet::lease_store as ls;
use crate::bindings::heart::fleet::types as wit;
use crate::convert::status_in;

/// Why a store request failed, with the code the operation ends with.
pub struct StoreFailure {
    /// `store-unavailable` or `store-protocol`.
    pub code: ErrorCode,
    /// What the host or the check said.
    pub message: String,
}

impl StoreFailure {
    /// The failure as the error of an operation that stopped at `step`.
    pub fn at(self, step: &str) -> HeartError {
        let mut e = HeartError::store(step, &StoreError(self.message));
        e.code = self.code;
        e
    }
}

fn protocol(message: String) -> StoreFailure {
    StoreFailure { code: ErrorCode::StoreProtocol, message }
}

/// Executes `req` on the host's store.
pub fn execute(req: StoreRequest) -> Result<StoreAnswer, StoreFailure> {
    match ls::execute(&request(req)) {
        Ok(answer) => self::answer(answer).map_err(|m| protocol(format!("the store's answer: {m}"))),
        Err(ls::StoreError::Unavailable(message)) | Err(ls::StoreError::Other(message)) => {
            Err(StoreFailure { code: ErrorCode::StoreUnavailable, message })
        }
        Err(ls::StoreError::Protocol(m)) => Err(protocol(format!("lease-store protocol: {m}"))),
    }
}

// ------------------------------------------------------------------------------------------
// Requests: the core's types as WIT nodes
// ------------------------------------------------------------------------------------------

/// A table's columns as the WIT `column`.
trait Column: Copy {
    fn wit(self) -> ls::Column;
}

impl Column for RunCol {
    fn wit(self) -> ls::Column {
        use ls::RunColumn as W;
        ls::Column::Run(match self {
            RunCol::Id => W::Id,
            RunCol::Status => W::Status,
            RunCol::LeaseOwner => W::LeaseOwner,
            RunCol::LeaseExpiresAt => W::LeaseExpiresAt,
            RunCol::Retries => W::Retries,
            RunCol::FencingEpoch => W::FencingEpoch,
            RunCol::UpdatedAt => W::UpdatedAt,
            RunCol::IdempotencyKey => W::IdempotencyKey,
        })
    }
}

impl Column for IntentCol {
    fn wit(self) -> ls::Column {
        use ls::IntentColumn as W;
        ls::Column::Intent(match self {
            IntentCol::State => W::State,
            IntentCol::Channel => W::Channel,
            IntentCol::PayloadDigest => W::PayloadDigest,
            IntentCol::FenceOwner => W::FenceOwner,
            IntentCol::FenceExpiresAt => W::FenceExpiresAt,
            IntentCol::FenceEpoch => W::FenceEpoch,
            IntentCol::ExternalRef => W::ExternalRef,
            IntentCol::Attempts => W::Attempts,
            IntentCol::LastError => W::LastError,
            IntentCol::CommittedAt => W::CommittedAt,
        })
    }
}

impl Column for InstanceCol {
    fn wit(self) -> ls::Column {
        use ls::InstanceColumn as W;
        ls::Column::Instance(match self {
            InstanceCol::InstanceId => W::InstanceId,
            InstanceCol::Status => W::Status,
            InstanceCol::LastHeartbeat => W::LastHeartbeat,
        })
    }
}

fn value(v: Val) -> ls::Value {
    match v {
        Val::Null => ls::Value::Null,
        Val::Text(t) => ls::Value::Text(t),
        Val::Int(i) => ls::Value::Int(i),
        Val::Time(t) => ls::Value::Time(t.0),
        Val::Json(j) => ls::Value::Json(j.to_string()),
    }
}

/// The index the next node pushed gets. Lists stay far below `u32::MAX` nodes: the core
/// builds conditions of a handful of nodes.
fn next(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// `c` as nodes, root first.
fn condition<C: Column>(c: Cond<C>) -> ls::ConditionTree {
    let mut nodes = Vec::with_capacity(8);
    push_condition(c, &mut nodes);
    nodes
}

/// Pushes `c` and its subtree (each child after its parent); returns `c`'s index.
fn push_condition<C: Column>(c: Cond<C>, nodes: &mut Vec<ls::Condition>) -> u32 {
    let at = nodes.len();
    nodes.push(ls::Condition::Always);
    let node = match c {
        Cond::True => ls::Condition::Always,
        Cond::Eq(col, v) => ls::Condition::Eq(ls::ColumnValue { column: col.wit(), value: value(v) }),
        Cond::In(col, vs) => {
            ls::Condition::InList(ls::ColumnValues { column: col.wit(), values: vs.into_iter().map(value).collect() })
        }
        Cond::AtMost(col, n) => ls::Condition::AtMost(ls::ColumnInt { column: col.wit(), n }),
        Cond::ExpiredAt(col) => ls::Condition::ExpiredAt(col.wit()),
        Cond::LiveAt(col) => ls::Condition::LiveAt(col.wit()),
        Cond::OlderThan(col, n) => ls::Condition::OlderThan(ls::ColumnInt { column: col.wit(), n }),
        Cond::StartsWith(col, prefix) => ls::Condition::StartsWith(ls::ColumnPrefix { column: col.wit(), prefix }),
        Cond::And(cs) => ls::Condition::All(cs.into_iter().map(|c| push_condition(c, nodes)).collect()),
        Cond::Or(cs) => ls::Condition::Any(cs.into_iter().map(|c| push_condition(c, nodes)).collect()),
        Cond::Not(c) => ls::Condition::Not(push_condition(*c, nodes)),
        Cond::RunHeldBy { owner, lease_expires_at, epoch } => {
            ls::Condition::RunHeldBy(ls::HeldBy { owner, lease_expires_at: lease_expires_at.0, epoch })
        }
        Cond::OwnerInstanceDead { ttl_ms } => ls::Condition::OwnerInstanceDead(ttl_ms),
    };
    nodes[at] = node;
    next(at)
}

/// Pushes `e` and its subtree; returns `e`'s index.
fn push_expression<C: Column>(e: Expr<C>, nodes: &mut Vec<ls::Expression>) -> u32 {
    let at = nodes.len();
    nodes.push(ls::Expression::Now);
    let node = match e {
        Expr::Val(v) => ls::Expression::Value(value(v)),
        Expr::Now => ls::Expression::Now,
        Expr::NowPlus(ms) => ls::Expression::NowPlus(ms),
        Expr::Add(col, n) => ls::Expression::Add(ls::ColumnInt { column: col.wit(), n }),
        Expr::Case(when, then, otherwise) => {
            let when = condition(*when);
            let then = push_expression(*then, nodes);
            let otherwise = push_expression(*otherwise, nodes);
            ls::Expression::Choose(ls::Choice { when, then, otherwise })
        }
    };
    nodes[at] = node;
    next(at)
}

fn assignments<C: Column>(set: Vec<Assign<C>>) -> Vec<ls::Assignment> {
    set.into_iter()
        .map(|(col, e)| {
            let mut expression = Vec::with_capacity(1);
            push_expression(e, &mut expression);
            ls::Assignment { column: col.wit(), expression }
        })
        .collect()
}

fn log_entry(e: DispatchLogEntry) -> ls::DispatchLogEntry {
    ls::DispatchLogEntry {
        run_id: e.run_id,
        effect_key: e.effect_key,
        attempt: e.attempt,
        outcome: e.outcome,
        at: e.at.map(|t| t.0),
        detail: e.detail.map(|d| d.to_string()),
    }
}

/// The core's request as the WIT request.
fn request(req: StoreRequest) -> ls::StoreRequest {
    match req {
        StoreRequest::Now => ls::StoreRequest::Now,
        StoreRequest::ReadRun { run_id } => ls::StoreRequest::ReadRun(run_id),
        StoreRequest::UpdateRun { run_id, when, set, want_before, want_after } => {
            ls::StoreRequest::UpdateRun(ls::UpdateRun {
                run_id,
                when: condition(when),
                set: assignments(set),
                want_before,
                want_after,
            })
        }
        StoreRequest::ScanRuns { when, order, limit } => ls::StoreRequest::ScanRuns(ls::ScanRuns {
            when: condition(when),
            order: match order {
                RunOrder::ExpiresAt => ls::RunOrder::ExpiresAt,
                RunOrder::UpdatedAtDesc => ls::RunOrder::UpdatedAtDesc,
            },
            limit,
        }),
        StoreRequest::EnsureRun(NewRun { idempotency_key, objective, created_by }) => {
            ls::StoreRequest::EnsureRun(ls::NewRun { idempotency_key, objective, created_by })
        }
        StoreRequest::ClaimIntent(NewIntent { run_id, effect_key, channel, payload_digest }) => {
            ls::StoreRequest::ClaimIntent(ls::NewIntent { run_id, effect_key, channel, payload_digest })
        }
        StoreRequest::UpdateIntent { run_id, effect_key, when, set, log } => {
            ls::StoreRequest::UpdateIntent(ls::UpdateIntent {
                run_id,
                effect_key,
                when: condition(when),
                set: assignments(set),
                log: log.map(log_entry),
            })
        }
        StoreRequest::ScanIntents { when, limit } => {
            ls::StoreRequest::ScanIntents(ls::ScanIntents { when: condition(when), limit })
        }
        StoreRequest::ReadLog { run_id, effect_key } => ls::StoreRequest::ReadLog(ls::EffectRef { run_id, effect_key }),
        StoreRequest::UpsertInstance { instance_id, hostname, pid, metadata } => {
            ls::StoreRequest::UpsertInstance(ls::UpsertInstance {
                instance_id,
                hostname,
                pid,
                metadata: metadata.map(|m| m.to_string()),
            })
        }
        StoreRequest::UpdateInstances { when, set } => {
            ls::StoreRequest::UpdateInstances(ls::UpdateInstances { when: condition(when), set: assignments(set) })
        }
        StoreRequest::ScanInstances { when } => ls::StoreRequest::ScanInstances(condition(when)),
    }
}

// ------------------------------------------------------------------------------------------
// Answers: the host's records, checked
// ------------------------------------------------------------------------------------------

fn time(what: &str, ms: i64) -> Result<Timestamp, String> {
    Timestamp::from_millis(ms).ok_or_else(|| format!("{what} is {ms} ms, outside years 0000-9999"))
}

fn opt_time(what: &str, ms: Option<i64>) -> Result<Option<Timestamp>, String> {
    ms.map(|ms| time(what, ms)).transpose()
}

fn opt_json(what: &str, text: Option<String>) -> Result<Option<Value>, String> {
    text.map(|t| serde_json::from_str(&t).map_err(|e| format!("{what} is not JSON: {e}"))).transpose()
}

fn run(r: wit::RunRow) -> Result<RunRow, String> {
    Ok(RunRow {
        lease_expires_at: opt_time("a run's lease_expires_at", r.lease_expires_at)?,
        budget: opt_json("a run's budget", r.budget)?,
        created_at: time("a run's created_at", r.created_at)?,
        updated_at: time("a run's updated_at", r.updated_at)?,
        id: r.id,
        task_id: r.task_id,
        assignment_id: r.assignment_id,
        objective: r.objective,
        required_capabilities: r.required_capabilities,
        status: status_in(r.status),
        assigned_agent: r.assigned_agent,
        lease_owner: r.lease_owner,
        retries: r.retries,
        approval_state: r.approval_state,
        visibility: r.visibility,
        idempotency_key: r.idempotency_key,
        created_by: r.created_by,
        fencing_epoch: r.fencing_epoch,
    })
}

fn intent(r: wit::IntentRow) -> Result<IntentRow, String> {
    Ok(IntentRow {
        fence_expires_at: opt_time("an intent's fence_expires_at", r.fence_expires_at)?,
        external_ref: opt_json("an intent's external_ref", r.external_ref)?,
        created_at: time("an intent's created_at", r.created_at)?,
        committed_at: opt_time("an intent's committed_at", r.committed_at)?,
        run_id: r.run_id,
        effect_key: r.effect_key,
        state: match r.state {
            wit::IntentState::Intent => IntentState::Intent,
            wit::IntentState::Dispatched => IntentState::Dispatched,
            wit::IntentState::Committed => IntentState::Committed,
            wit::IntentState::Abandoned => IntentState::Abandoned,
        },
        channel: r.channel,
        payload_digest: r.payload_digest,
        fence_owner: r.fence_owner,
        fence_epoch: r.fence_epoch,
        attempts: r.attempts,
        last_error: r.last_error,
    })
}

fn instance(r: wit::InstanceRow) -> Result<InstanceRow, String> {
    Ok(InstanceRow {
        started_at: time("an instance's started_at", r.started_at)?,
        last_heartbeat: time("an instance's last_heartbeat", r.last_heartbeat)?,
        metadata: opt_json("an instance's metadata", r.metadata)?,
        instance_id: r.instance_id,
        hostname: r.hostname,
        pid: r.pid,
        status: match r.status {
            wit::InstanceStatus::Alive => InstanceStatus::Alive,
            wit::InstanceStatus::Draining => InstanceStatus::Draining,
            wit::InstanceStatus::Dead => InstanceStatus::Dead,
        },
    })
}

fn entry(e: ls::DispatchLogEntry) -> Result<DispatchLogEntry, String> {
    Ok(DispatchLogEntry {
        at: opt_time("a log entry's at", e.at)?,
        detail: opt_json("a log entry's detail", e.detail)?,
        run_id: e.run_id,
        effect_key: e.effect_key,
        attempt: e.attempt,
        outcome: e.outcome,
    })
}

fn all<W, T>(rows: Vec<W>, f: fn(W) -> Result<T, String>) -> Result<Vec<T>, String> {
    rows.into_iter().map(f).collect()
}

/// The host's answer as the core's. Whether the reply fits the request is the core's check.
fn answer(a: ls::StoreAnswer) -> Result<StoreAnswer, String> {
    use ls::StoreReply as R;
    let now = time("the store's now", a.now)?;
    let reply = match a.reply {
        R::Now => StoreReply::Now,
        R::Run(row) => StoreReply::Run { run: row.map(run).transpose()? },
        R::RunWrite(w) => {
            StoreReply::RunWrite { before: w.before.map(run).transpose()?, after: w.after.map(run).transpose()? }
        }
        R::RunHit(hit) => StoreReply::RunHit { hit },
        R::Runs(rows) => StoreReply::Runs { runs: all(rows, run)? },
        R::Ensured(e) => StoreReply::Ensured { run: run(e.run)?, created: e.created },
        R::Claim(c) => StoreReply::Claim { intent: intent(c.intent)?, claimed: c.claimed },
        R::Intent(row) => StoreReply::Intent { intent: row.map(intent).transpose()? },
        R::Intents(rows) => StoreReply::Intents { intents: all(rows, intent)? },
        R::Log(entries) => StoreReply::Log { entries: all(entries, entry)? },
        R::Instances(rows) => StoreReply::Instances { instances: all(rows, instance)? },
    };
    Ok(StoreAnswer { now, reply })
}

//! The store request language.
//!
//! Every store interaction of every operation is one [`StoreRequest`]: a read, a scan, or
//! one atomic conditional write. Conditions ([`Cond`]) and assignments ([`Expr`]) may
//! refer to the store's clock (`now`), so a SQL store evaluates time inside the statement
//! and worker clock skew cannot break exclusion. Every answer ([`StoreAnswer`]) carries the
//! `now` the store used, truncated to whole milliseconds.
//!
//! The semantics are defined once, here, by the pure evaluator ([`Cond::eval`],
//! [`Expr::eval`]) that the memory store runs; [`crate::sql`] renders the same requests into
//! one parameterized statement per dialect. A store someone writes (a key-value store, say)
//! can read the row, call [`apply_run_update`] and write the result back with a
//! compare-and-set.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::{DispatchLogEntry, InstanceRow, InstanceStatus, IntentRow, IntentState, RunRow, RunStatus};
use crate::time::Timestamp;

/// A column of `agent_runs` that requests may read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunCol {
    /// `id`
    Id,
    /// `status`
    Status,
    /// `lease_owner`
    LeaseOwner,
    /// `lease_expires_at`
    LeaseExpiresAt,
    /// `retries`
    Retries,
    /// `fencing_epoch`
    FencingEpoch,
    /// `updated_at`
    UpdatedAt,
    /// `idempotency_key`
    IdempotencyKey,
}

/// A column of `effect_intents` that requests may read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentCol {
    /// `state`
    State,
    /// `channel`
    Channel,
    /// `payload_digest`
    PayloadDigest,
    /// `fence_owner`
    FenceOwner,
    /// `fence_expires_at`
    FenceExpiresAt,
    /// `fence_epoch`
    FenceEpoch,
    /// `external_ref`
    ExternalRef,
    /// `attempts`
    Attempts,
    /// `last_error`
    LastError,
    /// `committed_at`
    CommittedAt,
}

/// A column of `agent_instances` that requests may read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceCol {
    /// `instance_id`
    InstanceId,
    /// `status`
    Status,
    /// `last_heartbeat`
    LastHeartbeat,
}

impl RunCol {
    /// The SQL column name.
    pub fn name(self) -> &'static str {
        match self {
            RunCol::Id => "id",
            RunCol::Status => "status",
            RunCol::LeaseOwner => "lease_owner",
            RunCol::LeaseExpiresAt => "lease_expires_at",
            RunCol::Retries => "retries",
            RunCol::FencingEpoch => "fencing_epoch",
            RunCol::UpdatedAt => "updated_at",
            RunCol::IdempotencyKey => "idempotency_key",
        }
    }
}

impl IntentCol {
    /// The SQL column name.
    pub fn name(self) -> &'static str {
        match self {
            IntentCol::State => "state",
            IntentCol::Channel => "channel",
            IntentCol::PayloadDigest => "payload_digest",
            IntentCol::FenceOwner => "fence_owner",
            IntentCol::FenceExpiresAt => "fence_expires_at",
            IntentCol::FenceEpoch => "fence_epoch",
            IntentCol::ExternalRef => "external_ref",
            IntentCol::Attempts => "attempts",
            IntentCol::LastError => "last_error",
            IntentCol::CommittedAt => "committed_at",
        }
    }
}

impl InstanceCol {
    /// The SQL column name.
    pub fn name(self) -> &'static str {
        match self {
            InstanceCol::InstanceId => "instance_id",
            InstanceCol::Status => "status",
            InstanceCol::LastHeartbeat => "last_heartbeat",
        }
    }
}

/// A literal value in a condition or assignment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Val {
    /// SQL `NULL`.
    Null,
    /// Text (statuses and states are text too).
    Text(String),
    /// A 64-bit integer.
    Int(i64),
    /// A timestamp (`timestamptz` in PostgreSQL, ISO text in SQLite).
    Time(Timestamp),
    /// A JSON document (`jsonb`).
    Json(Value),
}

impl Val {
    /// `Text` of a run status.
    pub fn status(s: RunStatus) -> Val {
        Val::Text(s.as_str().to_owned())
    }
    /// `Text` or `Null`.
    pub fn opt_text(s: Option<&str>) -> Val {
        s.map_or(Val::Null, |s| Val::Text(s.to_owned()))
    }
    /// `Time` or `Null`.
    pub fn opt_time(t: Option<Timestamp>) -> Val {
        t.map_or(Val::Null, Val::Time)
    }
    fn as_int(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            _ => None,
        }
    }
}

/// A borrowed column value, so evaluating a condition allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValRef<'a> {
    /// SQL `NULL`.
    Null,
    /// Text.
    Text(&'a str),
    /// An integer.
    Int(i64),
    /// A timestamp.
    Time(Timestamp),
    /// A JSON document.
    Json(&'a Value),
}

impl ValRef<'_> {
    /// The owned value.
    pub fn to_val(self) -> Val {
        match self {
            ValRef::Null => Val::Null,
            ValRef::Text(t) => Val::Text(t.to_owned()),
            ValRef::Int(i) => Val::Int(i),
            ValRef::Time(t) => Val::Time(t),
            ValRef::Json(j) => Val::Json(j.clone()),
        }
    }

    fn as_time(self) -> Option<Timestamp> {
        match self {
            ValRef::Time(t) => Some(t),
            _ => None,
        }
    }

    fn as_int(self) -> Option<i64> {
        match self {
            ValRef::Int(i) => Some(i),
            _ => None,
        }
    }

    /// Null-safe equality with an owned value.
    pub fn equals(self, v: &Val) -> bool {
        match (self, v) {
            (ValRef::Null, Val::Null) => true,
            (ValRef::Text(a), Val::Text(b)) => a == b,
            (ValRef::Int(a), Val::Int(b)) => a == *b,
            (ValRef::Time(a), Val::Time(b)) => a == *b,
            (ValRef::Json(a), Val::Json(b)) => a == b,
            _ => false,
        }
    }
}

/// A condition over the columns `C` of one table. Equality is null-safe
/// (`IS NOT DISTINCT FROM`), so `Eq(col, Null)` means "is null".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cond<C> {
    /// Always true.
    True,
    /// `col IS NOT DISTINCT FROM value`.
    Eq(C, Val),
    /// `col IN (values)` (no nulls in the list).
    In(C, Vec<Val>),
    /// `col <= value` for integers.
    AtMost(C, i64),
    /// A timestamp column that is null or `<= now` (the one expiry rule).
    ExpiredAt(C),
    /// A timestamp column that is not null and `> now`.
    LiveAt(C),
    /// A timestamp column more than `ms` before now (`now - col > ms`, strict).
    OlderThan(C, i64),
    /// Text that starts with a prefix.
    StartsWith(C, String),
    /// All hold.
    And(Vec<Cond<C>>),
    /// Any holds.
    Or(Vec<Cond<C>>),
    /// Negation (null-safe: the operand is never unknown).
    Not(Box<Cond<C>>),
    /// (intents) the run of this intent is held by exactly this live token at `now`.
    RunHeldBy {
        /// Token owner.
        owner: String,
        /// Token expiry.
        lease_expires_at: Timestamp,
        /// Token epoch, when the token has one.
        epoch: Option<i64>,
    },
    /// (runs) `lease_owner` is an instance that is dead or silent for more than `ttl_ms`.
    OwnerInstanceDead {
        /// The liveness TTL in milliseconds (strict `>`).
        ttl_ms: i64,
    },
}

/// A value assigned by a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expr<C> {
    /// A literal.
    Val(Val),
    /// The store's `now`.
    Now,
    /// `now + ms`.
    NowPlus(i64),
    /// The column's current value plus `n` (integers).
    Add(C, i64),
    /// `CASE WHEN cond THEN a ELSE b END`, evaluated against the row before the write.
    Case(Box<Cond<C>>, Box<Expr<C>>, Box<Expr<C>>),
}

/// One column assignment.
pub type Assign<C> = (C, Expr<C>);

/// Sort order of a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOrder {
    /// Oldest expiry first, then id (the sweep: the longest-dead holders first).
    ExpiresAt,
    /// Most recently updated first, then id (operator listings).
    UpdatedAtDesc,
}

/// What a `find-or-create` inserts when no run has the idempotency key yet. The store
/// supplies `id` and `assignment_id` (UUIDs) and the timestamps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewRun {
    /// The unique business key.
    pub idempotency_key: String,
    /// What the run is for.
    pub objective: String,
    /// Who creates it.
    pub created_by: String,
}

/// What a claim inserts into `effect_intents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewIntent {
    /// The run.
    pub run_id: String,
    /// The effect.
    pub effect_key: String,
    /// The channel.
    pub channel: String,
    /// The payload digest (`""` for `recordOnce`).
    pub payload_digest: String,
}

/// One request to a store. Each is one statement in a SQL store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum StoreRequest {
    /// Only the clock.
    Now,
    /// Read one run. Answer: [`StoreReply::Run`].
    ReadRun {
        /// The run.
        run_id: String,
    },
    /// One atomic conditional write of one run. Answer: [`StoreReply::RunWrite`] with the
    /// row after the write (`None` on a miss) and, when `want_before`, the row before it
    /// on a hit.
    UpdateRun {
        /// The run.
        run_id: String,
        /// The condition, evaluated at the store's `now`.
        when: Cond<RunCol>,
        /// The assignments, evaluated against the row before the write.
        set: Vec<Assign<RunCol>>,
        /// Return the row as it was before the write.
        want_before: bool,
    },
    /// Runs matching a condition. Answer: [`StoreReply::Runs`].
    ScanRuns {
        /// The filter.
        when: Cond<RunCol>,
        /// The order.
        order: RunOrder,
        /// At most this many.
        limit: u32,
    },
    /// Find the run with this idempotency key or create it, race-safe. Answer:
    /// [`StoreReply::Ensured`].
    EnsureRun(NewRun),
    /// Insert an intent unless `(run_id, effect_key)` exists; append `claimed` or `deduped`
    /// to the dispatch log in the same write. Answer: [`StoreReply::Claim`].
    ClaimIntent(NewIntent),
    /// One atomic conditional write of one intent, with an optional log entry appended in
    /// the same write when it hits. Answer: [`StoreReply::Intent`].
    UpdateIntent {
        /// The run.
        run_id: String,
        /// The effect.
        effect_key: String,
        /// The condition.
        when: Cond<IntentCol>,
        /// The assignments.
        set: Vec<Assign<IntentCol>>,
        /// Appended with the store's `now` as `at` when the write hits.
        log: Option<DispatchLogEntry>,
    },
    /// Intents matching a condition, oldest fence expiry first. Answer: [`StoreReply::Intents`].
    ScanIntents {
        /// The filter.
        when: Cond<IntentCol>,
        /// At most this many.
        limit: u32,
    },
    /// Read the dispatch log of one effect, oldest first. Answer: [`StoreReply::Log`].
    ReadLog {
        /// The run.
        run_id: String,
        /// The effect.
        effect_key: String,
    },
    /// Insert or refresh an instance: status `alive`, `started_at = last_heartbeat = now`.
    /// Answer: [`StoreReply::Instances`] with the one row.
    UpsertInstance {
        /// The instance id.
        instance_id: String,
        /// Host name.
        hostname: Option<String>,
        /// Process id.
        pid: Option<i64>,
        /// Metadata.
        metadata: Option<Value>,
    },
    /// Conditional write of every instance matching `when`. Answer: [`StoreReply::Instances`]
    /// with the rows written.
    UpdateInstances {
        /// The filter.
        when: Cond<InstanceCol>,
        /// The assignments.
        set: Vec<Assign<InstanceCol>>,
    },
    /// Instances matching a condition, by id. Answer: [`StoreReply::Instances`].
    ScanInstances {
        /// The filter.
        when: Cond<InstanceCol>,
    },
}

/// A store's answer to one request.
#[allow(clippy::large_enum_variant)] // moved once per request; see `machine::Answer`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreReply {
    /// For [`StoreRequest::Now`].
    Now,
    /// For [`StoreRequest::ReadRun`].
    Run {
        /// The run, if it exists.
        run: Option<RunRow>,
    },
    /// For [`StoreRequest::UpdateRun`].
    RunWrite {
        /// The row before the write (hits with `want_before` only).
        before: Option<RunRow>,
        /// The row after the write; `None` when the condition did not hold or the run is missing.
        after: Option<RunRow>,
    },
    /// For [`StoreRequest::ScanRuns`].
    Runs {
        /// The rows.
        runs: Vec<RunRow>,
    },
    /// For [`StoreRequest::EnsureRun`].
    Ensured {
        /// The run.
        run: RunRow,
        /// Whether this request created it.
        created: bool,
    },
    /// For [`StoreRequest::ClaimIntent`].
    Claim {
        /// The intent row (the new one, or the one that already existed).
        intent: IntentRow,
        /// Whether this request inserted it.
        claimed: bool,
    },
    /// For [`StoreRequest::UpdateIntent`].
    Intent {
        /// The row after the write, `None` on a miss.
        intent: Option<IntentRow>,
    },
    /// For [`StoreRequest::ScanIntents`].
    Intents {
        /// The rows.
        intents: Vec<IntentRow>,
    },
    /// For [`StoreRequest::ReadLog`].
    Log {
        /// The entries.
        entries: Vec<DispatchLogEntry>,
    },
    /// For the instance requests.
    Instances {
        /// The rows.
        instances: Vec<InstanceRow>,
    },
}

/// A reply with the store's `now` (whole milliseconds) used to evaluate the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoreAnswer {
    /// The store's clock.
    pub now: Timestamp,
    /// The reply.
    pub reply: StoreReply,
}

/// The answer to a [`StoreRequest::UpdateRun`] from a store that wrote the run in place
/// ([`LeaseStore::write_run_in_place`](crate::LeaseStore::write_run_in_place)): what
/// [`StoreReply::RunWrite`] says, with the rows lent by the store instead of copied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunWriteRef<'a> {
    /// The store's clock.
    pub now: Timestamp,
    /// The row before the write (hits with `want_before` only).
    pub before: Option<&'a RunRow>,
    /// The row after the write; `None` when the condition did not hold or the run is missing.
    pub after: Option<&'a RunRow>,
}

/// Read access to the other tables, for the cross-table conditions.
pub trait Lookup {
    /// The run with this id.
    fn run(&self, run_id: &str) -> Option<&RunRow>;
    /// The instance with this id.
    fn instance(&self, instance_id: &str) -> Option<&InstanceRow>;
}

/// A row whose columns the evaluator can read and write.
pub trait Record {
    /// The column type.
    type Col: Copy;
    /// The value of a column, borrowed.
    fn get_ref(&self, col: Self::Col) -> ValRef<'_>;
    /// The value of a column.
    fn get(&self, col: Self::Col) -> Val {
        self.get_ref(col).to_val()
    }
    /// Writes a column. A value of the wrong type is a protocol error.
    fn set(&mut self, col: Self::Col, val: Val) -> Result<(), String>;
    /// Whether [`Record::set`] would accept `val` for `col` (no write).
    fn check(&self, col: Self::Col, val: &Val) -> Result<(), String>;
    /// The run this row belongs to (for [`Cond::RunHeldBy`]) and its lease owner (for
    /// [`Cond::OwnerInstanceDead`]).
    fn run_ref(&self) -> (&str, Option<&str>);
}

impl<C: Copy> Cond<C> {
    /// Evaluates the condition on `row` at `now`.
    pub fn eval<R: Record<Col = C>>(&self, row: &R, now: Timestamp, lookup: &dyn Lookup) -> bool {
        match self {
            Cond::True => true,
            Cond::Eq(c, v) => row.get_ref(*c).equals(v),
            Cond::In(c, vs) => {
                let x = row.get_ref(*c);
                x != ValRef::Null && vs.iter().any(|v| x.equals(v))
            }
            Cond::AtMost(c, n) => row.get_ref(*c).as_int().is_some_and(|x| x <= *n),
            Cond::ExpiredAt(c) => row.get_ref(*c).as_time().is_none_or(|t| t <= now),
            Cond::LiveAt(c) => row.get_ref(*c).as_time().is_some_and(|t| t > now),
            Cond::OlderThan(c, ms) => row.get_ref(*c).as_time().is_some_and(|t| now.0 - t.0 > *ms),
            Cond::StartsWith(c, p) => matches!(row.get_ref(*c), ValRef::Text(t) if t.starts_with(p.as_str())),
            Cond::And(cs) => cs.iter().all(|c| c.eval(row, now, lookup)),
            Cond::Or(cs) => cs.iter().any(|c| c.eval(row, now, lookup)),
            Cond::Not(c) => !c.eval(row, now, lookup),
            Cond::RunHeldBy { owner, lease_expires_at, epoch } => {
                let token = crate::model::FencingToken {
                    run_id: row.run_ref().0.to_owned(),
                    owner: owner.clone(),
                    lease_expires_at: *lease_expires_at,
                    epoch: *epoch,
                };
                lookup.run(row.run_ref().0).is_some_and(|run| run.holds(&token, now))
            }
            Cond::OwnerInstanceDead { ttl_ms } => row
                .run_ref()
                .1
                .and_then(|owner| lookup.instance(owner))
                .is_some_and(|inst| inst.is_expired(now, *ttl_ms)),
        }
    }
}

impl<C: Copy> Expr<C> {
    /// Evaluates the assignment against `row` (the row before the write) at `now`.
    pub fn eval<R: Record<Col = C>>(&self, row: &R, now: Timestamp, lookup: &dyn Lookup) -> Result<Val, String> {
        let mut value = Val::Null;
        self.eval_into(row, now, lookup, &mut value)?;
        Ok(value)
    }

    /// [`Expr::eval`], written into `out`: a store that evaluates a write's assignments into
    /// a buffer writes each value once, in place (a value returned and then moved into the
    /// buffer is copied right after being written, which stalls the copy).
    pub(crate) fn eval_into<R: Record<Col = C>>(
        &self,
        row: &R,
        now: Timestamp,
        lookup: &dyn Lookup,
        out: &mut Val,
    ) -> Result<(), String> {
        *out = match self {
            Expr::Val(v) => v.clone(),
            Expr::Now => Val::Time(now),
            Expr::NowPlus(ms) => Val::Time(now.plus_millis(*ms).ok_or("timestamp out of range")?),
            Expr::Add(c, n) => {
                let x = row.get_ref(*c).as_int().ok_or("arithmetic on a non-integer column")?;
                Val::Int(x.checked_add(*n).ok_or("integer overflow")?)
            }
            Expr::Case(cond, a, b) => {
                let chosen = if cond.eval(row, now, lookup) { a } else { b };
                return chosen.eval_into(row, now, lookup, out);
            }
        };
        Ok(())
    }
}

/// Applies a conditional write to a copy of `row`: `Ok(None)` when the condition does not
/// hold. All assignments are evaluated against the row before the write, as in SQL.
pub fn apply_update<R: Record + Clone>(
    row: &R,
    when: &Cond<R::Col>,
    set: &[Assign<R::Col>],
    now: Timestamp,
    lookup: &dyn Lookup,
) -> Result<Option<R>, String> {
    if !when.eval(row, now, lookup) {
        return Ok(None);
    }
    let values = set.iter().map(|(c, e)| e.eval(row, now, lookup).map(|v| (*c, v))).collect::<Result<Vec<_>, _>>()?;
    let mut next = row.clone();
    for (c, v) in values {
        next.set(c, v)?;
    }
    Ok(Some(next))
}

/// [`apply_update`] for runs.
pub fn apply_run_update(
    row: &RunRow,
    when: &Cond<RunCol>,
    set: &[Assign<RunCol>],
    now: Timestamp,
    lookup: &dyn Lookup,
) -> Result<Option<RunRow>, String> {
    apply_update(row, when, set, now, lookup)
}

fn text(v: Val, what: &str) -> Result<String, String> {
    match v {
        Val::Text(t) => Ok(t),
        other => Err(format!("{what}: expected text, got {other:?}")),
    }
}

fn opt_text(v: Val, what: &str) -> Result<Option<String>, String> {
    match v {
        Val::Null => Ok(None),
        other => text(other, what).map(Some),
    }
}

fn opt_time(v: Val, what: &str) -> Result<Option<Timestamp>, String> {
    match v {
        Val::Null => Ok(None),
        Val::Time(t) => Ok(Some(t)),
        other => Err(format!("{what}: expected a timestamp, got {other:?}")),
    }
}

fn int(v: Val, what: &str) -> Result<i64, String> {
    v.as_int().ok_or_else(|| format!("{what}: expected an integer, got {v:?}"))
}

impl Record for RunRow {
    type Col = RunCol;
    fn get_ref(&self, col: RunCol) -> ValRef<'_> {
        match col {
            RunCol::Id => ValRef::Text(&self.id),
            RunCol::Status => ValRef::Text(self.status.as_str()),
            RunCol::LeaseOwner => self.lease_owner.as_deref().map_or(ValRef::Null, ValRef::Text),
            RunCol::LeaseExpiresAt => self.lease_expires_at.map_or(ValRef::Null, ValRef::Time),
            RunCol::Retries => ValRef::Int(self.retries),
            RunCol::FencingEpoch => ValRef::Int(self.fencing_epoch),
            RunCol::UpdatedAt => ValRef::Time(self.updated_at),
            RunCol::IdempotencyKey => ValRef::Text(&self.idempotency_key),
        }
    }
    fn set(&mut self, col: RunCol, val: Val) -> Result<(), String> {
        match col {
            RunCol::Id => return Err("the run id is immutable".to_owned()),
            RunCol::IdempotencyKey => return Err("the idempotency key is immutable".to_owned()),
            RunCol::Status => self.status = RunStatus::parse(&text(val, "status")?).map_err(|e| e.message)?,
            RunCol::LeaseOwner => self.lease_owner = opt_text(val, "lease_owner")?,
            RunCol::LeaseExpiresAt => self.lease_expires_at = opt_time(val, "lease_expires_at")?,
            RunCol::Retries => self.retries = int(val, "retries")?,
            RunCol::FencingEpoch => self.fencing_epoch = int(val, "fencing_epoch")?,
            RunCol::UpdatedAt => self.updated_at = opt_time(val, "updated_at")?.ok_or("updated_at is NOT NULL")?,
        }
        Ok(())
    }
    fn check(&self, col: RunCol, val: &Val) -> Result<(), String> {
        match (col, val) {
            (RunCol::Id | RunCol::IdempotencyKey, _) => Err(format!("{} is immutable", col.name())),
            (RunCol::Status, Val::Text(t)) => RunStatus::parse(t).map(|_| ()).map_err(|e| e.message),
            (RunCol::LeaseOwner, Val::Null | Val::Text(_)) => Ok(()),
            (RunCol::LeaseExpiresAt, Val::Null | Val::Time(_)) => Ok(()),
            (RunCol::Retries | RunCol::FencingEpoch, Val::Int(_)) => Ok(()),
            (RunCol::UpdatedAt, Val::Time(_)) => Ok(()),
            (c, v) => Err(format!("{}: a value of the wrong type: {v:?}", c.name())),
        }
    }
    fn run_ref(&self) -> (&str, Option<&str>) {
        (&self.id, self.lease_owner.as_deref())
    }
}

impl RunRow {
    /// [`Record::set`] from a borrowed value: a literal assignment's value is applied from the
    /// request without a copy where the column does not keep it (a status is parsed).
    pub(crate) fn set_from(&mut self, col: RunCol, val: &Val) -> Result<(), String> {
        match (col, val) {
            (RunCol::Status, Val::Text(t)) => {
                self.status = RunStatus::parse(t).map_err(|e| e.message)?;
                Ok(())
            }
            _ => self.set(col, val.clone()),
        }
    }
}

impl Record for IntentRow {
    type Col = IntentCol;
    fn get_ref(&self, col: IntentCol) -> ValRef<'_> {
        match col {
            IntentCol::State => ValRef::Text(self.state.as_str()),
            IntentCol::Channel => ValRef::Text(&self.channel),
            IntentCol::PayloadDigest => ValRef::Text(&self.payload_digest),
            IntentCol::FenceOwner => self.fence_owner.as_deref().map_or(ValRef::Null, ValRef::Text),
            IntentCol::FenceExpiresAt => self.fence_expires_at.map_or(ValRef::Null, ValRef::Time),
            IntentCol::FenceEpoch => self.fence_epoch.map_or(ValRef::Null, ValRef::Int),
            IntentCol::ExternalRef => self.external_ref.as_ref().map_or(ValRef::Null, ValRef::Json),
            IntentCol::Attempts => ValRef::Int(self.attempts),
            IntentCol::LastError => self.last_error.as_deref().map_or(ValRef::Null, ValRef::Text),
            IntentCol::CommittedAt => self.committed_at.map_or(ValRef::Null, ValRef::Time),
        }
    }
    fn set(&mut self, col: IntentCol, val: Val) -> Result<(), String> {
        match col {
            IntentCol::State => {
                let t = text(val, "state")?;
                self.state =
                    [IntentState::Intent, IntentState::Dispatched, IntentState::Committed, IntentState::Abandoned]
                        .into_iter()
                        .find(|s| s.as_str() == t)
                        .ok_or_else(|| format!("unknown intent state {t:?}"))?;
            }
            IntentCol::Channel => self.channel = text(val, "channel")?,
            IntentCol::PayloadDigest => self.payload_digest = text(val, "payload_digest")?,
            IntentCol::FenceOwner => self.fence_owner = opt_text(val, "fence_owner")?,
            IntentCol::FenceExpiresAt => self.fence_expires_at = opt_time(val, "fence_expires_at")?,
            IntentCol::FenceEpoch => {
                self.fence_epoch = match val {
                    Val::Null => None,
                    v => Some(int(v, "fence_epoch")?),
                }
            }
            IntentCol::ExternalRef => {
                self.external_ref = match val {
                    Val::Null => None,
                    Val::Json(j) => Some(j),
                    other => return Err(format!("external_ref: expected JSON, got {other:?}")),
                }
            }
            IntentCol::Attempts => self.attempts = int(val, "attempts")?,
            IntentCol::LastError => self.last_error = opt_text(val, "last_error")?,
            IntentCol::CommittedAt => self.committed_at = opt_time(val, "committed_at")?,
        }
        Ok(())
    }
    fn check(&self, col: IntentCol, val: &Val) -> Result<(), String> {
        let mut scratch = self.clone();
        scratch.set(col, val.clone())
    }
    fn run_ref(&self) -> (&str, Option<&str>) {
        (&self.run_id, None)
    }
}

impl Record for InstanceRow {
    type Col = InstanceCol;
    fn get_ref(&self, col: InstanceCol) -> ValRef<'_> {
        match col {
            InstanceCol::InstanceId => ValRef::Text(&self.instance_id),
            InstanceCol::Status => ValRef::Text(self.status.as_str()),
            InstanceCol::LastHeartbeat => ValRef::Time(self.last_heartbeat),
        }
    }
    fn set(&mut self, col: InstanceCol, val: Val) -> Result<(), String> {
        match col {
            InstanceCol::InstanceId => return Err("the instance id is immutable".to_owned()),
            InstanceCol::Status => {
                let t = text(val, "status")?;
                self.status = [InstanceStatus::Alive, InstanceStatus::Draining, InstanceStatus::Dead]
                    .into_iter()
                    .find(|s| s.as_str() == t)
                    .ok_or_else(|| format!("unknown instance status {t:?}"))?;
            }
            InstanceCol::LastHeartbeat => {
                self.last_heartbeat = opt_time(val, "last_heartbeat")?.ok_or("last_heartbeat is NOT NULL")?
            }
        }
        Ok(())
    }
    fn check(&self, col: InstanceCol, val: &Val) -> Result<(), String> {
        let mut scratch = self.clone();
        scratch.set(col, val.clone())
    }
    fn run_ref(&self) -> (&str, Option<&str>) {
        (&self.instance_id, None)
    }
}

/// `status IN ('leased','running')`.
pub fn held() -> Cond<RunCol> {
    Cond::In(RunCol::Status, RunStatus::HELD.iter().map(|s| Val::status(*s)).collect())
}

/// The live-token condition shared by renew, release and verify (deliberate fixes 1 and 2):
/// held, same owner, same expiry, the expiry still in the future, and the same epoch when
/// the token carries one.
pub fn holds_token(token: &crate::model::FencingToken) -> Cond<RunCol> {
    let mut all = vec![
        held(),
        Cond::Eq(RunCol::LeaseOwner, Val::Text(token.owner.clone())),
        Cond::Eq(RunCol::LeaseExpiresAt, Val::Time(token.lease_expires_at)),
        Cond::LiveAt(RunCol::LeaseExpiresAt),
    ];
    if let Some(epoch) = token.epoch {
        all.push(Cond::Eq(RunCol::FencingEpoch, Val::Int(epoch)));
    }
    Cond::And(all)
}

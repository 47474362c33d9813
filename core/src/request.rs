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

impl<C: Copy> Cond<C> {
    /// The columns this condition reads, in order of appearance, into `out` (the run a
    /// `RunHeldBy` names and the instances of `OwnerInstanceDead` are other tables).
    pub fn columns_into(&self, out: &mut Vec<C>) {
        match self {
            Cond::True | Cond::RunHeldBy { .. } | Cond::OwnerInstanceDead { .. } => {}
            Cond::Eq(c, _)
            | Cond::In(c, _)
            | Cond::AtMost(c, _)
            | Cond::ExpiredAt(c)
            | Cond::LiveAt(c)
            | Cond::OlderThan(c, _)
            | Cond::StartsWith(c, _) => out.push(*c),
            Cond::And(all) | Cond::Or(all) => all.iter().for_each(|c| c.columns_into(out)),
            Cond::Not(c) => c.columns_into(out),
        }
    }
}

impl<C: Copy> Expr<C> {
    /// The columns this expression reads, into `out`.
    pub fn columns_into(&self, out: &mut Vec<C>) {
        match self {
            Expr::Val(_) | Expr::Now | Expr::NowPlus(_) => {}
            Expr::Add(c, _) => out.push(*c),
            Expr::Case(when, then, otherwise) => {
                when.columns_into(out);
                then.columns_into(out);
                otherwise.columns_into(out);
            }
        }
    }
}

impl RunCol {
    /// Every column requests may read or write, in the table's order.
    pub const ALL: [RunCol; 8] = [
        RunCol::Id,
        RunCol::Status,
        RunCol::LeaseOwner,
        RunCol::LeaseExpiresAt,
        RunCol::Retries,
        RunCol::FencingEpoch,
        RunCol::UpdatedAt,
        RunCol::IdempotencyKey,
    ];

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
    /// The value, borrowed.
    pub fn as_ref(&self) -> ValRef<'_> {
        match self {
            Val::Null => ValRef::Null,
            Val::Text(t) => ValRef::Text(t),
            Val::Int(i) => ValRef::Int(*i),
            Val::Time(t) => ValRef::Time(*t),
            Val::Json(j) => ValRef::Json(j),
        }
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
///
/// Its JSON form is tagged by `op` (`{"op":"update_run","run_id":…}`), deserialized tag first
/// (`crate::tagged`).
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    /// on a hit; or, when the request wants neither row (`want_before` and `want_after` both
    /// false), [`StoreReply::RunHit`]: only whether the write hit (a store may still answer
    /// `RunWrite`).
    UpdateRun {
        /// The run.
        run_id: String,
        /// The condition, evaluated at the store's `now`.
        when: Cond<RunCol>,
        /// The assignments, evaluated against the row before the write.
        set: Vec<Assign<RunCol>>,
        /// Return the row as it was before the write.
        want_before: bool,
        /// Return the row after the write. `false` for an operation that only needs to know
        /// whether the write hit (`verifyFence`): its answer then carries no row. Absent from
        /// the JSON form when `true`, the default.
        #[serde(skip_serializing_if = "is_true")]
        want_after: bool,
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
///
/// Its JSON form is tagged by `kind` (`{"kind":"run_write","before":…,"after":…}`),
/// deserialized tag first (`crate::tagged`): serde's derive buffered every answer, rows and
/// all, before reading its tag.
#[allow(clippy::large_enum_variant)] // moved once per request; see `machine::Answer`
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    /// For a [`StoreRequest::UpdateRun`] that wants neither row: whether the write hit (the
    /// condition held and the run exists).
    RunHit {
        /// Whether the write hit.
        hit: bool,
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

impl<'de> Deserialize<'de> for StoreReply {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StoreReply, D::Error> {
        crate::tagged::deserialize(d)
    }
}

impl crate::tagged::Tagged for StoreReply {
    const TAG: &'static str = "kind";
    const KINDS: &'static [&'static str] =
        &["now", "run", "run_write", "run_hit", "runs", "ensured", "claim", "intent", "intents", "log", "instances"];

    fn variant<'de, D: serde::Deserializer<'de>>(kind: &str, d: D) -> Result<StoreReply, D::Error> {
        use fields::*;
        Ok(match kind {
            "now" => {
                Empty::deserialize(d)?;
                StoreReply::Now
            }
            "run" => StoreReply::Run { run: RunFields::deserialize(d)?.run },
            "run_write" => {
                let f = RunWriteFields::deserialize(d)?;
                StoreReply::RunWrite { before: f.before, after: f.after }
            }
            "run_hit" => StoreReply::RunHit { hit: RunHitFields::deserialize(d)?.hit },
            "runs" => StoreReply::Runs { runs: RunsFields::deserialize(d)?.runs },
            "ensured" => {
                let f = EnsuredFields::deserialize(d)?;
                StoreReply::Ensured { run: f.run, created: f.created }
            }
            "claim" => {
                let f = ClaimFields::deserialize(d)?;
                StoreReply::Claim { intent: f.intent, claimed: f.claimed }
            }
            "intent" => StoreReply::Intent { intent: IntentFields::deserialize(d)?.intent },
            "intents" => StoreReply::Intents { intents: IntentsFields::deserialize(d)?.intents },
            "log" => StoreReply::Log { entries: LogFields::deserialize(d)?.entries },
            "instances" => StoreReply::Instances { instances: InstancesFields::deserialize(d)?.instances },
            other => return Err(serde::de::Error::unknown_variant(other, Self::KINDS)),
        })
    }
}

impl StoreRequest {
    /// Whether the request may change the store (every request but the clock, the reads and
    /// the scans). A store that keeps receipts in the write's own transaction opens one at
    /// an operation's first write ([`crate::LeaseStore::settle`]).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            StoreRequest::UpdateRun { .. }
                | StoreRequest::EnsureRun(_)
                | StoreRequest::ClaimIntent(_)
                | StoreRequest::UpdateIntent { .. }
                | StoreRequest::UpsertInstance { .. }
                | StoreRequest::UpdateInstances { .. }
        )
    }
}

impl<'de> Deserialize<'de> for StoreRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StoreRequest, D::Error> {
        crate::tagged::deserialize(d)
    }
}

impl crate::tagged::Tagged for StoreRequest {
    const TAG: &'static str = "op";
    const KINDS: &'static [&'static str] = &[
        "now",
        "read_run",
        "update_run",
        "scan_runs",
        "ensure_run",
        "claim_intent",
        "update_intent",
        "scan_intents",
        "read_log",
        "upsert_instance",
        "update_instances",
        "scan_instances",
    ];

    fn variant<'de, D: serde::Deserializer<'de>>(op: &str, d: D) -> Result<StoreRequest, D::Error> {
        use fields::*;
        Ok(match op {
            "now" => {
                NoFields::deserialize(d)?;
                StoreRequest::Now
            }
            "read_run" => StoreRequest::ReadRun { run_id: ReadRunFields::deserialize(d)?.run_id },
            "update_run" => {
                let f = UpdateRunFields::deserialize(d)?;
                StoreRequest::UpdateRun {
                    run_id: f.run_id,
                    when: f.when,
                    set: f.set,
                    want_before: f.want_before,
                    want_after: f.want_after,
                }
            }
            "scan_runs" => {
                let f = ScanRunsFields::deserialize(d)?;
                StoreRequest::ScanRuns { when: f.when, order: f.order, limit: f.limit }
            }
            "ensure_run" => StoreRequest::EnsureRun(NewRun::deserialize(d)?),
            "claim_intent" => StoreRequest::ClaimIntent(NewIntent::deserialize(d)?),
            "update_intent" => {
                let f = UpdateIntentFields::deserialize(d)?;
                StoreRequest::UpdateIntent {
                    run_id: f.run_id,
                    effect_key: f.effect_key,
                    when: f.when,
                    set: f.set,
                    log: f.log,
                }
            }
            "scan_intents" => {
                let f = ScanIntentsFields::deserialize(d)?;
                StoreRequest::ScanIntents { when: f.when, limit: f.limit }
            }
            "read_log" => {
                let f = ReadLogFields::deserialize(d)?;
                StoreRequest::ReadLog { run_id: f.run_id, effect_key: f.effect_key }
            }
            "upsert_instance" => {
                let f = UpsertInstanceFields::deserialize(d)?;
                StoreRequest::UpsertInstance {
                    instance_id: f.instance_id,
                    hostname: f.hostname,
                    pid: f.pid,
                    metadata: f.metadata,
                }
            }
            "update_instances" => {
                let f = UpdateInstancesFields::deserialize(d)?;
                StoreRequest::UpdateInstances { when: f.when, set: f.set }
            }
            "scan_instances" => StoreRequest::ScanInstances { when: ScanInstancesFields::deserialize(d)?.when },
            other => return Err(serde::de::Error::unknown_variant(other, Self::KINDS)),
        })
    }
}

/// The fields of each variant of [`StoreRequest`] and [`StoreReply`], read as the derive read
/// them (a missing option is `None`), except that a request's unknown field is an error: a
/// request is the core's own, so one with a field it does not have is not a request (and an
/// ignored field would escape the parser's nesting limit). A reply's unknown field is ignored,
/// as a store may answer more than it is asked.
mod fields {
    use serde::Deserialize;
    use serde_json::Value;

    use super::{Assign, Cond, InstanceCol, IntentCol, RunCol, RunOrder};
    use crate::model::{DispatchLogEntry, InstanceRow, IntentRow, RunRow};

    #[derive(Deserialize)]
    pub(super) struct Empty {}
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct NoFields {}

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct ReadRunFields {
        pub(super) run_id: String,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct UpdateRunFields {
        pub(super) run_id: String,
        pub(super) when: Cond<RunCol>,
        pub(super) set: Vec<Assign<RunCol>>,
        pub(super) want_before: bool,
        #[serde(default = "super::yes")]
        pub(super) want_after: bool,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct ScanRunsFields {
        pub(super) when: Cond<RunCol>,
        pub(super) order: RunOrder,
        pub(super) limit: u32,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct UpdateIntentFields {
        pub(super) run_id: String,
        pub(super) effect_key: String,
        pub(super) when: Cond<IntentCol>,
        pub(super) set: Vec<Assign<IntentCol>>,
        pub(super) log: Option<DispatchLogEntry>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct ScanIntentsFields {
        pub(super) when: Cond<IntentCol>,
        pub(super) limit: u32,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct ReadLogFields {
        pub(super) run_id: String,
        pub(super) effect_key: String,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct UpsertInstanceFields {
        pub(super) instance_id: String,
        pub(super) hostname: Option<String>,
        pub(super) pid: Option<i64>,
        pub(super) metadata: Option<Value>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct UpdateInstancesFields {
        pub(super) when: Cond<InstanceCol>,
        pub(super) set: Vec<Assign<InstanceCol>>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct ScanInstancesFields {
        pub(super) when: Cond<InstanceCol>,
    }

    #[derive(Deserialize)]
    pub(super) struct RunFields {
        pub(super) run: Option<RunRow>,
    }
    #[derive(Deserialize)]
    pub(super) struct RunWriteFields {
        pub(super) before: Option<RunRow>,
        pub(super) after: Option<RunRow>,
    }
    #[derive(Deserialize)]
    pub(super) struct RunHitFields {
        pub(super) hit: bool,
    }
    #[derive(Deserialize)]
    pub(super) struct RunsFields {
        pub(super) runs: Vec<RunRow>,
    }
    #[derive(Deserialize)]
    pub(super) struct EnsuredFields {
        pub(super) run: RunRow,
        pub(super) created: bool,
    }
    #[derive(Deserialize)]
    pub(super) struct ClaimFields {
        pub(super) intent: IntentRow,
        pub(super) claimed: bool,
    }
    #[derive(Deserialize)]
    pub(super) struct IntentFields {
        pub(super) intent: Option<IntentRow>,
    }
    #[derive(Deserialize)]
    pub(super) struct IntentsFields {
        pub(super) intents: Vec<IntentRow>,
    }
    #[derive(Deserialize)]
    pub(super) struct LogFields {
        pub(super) entries: Vec<DispatchLogEntry>,
    }
    #[derive(Deserialize)]
    pub(super) struct InstancesFields {
        pub(super) instances: Vec<InstanceRow>,
    }
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

/// `want_after`'s default (serde takes a function).
fn yes() -> bool {
    true
}

/// Whether `want_after` is its default, so the JSON form leaves it out.
#[expect(clippy::trivially_copy_pass_by_ref, reason = "serde's skip_serializing_if passes a reference")]
fn is_true(v: &bool) -> bool {
    *v
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
        RunRow::assignable(col, val)
    }
    fn run_ref(&self) -> (&str, Option<&str>) {
        (&self.id, self.lease_owner.as_deref())
    }
}

impl RunRow {
    /// Whether `val` may be written to `col` ([`Record::check`]): the column's type, a known
    /// status, null only where the column takes it, never the immutable id or key.
    pub(crate) fn assignable(col: RunCol, val: &Val) -> Result<(), String> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The derive the hand-written deserializer replaces, as the oracle.
    #[allow(clippy::large_enum_variant, dead_code)]
    #[derive(Debug, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Derived {
        Now,
        Run { run: Option<RunRow> },
        RunWrite { before: Option<RunRow>, after: Option<RunRow> },
        RunHit { hit: bool },
        Runs { runs: Vec<RunRow> },
        Ensured { run: RunRow, created: bool },
        Claim { intent: IntentRow, claimed: bool },
        Intent { intent: Option<IntentRow> },
        Intents { intents: Vec<IntentRow> },
        Log { entries: Vec<DispatchLogEntry> },
        Instances { instances: Vec<InstanceRow> },
    }

    /// The derive's reading as a `StoreReply` (through its JSON, which the derive and the
    /// serializer agree on).
    fn derived(text: &str) -> Result<Value, String> {
        let d: Derived = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let v = match d {
            Derived::Now => json!({ "kind": "now" }),
            Derived::Run { run } => json!({ "kind": "run", "run": run }),
            Derived::RunWrite { before, after } => json!({ "kind": "run_write", "before": before, "after": after }),
            Derived::RunHit { hit } => json!({ "kind": "run_hit", "hit": hit }),
            Derived::Runs { runs } => json!({ "kind": "runs", "runs": runs }),
            Derived::Ensured { run, created } => json!({ "kind": "ensured", "run": run, "created": created }),
            Derived::Claim { intent, claimed } => json!({ "kind": "claim", "intent": intent, "claimed": claimed }),
            Derived::Intent { intent } => json!({ "kind": "intent", "intent": intent }),
            Derived::Intents { intents } => json!({ "kind": "intents", "intents": intents }),
            Derived::Log { entries } => json!({ "kind": "log", "entries": entries }),
            Derived::Instances { instances } => json!({ "kind": "instances", "instances": instances }),
        };
        Ok(v)
    }

    /// The derive of [`StoreRequest`] the hand-written deserializer replaces, as the oracle.
    #[allow(clippy::large_enum_variant, dead_code)]
    #[derive(Debug, Serialize, Deserialize)]
    #[serde(tag = "op", rename_all = "snake_case")]
    enum DerivedRequest {
        Now,
        ReadRun {
            run_id: String,
        },
        UpdateRun {
            run_id: String,
            when: Cond<RunCol>,
            set: Vec<Assign<RunCol>>,
            want_before: bool,
            #[serde(default = "super::yes", skip_serializing_if = "super::is_true")]
            want_after: bool,
        },
        ScanRuns {
            when: Cond<RunCol>,
            order: RunOrder,
            limit: u32,
        },
        EnsureRun(NewRun),
        ClaimIntent(NewIntent),
        UpdateIntent {
            run_id: String,
            effect_key: String,
            when: Cond<IntentCol>,
            set: Vec<Assign<IntentCol>>,
            log: Option<DispatchLogEntry>,
        },
        ScanIntents {
            when: Cond<IntentCol>,
            limit: u32,
        },
        ReadLog {
            run_id: String,
            effect_key: String,
        },
        UpsertInstance {
            instance_id: String,
            hostname: Option<String>,
            pid: Option<i64>,
            metadata: Option<Value>,
        },
        UpdateInstances {
            when: Cond<InstanceCol>,
            set: Vec<Assign<InstanceCol>>,
        },
        ScanInstances {
            when: Cond<InstanceCol>,
        },
    }

    /// Every request the fleet's operations send, as JSON text, answered by a memory store.
    fn requests_of_every_kind() -> Vec<String> {
        use crate::bridge::{Begun, BridgeFleet, BridgeMemoryStore, store_request};
        let t0 = Timestamp(1_785_369_600_000);
        let store = BridgeMemoryStore::new(t0.0);
        store.insert(&serde_json::to_string(&RunRow::ready("r", "heart:resource:x", t0)).unwrap()).unwrap();
        let fleet = BridgeFleet::new(Some(5), false);
        let mut seen = Vec::new();
        let mut run = |name: &str, args: String| -> Value {
            let mut op = match fleet.begin_on_host(name, &args) {
                Begun::Done(text) => return serde_json::from_str(&text).unwrap(),
                Begun::Pending(op) => op,
            };
            loop {
                let need: Value = serde_json::from_str(op.need()).unwrap();
                let text = match need["need"].as_str() {
                    Some("store") => {
                        seen.push(op.request().to_owned());
                        op.resume_store(&store.execute_json(op.request()).unwrap())
                    }
                    Some("effect") => op.resume_effect(r#"{"id":1}"#),
                    Some("probe") => op.resume_probe(r#"{"status":"unknown"}"#),
                    other => panic!("{other:?}"),
                };
                if op.is_done() {
                    return serde_json::from_str(&text).unwrap();
                }
            }
        };
        let acq = run("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#.into());
        let fence = acq["ok"]["fence"].to_string();
        run("verifyFence", format!(r#"{{"fence":{fence}}}"#));
        run("sendOnce", format!(r#"{{"fence":{fence},"channel":"mail","effectKey":"k","payload":{{"a":1}}}}"#));
        run("recordOnce", r#"{"runId":"r","effectKey":"k2"}"#.into());
        run("release", format!(r#"{{"fence":{fence},"nextStatus":"ready"}}"#));
        run("reclaimExpired", "{}".into());
        run("reconcileOutbox", "{}".into());
        run("registerInstance", r#"{"instanceId":"i","hostname":"h","pid":7,"metadata":{"m":[1]}}"#.into());
        run("heartbeatInstance", r#"{"instanceId":"i"}"#.into());
        run("reclaimDeadInstanceRuns", "{}".into());
        run("listRuns", r#"{"status":"ready"}"#.into());
        run("getRun", r#"{"runId":"r"}"#.into());
        run("ensureResourceRun", r#"{"kind":"k","key":"y","objective":"o","createdBy":"c"}"#.into());
        for (kind, args) in [("now", "{}"), ("readLog", r#"{"runId":"r","effectKey":"k"}"#), ("instances", "{}")] {
            seen.push(store_request(kind, args).unwrap());
        }
        seen
    }

    #[test]
    fn the_hand_written_request_reads_what_the_derive_read_in_any_field_order() {
        let requests = requests_of_every_kind();
        let ops: std::collections::BTreeSet<String> = requests
            .iter()
            .map(|t| serde_json::from_str::<Value>(t).unwrap()["op"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ops.len(), 12, "every kind of request: {ops:?}");
        for text in &requests {
            let mut object: serde_json::Map<String, Value> = serde_json::from_str(text).unwrap();
            let op = object.remove("op").unwrap();
            // The tag first (as written), and last.
            let mut last = object.clone();
            last.insert("op".into(), op);
            for text in [text.clone(), Value::Object(last).to_string()] {
                let want = serde_json::to_value(serde_json::from_str::<DerivedRequest>(&text).unwrap()).unwrap();
                let got = serde_json::to_value(serde_json::from_str::<StoreRequest>(&text).unwrap()).unwrap();
                assert_eq!(want, got, "{text}");
            }
        }
        for text in ["{}", r#"{"op":"nope"}"#, r#"{"run_id":"r","op":5}"#, r#"{"op":"read_run"}"#] {
            assert!(serde_json::from_str::<DerivedRequest>(text).is_err(), "{text}");
            assert!(serde_json::from_str::<StoreRequest>(text).is_err(), "{text}");
        }
        // Unlike the derive, a request with a field it does not have is not a request, tag
        // first or last, however deep the field (an ignored one would escape the nesting limit).
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        for text in [
            r#"{"op":"read_run","run_id":"r","extra":1}"#.to_owned(),
            r#"{"run_id":"r","extra":1,"op":"read_run"}"#.to_owned(),
            r#"{"op":"now","extra":1}"#.to_owned(),
            format!(r#"{{"op":"read_run","run_id":"r","extra":{deep}}}"#),
        ] {
            let e = serde_json::from_str::<StoreRequest>(&text).unwrap_err().to_string();
            assert!(e.contains("unknown field `extra`"), "{e}");
        }
    }

    fn by_hand(text: &str) -> Result<Value, String> {
        serde_json::from_str::<StoreReply>(text).map(|r| serde_json::to_value(r).unwrap()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_hand_written_reply_reads_what_the_derive_read_in_any_field_order() {
        let t0 = Timestamp(1_785_369_600_000);
        let row = serde_json::to_value(RunRow::ready("r", "k", t0)).unwrap();
        let intent = json!({"run_id": "r", "effect_key": "e", "state": "claimed", "channel": "mail",
            "payload_digest": "d", "created_at": "2026-07-30T00:00:00.000Z"});
        let instance = json!({"instance_id": "i", "status": "alive", "started_at": "2026-07-30T00:00:00.000Z",
            "last_heartbeat": "2026-07-30T00:00:00.000Z"});
        let entry = json!({"run_id": "r", "effect_key": "e", "attempt": 1, "outcome": "claimed"});
        let bodies: Vec<(&str, Vec<(&str, Value)>)> = vec![
            ("now", vec![]),
            ("run", vec![("run", row.clone())]),
            ("run", vec![("run", Value::Null)]),
            ("run", vec![]),
            ("run_write", vec![("before", row.clone()), ("after", row.clone())]),
            ("run_write", vec![("after", Value::Null)]),
            ("run_hit", vec![("hit", json!(true))]),
            ("run_hit", vec![("hit", json!(false)), ("after", row.clone())]),
            ("run_hit", vec![]),
            ("runs", vec![("runs", json!([row.clone(), row.clone()]))]),
            ("runs", vec![]),
            ("ensured", vec![("run", row.clone()), ("created", json!(true))]),
            ("ensured", vec![("created", json!(true))]),
            ("claim", vec![("intent", intent.clone()), ("claimed", json!(false))]),
            ("intent", vec![("intent", intent.clone()), ("extra", json!(1))]),
            ("intents", vec![("intents", json!([intent]))]),
            ("log", vec![("entries", json!([entry]))]),
            ("instances", vec![("instances", json!([instance]))]),
            ("runs", vec![("runs", json!("not a list"))]),
            ("nope", vec![]),
        ];
        let object = |fields: &[(&str, Value)]| {
            let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", json!(k))).collect();
            format!("{{{}}}", inner.join(","))
        };
        let mut checked = 0;
        for (kind, fields) in bodies {
            let tag = ("kind", json!(kind));
            let first: Vec<(&str, Value)> = std::iter::once(tag.clone()).chain(fields.iter().cloned()).collect();
            let last: Vec<(&str, Value)> = fields.iter().cloned().chain(std::iter::once(tag)).collect();
            for text in [object(&first), object(&last)] {
                match (derived(&text), by_hand(&text)) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("{text}: the derive gave {a:?}, the hand-written reader {b:?}"),
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 40);
        for text in ["{}", r#"{"run":null}"#, r#"{"kind":5}"#, r#"{"run":null,"kind":5}"#, "[]", "null"] {
            assert!(derived(text).is_err() && by_hand(text).is_err(), "{text}");
        }
    }
}

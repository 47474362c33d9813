//! The TypeScript package's `LeaseStore` contract, driven by the core.
//!
//! A user's store written to that contract has four methods and cannot run the core's
//! request language:
//!
//! ```text
//! getRun(runId) -> row | null
//! conditionalUpdate(runId, updates, {eq, in}) -> updated row | null   (atomic)
//! findExpiredLeases(nowIso, limit) -> rows
//! now() -> Date
//! ```
//!
//! [`ReferenceStore`] turns each store request of one operation into calls of those methods
//! and decides the request with the core's own evaluator on the rows they return, so the
//! host only makes the calls it is told to make ([`LeaseStoreCall`]):
//!
//! * a read (`read_run`): `now()`, then `getRun(id)`;
//! * a conditional write (`update_run`): `now()`, `getRun(id)`, the decision on that row,
//!   then `conditionalUpdate(id, patch, {eq})`, conditioned on every column the decision read
//!   with the values as read (a compare-and-set). When the row changed in between, the write
//!   misses and the request is decided again on a fresh read, at most `cas_retries` times;
//!   then the request fails (`store-unavailable`, "kept changing"), never a silent miss;
//! * a conditional write the contract can state whole (renew, verify, a release to a final
//!   status, a requeue: equalities and memberships against known values, the expiry's
//!   liveness decided on the token's own expiry, assignments of values and the clock): `now()`, then one
//!   `conditionalUpdate(id, patch, {eq, in})` with no read before it, as the TypeScript
//!   package itself writes them ([`DirectWrite`]). A hit is the answer; a miss is decided
//!   again on a read (then as above), so a row the store holds in another form (a timestamp's
//!   other text, no `fencing_epoch`) is still decided by the core;
//! * the sweep's scan of expired leases: `now()`, then `findExpiredLeases(nowIso, limit)`;
//! * a row the operation already read (a scanned row, the row of a missed write) answers the
//!   operation's next request on that run, once, at the clock it was read at: one read per
//!   decision;
//! * every other request (effect intents, instances, run listings, find-or-create) has no
//!   method in the contract: `invalid-input` naming what is missing, before any call.
//!
//! A row is taken as the store returned it: the schema's defaults where it has no value (or
//! null in a NOT NULL column); heart-fleet's own columns (`fencing_epoch`) are neither
//! compared nor written when the store's rows lack them.
//!
//! The calls cross to the host as compact text (values separated by
//! [`COMPACT_SEPARATOR`](super::COMPACT_SEPARATOR)); see [`LeaseStoreCall::text`].

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::BridgeResult;
use super::compact::COMPACT_SEPARATOR;
use crate::request::{Cond, Expr, Record, RunCol, StoreReply, StoreRequest, Val};
use crate::{ErrorCode, HeartError, LeaseStore, MemoryStore, RunRow, StoreAnswer, Timestamp};

/// The four methods of the contract, in the order the TypeScript package lists them.
pub const LEASE_STORE_METHODS: [&str; 4] = ["getRun", "conditionalUpdate", "findExpiredLeases", "now"];

/// How many times a write is decided, by default, when the row keeps changing under it.
pub const DEFAULT_CAS_RETRIES: u32 = 5;

/// The most times a host may have a write decided (`casRetries`); more is a row that will
/// not settle, better reported than retried.
pub const MAX_CAS_RETRIES: u32 = 100;

/// The columns heart-fleet adds to the TypeScript package's `agent_runs` schema: a store
/// whose rows lack them has them neither compared nor written.
const OUR_RUN_COLUMNS: [RunCol; 1] = [RunCol::FencingEpoch];

/// One call of the user's store that the host makes and answers.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseStoreCall {
    /// `now()`: answer with the milliseconds of the Date.
    Now,
    /// `now()`, then `getRun(runId)`: answer with both, the milliseconds and the row (JSON)
    /// or `null`.
    GetRun {
        /// The run.
        run_id: String,
    },
    /// `conditionalUpdate(runId, patch, {eq})`, where `eq` holds each named column with its
    /// value in the row the host last read for this run (as read, not as the core took it):
    /// answer with the row it returned (JSON) or `null`.
    ConditionalUpdate {
        /// The run.
        run_id: String,
        /// The columns to write and their values.
        patch: Map<String, Value>,
        /// The columns the write is conditioned on.
        expect: Vec<&'static str>,
    },
    /// `conditionalUpdate(runId, patch, conditions)` with its conditions given whole
    /// (`{eq, in}`), no read before it: answer with the row it returned (JSON) or `null`.
    WriteDirect {
        /// The run.
        run_id: String,
        /// The columns to write and their values.
        patch: Map<String, Value>,
        /// `{"eq": {column: value}, "in": {column: [values]}}`.
        conditions: Map<String, Value>,
    },
    /// `findExpiredLeases(nowIso, limit)`: answer with the rows (a JSON array).
    FindExpiredLeases {
        /// The store's clock, ISO text.
        now_iso: String,
        /// At most this many rows.
        limit: u32,
    },
}

impl LeaseStoreCall {
    /// The call as compact text: a tag, then its values separated by
    /// [`COMPACT_SEPARATOR`](super::COMPACT_SEPARATOR). The tag is `T` for `now()`, `G` for
    /// `now()` then `getRun` (then the run id), `U` for `conditionalUpdate` (then the run id,
    /// the patch as JSON and the `eq` columns joined by commas), `W` for `conditionalUpdate`
    /// with its conditions given (then the run id, the patch and the conditions as JSON) and
    /// `F` for `findExpiredLeases` (then the clock's ISO text and the limit); upper case when
    /// the call is the first of a store request (a host bounds each request's calls
    /// together), lower case otherwise. No tag is `{` or one of the compact answers' (`A`,
    /// `N`, `R`, `V`).
    pub fn text(&self, first: bool) -> String {
        let sep = COMPACT_SEPARATOR;
        let mut out = String::new();
        let tag = match self {
            LeaseStoreCall::Now => 'T',
            LeaseStoreCall::GetRun { .. } => 'G',
            LeaseStoreCall::ConditionalUpdate { .. } => 'U',
            LeaseStoreCall::WriteDirect { .. } => 'W',
            LeaseStoreCall::FindExpiredLeases { .. } => 'F',
        };
        out.push(if first { tag } else { tag.to_ascii_lowercase() });
        match self {
            LeaseStoreCall::Now => {}
            LeaseStoreCall::GetRun { run_id } => {
                let _ = write!(out, "{sep}{run_id}");
            }
            LeaseStoreCall::ConditionalUpdate { run_id, patch, expect } => {
                let _ = write!(out, "{sep}{run_id}{sep}{}{sep}{}", super::to_text(patch), expect.join(","));
            }
            LeaseStoreCall::WriteDirect { run_id, patch, conditions } => {
                let _ = write!(out, "{sep}{run_id}{sep}{}{sep}{}", super::to_text(patch), super::to_text(conditions));
            }
            LeaseStoreCall::FindExpiredLeases { now_iso, limit } => {
                let _ = write!(out, "{sep}{now_iso}{sep}{limit}");
            }
        }
        out
    }
}

/// What the host does next for one store request.
#[derive(Debug)]
#[expect(clippy::large_enum_variant, reason = "returned and matched at once; a box would allocate per answer")]
pub(super) enum Progress {
    /// Make this call (its compact text) and answer it.
    Call(String),
    /// The request's answer: resume the operation with it.
    Answer(Result<StoreAnswer, HeartError>),
}

/// A row this operation read, and the clock it was read at.
struct Known {
    row: Option<Taken>,
    ms: i64,
}

/// What the request in progress waits for.
enum Wait {
    /// `now()` (a `now` request, a scan).
    Clock,
    /// `now()`, before a write stated whole.
    DirectClock(DirectWrite),
    /// `now()` and `getRun`.
    Read,
    /// `conditionalUpdate`, with the row before the write when the request wants it.
    Written(Option<Box<RunRow>>),
    /// `conditionalUpdate` of a write stated whole.
    WrittenDirect,
    /// `findExpiredLeases`.
    Expired,
}

struct Pending {
    request: StoreRequest,
    ms: i64,
    /// Decided on a row read earlier in the operation (it proves only hits).
    given: bool,
    /// Compare-and-set writes lost so far.
    lost: u32,
    wait: Wait,
}

/// The compare-and-set decision of one `update_run` on one row.
pub(super) struct Decision {
    before: Option<RunRow>,
    after: Option<RunRow>,
    /// The columns the decision read that the store's row has.
    expect: Vec<&'static str>,
    /// The columns the write changes.
    patch: Map<String, Value>,
}

/// The store requests of one operation over a store with the `LeaseStore` methods (make one
/// per operation: it remembers the rows the operation read). See the module docs.
pub(super) struct ReferenceStore {
    cas_retries: u32,
    known: HashMap<String, Known>,
    pending: Option<Pending>,
    epoch_column: EpochColumn,
}

/// Whether a store's rows have `fencing_epoch`, as its last row showed: learned from the rows
/// taken, shared by the operations of one fleet (a request driven alone, through
/// [`BridgeReferenceRequests`], starts from unknown). A write stated whole compares a token's
/// epoch above 0 (a row had the column when it was minted) unless the rows have shown they
/// lack it, and an epoch of 0 (a store without the column) only once they have shown they
/// have it; otherwise the write is decided on a read.
#[derive(Debug, Clone, Default)]
pub(super) struct EpochColumn(Arc<AtomicU8>);

impl EpochColumn {
    const UNKNOWN: u8 = 0;
    const PRESENT: u8 = 1;
    const ABSENT: u8 = 2;

    fn learn(&self, taken: &Taken) {
        let seen = if taken.present.contains(&RunCol::FencingEpoch.name()) { Self::PRESENT } else { Self::ABSENT };
        self.0.store(seen, Ordering::Relaxed);
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A conditional write the contract can state whole, before the clock is known: its `eq` and
/// `in` conditions and the expiries that must still be live at the clock.
///
/// A hit is the store's own equality on the values the core states, as for the TypeScript
/// package's writes; so only what every store compares alike goes this way: one condition per
/// column, values of the column's type (null only where the column takes it, never in an
/// `in` list), assignments the core itself would accept.
struct DirectWrite {
    conditions: Map<String, Value>,
    live: Vec<Timestamp>,
}

impl DirectWrite {
    /// `when` of an `update_run` as `{eq, in}` conditions on values the request names, or
    /// `None` when a condition needs the row (a takeover, a dead owner, a prefix, an
    /// arithmetic assignment, a column of ours the store may lack) or the request is not one
    /// the contract can state exactly: then it is decided on a read.
    fn of(request: &StoreRequest, epoch_column: u8) -> Option<DirectWrite> {
        let StoreRequest::UpdateRun { when, set, want_before: false, .. } = request else { return None };
        if set.is_empty() {
            return None;
        }
        let mut assigned = Vec::with_capacity(set.len());
        for (c, e) in set {
            let fits = match e {
                Expr::Val(v) => RunRow::assignable(*c, v).is_ok(),
                Expr::Now | Expr::NowPlus(_) => RunRow::assignable(*c, &Val::Time(Timestamp::EPOCH)).is_ok(),
                _ => false,
            };
            if !fits || OUR_RUN_COLUMNS.contains(c) || assigned.contains(c) {
                return None;
            }
            assigned.push(*c);
        }
        let all = match when {
            Cond::And(all) => all.as_slice(),
            one => std::slice::from_ref(one),
        };
        // A value the store compares as the core does: the column's type, null only where the
        // column takes it (the condition language also names the id and the key).
        let comparable = |c: RunCol, v: &Val| {
            RunRow::assignable(c, v).is_ok() || matches!((c, v), (RunCol::Id | RunCol::IdempotencyKey, Val::Text(_)))
        };
        let (mut eq, mut within, mut live) = (Map::new(), Map::new(), Vec::new());
        let mut named = Vec::with_capacity(all.len());
        for cond in all {
            let column = match cond {
                Cond::Eq(c, _) | Cond::In(c, _) => *c,
                _ => continue,
            };
            if named.contains(&column) {
                return None;
            }
            named.push(column);
        }
        for cond in all {
            match cond {
                Cond::Eq(RunCol::FencingEpoch, Val::Int(e)) => match (*e, epoch_column) {
                    (0, EpochColumn::ABSENT) => {}
                    (0, EpochColumn::PRESENT) | (1.., EpochColumn::UNKNOWN | EpochColumn::PRESENT) => {
                        eq.insert(RunCol::FencingEpoch.name().to_owned(), Value::from(*e));
                    }
                    _ => return None,
                },
                Cond::Eq(c, v) if comparable(*c, v) => {
                    eq.insert(c.name().to_owned(), plain(v.as_ref()));
                }
                Cond::In(c, vs) if vs.iter().all(|v| *v != Val::Null && comparable(*c, v)) => {
                    within.insert(c.name().to_owned(), vs.iter().map(|v| plain(v.as_ref())).collect());
                }
                // Live on the expiry the request names (an equality of the same conjunction).
                Cond::LiveAt(c) => match all.iter().find_map(|x| match x {
                    Cond::Eq(e, Val::Time(t)) if e == c => Some(*t),
                    _ => None,
                }) {
                    Some(t) => live.push(t),
                    None => return None,
                },
                _ => return None,
            }
        }
        let mut conditions = Map::new();
        conditions.insert("eq".into(), Value::Object(eq));
        if !within.is_empty() {
            conditions.insert("in".into(), Value::Object(within));
        }
        Some(DirectWrite { conditions, live })
    }

    /// The call at the store's clock `ms`: `None` when a named expiry is no longer live (the
    /// write would miss: decided on a read, which explains it) or an assignment is out of range.
    fn call(self, request: &StoreRequest, ms: i64) -> Option<LeaseStoreCall> {
        let StoreRequest::UpdateRun { run_id, set, .. } = request else { return None };
        let now = Timestamp(ms);
        if self.live.iter().any(|t| *t <= now) {
            return None;
        }
        let mut patch = Map::new();
        for c in RunCol::ALL {
            let Some((_, expr)) = set.iter().find(|(col, _)| *col == c) else { continue };
            let value = match expr {
                Expr::Val(v) => plain(v.as_ref()),
                Expr::Now => Value::String(now.to_iso()),
                Expr::NowPlus(d) => Value::String(now.plus_millis(*d)?.to_iso()),
                _ => return None,
            };
            patch.insert(c.name().to_owned(), value);
        }
        Some(LeaseStoreCall::WriteDirect { run_id: run_id.clone(), patch, conditions: self.conditions })
    }
}

fn protocol(message: String) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, format!("LeaseStore.{message}"))
}

/// What a returned value is, for a message (never the value itself: rows hold user data).
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "boolean".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.is_empty() => "an empty string".into(),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn unservable(what: &str) -> HeartError {
    HeartError::invalid(format!(
        "a store with only the LeaseStore methods ({}) cannot {what}: give HeartFleet a store with execute(request) \
         (MemoryLeaseStore, PgLeaseStore, SupabaseLeaseStore or your own)",
        LEASE_STORE_METHODS.join(", ")
    ))
}

/// What the contract cannot serve of `request`, or `None` when it can.
fn unservable_request(request: &StoreRequest) -> Option<HeartError> {
    let what = match request {
        StoreRequest::Now | StoreRequest::ReadRun { .. } | StoreRequest::UpdateRun { .. } => return None,
        StoreRequest::ScanRuns { when, .. } if is_expired_scan(when) => return None,
        StoreRequest::ScanRuns { when, .. } if mentions_dead_owner(when) => {
            "find the runs of dead instances (use LivenessReclaimer with a LivenessStore)"
        }
        StoreRequest::ScanRuns { .. } => "list runs",
        StoreRequest::EnsureRun(_) => "create runs (ensureResourceRun)",
        StoreRequest::ClaimIntent(_) => "store effect intents (DurableEffectLedger, sendOnce)",
        StoreRequest::UpdateIntent { .. } | StoreRequest::ScanIntents { .. } => {
            "store effect intents (DurableEffectLedger, sendOnce, reconcileOutbox)"
        }
        StoreRequest::ReadLog { .. } => "read the outbox dispatch log (DurableEffectLedger)",
        StoreRequest::UpsertInstance { .. } => {
            "store agent instances (registerInstance; use LivenessReclaimer with a LivenessStore)"
        }
        StoreRequest::UpdateInstances { .. } => {
            "store agent instances (heartbeatInstance, the liveness pass; use LivenessReclaimer with a LivenessStore)"
        }
        StoreRequest::ScanInstances { .. } => "store agent instances (use LivenessReclaimer with a LivenessStore)",
    };
    Some(unservable(what))
}

fn mentions_dead_owner(cond: &Cond<RunCol>) -> bool {
    match cond {
        Cond::OwnerInstanceDead { .. } => true,
        Cond::And(all) | Cond::Or(all) => all.iter().any(mentions_dead_owner),
        Cond::Not(c) => mentions_dead_owner(c),
        _ => false,
    }
}

/// A scan `findExpiredLeases` can serve: a top-level conjunct says every row it wants has an
/// expired lease (and no instance table is read).
fn is_expired_scan(when: &Cond<RunCol>) -> bool {
    let expired = |c: &Cond<RunCol>| matches!(c, Cond::ExpiredAt(RunCol::LeaseExpiresAt));
    let top = match when {
        Cond::And(all) => all.iter().any(expired),
        other => expired(other),
    };
    top && !mentions_dead_owner(when)
}

/// One value of a store's row: absent, null, or given.
#[derive(Default)]
enum Given<T> {
    #[default]
    Absent,
    Null,
    Is(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Given<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(d).map(|v| v.map_or(Given::Null, Given::Is))
    }
}

impl<T> Given<T> {
    /// Whether the store's row has the column (null included).
    fn present(&self) -> bool {
        !matches!(self, Given::Absent)
    }

    /// A NOT NULL column: the given value, else the schema's default (made only then).
    fn or(self, default: impl FnOnce() -> T) -> T {
        match self {
            Given::Is(v) => v,
            Given::Absent | Given::Null => default(),
        }
    }

    /// A nullable column (its default is null).
    fn or_null(self) -> Option<T> {
        match self {
            Given::Is(v) => Some(v),
            Given::Absent | Given::Null => None,
        }
    }
}

/// An `agent_runs` row as a user's store returns it: any column may be absent or null, and
/// columns the schema does not have are ignored.
#[derive(Default)]
struct AgentRunsRow {
    id: Given<String>,
    task_id: Given<String>,
    assignment_id: Given<String>,
    objective: Given<String>,
    required_capabilities: Given<Vec<String>>,
    status: Given<crate::RunStatus>,
    assigned_agent: Given<String>,
    lease_owner: Given<String>,
    lease_expires_at: Given<Timestamp>,
    retries: Given<i64>,
    budget: Given<Value>,
    approval_state: Given<String>,
    visibility: Given<String>,
    idempotency_key: Given<String>,
    created_by: Given<String>,
    created_at: Given<Timestamp>,
    updated_at: Given<Timestamp>,
    fencing_epoch: Given<i64>,
}

/// The columns of [`AgentRunsRow`], in its order.
const AGENT_RUNS_COLUMNS: [&str; 18] = [
    "id",
    "task_id",
    "assignment_id",
    "objective",
    "required_capabilities",
    "status",
    "assigned_agent",
    "lease_owner",
    "lease_expires_at",
    "retries",
    "budget",
    "approval_state",
    "visibility",
    "idempotency_key",
    "created_by",
    "created_at",
    "updated_at",
    "fencing_epoch",
];

/// A key of a row: the index of its column, `None` for a column the schema does not have.
struct ColumnKey(Option<usize>);

impl<'de> Deserialize<'de> for ColumnKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = ColumnKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a column name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ColumnKey, E> {
                Ok(ColumnKey(AGENT_RUNS_COLUMNS.iter().position(|c| *c == v)))
            }
        }
        d.deserialize_identifier(Name)
    }
}

// By hand, not derived: a map visitor alone (no sequence form) keeps the `.wasm` small.
impl<'de> Deserialize<'de> for AgentRunsRow {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Row;
        impl<'de> serde::de::Visitor<'de> for Row {
            type Value = AgentRunsRow;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an agent_runs row")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<AgentRunsRow, A::Error> {
                let mut row = AgentRunsRow::default();
                while let Some(ColumnKey(column)) = map.next_key()? {
                    match column {
                        Some(0) => row.id = map.next_value()?,
                        Some(1) => row.task_id = map.next_value()?,
                        Some(2) => row.assignment_id = map.next_value()?,
                        Some(3) => row.objective = map.next_value()?,
                        Some(4) => row.required_capabilities = map.next_value()?,
                        Some(5) => row.status = map.next_value()?,
                        Some(6) => row.assigned_agent = map.next_value()?,
                        Some(7) => row.lease_owner = map.next_value()?,
                        Some(8) => row.lease_expires_at = map.next_value()?,
                        Some(9) => row.retries = map.next_value()?,
                        Some(10) => row.budget = map.next_value()?,
                        Some(11) => row.approval_state = map.next_value()?,
                        Some(12) => row.visibility = map.next_value()?,
                        Some(13) => row.idempotency_key = map.next_value()?,
                        Some(14) => row.created_by = map.next_value()?,
                        Some(15) => row.created_at = map.next_value()?,
                        Some(16) => row.updated_at = map.next_value()?,
                        Some(17) => row.fencing_epoch = map.next_value()?,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(row)
            }
        }
        d.deserialize_map(Row)
    }
}

/// A row the core took from a store: the row, and which of the columns requests address
/// ([`RunCol::ALL`]) the store's own row has.
#[derive(Clone)]
struct Taken {
    run: RunRow,
    present: Vec<&'static str>,
}

impl AgentRunsRow {
    /// The row as the core takes it for `run_id`, at `at`: the schema's defaults where it has
    /// no value (or null in a NOT NULL column). `Err`: the id it names instead (JSON).
    fn take(self, run_id: &str, at: Timestamp) -> Result<Taken, String> {
        let AgentRunsRow {
            id,
            task_id,
            assignment_id,
            objective,
            required_capabilities,
            status,
            assigned_agent,
            lease_owner,
            lease_expires_at,
            retries,
            budget,
            approval_state,
            visibility,
            idempotency_key,
            created_by,
            created_at,
            updated_at,
            fencing_epoch,
        } = self;
        match &id {
            Given::Absent => {}
            Given::Is(id) if id == run_id => {}
            Given::Is(other) => return Err(format!("{other:?}")),
            Given::Null => return Err("null".into()),
        }
        let present = [
            (id.present(), RunCol::Id),
            (status.present(), RunCol::Status),
            (lease_owner.present(), RunCol::LeaseOwner),
            (idempotency_key.present(), RunCol::IdempotencyKey),
            (lease_expires_at.present(), RunCol::LeaseExpiresAt),
            (updated_at.present(), RunCol::UpdatedAt),
            (retries.present(), RunCol::Retries),
            (fencing_epoch.present(), RunCol::FencingEpoch),
        ]
        .into_iter()
        .filter(|(given, _)| *given)
        .map(|(_, col)| col.name())
        .collect();
        // `RunRow::seeded`'s defaults, each made only for a column the row leaves out (a test
        // checks a row of only its id against `seeded`).
        let run = RunRow {
            id: run_id.to_owned(),
            task_id: task_id.or_null(),
            assignment_id: assignment_id.or(|| run_id.to_owned()),
            objective: objective.or(|| crate::model::DEFAULT_OBJECTIVE.to_owned()),
            required_capabilities: required_capabilities.or(Vec::new),
            status: status.or(|| crate::RunStatus::Ready),
            assigned_agent: assigned_agent.or_null(),
            lease_owner: lease_owner.or_null(),
            lease_expires_at: lease_expires_at.or_null(),
            retries: retries.or(|| 0),
            budget: budget.or_null(),
            approval_state: approval_state.or(|| crate::model::DEFAULT_APPROVAL.to_owned()),
            visibility: visibility.or(|| crate::model::DEFAULT_VISIBILITY.to_owned()),
            idempotency_key: idempotency_key.or(|| RunRow::seeded_key(run_id)),
            created_by: created_by.or(|| crate::model::DEFAULT_CREATED_BY.to_owned()),
            created_at: created_at.or(|| at),
            updated_at: updated_at.or(|| at),
            fencing_epoch: fencing_epoch.or(|| 0),
        };
        Ok(Taken { run, present })
    }
}

/// What `method` returned for `run_id` (JSON text), as the core takes it: `None` for null.
fn take_row(method: &str, text: &str, run_id: &str, at: Timestamp) -> Result<Option<Taken>, HeartError> {
    match serde_json::from_str::<Option<AgentRunsRow>>(text) {
        Ok(None) => Ok(None),
        Ok(Some(row)) => row
            .take(run_id, at)
            .map(Some)
            .map_err(|id| protocol(format!("{method} returned run {id} for run {run_id:?}"))),
        Err(e) => Err(not_a_row(method, text, &e)),
    }
}

/// Why `text` is not a row: its shape when it is not an object, else serde's reason.
fn not_a_row(method: &str, text: &str, e: &serde_json::Error) -> HeartError {
    match serde_json::from_str::<Value>(text) {
        Err(_) => protocol(format!("{method} returned text that is not JSON: {e}")),
        Ok(Value::Object(_)) => protocol(format!("{method} returned a row that is not an agent_runs row: {e}")),
        Ok(other) => protocol(format!("{method} returned {}, not a row or null", describe(&other))),
    }
}

/// `request` answered by the core's evaluator on `runs` at `ms`.
pub(super) fn evaluate(request: StoreRequest, runs: Vec<RunRow>, ms: i64) -> Result<StoreAnswer, HeartError> {
    let mut store = MemoryStore::new(Timestamp(ms));
    for run in runs {
        store.insert_exact(run).map_err(|e| protocol(format!("the rows: {}", e.0)))?;
    }
    store.execute(request).map_err(|e| HeartError::new(ErrorCode::StoreProtocol, e.0))
}

/// A column's value as a row's JSON holds it.
fn plain(v: crate::request::ValRef<'_>) -> Value {
    use crate::request::ValRef;
    match v {
        ValRef::Null => Value::Null,
        ValRef::Text(t) => Value::String(t.to_owned()),
        ValRef::Int(n) => Value::from(n),
        ValRef::Time(t) => Value::String(t.to_iso()),
        ValRef::Json(j) => j.clone(),
    }
}

/// The compare-and-set decision of `request` (an `update_run`) on `run` at `ms`, for a store
/// whose rows have the columns `present`: `after` is `None` when the condition does not hold;
/// `expect`, the columns the decision read that the store's row has (the write is
/// conditioned on their values as read); `patch`, the columns the write changes
/// (heart-fleet's own columns only when the store's row has them; `updated_at` alone when
/// nothing changes, so that the write still proves the condition); `before`, the row as
/// read when the request wants it.
pub(super) fn decide(request: &StoreRequest, run: &RunRow, present: &[&str], ms: i64) -> Result<Decision, HeartError> {
    let StoreRequest::UpdateRun { when, set, want_before, .. } = request else {
        return Err(HeartError::new(ErrorCode::StoreProtocol, "a decision is made on an update_run request"));
    };
    let has = |c: RunCol| present.contains(&c.name());
    let mut reads = Vec::new();
    when.columns_into(&mut reads);
    set.iter().for_each(|(_, expr)| expr.columns_into(&mut reads));
    let expect = RunCol::ALL.into_iter().filter(|c| reads.contains(c) && has(*c)).map(RunCol::name).collect();
    let after = crate::memory::written_run(run, when, set, Timestamp(ms))
        .map_err(|e| HeartError::new(ErrorCode::StoreProtocol, e))?;
    let mut patch = Map::new();
    if let Some(now) = &after {
        for c in RunCol::ALL {
            let ours = OUR_RUN_COLUMNS.contains(&c);
            if run.get_ref(c) != now.get_ref(c) && (!ours || has(c)) {
                patch.insert(c.name().to_owned(), plain(now.get_ref(c)));
            }
        }
        if patch.is_empty() {
            patch.insert("updated_at".into(), Value::String(now.updated_at.to_iso()));
        }
    }
    let before = (after.is_some() && *want_before).then(|| run.clone());
    Ok(Decision { before, after, expect, patch })
}

/// The answer to the conditional write `request` at `ms`: the rows it wants, or only whether
/// it hit when it wants neither (verifyFence's), as the core's own stores answer.
fn written_answer(request: &StoreRequest, ms: i64, before: Option<RunRow>, after: Option<RunRow>) -> StoreAnswer {
    let reply = match request {
        StoreRequest::UpdateRun { want_before: false, want_after: false, .. } => {
            StoreReply::RunHit { hit: after.is_some() }
        }
        StoreRequest::UpdateRun { want_before: true, .. } => StoreReply::RunWrite { before, after },
        _ => StoreReply::RunWrite { before: None, after },
    };
    StoreAnswer { now: Timestamp(ms), reply }
}

impl ReferenceStore {
    /// The requests of one operation; a write is decided at most `cas_retries` times, taken
    /// within `1..=MAX_CAS_RETRIES` (the packages refuse anything else before it gets here).
    pub(super) fn new(cas_retries: u32) -> ReferenceStore {
        ReferenceStore::sharing(cas_retries, EpochColumn::default())
    }

    /// [`ReferenceStore::new`], learning the store's rows' shape with the other operations
    /// that share `epoch_column` (one fleet's).
    pub(super) fn sharing(cas_retries: u32, epoch_column: EpochColumn) -> ReferenceStore {
        let cas_retries = cas_retries.clamp(1, MAX_CAS_RETRIES);
        ReferenceStore { cas_retries, known: HashMap::new(), pending: None, epoch_column }
    }

    /// A row the store returned: it shows whether the store's rows have our column.
    fn taken(&self, row: Option<Taken>) -> Option<Taken> {
        if let Some(t) = &row {
            self.epoch_column.learn(t);
        }
        row
    }

    fn call(&mut self, pending: Pending, call: LeaseStoreCall, first: bool) -> Progress {
        self.pending = Some(pending);
        Progress::Call(call.text(first))
    }

    fn answer(&mut self, answer: Result<StoreAnswer, HeartError>) -> Progress {
        self.pending = None;
        Progress::Answer(answer)
    }

    /// Starts one store request of the operation.
    pub(super) fn start(&mut self, request: StoreRequest) -> Progress {
        if let Some(e) = unservable_request(&request) {
            return self.answer(Err(e));
        }
        let run_id = match &request {
            StoreRequest::ReadRun { .. } | StoreRequest::UpdateRun { .. } => Some(run_of(&request).to_owned()),
            _ => None,
        };
        let pending = Pending { request, ms: 0, given: false, lost: 0, wait: Wait::Clock };
        match run_id {
            Some(id) => match self.known.remove(&id) {
                Some(known) => self.on_row(Pending { ms: known.ms, given: true, ..pending }, known.row),
                None => match DirectWrite::of(&pending.request, self.epoch_column.get()) {
                    Some(direct) => {
                        self.call(Pending { wait: Wait::DirectClock(direct), ..pending }, LeaseStoreCall::Now, true)
                    }
                    None => {
                        self.call(Pending { wait: Wait::Read, ..pending }, LeaseStoreCall::GetRun { run_id: id }, true)
                    }
                },
            },
            None => self.call(pending, LeaseStoreCall::Now, true),
        }
    }

    /// The clock of a write stated whole came back: the write, or a read when the write
    /// would miss.
    fn on_direct_clock(&mut self, pending: Pending, direct: DirectWrite) -> Progress {
        match direct.call(&pending.request, pending.ms) {
            Some(call) => self.call(Pending { wait: Wait::WrittenDirect, ..pending }, call, false),
            None => self.read_again(pending),
        }
    }

    /// The request decided on a fresh clock and read.
    fn read_again(&mut self, pending: Pending) -> Progress {
        let call = LeaseStoreCall::GetRun { run_id: run_of(&pending.request).to_owned() };
        self.call(Pending { given: false, wait: Wait::Read, ..pending }, call, false)
    }

    /// The host's `now()` answered, in milliseconds.
    pub(super) fn clock(&mut self, ms: i64) -> Progress {
        let Some(pending) = self.pending.take().filter(|p| matches!(p.wait, Wait::Clock | Wait::DirectClock(_))) else {
            return self.answer(Err(out_of_turn("now()")));
        };
        let pending = match pending.wait {
            Wait::DirectClock(direct) => {
                return self.on_direct_clock(Pending { ms, wait: Wait::Clock, ..pending }, direct);
            }
            _ => Pending { ms, ..pending },
        };
        match &pending.request {
            StoreRequest::Now => self.answer(Ok(StoreAnswer { now: Timestamp(ms), reply: StoreReply::Now })),
            StoreRequest::ScanRuns { limit, .. } => {
                let call = LeaseStoreCall::FindExpiredLeases { now_iso: Timestamp(ms).to_iso(), limit: *limit };
                self.call(Pending { wait: Wait::Expired, ..pending }, call, false)
            }
            _ => self.answer(Err(out_of_turn("now()"))),
        }
    }

    /// The host's `now()` (milliseconds) and `getRun` (the row's JSON text or `null`) answered.
    pub(super) fn read(&mut self, ms: i64, text: &str) -> Progress {
        let Some(pending) = self.pending.take().filter(|p| matches!(p.wait, Wait::Read)) else {
            return self.answer(Err(out_of_turn("a read")));
        };
        let row = match take_row("getRun", text, run_of(&pending.request), Timestamp(ms)) {
            Ok(row) => self.taken(row),
            Err(e) => return self.answer(Err(e)),
        };
        self.on_row(Pending { ms, ..pending }, row)
    }

    /// The host's `conditionalUpdate` answered: the row's JSON text or `null`.
    pub(super) fn written(&mut self, text: &str) -> Progress {
        let Some(pending) = self.pending.take().filter(|p| matches!(p.wait, Wait::Written(_) | Wait::WrittenDirect))
        else {
            return self.answer(Err(out_of_turn("a written row")));
        };
        let row = match take_row("conditionalUpdate", text, run_of(&pending.request), Timestamp(pending.ms)) {
            Ok(row) => self.taken(row),
            Err(e) => return self.answer(Err(e)),
        };
        match (&pending.wait, row) {
            (Wait::WrittenDirect, Some(after)) => {
                self.answer(Ok(written_answer(&pending.request, pending.ms, None, Some(after.run))))
            }
            // Not written: decided on a read, which also tells a changed row from one the
            // store holds in another form.
            (Wait::WrittenDirect, None) => self.read_again(pending),
            (_, row) => self.on_written(pending, row),
        }
    }

    /// The host's `findExpiredLeases` answered: the rows' JSON text (an array).
    pub(super) fn rows(&mut self, text: &str) -> Progress {
        let Some(pending) = self.pending.take().filter(|p| matches!(p.wait, Wait::Expired)) else {
            return self.answer(Err(out_of_turn("rows")));
        };
        let list = match serde_json::from_str::<Vec<AgentRunsRow>>(text) {
            Ok(list) => list,
            Err(e) => return self.answer(Err(not_rows(text, &e))),
        };
        let at = Timestamp(pending.ms);
        let mut runs = Vec::with_capacity(list.len());
        for row in list {
            let Given::Is(id) = &row.id else {
                return self
                    .answer(Err(protocol("findExpiredLeases returned a row without an id among its rows".into())));
            };
            let id = id.clone();
            let taken = match row.take(&id, at) {
                Ok(taken) => {
                    self.epoch_column.learn(&taken);
                    taken
                }
                Err(other) => return self.answer(Err(protocol(format!("findExpiredLeases returned run {other}")))),
            };
            runs.push(taken.run.clone());
            // A scanned row is the read of the write that follows.
            self.known.insert(id, Known { row: Some(taken), ms: pending.ms });
        }
        let answer = evaluate(pending.request, runs, pending.ms);
        self.answer(answer)
    }

    /// The host's call failed: the request ends (the operation is resumed with the failure).
    pub(super) fn failed(&mut self) {
        self.pending = None;
    }

    /// A read of the request's run came back (`None`: no run).
    fn on_row(&mut self, pending: Pending, row: Option<Taken>) -> Progress {
        let StoreRequest::UpdateRun { run_id, .. } = &pending.request else {
            // A read: the row, as read.
            let reply = StoreReply::Run { run: row.map(|t| t.run) };
            return self.answer(Ok(StoreAnswer { now: Timestamp(pending.ms), reply }));
        };
        let run_id = run_id.clone();
        let decision = match &row {
            Some(t) => match decide(&pending.request, &t.run, &t.present, pending.ms) {
                Ok(d) => d.after.is_some().then_some(d),
                Err(e) => return self.answer(Err(e)),
            },
            None => None,
        };
        match decision {
            Some(Decision { before, patch, expect, .. }) => {
                let call = LeaseStoreCall::ConditionalUpdate { run_id, patch, expect };
                let first = pending.given;
                self.call(Pending { wait: Wait::Written(before.map(Box::new)), ..pending }, call, first)
            }
            // A row read earlier in the operation proves only hits: decide a miss on a fresh read.
            None if pending.given => {
                let call = LeaseStoreCall::GetRun { run_id };
                self.call(Pending { given: false, wait: Wait::Read, ..pending }, call, false)
            }
            None => {
                // The read that follows a miss (to explain it) is answered with this one.
                let ms = pending.ms;
                self.known.insert(run_id, Known { row, ms });
                self.answer(Ok(written_answer(&pending.request, ms, None, None)))
            }
        }
    }

    /// The conditional write came back (`None`: it missed).
    fn on_written(&mut self, pending: Pending, row: Option<Taken>) -> Progress {
        let Pending { request, ms, lost, wait: Wait::Written(before), .. } = pending else {
            return self.answer(Err(out_of_turn("a written row")));
        };
        let StoreRequest::UpdateRun { run_id, .. } = &request else {
            return self.answer(Err(out_of_turn("a written row")));
        };
        let Some(after) = row else {
            // The row changed since the read: decide again on a fresh one.
            let lost = lost + 1;
            if lost >= self.cas_retries {
                let message =
                    format!("LeaseStore: run {run_id} kept changing (compare-and-set lost {} times)", self.cas_retries);
                return self.answer(Err(HeartError::new(ErrorCode::StoreUnavailable, message)));
            }
            let call = LeaseStoreCall::GetRun { run_id: run_id.clone() };
            let pending = Pending { request, ms, given: false, lost, wait: Wait::Read };
            return self.call(pending, call, false);
        };
        self.answer(Ok(written_answer(&request, ms, before.map(|b| *b), Some(after.run))))
    }
}

/// Why `text` is not a list of rows: its shape when it is not an array, else serde's reason.
fn not_rows(text: &str, e: &serde_json::Error) -> HeartError {
    match serde_json::from_str::<Value>(text) {
        Err(_) => protocol(format!("findExpiredLeases returned text that is not JSON: {e}")),
        Ok(Value::Array(rows)) => match rows.iter().find(|r| !r.is_object()) {
            Some(row) => protocol(format!("findExpiredLeases returned {} among its rows", describe(row))),
            None => protocol(format!("findExpiredLeases returned a row that is not an agent_runs row: {e}")),
        },
        Ok(other) => protocol(format!("findExpiredLeases returned {}, not an array of rows", describe(&other))),
    }
}

/// One operation's store requests over a store with the `LeaseStore` methods, one request at
/// a time as JSON text: for a host that routes an operation's requests itself (some to this
/// store, some to another) and so drives them apart from the operation
/// ([`BridgeFleet::begin_on_reference`](super::BridgeFleet::begin_on_reference) is the
/// direct path). Each method returns the next call's compact text ([`LeaseStoreCall::text`])
/// or, once the request is decided, its StoreAnswer (JSON text, starting with `{`); a failure
/// is the error, with its code.
pub struct BridgeReferenceRequests {
    store: ReferenceStore,
}

fn text_of(progress: Progress) -> BridgeResult<String> {
    match progress {
        Progress::Call(call) => Ok(call),
        Progress::Answer(answer) => answer.map(|a| super::to_text(&a)),
    }
}

impl BridgeReferenceRequests {
    /// The requests of one operation; a write is decided at most `cas_retries` times, taken
    /// within `1..=MAX_CAS_RETRIES`.
    pub fn new(cas_retries: u32) -> BridgeReferenceRequests {
        BridgeReferenceRequests { store: ReferenceStore::new(cas_retries) }
    }

    /// Starts one request (StoreRequest JSON text).
    pub fn start(&mut self, request: &str) -> BridgeResult<String> {
        let request = serde_json::from_str::<StoreRequest>(request)
            .map_err(|e| HeartError::new(ErrorCode::StoreProtocol, format!("not a StoreRequest: {e}")))?;
        text_of(self.store.start(request))
    }

    /// `now()` answered, in milliseconds.
    pub fn clock(&mut self, ms: i64) -> BridgeResult<String> {
        text_of(self.store.clock(ms))
    }

    /// `now()` (milliseconds) and `getRun` (the row as JSON, or `null`) answered.
    pub fn read(&mut self, ms: i64, row: &str) -> BridgeResult<String> {
        text_of(self.store.read(ms, row))
    }

    /// `conditionalUpdate` answered: the row (JSON) or `null`.
    pub fn written(&mut self, row: &str) -> BridgeResult<String> {
        text_of(self.store.written(row))
    }

    /// `findExpiredLeases` answered: the rows (a JSON array).
    pub fn rows(&mut self, rows: &str) -> BridgeResult<String> {
        text_of(self.store.rows(rows))
    }

    /// A call failed: the request ends.
    pub fn failed(&mut self) {
        self.store.failed();
    }
}

/// The run of a `read_run` or `update_run` (empty for other requests, which read no row).
fn run_of(request: &StoreRequest) -> &str {
    match request {
        StoreRequest::ReadRun { run_id } | StoreRequest::UpdateRun { run_id, .. } => run_id,
        _ => "",
    }
}

fn out_of_turn(what: &str) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, format!("LeaseStore: {what} answered when no call asked for it"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::{Expr, Val};

    const T0: i64 = 1_785_369_600_000;

    fn take() -> StoreRequest {
        StoreRequest::UpdateRun {
            run_id: "r".into(),
            when: Cond::Eq(RunCol::Status, Val::Text("ready".into())),
            set: vec![
                (RunCol::Status, Expr::Val(Val::Text("leased".into()))),
                (RunCol::FencingEpoch, Expr::Add(RunCol::FencingEpoch, 1)),
            ],
            want_before: false,
            want_after: true,
        }
    }

    fn row() -> Value {
        serde_json::to_value(RunRow::ready("r", "k", Timestamp(T0))).unwrap()
    }

    fn names<'a>(cols: &[&'a str]) -> Vec<&'a str> {
        cols.to_vec()
    }

    #[test]
    fn cas_retries_are_taken_within_one_and_the_contracts_bound() {
        assert_eq!(ReferenceStore::new(0).cas_retries, 1);
        assert_eq!(ReferenceStore::new(7).cas_retries, 7);
        assert_eq!(ReferenceStore::new(MAX_CAS_RETRIES).cas_retries, MAX_CAS_RETRIES);
        assert_eq!(ReferenceStore::new(u32::MAX).cas_retries, MAX_CAS_RETRIES);
        let contract: Value = serde_json::from_str(&super::super::contract_json()).unwrap();
        assert_eq!(contract["maxCasRetries"], json!(MAX_CAS_RETRIES));
        assert_eq!(contract["defaults"]["casRetries"], json!(DEFAULT_CAS_RETRIES));
    }

    fn call(p: Progress) -> String {
        match p {
            Progress::Call(text) => text,
            Progress::Answer(a) => panic!("expected a call, got {a:?}"),
        }
    }

    fn answer(p: Progress) -> Result<StoreAnswer, HeartError> {
        match p {
            Progress::Answer(a) => a,
            Progress::Call(text) => panic!("expected an answer, got the call {text:?}"),
        }
    }

    #[test]
    fn a_hit_writes_what_changed_conditioned_on_what_was_read() {
        let run = RunRow::ready("r", "k", Timestamp(T0));
        let d = decide(&take(), &run, &names(&["id", "status", "fencing_epoch", "updated_at"]), T0 + 5).unwrap();
        assert_eq!(d.expect, ["status", "fencing_epoch"]);
        assert_eq!(Value::Object(d.patch), json!({"status": "leased", "fencing_epoch": 1}));
        assert!(d.before.is_none(), "the request does not want the row before");
        // A row without our columns has them neither compared nor written.
        let d = decide(&take(), &run, &names(&["id", "status"]), T0).unwrap();
        assert_eq!(d.expect, ["status"]);
        assert_eq!(Value::Object(d.patch), json!({"status": "leased"}));
    }

    #[test]
    fn a_write_that_changes_nothing_still_writes_updated_at_and_a_miss_writes_nothing() {
        let touch = StoreRequest::UpdateRun {
            run_id: "r".into(),
            when: Cond::Eq(RunCol::Status, Val::Text("ready".into())),
            set: vec![(RunCol::UpdatedAt, Expr::Now)],
            want_before: false,
            want_after: true,
        };
        let run = RunRow::ready("r", "k", Timestamp(T0));
        let d = decide(&touch, &run, &names(&["status"]), T0).unwrap();
        assert_eq!(Value::Object(d.patch), json!({"updated_at": "2026-07-30T00:00:00.000Z"}));
        let no = StoreRequest::UpdateRun {
            run_id: "r".into(),
            when: Cond::Eq(RunCol::Status, Val::Text("leased".into())),
            set: vec![],
            want_before: false,
            want_after: true,
        };
        let d = decide(&no, &run, &names(&["status"]), T0).unwrap();
        assert!(d.after.is_none() && d.patch.is_empty());
    }

    #[test]
    fn a_decision_writes_what_the_memory_store_writes() {
        let token = crate::FencingToken {
            run_id: "r".into(),
            owner: "w".into(),
            lease_expires_at: Timestamp(T0 + 60_000),
            epoch: Some(1),
        };
        let ready = RunRow::ready("r", "k", Timestamp(T0));
        let mut held = ready.clone();
        held.status = crate::RunStatus::Leased;
        held.lease_owner = Some("w".into());
        held.lease_expires_at = Some(Timestamp(T0 + 60_000));
        held.fencing_epoch = 1;
        let verify = crate::ops::lease::verify_request(&token);
        let all: Vec<&str> = RunCol::ALL.iter().map(|c| c.name()).collect();
        for (request, row, at) in [
            (take(), &ready, T0 + 1),
            (verify.clone(), &held, T0 + 1),
            (verify.clone(), &held, T0 + 60_000),
            (verify, &ready, T0 + 1),
        ] {
            let d = decide(&request, row, &all, at).unwrap();
            let mut store = MemoryStore::new(Timestamp(at));
            store.insert_exact(row.clone()).unwrap();
            match store.execute(request.clone()).unwrap().reply {
                StoreReply::RunWrite { after, .. } => assert_eq!(d.after, after, "{request:?} at {at}"),
                // verifyFence's write wants only whether it hit.
                StoreReply::RunHit { hit } => assert_eq!(d.after.is_some(), hit, "{request:?} at {at}"),
                other => panic!("a run write: {other:?}"),
            }
        }
    }

    #[test]
    fn a_write_is_a_read_with_the_clock_then_a_compare_and_set_on_the_columns_read() {
        let mut s = ReferenceStore::new(3);
        assert_eq!(call(s.start(take())), "G\u{1f}r");
        let cas = call(s.read(T0, &row().to_string()));
        assert_eq!(cas, "u\u{1f}r\u{1f}{\"fencing_epoch\":1,\"status\":\"leased\"}\u{1f}status,fencing_epoch");
        let mut written = row();
        written["status"] = json!("leased");
        let a = answer(s.written(&written.to_string())).unwrap();
        let StoreReply::RunWrite { before: None, after: Some(after) } = a.reply else { panic!("{a:?}") };
        assert_eq!(after.status, crate::RunStatus::Leased);
    }

    fn token(epoch: Option<i64>) -> crate::FencingToken {
        crate::FencingToken { run_id: "r".into(), owner: "w".into(), lease_expires_at: Timestamp(T0 + 60_000), epoch }
    }

    /// The run `token` holds, as a store with `fencing_epoch` returns it.
    fn held_by(token: &crate::FencingToken) -> Value {
        let mut held = row();
        held["status"] = json!("leased");
        held["lease_owner"] = json!(token.owner);
        held["lease_expires_at"] = json!(token.lease_expires_at.to_iso());
        held["fencing_epoch"] = json!(token.epoch.unwrap_or(0));
        held
    }

    #[test]
    fn a_write_the_contract_can_state_is_one_conditional_update_after_the_clock_as_the_reference_writes_it() {
        let t = token(Some(3));
        let conditions = r#"{"eq":{"fencing_epoch":3,"lease_expires_at":"2026-07-30T00:01:00.000Z","lease_owner":"w"},"in":{"status":["leased","running"]}}"#;
        // verifyFence: updated_at only.
        let mut s = ReferenceStore::new(3);
        assert_eq!(call(s.start(crate::ops::lease::verify_request(&t))), "T");
        let write = call(s.clock(T0 + 5));
        assert_eq!(write, format!("w\u{1f}r\u{1f}{{\"updated_at\":\"2026-07-30T00:00:00.005Z\"}}\u{1f}{conditions}"));
        let mut after = held_by(&t);
        after["updated_at"] = json!("2026-07-30T00:00:00.005Z");
        // Only whether it hit: verifyFence wants neither row, as the core's own stores answer.
        let a = answer(s.written(&after.to_string())).unwrap();
        assert_eq!(a.now, Timestamp(T0 + 5));
        assert_eq!(a.reply, StoreReply::RunHit { hit: true });
        // renew: the new expiry from the store's clock, and the row written.
        let mut s = ReferenceStore::new(3);
        assert_eq!(call(s.start(crate::ops::lease::renew_request(&t, 90_000))), "T");
        let write = call(s.clock(T0 + 5));
        let patch = r#"{"lease_expires_at":"2026-07-30T00:01:30.005Z","updated_at":"2026-07-30T00:00:00.005Z"}"#;
        assert_eq!(write, format!("w\u{1f}r\u{1f}{patch}\u{1f}{conditions}"));
        after["lease_expires_at"] = json!("2026-07-30T00:01:30.005Z");
        let a = answer(s.written(&after.to_string())).unwrap();
        let StoreReply::RunWrite { before: None, after: Some(run) } = a.reply else { panic!("{a:?}") };
        assert_eq!(run.lease_expires_at, Some(Timestamp(T0 + 90_005)));
        // release to a final status; to ready it names the run's key, which needs the row.
        let mut s = ReferenceStore::new(3);
        call(s.start(crate::ops::lease::release_request(&t, crate::ops::ReleaseTo::Completed)));
        let patch = r#"{"lease_expires_at":null,"lease_owner":null,"status":"completed","updated_at":"2026-07-30T00:00:00.005Z"}"#;
        assert_eq!(call(s.clock(T0 + 5)), format!("w\u{1f}r\u{1f}{patch}\u{1f}{conditions}"));
        let mut s = ReferenceStore::new(3);
        assert_eq!(call(s.start(crate::ops::lease::release_request(&t, crate::ops::ReleaseTo::Ready))), "G\u{1f}r");
        // acquire reads first, as the reference does.
        assert_eq!(call(ReferenceStore::new(3).start(take())), "G\u{1f}r");
    }

    #[test]
    fn a_write_stated_whole_that_misses_is_decided_on_a_read_and_an_expired_token_is_read_at_once() {
        let t = token(Some(3));
        // A miss: the clock and the row again, then the core's decision on it.
        let mut s = ReferenceStore::new(3);
        call(s.start(crate::ops::lease::verify_request(&t)));
        call(s.clock(T0 + 5));
        assert_eq!(call(s.written("null")), "g\u{1f}r");
        // The store holds the expiry in another text form: the decision on the row is a hit,
        // written as a compare-and-set on the values as read.
        let mut other_form = held_by(&t);
        other_form["lease_expires_at"] = json!("2026-07-30T00:01:00+00:00");
        let cas = call(s.read(T0 + 6, &other_form.to_string()));
        assert!(cas.starts_with("u\u{1f}r\u{1f}{\"updated_at\":\"2026-07-30T00:00:00.006Z\"}\u{1f}"), "{cas}");
        assert_eq!(answer(s.written(&other_form.to_string())).unwrap().reply, StoreReply::RunHit { hit: true });
        // The direct miss is not a lost compare-and-set: with two decisions allowed, a lost
        // compare-and-set after it is decided again (a second loss would be reported).
        let mut s = ReferenceStore::new(2);
        call(s.start(crate::ops::lease::verify_request(&t)));
        call(s.clock(T0 + 5));
        call(s.written("null"));
        assert!(call(s.read(T0 + 6, &other_form.to_string())).starts_with("u\u{1f}"));
        assert_eq!(call(s.written("null")), "g\u{1f}r", "one loss, decided again");
        // A changed row: the read's decision is the miss.
        let mut s = ReferenceStore::new(1);
        call(s.start(crate::ops::lease::verify_request(&t)));
        call(s.clock(T0 + 5));
        call(s.written("null"));
        let mut taken_over = held_by(&t);
        taken_over["lease_owner"] = json!("other");
        let a = answer(s.read(T0 + 6, &taken_over.to_string())).unwrap();
        assert_eq!(a.reply, StoreReply::RunHit { hit: false });
        // The token's own expiry has passed at the clock: no write, the row read instead.
        let mut s = ReferenceStore::new(3);
        call(s.start(crate::ops::lease::verify_request(&t)));
        assert_eq!(call(s.clock(T0 + 60_000)), "g\u{1f}r");
    }

    #[test]
    fn only_a_request_every_store_compares_as_the_core_does_is_written_whole() {
        let t = token(Some(3));
        let verify = crate::ops::lease::verify_request(&t);
        let StoreRequest::UpdateRun { when: Cond::And(held), set, .. } = &verify else { panic!("{verify:?}") };
        let with = |extra: Vec<Cond<RunCol>>, set: Vec<(RunCol, Expr<RunCol>)>| StoreRequest::UpdateRun {
            run_id: "r".into(),
            when: Cond::And(held.iter().cloned().chain(extra).collect()),
            set,
            want_before: false,
            want_after: true,
        };
        let status = |s: &str| Val::Text(s.into());
        for (what, request) in [
            ("a column named twice", with(vec![Cond::Eq(RunCol::LeaseOwner, Val::Text("x".into()))], set.clone())),
            ("a value of another type", with(vec![Cond::Eq(RunCol::Retries, Val::Text("0".into()))], set.clone())),
            ("null in a NOT NULL column", with(vec![Cond::Eq(RunCol::Retries, Val::Null)], set.clone())),
            ("null among the values of in", with(vec![Cond::In(RunCol::IdempotencyKey, vec![Val::Null])], set.clone())),
            ("an unknown status", with(vec![], vec![(RunCol::Status, Expr::Val(status("paused")))])),
            ("the immutable key assigned", with(vec![], vec![(RunCol::IdempotencyKey, Expr::Val(status("k")))])),
            (
                "a column assigned twice",
                with(vec![], vec![(RunCol::UpdatedAt, Expr::Now), (RunCol::UpdatedAt, Expr::Now)]),
            ),
            ("nothing assigned", with(vec![], vec![])),
        ] {
            assert_eq!(call(ReferenceStore::new(3).start(request)), "G\u{1f}r", "{what}: decided on a read");
        }
        // The same request without the oddity is written whole.
        assert_eq!(call(ReferenceStore::new(3).start(with(vec![], set.clone()))), "T");
        // A token's epoch above 0 on a store whose rows lack the column is decided on a read
        // (the core takes the missing column as 0: a miss).
        let absent = EpochColumn::default();
        absent.0.store(EpochColumn::ABSENT, Ordering::Relaxed);
        assert_eq!(call(ReferenceStore::sharing(3, absent).start(verify)), "G\u{1f}r");
    }

    #[test]
    fn a_token_of_epoch_zero_is_written_whole_once_a_row_showed_the_store_has_no_fencing_epoch() {
        let t = token(Some(0));
        let shared = EpochColumn::default();
        let mut s = ReferenceStore::sharing(3, shared.clone());
        assert_eq!(call(s.start(crate::ops::lease::verify_request(&t))), "G\u{1f}r", "unknown: decided on a read");
        let mut without = held_by(&t);
        without.as_object_mut().unwrap().remove("fencing_epoch");
        call(s.read(T0, &without.to_string()));
        // The next operation of the same fleet writes at once, with no epoch compared.
        let mut s = ReferenceStore::sharing(3, shared.clone());
        assert_eq!(call(s.start(crate::ops::lease::verify_request(&t))), "T");
        let write = call(s.clock(T0));
        assert!(write.ends_with(r#"{"eq":{"lease_expires_at":"2026-07-30T00:01:00.000Z","lease_owner":"w"},"in":{"status":["leased","running"]}}"#), "{write}");
        // A store whose rows have it compares it, zero included.
        let mut s = ReferenceStore::sharing(3, shared.clone());
        call(s.start(StoreRequest::ReadRun { run_id: "r".into() }));
        answer(s.read(T0, &held_by(&t).to_string())).unwrap();
        let mut s = ReferenceStore::sharing(3, shared);
        call(s.start(crate::ops::lease::verify_request(&t)));
        assert!(call(s.clock(T0)).contains(r#""fencing_epoch":0"#));
        // A token without an epoch compares none, whatever the store.
        let mut s = ReferenceStore::new(3);
        assert_eq!(call(s.start(crate::ops::lease::verify_request(&token(None)))), "T");
    }

    #[test]
    fn a_lost_compare_and_set_is_decided_again_then_reported_never_a_silent_miss() {
        let mut s = ReferenceStore::new(2);
        call(s.start(take()));
        call(s.read(T0, &row().to_string()));
        assert_eq!(call(s.written("null")), "g\u{1f}r", "a fresh clock and read");
        call(s.read(T0, &row().to_string()));
        let e = answer(s.written("null")).unwrap_err();
        assert_eq!(e.code, ErrorCode::StoreUnavailable);
        assert!(e.message.contains("kept changing (compare-and-set lost 2 times)"), "{}", e.message);
    }

    #[test]
    fn the_row_of_a_miss_answers_the_read_that_explains_it_without_another_call() {
        let mut s = ReferenceStore::new(3);
        let mut held = row();
        held["status"] = json!("leased");
        call(s.start(take()));
        let a = answer(s.read(T0, &held.to_string())).unwrap();
        assert!(matches!(a.reply, StoreReply::RunWrite { after: None, .. }));
        let read = answer(s.start(StoreRequest::ReadRun { run_id: "r".into() })).unwrap();
        let StoreReply::Run { run: Some(run) } = read.reply else { panic!("{read:?}") };
        assert_eq!(run.status, crate::RunStatus::Leased);
        // Once: the next read calls the store again.
        assert_eq!(call(s.start(StoreRequest::ReadRun { run_id: "r".into() })), "G\u{1f}r");
    }

    #[test]
    fn a_wrong_shaped_row_is_store_protocol_and_defaults_fill_what_a_row_lacks() {
        for (text, says) in [
            ("\"ok\"", "getRun returned a string, not a row or null"),
            ("{\"id\":\"other\"}", "returned run \"other\" for run \"r\""),
            ("{\"retries\":\"many\"}", "not an agent_runs row"),
            ("not json", "not JSON"),
        ] {
            let mut s = ReferenceStore::new(3);
            call(s.start(StoreRequest::ReadRun { run_id: "r".into() }));
            let e = answer(s.read(T0, text)).unwrap_err();
            assert_eq!(e.code, ErrorCode::StoreProtocol, "{text}");
            assert!(e.message.contains(says), "{text}: {}", e.message);
        }
        let mut s = ReferenceStore::new(3);
        call(s.start(StoreRequest::ReadRun { run_id: "r".into() }));
        let a = answer(s.read(T0, r#"{"status":"ready","lease_owner":null,"retries":null}"#)).unwrap();
        let StoreReply::Run { run: Some(run) } = a.reply else { panic!("{a:?}") };
        assert_eq!((run.id.as_str(), run.retries, run.idempotency_key.as_str()), ("r", 0, "key:r"));
        // A row with only its id is taken as the seeded run hosts start from.
        let mut s = ReferenceStore::new(3);
        call(s.start(StoreRequest::ReadRun { run_id: "r".into() }));
        let a = answer(s.read(T0, r#"{"id":"r"}"#)).unwrap();
        let StoreReply::Run { run: Some(run) } = a.reply else { panic!("{a:?}") };
        let seeded = crate::bridge::seeded_row_json("agent_runs", "r", "2026-07-30T00:00:00.000Z").unwrap();
        assert_eq!(serde_json::to_value(run).unwrap(), serde_json::from_str::<Value>(&seeded).unwrap());
    }

    #[test]
    fn a_seeded_row_needs_a_known_table_and_an_instant() {
        let at = "2026-07-30T00:00:00.000Z";
        let instance: Value =
            serde_json::from_str(&crate::bridge::seeded_row_json("agent_instances", "i", at).unwrap()).unwrap();
        assert_eq!(
            instance,
            json!({"instance_id": "i", "hostname": null, "pid": null, "status": "alive",
                   "started_at": at, "last_heartbeat": at, "metadata": null})
        );
        for (table, at, says) in [
            ("agent_runs", "yesterday", "seededRow"),
            ("effect_intents", at, "no defaults for table \"effect_intents\""),
        ] {
            let e = crate::bridge::seeded_row_json(table, "r", at).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput);
            assert!(e.message.contains(says), "{}", e.message);
        }
    }

    #[test]
    fn requests_the_contract_cannot_serve_are_invalid_input_before_any_call() {
        let mut s = ReferenceStore::new(3);
        let list =
            StoreRequest::ScanRuns { when: Cond::True, order: crate::request::RunOrder::UpdatedAtDesc, limit: 5 };
        let e = answer(s.start(list)).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput);
        assert!(e.message.contains("cannot list runs") && e.message.contains("execute(request)"), "{}", e.message);
    }

    #[test]
    fn the_sweep_scans_with_find_expired_leases_and_its_rows_are_the_reads_of_its_writes() {
        let mut s = ReferenceStore::new(3);
        let when = Cond::And(vec![
            Cond::In(RunCol::Status, vec![Val::Text("leased".into())]),
            Cond::ExpiredAt(RunCol::LeaseExpiresAt),
        ]);
        let scan = StoreRequest::ScanRuns { when, order: crate::request::RunOrder::UpdatedAtDesc, limit: 7 };
        assert_eq!(call(s.start(scan)), "T");
        assert_eq!(call(s.clock(T0)), "f\u{1f}2026-07-30T00:00:00.000Z\u{1f}7");
        let mut held = row();
        held["status"] = json!("leased");
        let a = answer(s.rows(&json!([held]).to_string())).unwrap();
        assert!(matches!(a.reply, StoreReply::Runs { ref runs } if runs.len() == 1), "{a:?}");
        let reclaim = StoreRequest::UpdateRun {
            run_id: "r".into(),
            when: Cond::Eq(RunCol::Status, Val::Text("leased".into())),
            set: vec![(RunCol::Status, Expr::Val(Val::Text("ready".into())))],
            want_before: true,
            want_after: true,
        };
        // No clock, no read: the write is the first call of its request.
        assert!(call(s.start(reclaim)).starts_with("U\u{1f}r\u{1f}"));
        let e = answer(s.rows("[{\"status\":\"leased\"}]")).unwrap_err();
        assert_eq!(e.code, ErrorCode::StoreProtocol, "an answer out of turn");
    }
}

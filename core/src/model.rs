//! The data model shared with the TypeScript package: run rows and their 12 statuses,
//! fencing tokens, effect intents, the dispatch log and fleet instances. Field names
//! and JSON shapes are the reference's (snake_case rows, camelCase tokens).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::HeartError;
use crate::time::Timestamp;

/// The 12 run statuses, in the reference's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Created, not yet ready to run.
    Created,
    /// Ready to be acquired.
    Ready,
    /// Held by a lease.
    Leased,
    /// Held by a lease, the holder reported progress (other writers set this).
    Running,
    /// Waiting for a person.
    WaitingApproval,
    /// Blocked on something else.
    Blocked,
    /// Being verified.
    Verifying,
    /// Being recovered.
    Recovering,
    /// Finished successfully.
    Completed,
    /// Finished with a failure.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Too many holders died; an operator must requeue it.
    Quarantined,
}

impl RunStatus {
    /// All statuses in the reference's order.
    pub const ALL: [RunStatus; 12] = [
        RunStatus::Created,
        RunStatus::Ready,
        RunStatus::Leased,
        RunStatus::Running,
        RunStatus::WaitingApproval,
        RunStatus::Blocked,
        RunStatus::Verifying,
        RunStatus::Recovering,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Quarantined,
    ];
    /// The statuses in which a lease is held (`leased`, `running`).
    pub const HELD: [RunStatus; 2] = [RunStatus::Leased, RunStatus::Running];

    /// The text stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Created => "created",
            RunStatus::Ready => "ready",
            RunStatus::Leased => "leased",
            RunStatus::Running => "running",
            RunStatus::WaitingApproval => "waiting_approval",
            RunStatus::Blocked => "blocked",
            RunStatus::Verifying => "verifying",
            RunStatus::Recovering => "recovering",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Quarantined => "quarantined",
        }
    }

    /// Parses a status; an unknown one is `invalid-input`.
    pub fn parse(text: &str) -> Result<RunStatus, HeartError> {
        RunStatus::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| HeartError::invalid(format!("unknown run status {text:?}")))
    }

    /// `leased` or `running`.
    pub fn is_held(self) -> bool {
        matches!(self, RunStatus::Leased | RunStatus::Running)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A row of `agent_runs`, with the reference's fields in its order plus `fencing_epoch`.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// Primary key (a UUID in PostgreSQL).
    pub id: String,
    /// Soft link to a task.
    #[serde(default)]
    pub task_id: Option<String>,
    /// A UUID in the real schema.
    pub assignment_id: String,
    /// What the run is for.
    pub objective: String,
    /// Capabilities a worker needs.
    #[serde(default)]
    pub required_capabilities: Vec<String>,
    /// Lifecycle status.
    pub status: RunStatus,
    /// Assigned agent, if any.
    #[serde(default)]
    pub assigned_agent: Option<String>,
    /// The lease holder.
    #[serde(default)]
    pub lease_owner: Option<String>,
    /// When the lease expires (the token's expiry).
    #[serde(default)]
    pub lease_expires_at: Option<Timestamp>,
    /// How many holders died (counted by every recovery path).
    #[serde(default)]
    pub retries: i64,
    /// Free-form budget.
    #[serde(default)]
    pub budget: Option<Value>,
    /// `auto`, `pending`, `approved` or `rejected`.
    #[serde(default = "default_approval")]
    pub approval_state: String,
    /// `private`, `team` or `public`.
    #[serde(default = "default_visibility")]
    pub visibility: String,
    /// Unique business key (`heart:resource:…` for resource runs).
    pub idempotency_key: String,
    /// Who created the row.
    pub created_by: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last write time.
    pub updated_at: Timestamp,
    /// Monotonic fencing epoch, raised by every successful acquire (not in the reference).
    #[serde(default)]
    pub fencing_epoch: i64,
}

// By hand for `clone_from`: field by field, so a copy kept for reuse (the memory store's row
// before a write) takes a new row's values into the buffers it already has.
impl Clone for RunRow {
    fn clone(&self) -> RunRow {
        RunRow {
            id: self.id.clone(),
            task_id: self.task_id.clone(),
            assignment_id: self.assignment_id.clone(),
            objective: self.objective.clone(),
            required_capabilities: self.required_capabilities.clone(),
            status: self.status,
            assigned_agent: self.assigned_agent.clone(),
            lease_owner: self.lease_owner.clone(),
            lease_expires_at: self.lease_expires_at,
            retries: self.retries,
            budget: self.budget.clone(),
            approval_state: self.approval_state.clone(),
            visibility: self.visibility.clone(),
            idempotency_key: self.idempotency_key.clone(),
            created_by: self.created_by.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            fencing_epoch: self.fencing_epoch,
        }
    }

    fn clone_from(&mut self, source: &RunRow) {
        // Destructured so that a new field cannot be forgotten here.
        let RunRow {
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
        } = source;
        self.id.clone_from(id);
        self.task_id.clone_from(task_id);
        self.assignment_id.clone_from(assignment_id);
        self.objective.clone_from(objective);
        self.required_capabilities.clone_from(required_capabilities);
        self.status = *status;
        self.assigned_agent.clone_from(assigned_agent);
        self.lease_owner.clone_from(lease_owner);
        self.lease_expires_at = *lease_expires_at;
        self.retries = *retries;
        self.budget.clone_from(budget);
        self.approval_state.clone_from(approval_state);
        self.visibility.clone_from(visibility);
        self.idempotency_key.clone_from(idempotency_key);
        self.created_by.clone_from(created_by);
        self.created_at = *created_at;
        self.updated_at = *updated_at;
        self.fencing_epoch = *fencing_epoch;
    }
}

/// What a run's NOT NULL text columns hold when a row leaves them out (the schema's defaults).
pub(crate) const DEFAULT_OBJECTIVE: &str = "run";
pub(crate) const DEFAULT_APPROVAL: &str = "auto";
pub(crate) const DEFAULT_VISIBILITY: &str = "team";
pub(crate) const DEFAULT_CREATED_BY: &str = "heart-fleet";

fn default_approval() -> String {
    DEFAULT_APPROVAL.to_owned()
}

fn default_visibility() -> String {
    DEFAULT_VISIBILITY.to_owned()
}

impl RunRow {
    /// A `ready` run with the given id and idempotency key, created at `at`. Test and
    /// fixture helper; the other fields take the schema defaults.
    pub fn ready(id: impl Into<String>, idempotency_key: impl Into<String>, at: Timestamp) -> RunRow {
        let id = id.into();
        RunRow {
            assignment_id: id.clone(),
            id,
            task_id: None,
            objective: DEFAULT_OBJECTIVE.to_owned(),
            required_capabilities: Vec::new(),
            status: RunStatus::Ready,
            assigned_agent: None,
            lease_owner: None,
            lease_expires_at: None,
            retries: 0,
            budget: None,
            approval_state: default_approval(),
            visibility: default_visibility(),
            idempotency_key: idempotency_key.into(),
            created_by: DEFAULT_CREATED_BY.to_owned(),
            created_at: at,
            updated_at: at,
            fencing_epoch: 0,
        }
    }

    /// A run seeded without the columns a host left out: [`RunRow::ready`] with the
    /// idempotency key `key:<id>`. The one source of a partial row's defaults: a store
    /// row with the TypeScript package's methods, a memory store's `insert`, and the
    /// hosts' seeding helpers ([`crate::bridge::seeded_row_json`]) start from it.
    pub fn seeded(id: &str, at: Timestamp) -> RunRow {
        RunRow::ready(id, RunRow::seeded_key(id), at)
    }

    /// The idempotency key of a run seeded without one.
    pub(crate) fn seeded_key(id: &str) -> String {
        format!("key:{id}")
    }

    /// The one expiry rule (deliberate fix 1): a held lease is expired iff its expiry is
    /// missing or `<= now` ([`lease_expired_at`]).
    pub fn lease_expired(&self, now: Timestamp) -> bool {
        lease_expired_at(self.lease_expires_at, now)
    }

    /// `canAcquire`: `ready`, or held with an expired lease ([`can_acquire_at`]).
    pub fn can_acquire(&self, now: Timestamp) -> bool {
        can_acquire_at(self.status, self.lease_expires_at, now)
    }

    /// Whether `token` proves a live lease on this row at `now`.
    pub fn holds(&self, token: &FencingToken, now: Timestamp) -> bool {
        self.id == token.run_id
            && self.status.is_held()
            && self.lease_owner.as_deref() == Some(token.owner.as_str())
            && self.lease_expires_at == Some(token.lease_expires_at)
            && token.epoch.is_none_or(|e| e == self.fencing_epoch)
            && !self.lease_expired(now)
    }
}

/// Proof of a lease: `{runId, owner, leaseExpiresAt}` as in the reference, plus the
/// run's fencing `epoch` at acquire time. A token without `epoch` (minted by an old
/// TypeScript node) is checked by the three-field equality alone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FencingToken {
    /// The run.
    pub run_id: String,
    /// The holder.
    pub owner: String,
    /// The lease expiry minted by the acquire or renew that produced this token.
    pub lease_expires_at: Timestamp,
    /// The run's fencing epoch when the lease was acquired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
}

/// The state of an effect intent (`effect_intents.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentState {
    /// Claimed, not sent. Safe to dispatch.
    Intent,
    /// Handed to the channel; the send may or may not have happened.
    Dispatched,
    /// Sent, with evidence.
    Committed,
    /// Given up (never resent: at most once).
    Abandoned,
}

impl IntentState {
    /// The text stored in the `state` column.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentState::Intent => "intent",
            IntentState::Dispatched => "dispatched",
            IntentState::Committed => "committed",
            IntentState::Abandoned => "abandoned",
        }
    }
}

/// The channels the `effect_intents.channel` CHECK allows.
pub const CHANNELS: [&str; 5] = ["telegram", "farcaster", "mail", "onchain", "internal"];

/// A row of `effect_intents`: the at-most-once lock of one effect of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntentRow {
    /// The run (first half of the primary key).
    pub run_id: String,
    /// The business identity of the effect (second half of the primary key).
    pub effect_key: String,
    /// Where the intent stands.
    pub state: IntentState,
    /// The channel the effect goes out on.
    pub channel: String,
    /// `sha256:dreamnet-sorted-json:v0:…` of the payload, `""` for `recordOnce`.
    pub payload_digest: String,
    /// The fence owner recorded at dispatch.
    #[serde(default)]
    pub fence_owner: Option<String>,
    /// The fence expiry recorded at dispatch.
    #[serde(default)]
    pub fence_expires_at: Option<Timestamp>,
    /// The fencing epoch recorded at dispatch and handed to the effect.
    #[serde(default)]
    pub fence_epoch: Option<i64>,
    /// Commit evidence.
    #[serde(default)]
    pub external_ref: Option<Value>,
    /// Reconciler passes that could not decide.
    #[serde(default)]
    pub attempts: i64,
    /// Why the reconciler reopened or abandoned it.
    #[serde(default)]
    pub last_error: Option<String>,
    /// Claim time.
    pub created_at: Timestamp,
    /// Commit time.
    #[serde(default)]
    pub committed_at: Option<Timestamp>,
}

/// An `outbox_dispatch_log` entry (attempt, outcome) as the reference writes them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchLogEntry {
    /// The run.
    pub run_id: String,
    /// The effect.
    pub effect_key: String,
    /// 0 for claim/dedupe/reconcile/abandon, 1 for sent.
    pub attempt: i64,
    /// `claimed`, `sent`, `deduped`, `reconciled` or `abandoned`.
    pub outcome: String,
    /// When (the store's clock; filled in by the store).
    #[serde(default)]
    pub at: Option<Timestamp>,
    /// Details.
    #[serde(default)]
    pub detail: Option<Value>,
}

/// `agent_instances.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceStatus {
    /// Heartbeating.
    Alive,
    /// Finishing its work, taking no new runs; live until it goes stale.
    Draining,
    /// Declared dead; its runs are reclaimed.
    Dead,
}

impl InstanceStatus {
    /// The text stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceStatus::Alive => "alive",
            InstanceStatus::Draining => "draining",
            InstanceStatus::Dead => "dead",
        }
    }
}

/// A row of `agent_instances`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRow {
    /// The worker's identity (the `lease_owner` of the runs it holds).
    pub instance_id: String,
    /// Host name.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Process id.
    #[serde(default)]
    pub pid: Option<i64>,
    /// Liveness status.
    pub status: InstanceStatus,
    /// Registration time.
    pub started_at: Timestamp,
    /// Last heartbeat.
    pub last_heartbeat: Timestamp,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
}

impl InstanceRow {
    /// An instance as registering it leaves it: `alive`, started and last heard from at
    /// `at`, no host name, pid or metadata. The memory store's `upsert_instance` writes it
    /// (with what the request gives), and hosts seed partial instance rows from it
    /// ([`crate::bridge::seeded_row_json`]).
    pub fn registered(instance_id: impl Into<String>, at: Timestamp) -> InstanceRow {
        InstanceRow {
            instance_id: instance_id.into(),
            hostname: None,
            pid: None,
            status: InstanceStatus::Alive,
            started_at: at,
            last_heartbeat: at,
            metadata: None,
        }
    }

    /// `isInstanceExpired`: dead, or silent for strictly more than `ttl_ms`
    /// ([`instance_expired_at`]).
    pub fn is_expired(&self, now: Timestamp, ttl_ms: i64) -> bool {
        instance_expired_at(self.status == InstanceStatus::Dead, self.last_heartbeat.0, now.0, ttl_ms)
    }
}

/// The one expiry rule over any clock reading: a lease with no expiry, or one `<= now`, is
/// expired. Generic so that a host's own reading (JavaScript's `f64` milliseconds, where
/// an unparsable instant is NaN and never expires anything) meets the same rule as the
/// core's [`Timestamp`].
pub fn lease_expired_at<T: PartialOrd>(expires_at: Option<T>, now: T) -> bool {
    expires_at.is_none_or(|e| e <= now)
}

/// `canAcquire` over any clock reading: `ready`, or held with an expired lease.
pub fn can_acquire_at<T: PartialOrd>(status: RunStatus, expires_at: Option<T>, now: T) -> bool {
    status == RunStatus::Ready || (status.is_held() && lease_expired_at(expires_at, now))
}

/// The one liveness rule over any clock reading: an instance is expired when it is dead or
/// has been silent for strictly more than `ttl`.
pub fn instance_expired_at<T: PartialOrd + std::ops::Sub<Output = T>>(
    dead: bool,
    last_heartbeat: T,
    now: T,
    ttl: T,
) -> bool {
    dead || now - last_heartbeat > ttl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_from_copies_every_field() {
        let mut full = RunRow::ready("run-1", "heart:resource:1", Timestamp(5));
        full.task_id = Some("task".into());
        full.required_capabilities = vec!["gpu".into(), "net".into()];
        full.status = RunStatus::Running;
        full.assigned_agent = Some("agent".into());
        full.lease_owner = Some("worker".into());
        full.lease_expires_at = Some(Timestamp(9));
        full.retries = 3;
        full.budget = Some(serde_json::json!({"usd": 2}));
        full.approval_state = "approved".into();
        full.visibility = "public".into();
        full.created_by = "me".into();
        full.updated_at = Timestamp(8);
        full.fencing_epoch = 4;
        let mut copy = RunRow::ready("other", "other-key", Timestamp(1));
        copy.clone_from(&full);
        assert_eq!(copy, full);
        let plain = RunRow::ready("r", "k", Timestamp(2));
        copy.clone_from(&plain);
        assert_eq!(copy, plain);
        assert_eq!(full.clone(), full);
    }
}

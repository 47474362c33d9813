//! Every operation, as a sans-I/O [`Machine`]. Each function validates its input first
//! (`invalid-input`, no store call), then describes the operation as straight-line code; the
//! lease operations (acquire, renew, release, verify), on the hot path of every worker, are
//! plain state machines instead (the `lease` submodule).
//! The deliberate fixes (docs/ARCHITECTURE.md, "Deliberate fixes") are marked `fix N` where
//! they shape a condition.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical;
use crate::error::{ErrorCode, HeartError};
use crate::machine::{Answer, Emit, Io, Machine, Need, ProbeVerdict, mismatch};
use crate::metrics::Counter;
use crate::model::{CHANNELS, FencingToken, InstanceRow, IntentRow, IntentState, RunRow, RunStatus};
use crate::receipt::{HeartEvent, HeartReceipt};
use crate::request::{
    Assign, Cond, Expr, InstanceCol, IntentCol, NewIntent, NewRun, RunCol, RunOrder, StoreReply, StoreRequest, Val,
    held,
};
use crate::time::Timestamp;

mod intent;
pub(crate) mod lease;

pub(crate) use intent::stale_dispatched;
pub use intent::{
    LAST_ERROR_UNITS, LOG_REASON_UNITS, LogEntry, MAX_EVIDENCE_DEPTH, Transition, UNSTORABLE_REASON_UNITS,
    truncate_utf16, unstorable_evidence,
};
use intent::{commit_set, state_is};
use lease::Reply;
pub use lease::{acquire, release, renew, verify_fence};

/// The longest lease: one year, in seconds.
pub const MAX_TTL_SECONDS: i64 = 31_536_000;

/// `acquire`'s reason for bad input (an empty id or owner, a ttl outside
/// `1..=MAX_TTL_SECONDS`; in the bindings also a value of the wrong type): the reference's
/// text, in its result shape rather than an error.
pub const INVALID_ACQUIRE_REASON: &str = "Invalid input";
/// Default retry ceiling (quarantine when `retries + 1 > 5`).
pub const DEFAULT_MAX_RETRIES: u32 = 5;
/// Default TTL-sweep batch.
pub const DEFAULT_SWEEP_LIMIT: u32 = 100;
/// Default liveness TTL (strictly greater than this is dead).
pub const DEFAULT_LIVENESS_TTL_MS: i64 = 90_000;
/// Default liveness batch.
pub const DEFAULT_LIVENESS_LIMIT: u32 = 200;
/// Default reconcile ceiling.
pub const DEFAULT_RECONCILE_MAX_ATTEMPTS: i64 = 5;
/// Default reconcile batch.
pub const DEFAULT_RECONCILE_LIMIT: u32 = 50;
/// How long a host waits for its user's store to answer one request before the operation
/// fails with `store-unavailable` (the bindings' `storeTimeoutMs` / `store_timeout`).
pub const DEFAULT_STORE_TIMEOUT_MS: i64 = 30_000;
/// Prefix of resource-run idempotency keys.
pub const RESOURCE_PREFIX: &str = "heart:resource:";

/// Settings that shape decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetConfig {
    /// Retry ceiling; `None` never quarantines.
    pub max_retries: Option<u32>,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig { max_retries: Some(DEFAULT_MAX_RETRIES) }
    }
}

/// `acquire`'s result, in the reference's shape plus a `code` on failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcquireResult {
    /// Whether the lease was won.
    pub acquired: bool,
    /// The row after the win, or the row as read before a failed attempt.
    pub run: Option<RunRow>,
    /// The token, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<FencingToken>,
    /// The reference's reason text, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The stable code, on failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
}

impl AcquireResult {
    fn failed(run: Option<RunRow>, reason: impl Into<String>, code: ErrorCode) -> AcquireResult {
        AcquireResult { acquired: false, run, fence: None, reason: Some(reason.into()), code: Some(code) }
    }
}

/// Why a token stopped proving a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LostCause {
    /// Another owner (or a newer lease of ours) holds the run now.
    Superseded,
    /// The lease expired before it was renewed.
    Expired,
    /// The run is no longer held (released, reclaimed, force-released).
    Released,
    /// The run is gone.
    NotFound,
    /// Renewals kept failing until the held expiry passed.
    StoreUnavailable,
}

impl LostCause {
    /// The stable text.
    pub fn as_str(self) -> &'static str {
        match self {
            LostCause::Superseded => "superseded",
            LostCause::Expired => "expired",
            LostCause::Released => "released",
            LostCause::NotFound => "not-found",
            LostCause::StoreUnavailable => "store-unavailable",
        }
    }

    /// Every cause, in declaration order (a test's exhaustive match keeps it complete).
    pub const ALL: [LostCause; 5] = [
        LostCause::Superseded,
        LostCause::Expired,
        LostCause::Released,
        LostCause::NotFound,
        LostCause::StoreUnavailable,
    ];

    /// The error code a lost lease reports (a rejected renew or release, the lease-lost
    /// signal): `store-unavailable` when renewals kept failing, else `fence-rejected` (the
    /// token no longer proves a live lease).
    pub fn code(self) -> ErrorCode {
        match self {
            LostCause::StoreUnavailable => ErrorCode::StoreUnavailable,
            _ => ErrorCode::FenceRejected,
        }
    }

    fn explain(run: Option<&RunRow>, token: &FencingToken, now: Timestamp) -> LostCause {
        match run {
            None => LostCause::NotFound,
            Some(r) if !r.status.is_held() => LostCause::Released,
            Some(r)
                if r.lease_owner.as_deref() == Some(token.owner.as_str())
                    && r.lease_expires_at == Some(token.lease_expires_at)
                    && token.epoch.is_none_or(|e| e == r.fencing_epoch)
                    && r.lease_expired(now) =>
            {
                LostCause::Expired
            }
            Some(_) => LostCause::Superseded,
        }
    }
}

/// The outcome of a fenced write (renew, release) that the store refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum Fenced<T> {
    /// It happened.
    Ok {
        /// The new token (renew) or the released row (release).
        value: T,
    },
    /// The token no longer proves the lease.
    Rejected {
        /// Why.
        cause: LostCause,
    },
}

/// How to leave a run on release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseTo {
    /// `completed`.
    Completed,
    /// `failed`.
    Failed,
    /// `cancelled`.
    Cancelled,
    /// Resource runs only (fix 8): back to `ready` with `retries = 0`.
    Ready,
}

impl ReleaseTo {
    /// Every next status, in the reference's order.
    pub const ALL: [ReleaseTo; 4] = [ReleaseTo::Completed, ReleaseTo::Failed, ReleaseTo::Cancelled, ReleaseTo::Ready];

    /// The status name.
    pub fn as_str(self) -> &'static str {
        self.status().as_str()
    }

    /// Parses a next status (`completed`, `failed`, `cancelled`, `ready`).
    pub fn parse(text: &str) -> Result<ReleaseTo, HeartError> {
        match text {
            "completed" => Ok(ReleaseTo::Completed),
            "failed" => Ok(ReleaseTo::Failed),
            "cancelled" => Ok(ReleaseTo::Cancelled),
            "ready" => Ok(ReleaseTo::Ready),
            other => Err(HeartError::invalid(format!(
                "next status must be completed, failed, cancelled or ready (resource runs), not {other:?}"
            ))),
        }
    }

    fn status(self) -> RunStatus {
        match self {
            ReleaseTo::Completed => RunStatus::Completed,
            ReleaseTo::Failed => RunStatus::Failed,
            ReleaseTo::Cancelled => RunStatus::Cancelled,
            ReleaseTo::Ready => RunStatus::Ready,
        }
    }
}

/// `reclaimExpired`'s summary, with the reference's keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimSummary {
    /// Runs reset to `ready`.
    pub reclaimed_count: u64,
    /// Their ids.
    pub reclaimed_ids: Vec<String>,
    /// Runs moved to `quarantined` (not counted in `reclaimed_count`).
    pub quarantined_ids: Vec<String>,
    /// Runs that changed under the sweep.
    pub errors: Vec<RunError>,
}

/// A per-run note in a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunError {
    /// The run.
    pub run_id: String,
    /// What happened.
    pub error: String,
}

/// `guardIrreversible`'s result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardResult {
    /// Whether the effect fired now.
    pub committed: bool,
    /// The effect's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// `fence-rejected` or `already-committed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The stable code on a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
}

/// `sendOnce`'s result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendResult {
    /// Whether the send happened now.
    pub sent: bool,
    /// The commit evidence (`external_ref`) when sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_ref: Option<Value>,
    /// Whether the evidence was committed (false only if the intent changed during the send).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub committed: Option<bool>,
    /// `fence-rejected`, `deduped` or `lost-dispatch-race`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The stable code on a refusal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
}

impl SendResult {
    fn refused(reason: &str, code: ErrorCode) -> SendResult {
        SendResult {
            sent: false,
            external_ref: None,
            committed: None,
            reason: Some(reason.to_owned()),
            code: Some(code),
        }
    }
}

/// `reconcileOutbox`'s summary, with the reference's keys in its order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReconcileSummary {
    /// Stale dispatched intents found.
    pub scanned: u64,
    /// Committed with the probe's evidence.
    pub committed: u64,
    /// Proved not sent and reopened.
    pub reopened: u64,
    /// Given up past the ceiling.
    pub abandoned: u64,
    /// Left for a later pass.
    pub left: u64,
    /// Probe failures and rows that changed under the pass.
    pub errors: Vec<EffectError>,
}

/// A per-intent note in a reconcile summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectError {
    /// The effect.
    pub effect_key: String,
    /// What happened.
    pub error: String,
}

/// The liveness pass's summary (the reference's keys, plus `quarantinedIds`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LivenessSummary {
    /// Instances declared dead by this pass.
    pub dead_instance_ids: Vec<String>,
    /// Runs reset to `ready`.
    pub reclaimed_count: u64,
    /// Their ids.
    pub reclaimed_ids: Vec<String>,
    /// Runs quarantined at the ceiling.
    pub quarantined_ids: Vec<String>,
    /// Runs that changed under the pass.
    pub errors: Vec<RunError>,
}

fn require(name: &str, value: &str) -> Result<(), HeartError> {
    if value.is_empty() { Err(HeartError::invalid(format!("{name} must be a non-empty string"))) } else { Ok(()) }
}

/// Fix 10: a ttl is an integer number of seconds in `1..=31_536_000`.
pub fn validate_ttl(ttl_seconds: i64) -> Result<i64, HeartError> {
    if (1..=MAX_TTL_SECONDS).contains(&ttl_seconds) {
        Ok(ttl_seconds * 1000)
    } else {
        Err(HeartError::invalid(format!("ttlSeconds must be an integer in 1..={MAX_TTL_SECONDS}, got {ttl_seconds}")))
    }
}

/// Validates a token's fields.
pub fn validate_token(token: &FencingToken) -> Result<(), HeartError> {
    require("fence.runId", &token.run_id)?;
    require("fence.owner", &token.owner)
}

fn run_write(
    answer: crate::request::StoreAnswer,
    step: &str,
) -> Result<(Timestamp, Option<RunRow>, Option<RunRow>), HeartError> {
    match answer.reply {
        StoreReply::RunWrite { before, after } => Ok((answer.now, before, after)),
        other => Err(mismatch(step, &Answer::Store(Ok(crate::request::StoreAnswer { now: answer.now, reply: other })))),
    }
}

fn wrong(step: &str, reply: StoreReply, now: Timestamp) -> HeartError {
    mismatch(step, &Answer::Store(Ok(crate::request::StoreAnswer { now, reply })))
}

async fn read_run(io: &Io, step: &str, run_id: &str) -> Result<(Timestamp, Option<RunRow>), HeartError> {
    let a = io.store(step, StoreRequest::ReadRun { run_id: run_id.to_owned() }).await?;
    match a.reply {
        StoreReply::Run { run } => Ok((a.now, run)),
        other => Err(wrong(step, other, a.now)),
    }
}

async fn update_run(
    io: &Io,
    step: &str,
    run_id: &str,
    when: Cond<RunCol>,
    set: Vec<Assign<RunCol>>,
    want_before: bool,
) -> Result<(Timestamp, Option<RunRow>, Option<RunRow>), HeartError> {
    let req = StoreRequest::UpdateRun { run_id: run_id.to_owned(), when, set, want_before, want_after: true };
    run_write(io.store(step, req).await?, step)
}

/// `retries + 1 > max`, evaluated on the row before the write.
fn at_ceiling(cfg: FleetConfig) -> Option<Cond<RunCol>> {
    cfg.max_retries.map(|max| Cond::Not(Box::new(Cond::AtMost(RunCol::Retries, i64::from(max) - 1))))
}

/// The recovery write shared by the sweep, the takeover at the ceiling and liveness
/// (fix 3): `retries + 1`, lease cleared, `ready` or (at the ceiling) `quarantined`.
fn recovery_set(cfg: FleetConfig) -> Vec<Assign<RunCol>> {
    let ready = Expr::Val(Val::status(RunStatus::Ready));
    let status = match at_ceiling(cfg) {
        Some(c) => Expr::Case(Box::new(c), Box::new(Expr::Val(Val::status(RunStatus::Quarantined))), Box::new(ready)),
        None => ready,
    };
    vec![
        (RunCol::Status, status),
        (RunCol::LeaseOwner, Expr::Val(Val::Null)),
        (RunCol::LeaseExpiresAt, Expr::Val(Val::Null)),
        (RunCol::Retries, Expr::Add(RunCol::Retries, 1)),
        (RunCol::UpdatedAt, Expr::Now),
    ]
}

/// Emits the receipt and counter of one recovery, returning whether it quarantined.
fn record_recovery(out: &mut (impl Emit + ?Sized), before_owner: Option<&str>, after: &RunRow, now: Timestamp) -> bool {
    let owner = before_owner.unwrap_or("unknown");
    let quarantined = after.status == RunStatus::Quarantined;
    let (counter, event) = if quarantined {
        (Counter::Quarantines, HeartEvent::Quarantined)
    } else {
        (Counter::Reclaims, HeartEvent::Reclaimed)
    };
    out.bump(counter);
    out.receipt(event, &after.id, owner, None, None, now);
    quarantined
}

async fn verify_inner(io: &mut Io, token: &FencingToken) -> Result<(bool, Timestamp), HeartError> {
    let mut answer = io.ask(Need::Store(lease::verify_request(token))).await?;
    let written = Reply::Owned(&mut answer).written_or_hit(lease::VERIFY_STEP)?;
    let live = written.after.hit();
    lease::record_verification(io, token, live, written.now);
    Ok((live, written.now))
}

/// `reclaimExpired({limit})`: scan expired held leases (fix 1: `<= now`), then one
/// conditional recovery write per run (fix 3 bookkeeping; the ceiling quarantines).
pub fn reclaim_expired(cfg: FleetConfig, limit: u32) -> Machine<ReclaimSummary> {
    Machine::new(move |mut io| async move {
        let when = Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]);
        let a = io.store("reclaim: scan", StoreRequest::ScanRuns { when, order: RunOrder::ExpiresAt, limit }).await?;
        let runs = match a.reply {
            StoreReply::Runs { runs } => runs,
            other => return Err(wrong("reclaim: scan", other, a.now)),
        };
        let mut summary = ReclaimSummary::default();
        for run in runs {
            let when = Cond::And(vec![
                held(),
                Cond::Eq(RunCol::LeaseOwner, Val::opt_text(run.lease_owner.as_deref())),
                Cond::Eq(RunCol::LeaseExpiresAt, Val::opt_time(run.lease_expires_at)),
                Cond::ExpiredAt(RunCol::LeaseExpiresAt),
            ]);
            let step = format!(
                "reclaim: write for run {} after {} recovered",
                run.id,
                summary.reclaimed_ids.len() + summary.quarantined_ids.len()
            );
            let (now, _, after) = update_run(&io, &step, &run.id, when, recovery_set(cfg), false).await?;
            match after {
                Some(after) => {
                    if record_recovery(&mut io, run.lease_owner.as_deref(), &after, now) {
                        summary.quarantined_ids.push(run.id);
                    } else {
                        summary.reclaimed_count += 1;
                        summary.reclaimed_ids.push(run.id);
                    }
                }
                None => summary
                    .errors
                    .push(RunError { run_id: run.id, error: "No rows updated (renewed mid-scan)".to_owned() }),
            }
        }
        Ok(summary)
    })
}

/// `guardIrreversible(heart, fence, ledger, effectKey, effect)`: verify the fence, record
/// the key once in the ledger ([`Need::RecordOnce`]), then run the effect ([`Need::Effect`]).
/// Fix 4: `effect_committed` after the effect succeeded, `effect_deduped` on a duplicate.
pub fn guard_irreversible(token: &FencingToken, effect_key: &str) -> Machine<GuardResult> {
    if let Err(e) = validate_token(token).and(require("effectKey", effect_key)) {
        return Machine::done(Err(e));
    }
    let (token, key) = (token.clone(), effect_key.to_owned());
    Machine::new(move |mut io| async move {
        let (live, now) = verify_inner(&mut io, &token).await?;
        if !live {
            return Ok(GuardResult {
                committed: false,
                result: None,
                reason: Some("fence-rejected".into()),
                code: Some(ErrorCode::FenceRejected),
            });
        }
        let first = match io.ask(Need::RecordOnce { run_id: token.run_id.clone(), effect_key: key.clone() }).await? {
            Answer::Recorded(Ok(first)) => first,
            Answer::Recorded(Err(e)) => return Err(HeartError::store("guard: record the effect key", &e)),
            other => return Err(mismatch("guard: record the effect key", &other)),
        };
        if !first {
            io.bump(Counter::EffectDedupes);
            io.receipt(effect_receipt(HeartEvent::EffectDeduped, &token, &key, now));
            return Ok(GuardResult {
                committed: false,
                result: None,
                reason: Some("already-committed".into()),
                code: Some(ErrorCode::Deduped),
            });
        }
        match io.ask(Need::Effect { effect_key: key.clone(), epoch: token.epoch }).await? {
            Answer::Effect(Ok(result)) => {
                io.bump(Counter::EffectCommits);
                io.receipt(effect_receipt(HeartEvent::EffectCommitted, &token, &key, now));
                Ok(GuardResult { committed: true, result: Some(result), reason: None, code: None })
            }
            // At most once: the key stays recorded and the effect is never retried.
            Answer::Effect(Err(message)) => Err(HeartError::new(ErrorCode::EffectFailed, message)),
            other => Err(mismatch("guard: effect", &other)),
        }
    })
}

/// An effect receipt stamped with the store clock of the fence check that admitted the
/// effect (a memory ledger has no clock; an extra round trip would buy nothing).
fn effect_receipt(event: HeartEvent, token: &FencingToken, key: &str, now: Timestamp) -> HeartReceipt {
    HeartReceipt::new(event, &token.run_id, &token.owner, Some(token.lease_expires_at), Some(key), now)
}

/// `DurableEffectLedger.recordOnce`: a claim with channel `internal` and an empty digest.
pub fn durable_record_once(run_id: &str, effect_key: &str) -> Machine<bool> {
    if let Err(e) = require("runId", run_id).and(require("effectKey", effect_key)) {
        return Machine::done(Err(e));
    }
    let intent = NewIntent {
        run_id: run_id.to_owned(),
        effect_key: effect_key.to_owned(),
        channel: "internal".into(),
        payload_digest: String::new(),
    };
    Machine::new(move |io| async move {
        let a = io.store("record once: claim", StoreRequest::ClaimIntent(intent)).await?;
        match a.reply {
            StoreReply::Claim { claimed, .. } => Ok(claimed),
            other => Err(wrong("record once: claim", other, a.now)),
        }
    })
}

async fn update_intent(
    io: &Io,
    step: &str,
    row: &IntentRow,
    when: Cond<IntentCol>,
    set: Vec<Assign<IntentCol>>,
    log: Option<LogEntry>,
) -> Result<(Timestamp, Option<IntentRow>), HeartError> {
    let req = intent::update_request(&row.run_id, &row.effect_key, when, set, log);
    let a = io.store(step, req).await?;
    match a.reply {
        StoreReply::Intent { intent } => Ok((a.now, intent)),
        other => Err(wrong(step, other, a.now)),
    }
}

/// `sendOnce(heart, ledger, {fence, channel, effectKey, payload, send})` in the documented
/// order (fix 5): verify the fence → claim the intent → mark it dispatched (one statement
/// conditioned on the run still holding this live token) → [`Need::Effect`] (the send; its
/// answer is the `external_ref` evidence) → commit the evidence in the same write as the
/// state change. An `intent` row (reopened by the reconciler, or left by a claimer that
/// crashed before dispatch) may be dispatched again by the current holder; every other
/// duplicate answers `deduped`.
pub fn send_once(token: &FencingToken, channel: &str, effect_key: &str, payload: &Value) -> Machine<SendResult> {
    let valid = validate_token(token).and(require("effectKey", effect_key)).and(if CHANNELS.contains(&channel) {
        Ok(())
    } else {
        Err(HeartError::invalid(format!("channel must be one of {CHANNELS:?}, not {channel:?}")))
    });
    if let Err(e) = valid {
        return Machine::done(Err(e));
    }
    let intent = NewIntent {
        run_id: token.run_id.clone(),
        effect_key: effect_key.to_owned(),
        channel: channel.to_owned(),
        payload_digest: canonical::payload_digest(payload),
    };
    let token = token.clone();
    Machine::new(move |mut io| async move {
        if !verify_inner(&mut io, &token).await?.0 {
            return Ok(SendResult::refused("fence-rejected", ErrorCode::FenceRejected));
        }
        let key = intent.effect_key.clone();
        let a = io.store("send once: claim", StoreRequest::ClaimIntent(intent)).await?;
        let (claimed, row) = match a.reply {
            StoreReply::Claim { claimed, intent } => (claimed, intent),
            other => return Err(wrong("send once: claim", other, a.now)),
        };
        let redispatchable = row.state == IntentState::Intent && !row.payload_digest.is_empty();
        let dedupe = |io: &Io, now: Timestamp| {
            io.bump(Counter::EffectDedupes);
            io.receipt(HeartReceipt::new(
                HeartEvent::EffectDeduped,
                &token.run_id,
                &token.owner,
                Some(token.lease_expires_at),
                Some(&key),
                now,
            ));
            SendResult::refused("deduped", ErrorCode::Deduped)
        };
        if !claimed && !redispatchable {
            return Ok(dedupe(&io, a.now));
        }
        let when = Cond::And(vec![
            state_is(IntentState::Intent),
            Cond::RunHeldBy {
                owner: token.owner.clone(),
                lease_expires_at: token.lease_expires_at,
                epoch: token.epoch,
            },
        ]);
        let set = vec![
            (IntentCol::State, Expr::Val(Val::Text(IntentState::Dispatched.as_str().into()))),
            (IntentCol::FenceOwner, Expr::Val(Val::Text(token.owner.clone()))),
            (IntentCol::FenceExpiresAt, Expr::Val(Val::Time(token.lease_expires_at))),
            (IntentCol::FenceEpoch, Expr::Val(token.epoch.map_or(Val::Null, Val::Int))),
            (IntentCol::LastError, Expr::Val(Val::Null)),
        ];
        let (now, dispatched) = update_intent(&io, "send once: mark dispatched", &row, when, set, None).await?;
        if dispatched.is_none() {
            return Ok(if claimed {
                SendResult::refused("lost-dispatch-race", ErrorCode::FenceRejected)
            } else {
                dedupe(&io, now)
            });
        }
        let evidence = match io.ask(Need::Effect { effect_key: key.clone(), epoch: token.epoch }).await? {
            Answer::Effect(Ok(v)) => v,
            Answer::Effect(Err(message)) => {
                return Err(HeartError::new(
                    ErrorCode::EffectFailed,
                    format!("send failed; the intent stays dispatched for the reconciler: {message}"),
                ));
            }
            other => return Err(mismatch("send once: send", &other)),
        };
        let when = Cond::And(vec![
            state_is(IntentState::Dispatched),
            Cond::Eq(IntentCol::FenceOwner, Val::Text(token.owner.clone())),
            Cond::Eq(IntentCol::FenceExpiresAt, Val::Time(token.lease_expires_at)),
        ]);
        let step = "send once: commit the evidence (the send happened; the intent stays dispatched for the reconciler)";
        let (now, committed) =
            update_intent(&io, step, &row, when, commit_set(&evidence), Some((1, "sent", Some(evidence.clone()))))
                .await?;
        if committed.is_some() {
            io.bump(Counter::EffectCommits);
            io.receipt(HeartReceipt::new(
                HeartEvent::EffectCommitted,
                &token.run_id,
                &token.owner,
                Some(token.lease_expires_at),
                Some(&key),
                now,
            ));
        }
        Ok(SendResult {
            sent: true,
            external_ref: Some(evidence),
            committed: Some(committed.is_some()),
            reason: None,
            code: None,
        })
    })
}

/// What the reconciler writes to `last_error` when it reopens an intent proved not sent.
const REOPENED_FOR_RETRY: &str = "reconciler: provably not sent, reopened for retry";

/// The reconciler's abandon reason (the reference's exact text).
pub fn abandon_reason(channel: &str, max_attempts: i64) -> String {
    format!(
        "reconciler: unverifiable send on '{channel}' past {max_attempts} attempts - abandoned (not resent, at-most-once)"
    )
}

/// `reconcileOutbox(ledger, {probes, maxAttempts, limit})`: for each dispatched intent whose
/// fence expired (fix 1: `<= now`), ask its channel's probe ([`Need::Probe`]): `sent`
/// commits the evidence, `not-sent` reopens, unknown is left (attempts + 1) and abandoned
/// past the ceiling. Fix 6: only writes that hit are counted and logged.
pub fn reconcile_outbox(max_attempts: i64, limit: u32) -> Machine<ReconcileSummary> {
    Machine::new(move |io| async move {
        let when = intent::stale_dispatched();
        let a = io.store("reconcile: scan", StoreRequest::ScanIntents { when, limit }).await?;
        let rows = match a.reply {
            StoreReply::Intents { intents } => intents,
            other => return Err(wrong("reconcile: scan", other, a.now)),
        };
        let mut s = ReconcileSummary { scanned: rows.len() as u64, ..ReconcileSummary::default() };
        for row in rows {
            let verdict = match io.ask(Need::Probe { intent: row.clone() }).await? {
                Answer::Probe(Ok(v)) => v,
                Answer::Probe(Err(e)) => {
                    s.errors.push(EffectError { effect_key: row.effect_key.clone(), error: e });
                    continue;
                }
                other => return Err(mismatch("reconcile: probe", &other)),
            };
            let step = format!("reconcile: write for {}", row.effect_key);
            let hit = match verdict {
                ProbeVerdict::Sent(evidence) => {
                    let (when, set, log) = Transition::MarkCommitted { external_ref: evidence }.parts();
                    let (now, hit) = update_intent(&io, &step, &row, when, set, log).await?;
                    if hit.is_some() {
                        s.committed += 1;
                        io.bump(Counter::EffectCommits);
                        let owner = row.fence_owner.as_deref().unwrap_or("unknown");
                        io.receipt(HeartReceipt::new(
                            HeartEvent::EffectCommitted,
                            &row.run_id,
                            owner,
                            row.fence_expires_at,
                            Some(&row.effect_key),
                            now,
                        ));
                    }
                    hit.is_some()
                }
                ProbeVerdict::NotSent => {
                    let reopen = Transition::Reopen { last_error: REOPENED_FOR_RETRY.to_owned() };
                    let (when, set, log) = reopen.parts();
                    let (_, hit) = update_intent(&io, &step, &row, when, set, log).await?;
                    s.reopened += u64::from(hit.is_some());
                    hit.is_some()
                }
                ProbeVerdict::Unknown if row.attempts >= max_attempts => {
                    let reason = abandon_reason(&row.channel, max_attempts);
                    let (when, set, log) = Transition::Abandon { reason }.parts();
                    let (_, hit) = update_intent(&io, &step, &row, when, set, log).await?;
                    s.abandoned += u64::from(hit.is_some());
                    hit.is_some()
                }
                ProbeVerdict::Unknown => {
                    let when = Cond::And(vec![
                        state_is(IntentState::Dispatched),
                        Cond::Eq(IntentCol::Attempts, Val::Int(row.attempts)),
                    ]);
                    let (_, hit) = update_intent(
                        &io,
                        &step,
                        &row,
                        when,
                        vec![(IntentCol::Attempts, Expr::Add(IntentCol::Attempts, 1))],
                        None,
                    )
                    .await?;
                    s.left += u64::from(hit.is_some());
                    hit.is_some()
                }
            };
            if !hit {
                s.errors.push(EffectError {
                    effect_key: row.effect_key.clone(),
                    error: "no rows updated (changed during the pass)".into(),
                });
            }
        }
        Ok(s)
    })
}

/// The liveness pass: declare instances silent for more than `ttl_ms` dead (one write),
/// then recover the held runs of every dead or silent instance (including ones declared
/// dead earlier whose runs a previous pass did not reach), one conditional write each, with
/// fix 3's bookkeeping.
pub fn reclaim_dead_instance_runs(cfg: FleetConfig, ttl_ms: i64, limit: u32) -> Machine<LivenessSummary> {
    Machine::new(move |mut io| async move {
        let dead = Val::Text("dead".into());
        let when = Cond::And(vec![
            Cond::Not(Box::new(Cond::Eq(InstanceCol::Status, dead.clone()))),
            Cond::OlderThan(InstanceCol::LastHeartbeat, ttl_ms),
        ]);
        let a = io
            .store(
                "liveness: mark silent instances dead",
                StoreRequest::UpdateInstances { when, set: vec![(InstanceCol::Status, Expr::Val(dead))] },
            )
            .await?;
        let newly_dead = match a.reply {
            StoreReply::Instances { instances } => instances,
            other => return Err(wrong("liveness: mark dead", other, a.now)),
        };
        let mut s = LivenessSummary {
            dead_instance_ids: newly_dead.into_iter().map(|i| i.instance_id).collect(),
            ..Default::default()
        };
        let when = Cond::And(vec![held(), Cond::OwnerInstanceDead { ttl_ms }]);
        let a = io
            .store(
                "liveness: scan runs of dead instances",
                StoreRequest::ScanRuns { when, order: RunOrder::ExpiresAt, limit },
            )
            .await?;
        let runs = match a.reply {
            StoreReply::Runs { runs } => runs,
            other => return Err(wrong("liveness: scan", other, a.now)),
        };
        for run in runs {
            let when = Cond::And(vec![
                held(),
                Cond::Eq(RunCol::LeaseOwner, Val::opt_text(run.lease_owner.as_deref())),
                Cond::Eq(RunCol::LeaseExpiresAt, Val::opt_time(run.lease_expires_at)),
            ]);
            let step = format!("liveness: write for run {}", run.id);
            let (now, _, after) = update_run(&io, &step, &run.id, when, recovery_set(cfg), false).await?;
            match after {
                Some(after) => {
                    if record_recovery(&mut io, run.lease_owner.as_deref(), &after, now) {
                        s.quarantined_ids.push(run.id);
                    } else {
                        s.reclaimed_count += 1;
                        s.reclaimed_ids.push(run.id);
                    }
                }
                None => s.errors.push(RunError { run_id: run.id, error: "no rows (re-leased)".into() }),
            }
        }
        Ok(s)
    })
}

fn instances_of(step: &str, a: crate::request::StoreAnswer) -> Result<Vec<InstanceRow>, HeartError> {
    match a.reply {
        StoreReply::Instances { instances } => Ok(instances),
        other => Err(wrong(step, other, a.now)),
    }
}

/// Registers (or re-registers) an instance as `alive`.
pub fn register_instance(
    instance_id: &str,
    hostname: Option<&str>,
    pid: Option<i64>,
    metadata: Option<Value>,
) -> Machine<InstanceRow> {
    if let Err(e) = require("instanceId", instance_id) {
        return Machine::done(Err(e));
    }
    let req = StoreRequest::UpsertInstance {
        instance_id: instance_id.to_owned(),
        hostname: hostname.map(str::to_owned),
        pid,
        metadata,
    };
    Machine::new(move |io| async move {
        let step = "register instance";
        instances_of(step, io.store(step, req).await?)?
            .into_iter()
            .next()
            .ok_or_else(|| HeartError::new(ErrorCode::StoreProtocol, "register instance: the store returned no row"))
    })
}

fn instance_write(instance_id: &str, set: Vec<Assign<InstanceCol>>, step: &'static str) -> Machine<bool> {
    if let Err(e) = require("instanceId", instance_id) {
        return Machine::done(Err(e));
    }
    let when = Cond::And(vec![
        Cond::Eq(InstanceCol::InstanceId, Val::Text(instance_id.to_owned())),
        Cond::Not(Box::new(Cond::Eq(InstanceCol::Status, Val::Text("dead".into())))),
    ]);
    Machine::new(move |io| async move {
        Ok(!instances_of(step, io.store(step, StoreRequest::UpdateInstances { when, set }).await?)?.is_empty())
    })
}

/// Heartbeats an instance; `false` when it is unknown or already dead (it must re-register).
pub fn heartbeat_instance(instance_id: &str) -> Machine<bool> {
    instance_write(instance_id, vec![(InstanceCol::LastHeartbeat, Expr::Now)], "instance heartbeat")
}

/// Marks an instance `draining`: live until it goes silent, taking no new work.
pub fn drain_instance(instance_id: &str) -> Machine<bool> {
    instance_write(instance_id, vec![(InstanceCol::Status, Expr::Val(Val::Text("draining".into())))], "drain instance")
}

/// Lists every instance.
pub fn list_instances() -> Machine<Vec<InstanceRow>> {
    Machine::new(move |io| async move {
        let step = "list instances";
        instances_of(step, io.store(step, StoreRequest::ScanInstances { when: Cond::True }).await?)
    })
}

/// The objective `ensureResourceRun` records when the caller gives none: `resource <kind>:<key>`.
pub fn default_resource_objective(kind: &str, key: &str) -> String {
    format!("resource {kind}:{key}")
}

/// Who `ensureResourceRun` records as a run's creator when the caller gives no one:
/// `heart-fleet:<kind>`.
pub fn default_resource_creator(kind: &str) -> String {
    format!("heart-fleet:{kind}")
}

/// Fix 8: find or create the run of a resource by its deterministic idempotency key
/// (race-safe; the store supplies the row id). Returns the row and whether it was created.
pub fn ensure_resource_run(kind: &str, key: &str, objective: &str, created_by: &str) -> Machine<(RunRow, bool)> {
    let idempotency_key = match canonical::deterministic_resource_id(kind, key) {
        Ok(k) => k,
        Err(e) => return Machine::done(Err(HeartError::invalid(e.to_string()))),
    };
    if let Err(e) = require("objective", objective).and(require("createdBy", created_by)) {
        return Machine::done(Err(e));
    }
    let new = NewRun { idempotency_key, objective: objective.to_owned(), created_by: created_by.to_owned() };
    Machine::new(move |io| async move {
        let a = io.store("ensure resource run", StoreRequest::EnsureRun(new)).await?;
        match a.reply {
            StoreReply::Ensured { run, created } => Ok((run, created)),
            other => Err(wrong("ensure resource run", other, a.now)),
        }
    })
}

/// Operator: list runs, optionally of one status, most recently updated first.
pub fn list_runs(status: Option<RunStatus>, limit: u32) -> Machine<Vec<RunRow>> {
    let when = status.map_or(Cond::True, |s| Cond::Eq(RunCol::Status, Val::status(s)));
    Machine::new(move |io| async move {
        let a = io.store("list runs", StoreRequest::ScanRuns { when, order: RunOrder::UpdatedAtDesc, limit }).await?;
        match a.reply {
            StoreReply::Runs { runs } => Ok(runs),
            other => Err(wrong("list runs", other, a.now)),
        }
    })
}

/// Operator: one run.
pub fn get_run(run_id: &str) -> Machine<Option<RunRow>> {
    if let Err(e) = require("runId", run_id) {
        return Machine::done(Err(e));
    }
    let run_id = run_id.to_owned();
    Machine::new(move |io| async move { Ok(read_run(&io, "show run", &run_id).await?.1) })
}

async fn explain_operator_miss(io: &Io, step: &str, run_id: &str, wanted: &str) -> HeartError {
    match read_run(io, step, run_id).await {
        Ok((_, None)) => HeartError::new(ErrorCode::RunNotFound, format!("run {run_id} not found")),
        Ok((_, Some(r))) => {
            HeartError::new(ErrorCode::InvalidState, format!("run {run_id} is {}, not {wanted}", r.status))
        }
        Err(e) => e,
    }
}

/// Operator: put a quarantined run back to `ready` with `retries = 0` (receipt `requeued`,
/// owner = the operator).
pub fn requeue_run(run_id: &str, operator: &str) -> Machine<RunRow> {
    if let Err(e) = require("runId", run_id).and(require("operator", operator)) {
        return Machine::done(Err(e));
    }
    let (run_id, operator) = (run_id.to_owned(), operator.to_owned());
    Machine::new(move |io| async move {
        let when = Cond::Eq(RunCol::Status, Val::status(RunStatus::Quarantined));
        let set = vec![
            (RunCol::Status, Expr::Val(Val::status(RunStatus::Ready))),
            (RunCol::Retries, Expr::Val(Val::Int(0))),
            (RunCol::UpdatedAt, Expr::Now),
        ];
        let (now, _, after) = update_run(&io, "requeue: conditional write", &run_id, when, set, false).await?;
        match after {
            Some(row) => {
                io.receipt(HeartReceipt::new(HeartEvent::Requeued, &run_id, &operator, None, None, now));
                Ok(row)
            }
            None => Err(explain_operator_miss(&io, "requeue: read after a miss", &run_id, "quarantined").await),
        }
    })
}

/// Operator: remove a lease by force, returning the run to `ready` (receipt
/// `force_released`, owner = the previous holder). Its token stops working at once.
pub fn force_release(run_id: &str) -> Machine<RunRow> {
    if let Err(e) = require("runId", run_id) {
        return Machine::done(Err(e));
    }
    let run_id = run_id.to_owned();
    Machine::new(move |io| async move {
        let set = vec![
            (RunCol::Status, Expr::Val(Val::status(RunStatus::Ready))),
            (RunCol::LeaseOwner, Expr::Val(Val::Null)),
            (RunCol::LeaseExpiresAt, Expr::Val(Val::Null)),
            (RunCol::UpdatedAt, Expr::Now),
        ];
        let (now, before, after) =
            update_run(&io, "force release: conditional write", &run_id, held(), set, true).await?;
        match after {
            Some(row) => {
                let prev = before.and_then(|b| b.lease_owner).unwrap_or_else(|| "unknown".to_owned());
                io.receipt(HeartReceipt::new(HeartEvent::ForceReleased, &run_id, &prev, None, None, now));
                Ok(row)
            }
            None => {
                Err(explain_operator_miss(&io, "force release: read after a miss", &run_id, "leased or running").await)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lost_cause_is_listed_and_has_its_code() {
        // Exhaustive, so that a new cause fails to compile here: give it its place in `ALL`.
        let place = |c: LostCause| match c {
            LostCause::Superseded => 0,
            LostCause::Expired => 1,
            LostCause::Released => 2,
            LostCause::NotFound => 3,
            LostCause::StoreUnavailable => 4,
        };
        for (i, c) in LostCause::ALL.into_iter().enumerate() {
            assert_eq!(place(c), i, "{}", c.as_str());
            let expected =
                if c == LostCause::StoreUnavailable { ErrorCode::StoreUnavailable } else { ErrorCode::FenceRejected };
            assert_eq!(c.code(), expected, "{}", c.as_str());
        }
    }
}

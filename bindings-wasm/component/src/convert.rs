//! Hand-written conversions between the core's types and the WIT records of
//! `heart:fleet/types` (the WIT types are separate Rust types, so serde stays out of them).
//! Free-form JSON columns travel as JSON text.

use heart_fleet_core as core;
use heart_fleet_core::ops::{
    AcquireResult, EffectError, Fenced, GuardResult, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary,
    ReleaseTo, RunError, SendResult,
};
use heart_fleet_core::session::NotRunReason;
use heart_fleet_core::{ErrorCode, HeartEvent, HeartMetrics, HeartReceipt, Timestamp};
use serde_json::Value;

use crate::bindings::heart::fleet::types as wit;

/// A core error as the WIT variant (codes newer than 0.1.0 become `other("<code>: <message>")`).
pub fn error(e: core::HeartError) -> wit::HeartError {
    let m = e.message;
    match e.code {
        ErrorCode::InvalidInput => wit::HeartError::InvalidInput(m),
        ErrorCode::RunNotFound => wit::HeartError::RunNotFound(m),
        ErrorCode::LeaseHeld => wit::HeartError::LeaseHeld(m),
        ErrorCode::Collision => wit::HeartError::Collision(m),
        ErrorCode::FenceRejected => wit::HeartError::FenceRejected(m),
        ErrorCode::Quarantined => wit::HeartError::Quarantined(m),
        ErrorCode::Deduped => wit::HeartError::Deduped(m),
        ErrorCode::StoreUnavailable => wit::HeartError::StoreUnavailable(m),
        ErrorCode::StoreProtocol => wit::HeartError::StoreProtocol(m),
        ErrorCode::ReceiptTampered => wit::HeartError::ReceiptTampered(m),
        ErrorCode::EffectFailed => wit::HeartError::EffectFailed(m),
        ErrorCode::InvalidState => wit::HeartError::InvalidState(m),
        other => wit::HeartError::Other(format!("{other}: {m}")),
    }
}

/// An `invalid-input` error.
pub fn invalid(message: String) -> wit::HeartError {
    wit::HeartError::InvalidInput(message)
}

/// A code for a result field.
pub fn code(c: ErrorCode) -> wit::ErrorCode {
    match c {
        ErrorCode::InvalidInput => wit::ErrorCode::InvalidInput,
        ErrorCode::RunNotFound => wit::ErrorCode::RunNotFound,
        ErrorCode::LeaseHeld => wit::ErrorCode::LeaseHeld,
        ErrorCode::Collision => wit::ErrorCode::Collision,
        ErrorCode::FenceRejected => wit::ErrorCode::FenceRejected,
        ErrorCode::Quarantined => wit::ErrorCode::Quarantined,
        ErrorCode::Deduped => wit::ErrorCode::Deduped,
        ErrorCode::StoreUnavailable => wit::ErrorCode::StoreUnavailable,
        ErrorCode::StoreProtocol => wit::ErrorCode::StoreProtocol,
        ErrorCode::ReceiptTampered => wit::ErrorCode::ReceiptTampered,
        ErrorCode::EffectFailed => wit::ErrorCode::EffectFailed,
        ErrorCode::InvalidState => wit::ErrorCode::InvalidState,
        _ => wit::ErrorCode::Other,
    }
}

fn json(v: Value) -> String {
    v.to_string()
}

/// Parses JSON text handed in by the host.
pub fn parse_json(what: &str, text: &str) -> Result<Value, wit::HeartError> {
    serde_json::from_str(text).map_err(|e| invalid(format!("{what} is not JSON: {e}")))
}

/// A token from the host.
pub fn token_in(t: wit::FencingToken) -> core::FencingToken {
    core::FencingToken {
        run_id: t.run_id,
        owner: t.owner,
        lease_expires_at: Timestamp(t.lease_expires_at),
        epoch: t.epoch,
    }
}

/// A token for the host.
pub fn token(t: core::FencingToken) -> wit::FencingToken {
    wit::FencingToken { run_id: t.run_id, owner: t.owner, lease_expires_at: t.lease_expires_at.0, epoch: t.epoch }
}

/// A run status for the host.
pub fn status(s: core::RunStatus) -> wit::RunStatus {
    use core::RunStatus as S;
    match s {
        S::Created => wit::RunStatus::Created,
        S::Ready => wit::RunStatus::Ready,
        S::Leased => wit::RunStatus::Leased,
        S::Running => wit::RunStatus::Running,
        S::WaitingApproval => wit::RunStatus::WaitingApproval,
        S::Blocked => wit::RunStatus::Blocked,
        S::Verifying => wit::RunStatus::Verifying,
        S::Recovering => wit::RunStatus::Recovering,
        S::Completed => wit::RunStatus::Completed,
        S::Failed => wit::RunStatus::Failed,
        S::Cancelled => wit::RunStatus::Cancelled,
        S::Quarantined => wit::RunStatus::Quarantined,
    }
}

/// A run status from the host.
pub fn status_in(s: wit::RunStatus) -> core::RunStatus {
    use core::RunStatus as S;
    match s {
        wit::RunStatus::Created => S::Created,
        wit::RunStatus::Ready => S::Ready,
        wit::RunStatus::Leased => S::Leased,
        wit::RunStatus::Running => S::Running,
        wit::RunStatus::WaitingApproval => S::WaitingApproval,
        wit::RunStatus::Blocked => S::Blocked,
        wit::RunStatus::Verifying => S::Verifying,
        wit::RunStatus::Recovering => S::Recovering,
        wit::RunStatus::Completed => S::Completed,
        wit::RunStatus::Failed => S::Failed,
        wit::RunStatus::Cancelled => S::Cancelled,
        wit::RunStatus::Quarantined => S::Quarantined,
    }
}

/// A run row for the host.
pub fn run(r: core::RunRow) -> wit::RunRow {
    wit::RunRow {
        id: r.id,
        task_id: r.task_id,
        assignment_id: r.assignment_id,
        objective: r.objective,
        required_capabilities: r.required_capabilities,
        status: status(r.status),
        assigned_agent: r.assigned_agent,
        lease_owner: r.lease_owner,
        lease_expires_at: r.lease_expires_at.map(|t| t.0),
        retries: r.retries,
        budget: r.budget.map(json),
        approval_state: r.approval_state,
        visibility: r.visibility,
        idempotency_key: r.idempotency_key,
        created_by: r.created_by,
        created_at: r.created_at.0,
        updated_at: r.updated_at.0,
        fencing_epoch: r.fencing_epoch,
    }
}

/// An intent row for the host.
pub fn intent(r: core::IntentRow) -> wit::IntentRow {
    use core::IntentState as S;
    wit::IntentRow {
        run_id: r.run_id,
        effect_key: r.effect_key,
        state: match r.state {
            S::Intent => wit::IntentState::Intent,
            S::Dispatched => wit::IntentState::Dispatched,
            S::Committed => wit::IntentState::Committed,
            S::Abandoned => wit::IntentState::Abandoned,
        },
        channel: r.channel,
        payload_digest: r.payload_digest,
        fence_owner: r.fence_owner,
        fence_expires_at: r.fence_expires_at.map(|t| t.0),
        fence_epoch: r.fence_epoch,
        external_ref: r.external_ref.map(json),
        attempts: r.attempts,
        last_error: r.last_error,
        created_at: r.created_at.0,
        committed_at: r.committed_at.map(|t| t.0),
    }
}

/// An instance row for the host.
pub fn instance(r: core::InstanceRow) -> wit::InstanceRow {
    use core::InstanceStatus as S;
    wit::InstanceRow {
        instance_id: r.instance_id,
        hostname: r.hostname,
        pid: r.pid,
        status: match r.status {
            S::Alive => wit::InstanceStatus::Alive,
            S::Draining => wit::InstanceStatus::Draining,
            S::Dead => wit::InstanceStatus::Dead,
        },
        started_at: r.started_at.0,
        last_heartbeat: r.last_heartbeat.0,
        metadata: r.metadata.map(json),
    }
}

fn event(e: HeartEvent) -> wit::HeartEvent {
    match e {
        HeartEvent::Acquired => wit::HeartEvent::Acquired,
        HeartEvent::Renewed => wit::HeartEvent::Renewed,
        HeartEvent::Released => wit::HeartEvent::Released,
        HeartEvent::Reclaimed => wit::HeartEvent::Reclaimed,
        HeartEvent::Quarantined => wit::HeartEvent::Quarantined,
        HeartEvent::FenceVerified => wit::HeartEvent::FenceVerified,
        HeartEvent::FenceRejected => wit::HeartEvent::FenceRejected,
        HeartEvent::EffectCommitted => wit::HeartEvent::EffectCommitted,
        HeartEvent::EffectDeduped => wit::HeartEvent::EffectDeduped,
        HeartEvent::Requeued => wit::HeartEvent::Requeued,
        HeartEvent::ForceReleased => wit::HeartEvent::ForceReleased,
    }
}

/// A receipt for the host.
pub fn receipt(r: HeartReceipt) -> wit::Receipt {
    wit::Receipt {
        schema_version: r.schema_version.to_string(),
        event: event(r.event),
        run_id: r.run_id,
        owner: r.owner,
        lease_expires_at: r.lease_expires_at,
        effect_key: r.effect_key,
        at: r.at,
        digest: r.digest,
    }
}

/// The counters for the host.
pub fn metrics(m: &HeartMetrics) -> wit::Metrics {
    wit::Metrics {
        acquire_attempts: m.acquire_attempts,
        acquire_wins: m.acquire_wins,
        acquire_collisions: m.acquire_collisions,
        renews: m.renews,
        renew_failures: m.renew_failures,
        releases: m.releases,
        release_failures: m.release_failures,
        reclaims: m.reclaims,
        quarantines: m.quarantines,
        fence_verifications: m.fence_verifications,
        fence_rejections: m.fence_rejections,
        effect_commits: m.effect_commits,
        effect_dedupes: m.effect_dedupes,
    }
}

/// `acquire`'s result for the host.
pub fn acquire_result(r: AcquireResult) -> wit::AcquireResult {
    wit::AcquireResult {
        acquired: r.acquired,
        run: r.run.map(run),
        fence: r.fence.map(token),
        reason: r.reason,
        code: r.code.map(code),
    }
}

/// A lost cause for the host.
pub fn lost(c: LostCause) -> wit::LostCause {
    match c {
        LostCause::Superseded => wit::LostCause::Superseded,
        LostCause::Expired => wit::LostCause::Expired,
        LostCause::Released => wit::LostCause::Released,
        LostCause::NotFound => wit::LostCause::NotFound,
        LostCause::StoreUnavailable => wit::LostCause::StoreUnavailable,
    }
}

/// A renew's outcome for the host.
pub fn renewed(r: Fenced<core::FencingToken>) -> wit::Renewed {
    match r {
        Fenced::Ok { value } => wit::Renewed::Ok(token(value)),
        Fenced::Rejected { cause } => wit::Renewed::Rejected(lost(cause)),
    }
}

/// A release's outcome for the host.
pub fn released(r: Fenced<core::RunRow>) -> wit::Released {
    match r {
        Fenced::Ok { value } => wit::Released::Ok(run(value)),
        Fenced::Rejected { cause } => wit::Released::Rejected(lost(cause)),
    }
}

/// A release target from the host.
pub fn release_to(t: wit::ReleaseTo) -> ReleaseTo {
    match t {
        wit::ReleaseTo::Completed => ReleaseTo::Completed,
        wit::ReleaseTo::Failed => ReleaseTo::Failed,
        wit::ReleaseTo::Cancelled => ReleaseTo::Cancelled,
        wit::ReleaseTo::Ready => ReleaseTo::Ready,
    }
}

fn run_errors(errors: Vec<RunError>) -> Vec<wit::RunError> {
    errors.into_iter().map(|e| wit::RunError { run_id: e.run_id, error: e.error }).collect()
}

/// The sweep's summary for the host.
pub fn reclaim_summary(s: ReclaimSummary) -> wit::ReclaimSummary {
    wit::ReclaimSummary {
        reclaimed_count: s.reclaimed_count,
        reclaimed_ids: s.reclaimed_ids,
        quarantined_ids: s.quarantined_ids,
        errors: run_errors(s.errors),
    }
}

/// The liveness pass's summary for the host.
pub fn liveness_summary(s: LivenessSummary) -> wit::LivenessSummary {
    wit::LivenessSummary {
        dead_instance_ids: s.dead_instance_ids,
        reclaimed_count: s.reclaimed_count,
        reclaimed_ids: s.reclaimed_ids,
        quarantined_ids: s.quarantined_ids,
        errors: run_errors(s.errors),
    }
}

/// `guard-irreversible`'s result for the host.
pub fn guard_result(r: GuardResult) -> wit::GuardResult {
    wit::GuardResult { committed: r.committed, result: r.result.map(json), reason: r.reason, code: r.code.map(code) }
}

/// `send-once`'s result for the host.
pub fn send_result(r: SendResult) -> wit::SendResult {
    wit::SendResult {
        sent: r.sent,
        external_ref: r.external_ref.map(json),
        committed: r.committed,
        reason: r.reason,
        code: r.code.map(code),
    }
}

/// The reconciler's summary for the host.
pub fn reconcile_summary(s: ReconcileSummary) -> wit::ReconcileSummary {
    wit::ReconcileSummary {
        scanned: s.scanned,
        committed: s.committed,
        reopened: s.reopened,
        abandoned: s.abandoned,
        left: s.left,
        errors: s
            .errors
            .into_iter()
            .map(|e: EffectError| wit::EffectError { effect_key: e.effect_key, error: e.error })
            .collect(),
    }
}

/// Why execute-with-lease did not run, for the host.
pub fn not_run(reason: NotRunReason, c: Option<ErrorCode>) -> wit::NotRun {
    wit::NotRun {
        reason: match reason {
            NotRunReason::LeaseHeld => wit::NotRunReason::LeaseHeld,
            NotRunReason::LeaseError => wit::NotRunReason::LeaseError,
        },
        code: c.map(code),
    }
}

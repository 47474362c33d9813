//! Conversions between the WIT records wasmtime generates for `heart:fleet/types` and the
//! core's types, so [`crate::ComponentFleet`] returns exactly what `HeartFleet` returns.
//! Free-form JSON travels as JSON text; text the component hands back that is not JSON is a
//! `store-protocol` error.

use heart_fleet_core as core;
use heart_fleet_core::ops::{
    AcquireResult, EffectError, Fenced, GuardResult, LivenessSummary, LostCause, ReclaimSummary, ReconcileSummary,
    ReleaseTo, RunError, SendResult,
};
use heart_fleet_core::session::NotRunReason;
use heart_fleet_core::{ErrorCode, HeartError, HeartEvent, HeartMetrics, HeartReceipt, Timestamp};
use serde_json::Value;

use crate::bindings::heart::fleet::types as wit;

fn protocol(message: String) -> HeartError {
    HeartError::new(ErrorCode::StoreProtocol, message)
}

fn json(what: &str, text: String) -> Result<Value, HeartError> {
    serde_json::from_str(&text).map_err(|e| protocol(format!("the component returned {what} that is not JSON: {e}")))
}

fn opt_json(what: &str, text: Option<String>) -> Result<Option<Value>, HeartError> {
    text.map(|t| json(what, t)).transpose()
}

/// The WIT error as the core's.
pub fn error(e: wit::HeartError) -> HeartError {
    use wit::HeartError as W;
    let (code, message) = match e {
        W::InvalidInput(m) => (ErrorCode::InvalidInput, m),
        W::RunNotFound(m) => (ErrorCode::RunNotFound, m),
        W::LeaseHeld(m) => (ErrorCode::LeaseHeld, m),
        W::Collision(m) => (ErrorCode::Collision, m),
        W::FenceRejected(m) => (ErrorCode::FenceRejected, m),
        W::Quarantined(m) => (ErrorCode::Quarantined, m),
        W::Deduped(m) => (ErrorCode::Deduped, m),
        W::StoreUnavailable(m) => (ErrorCode::StoreUnavailable, m),
        W::StoreProtocol(m) => (ErrorCode::StoreProtocol, m),
        W::ReceiptTampered(m) => (ErrorCode::ReceiptTampered, m),
        W::EffectFailed(m) => (ErrorCode::EffectFailed, m),
        W::InvalidState(m) => (ErrorCode::InvalidState, m),
        // `other` is "<code>: <message>" for codes this host may know by now.
        W::Other(m) => match m.split_once(": ").and_then(|(c, rest)| Some((ErrorCode::parse(c)?, rest))) {
            Some((code, rest)) => (code, rest.to_owned()),
            None => (ErrorCode::StoreProtocol, m),
        },
    };
    HeartError::new(code, message)
}

fn code(c: wit::ErrorCode) -> ErrorCode {
    use wit::ErrorCode as W;
    match c {
        W::InvalidInput => ErrorCode::InvalidInput,
        W::RunNotFound => ErrorCode::RunNotFound,
        W::LeaseHeld => ErrorCode::LeaseHeld,
        W::Collision => ErrorCode::Collision,
        W::FenceRejected => ErrorCode::FenceRejected,
        W::Quarantined => ErrorCode::Quarantined,
        W::Deduped => ErrorCode::Deduped,
        W::StoreUnavailable => ErrorCode::StoreUnavailable,
        W::StoreProtocol | W::Other => ErrorCode::StoreProtocol,
        W::ReceiptTampered => ErrorCode::ReceiptTampered,
        W::EffectFailed => ErrorCode::EffectFailed,
        W::InvalidState => ErrorCode::InvalidState,
    }
}

/// A token for the component.
pub fn token_out(t: &core::FencingToken) -> wit::FencingToken {
    wit::FencingToken {
        run_id: t.run_id.clone(),
        owner: t.owner.clone(),
        lease_expires_at: t.lease_expires_at.0,
        epoch: t.epoch,
    }
}

/// A token from the component.
pub fn token(t: wit::FencingToken) -> core::FencingToken {
    core::FencingToken {
        run_id: t.run_id,
        owner: t.owner,
        lease_expires_at: Timestamp(t.lease_expires_at),
        epoch: t.epoch,
    }
}

/// A run status for the component.
pub fn status_out(s: core::RunStatus) -> wit::RunStatus {
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

fn status(s: wit::RunStatus) -> core::RunStatus {
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

/// A run row from the component.
pub fn run(r: wit::RunRow) -> Result<core::RunRow, HeartError> {
    Ok(core::RunRow {
        id: r.id,
        task_id: r.task_id,
        assignment_id: r.assignment_id,
        objective: r.objective,
        required_capabilities: r.required_capabilities,
        status: status(r.status),
        assigned_agent: r.assigned_agent,
        lease_owner: r.lease_owner,
        lease_expires_at: r.lease_expires_at.map(Timestamp),
        retries: r.retries,
        budget: opt_json("a budget", r.budget)?,
        approval_state: r.approval_state,
        visibility: r.visibility,
        idempotency_key: r.idempotency_key,
        created_by: r.created_by,
        created_at: Timestamp(r.created_at),
        updated_at: Timestamp(r.updated_at),
        fencing_epoch: r.fencing_epoch,
    })
}

/// A run row for the component (a store answer).
pub fn run_out(r: core::RunRow) -> wit::RunRow {
    wit::RunRow {
        id: r.id,
        task_id: r.task_id,
        assignment_id: r.assignment_id,
        objective: r.objective,
        required_capabilities: r.required_capabilities,
        status: status_out(r.status),
        assigned_agent: r.assigned_agent,
        lease_owner: r.lease_owner,
        lease_expires_at: r.lease_expires_at.map(|t| t.0),
        retries: r.retries,
        budget: r.budget.map(|v| v.to_string()),
        approval_state: r.approval_state,
        visibility: r.visibility,
        idempotency_key: r.idempotency_key,
        created_by: r.created_by,
        created_at: r.created_at.0,
        updated_at: r.updated_at.0,
        fencing_epoch: r.fencing_epoch,
    }
}

/// An intent row for the component (a store answer).
pub fn intent_out(r: core::IntentRow) -> wit::IntentRow {
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
        external_ref: r.external_ref.map(|v| v.to_string()),
        attempts: r.attempts,
        last_error: r.last_error,
        created_at: r.created_at.0,
        committed_at: r.committed_at.map(|t| t.0),
    }
}

/// An instance row for the component (a store answer).
pub fn instance_out(r: core::InstanceRow) -> wit::InstanceRow {
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
        metadata: r.metadata.map(|v| v.to_string()),
    }
}

/// Run rows from the component.
pub fn runs(rows: Vec<wit::RunRow>) -> Result<Vec<core::RunRow>, HeartError> {
    rows.into_iter().map(run).collect()
}

/// An intent row from the component (for the host's probe).
pub fn intent(r: wit::IntentRow) -> Result<core::IntentRow, String> {
    use core::IntentState as S;
    let external_ref = match r.external_ref {
        Some(t) => Some(serde_json::from_str(&t).map_err(|e| format!("the intent's external_ref is not JSON: {e}"))?),
        None => None,
    };
    Ok(core::IntentRow {
        run_id: r.run_id,
        effect_key: r.effect_key,
        state: match r.state {
            wit::IntentState::Intent => S::Intent,
            wit::IntentState::Dispatched => S::Dispatched,
            wit::IntentState::Committed => S::Committed,
            wit::IntentState::Abandoned => S::Abandoned,
        },
        channel: r.channel,
        payload_digest: r.payload_digest,
        fence_owner: r.fence_owner,
        fence_expires_at: r.fence_expires_at.map(Timestamp),
        fence_epoch: r.fence_epoch,
        external_ref,
        attempts: r.attempts,
        last_error: r.last_error,
        created_at: Timestamp(r.created_at),
        committed_at: r.committed_at.map(Timestamp),
    })
}

/// An instance row from the component.
pub fn instance(r: wit::InstanceRow) -> Result<core::InstanceRow, HeartError> {
    use core::InstanceStatus as S;
    Ok(core::InstanceRow {
        instance_id: r.instance_id,
        hostname: r.hostname,
        pid: r.pid,
        status: match r.status {
            wit::InstanceStatus::Alive => S::Alive,
            wit::InstanceStatus::Draining => S::Draining,
            wit::InstanceStatus::Dead => S::Dead,
        },
        started_at: Timestamp(r.started_at),
        last_heartbeat: Timestamp(r.last_heartbeat),
        metadata: opt_json("instance metadata", r.metadata)?,
    })
}

fn event(e: wit::HeartEvent) -> HeartEvent {
    use wit::HeartEvent as W;
    match e {
        W::Acquired => HeartEvent::Acquired,
        W::Renewed => HeartEvent::Renewed,
        W::Released => HeartEvent::Released,
        W::Reclaimed => HeartEvent::Reclaimed,
        W::Quarantined => HeartEvent::Quarantined,
        W::FenceVerified => HeartEvent::FenceVerified,
        W::FenceRejected => HeartEvent::FenceRejected,
        W::EffectCommitted => HeartEvent::EffectCommitted,
        W::EffectDeduped => HeartEvent::EffectDeduped,
        W::Requeued => HeartEvent::Requeued,
        W::ForceReleased => HeartEvent::ForceReleased,
    }
}

/// A receipt from the component.
pub fn receipt(r: wit::Receipt) -> HeartReceipt {
    HeartReceipt {
        schema_version: r.schema_version.into(),
        event: event(r.event),
        run_id: r.run_id,
        owner: r.owner,
        lease_expires_at: r.lease_expires_at,
        effect_key: r.effect_key,
        at: r.at,
        digest: r.digest,
    }
}

/// The counters from the component.
pub fn metrics(m: wit::Metrics) -> HeartMetrics {
    HeartMetrics {
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

/// `a + b`, counter by counter.
pub fn add_metrics(a: &HeartMetrics, b: &HeartMetrics) -> HeartMetrics {
    HeartMetrics {
        acquire_attempts: a.acquire_attempts + b.acquire_attempts,
        acquire_wins: a.acquire_wins + b.acquire_wins,
        acquire_collisions: a.acquire_collisions + b.acquire_collisions,
        renews: a.renews + b.renews,
        renew_failures: a.renew_failures + b.renew_failures,
        releases: a.releases + b.releases,
        release_failures: a.release_failures + b.release_failures,
        reclaims: a.reclaims + b.reclaims,
        quarantines: a.quarantines + b.quarantines,
        fence_verifications: a.fence_verifications + b.fence_verifications,
        fence_rejections: a.fence_rejections + b.fence_rejections,
        effect_commits: a.effect_commits + b.effect_commits,
        effect_dedupes: a.effect_dedupes + b.effect_dedupes,
    }
}

/// `acquire`'s result from the component.
pub fn acquire_result(r: wit::AcquireResult) -> Result<AcquireResult, HeartError> {
    Ok(AcquireResult {
        acquired: r.acquired,
        run: r.run.map(run).transpose()?,
        fence: r.fence.map(token),
        reason: r.reason,
        code: r.code.map(code),
    })
}

/// A lost cause from the component.
pub fn lost(c: wit::LostCause) -> LostCause {
    match c {
        wit::LostCause::Superseded => LostCause::Superseded,
        wit::LostCause::Expired => LostCause::Expired,
        wit::LostCause::Released => LostCause::Released,
        wit::LostCause::NotFound => LostCause::NotFound,
        wit::LostCause::StoreUnavailable => LostCause::StoreUnavailable,
    }
}

/// A renew's outcome from the component.
pub fn renewed(r: wit::Renewed) -> Fenced<core::FencingToken> {
    match r {
        wit::Renewed::Ok(t) => Fenced::Ok { value: token(t) },
        wit::Renewed::Rejected(c) => Fenced::Rejected { cause: lost(c) },
    }
}

/// A release's outcome from the component.
pub fn released(r: wit::Released) -> Result<Fenced<core::RunRow>, HeartError> {
    Ok(match r {
        wit::Released::Ok(row) => Fenced::Ok { value: run(row)? },
        wit::Released::Rejected(c) => Fenced::Rejected { cause: lost(c) },
    })
}

/// A release target for the component.
pub fn release_to(t: ReleaseTo) -> wit::ReleaseTo {
    match t {
        ReleaseTo::Completed => wit::ReleaseTo::Completed,
        ReleaseTo::Failed => wit::ReleaseTo::Failed,
        ReleaseTo::Cancelled => wit::ReleaseTo::Cancelled,
        ReleaseTo::Ready => wit::ReleaseTo::Ready,
    }
}

fn run_errors(errors: Vec<wit::RunError>) -> Vec<RunError> {
    errors.into_iter().map(|e| RunError { run_id: e.run_id, error: e.error }).collect()
}

/// The sweep's summary from the component.
pub fn reclaim_summary(s: wit::ReclaimSummary) -> ReclaimSummary {
    ReclaimSummary {
        reclaimed_count: s.reclaimed_count,
        reclaimed_ids: s.reclaimed_ids,
        quarantined_ids: s.quarantined_ids,
        errors: run_errors(s.errors),
    }
}

/// The liveness pass's summary from the component.
pub fn liveness_summary(s: wit::LivenessSummary) -> LivenessSummary {
    LivenessSummary {
        dead_instance_ids: s.dead_instance_ids,
        reclaimed_count: s.reclaimed_count,
        reclaimed_ids: s.reclaimed_ids,
        quarantined_ids: s.quarantined_ids,
        errors: run_errors(s.errors),
    }
}

/// `guard-irreversible`'s result from the component.
pub fn guard_result(r: wit::GuardResult) -> Result<GuardResult, HeartError> {
    Ok(GuardResult {
        committed: r.committed,
        result: opt_json("an effect result", r.result)?,
        reason: r.reason,
        code: r.code.map(code),
    })
}

/// `send-once`'s result from the component.
pub fn send_result(r: wit::SendResult) -> Result<SendResult, HeartError> {
    Ok(SendResult {
        sent: r.sent,
        external_ref: opt_json("an external_ref", r.external_ref)?,
        committed: r.committed,
        reason: r.reason,
        code: r.code.map(code),
    })
}

/// The reconciler's summary from the component.
pub fn reconcile_summary(s: wit::ReconcileSummary) -> ReconcileSummary {
    ReconcileSummary {
        scanned: s.scanned,
        committed: s.committed,
        reopened: s.reopened,
        abandoned: s.abandoned,
        left: s.left,
        errors: s.errors.into_iter().map(|e| EffectError { effect_key: e.effect_key, error: e.error }).collect(),
    }
}

/// Why execute-with-lease did not run, from the component.
pub fn not_run(n: wit::NotRun) -> (NotRunReason, Option<ErrorCode>) {
    let reason = match n.reason {
        wit::NotRunReason::LeaseHeld => NotRunReason::LeaseHeld,
        wit::NotRunReason::LeaseError => NotRunReason::LeaseError,
    };
    (reason, n.code.map(code))
}

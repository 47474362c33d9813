//! The execute-with-lease loop as pure state: the heartbeat schedule, renew and release
//! serialized on the newest token (fix 7), and the lease-lost signal with its cause.
//!
//! Hosts own the timers. They call [`LeaseSession::on_acquired`] after the acquire, run a
//! beat every [`LeaseSession::interval_ms`] (never two at once, and never during the
//! release), report each renew with [`LeaseSession::on_renewed`], and release with
//! [`LeaseSession::fence`] (always the newest token) once the work is done. Times passed
//! in are the host's monotonic milliseconds, used only for scheduling.

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, HeartError};
use crate::model::FencingToken;
use crate::ops::{Fenced, LostCause, ReleaseTo, validate_ttl};

/// Where execute-with-lease leaves the run once the work is done: `completed` when it
/// succeeded (`ready` with `release_to_ready`, for a resource run that repeats), `failed`
/// when it threw.
pub fn release_status(work_succeeded: bool, release_to_ready: bool) -> ReleaseTo {
    match (work_succeeded, release_to_ready) {
        (true, true) => ReleaseTo::Ready,
        (true, false) => ReleaseTo::Completed,
        (false, _) => ReleaseTo::Failed,
    }
}

/// The reference's heartbeat cadence: `renewEveryMs ?? max(1000, floor(ttlSeconds*1000/2))`.
pub fn heartbeat_interval_ms(ttl_seconds: i64, renew_every_ms: Option<i64>) -> i64 {
    renew_every_ms.unwrap_or_else(|| (ttl_seconds.saturating_mul(1000) / 2).max(1000))
}

/// Why execute-with-lease did not run the work (the reference's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NotRunReason {
    /// Someone else holds the run, or it is in a status that cannot be acquired.
    LeaseHeld,
    /// Bad input, or the run was not found.
    LeaseError,
}

impl NotRunReason {
    /// Why execute-with-lease did not run the work when its options were bad (the ttl or the
    /// renewal period): `lease-error`.
    pub const ON_INVALID_INPUT: NotRunReason = NotRunReason::LeaseError;

    /// Why an acquire that did not win leaves the work not run: `lease-held` when the run
    /// exists (`run_found`), else `lease-error` (not found, or bad input).
    pub fn after_acquire(run_found: bool) -> NotRunReason {
        if run_found { NotRunReason::LeaseHeld } else { NotRunReason::LeaseError }
    }

    /// The stable text (the reference's `reason`).
    pub fn as_str(self) -> &'static str {
        match self {
            NotRunReason::LeaseHeld => "lease-held",
            NotRunReason::LeaseError => "lease-error",
        }
    }
}

/// The lease state of one execute-with-lease call.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseSession {
    ttl_ms: i64,
    interval_ms: i64,
    fence: Option<FencingToken>,
    lost: Option<LostCause>,
    last_ok_ms: i64,
}

impl LeaseSession {
    /// A session for a lease of `ttl_seconds` (validated) renewed every `renew_every_ms`
    /// (default: the reference's cadence).
    pub fn new(ttl_seconds: i64, renew_every_ms: Option<i64>) -> Result<LeaseSession, HeartError> {
        let ttl_ms = validate_ttl(ttl_seconds)?;
        if let Some(ms) = renew_every_ms
            && (ms < 1 || ms > ttl_ms)
        {
            return Err(HeartError::invalid(format!("renewEveryMs must be in 1..={ttl_ms}, got {ms}")));
        }
        Ok(LeaseSession {
            ttl_ms,
            interval_ms: heartbeat_interval_ms(ttl_seconds, renew_every_ms),
            fence: None,
            lost: None,
            last_ok_ms: 0,
        })
    }

    /// The heartbeat period in milliseconds.
    pub fn interval_ms(&self) -> i64 {
        self.interval_ms
    }

    /// Records the token of a successful acquire, made at host time `started_ms`.
    pub fn on_acquired(&mut self, fence: FencingToken, started_ms: i64) {
        self.fence = Some(fence);
        self.last_ok_ms = started_ms;
    }

    /// The newest token.
    pub fn fence(&self) -> Option<&FencingToken> {
        self.fence.as_ref()
    }

    /// Why the lease was lost, once it was.
    pub fn lost(&self) -> Option<LostCause> {
        self.lost
    }

    /// Whether a beat should renew now (held and not lost).
    pub fn should_renew(&self) -> bool {
        self.fence.is_some() && self.lost.is_none()
    }

    /// Records a renew that started at host time `started_ms`. A definite miss loses the
    /// lease with its cause; a store failure is retried on the next beat unless the held
    /// expiry has passed meanwhile. Returns the cause when this call lost the lease.
    pub fn on_renewed(
        &mut self,
        result: &Result<Fenced<FencingToken>, HeartError>,
        started_ms: i64,
    ) -> Option<LostCause> {
        if self.lost.is_some() {
            return None;
        }
        match result {
            Ok(Fenced::Ok { value }) => {
                self.fence = Some(value.clone());
                self.last_ok_ms = started_ms;
                None
            }
            Ok(Fenced::Rejected { cause }) => {
                self.lost = Some(*cause);
                self.lost
            }
            Err(e) if e.code == ErrorCode::InvalidInput => {
                self.lost = Some(LostCause::Superseded);
                self.lost
            }
            Err(_) => self.check_expiry(started_ms),
        }
    }

    /// Loses the lease (`store-unavailable`) if the held expiry passed at host time
    /// `now_ms` without a successful renew.
    pub fn check_expiry(&mut self, now_ms: i64) -> Option<LostCause> {
        if self.lost.is_none() && self.fence.is_some() && now_ms - self.last_ok_ms >= self.ttl_ms {
            self.lost = Some(LostCause::StoreUnavailable);
            return self.lost;
        }
        None
    }

    /// Whether the release is worth sending: not when the lease is definitely gone.
    pub fn should_release(&self) -> bool {
        self.fence.is_some() && matches!(self.lost, None | Some(LostCause::StoreUnavailable))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_decides_the_release_status() {
        assert_eq!(release_status(true, false), ReleaseTo::Completed);
        assert_eq!(release_status(true, true), ReleaseTo::Ready);
        assert_eq!(release_status(false, true), ReleaseTo::Failed);
        assert_eq!(release_status(false, false), ReleaseTo::Failed);
    }
    use crate::time::Timestamp;

    #[test]
    fn cadence_matches_the_reference() {
        assert_eq!(heartbeat_interval_ms(60, None), 30_000);
        assert_eq!(heartbeat_interval_ms(1, None), 1000);
        assert_eq!(heartbeat_interval_ms(3, None), 1500);
        assert_eq!(heartbeat_interval_ms(7, None), 3500);
        assert_eq!(heartbeat_interval_ms(60, Some(5000)), 5000);
    }

    #[test]
    fn store_failures_lose_the_lease_only_after_the_expiry() {
        let mut s = LeaseSession::new(60, None).unwrap();
        let fence =
            FencingToken { run_id: "r".into(), owner: "w".into(), lease_expires_at: Timestamp(60_000), epoch: Some(1) };
        s.on_acquired(fence, 0);
        let failed: Result<Fenced<FencingToken>, HeartError> =
            Err(HeartError::new(ErrorCode::StoreUnavailable, "down"));
        assert_eq!(s.on_renewed(&failed, 30_000), None);
        assert!(s.should_renew());
        assert_eq!(s.on_renewed(&failed, 60_000), Some(LostCause::StoreUnavailable));
        assert!(s.should_release());
        let mut s2 = LeaseSession::new(60, None).unwrap();
        s2.on_acquired(
            FencingToken { run_id: "r".into(), owner: "w".into(), lease_expires_at: Timestamp(60_000), epoch: None },
            0,
        );
        assert_eq!(
            s2.on_renewed(&Ok(Fenced::Rejected { cause: LostCause::Superseded }), 30_000),
            Some(LostCause::Superseded)
        );
        assert!(!s2.should_release());
    }

    #[test]
    fn bad_cadence_is_invalid_input() {
        assert_eq!(LeaseSession::new(0, None).unwrap_err().code, ErrorCode::InvalidInput);
        assert_eq!(LeaseSession::new(10, Some(0)).unwrap_err().code, ErrorCode::InvalidInput);
        assert_eq!(LeaseSession::new(10, Some(10_001)).unwrap_err().code, ErrorCode::InvalidInput);
    }
}

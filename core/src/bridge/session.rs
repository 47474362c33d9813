//! [`BridgeSession`]: the execute-with-lease state (heartbeat schedule, newest token,
//! lease-lost cause). The host owns the timers and the work; this decides.

use serde::Deserialize;
use serde_json::Value;

use super::{BridgeResult, invalid, parse_json};
use crate::ops::Fenced;
use crate::session::{LeaseSession, heartbeat_interval_ms};
use crate::{ErrorCode, FencingToken, HeartError};

/// The lease state of one execute-with-lease call.
#[derive(Debug)]
pub struct BridgeSession {
    inner: LeaseSession,
}

#[derive(Deserialize)]
struct ErrorJson {
    code: String,
    message: String,
}

#[derive(Deserialize)]
struct DoneJson {
    #[serde(default)]
    ok: Option<Value>,
    #[serde(default)]
    error: Option<ErrorJson>,
}

/// The result of a renew operation's final step (JSON text).
fn renew_result(done: &str) -> Result<Result<Fenced<FencingToken>, HeartError>, String> {
    let d: DoneJson = serde_json::from_str(done).map_err(|e| format!("not a renew step: {e}"))?;
    match (d.ok, d.error) {
        (Some(ok), _) => Ok(Ok(serde_json::from_str(&ok.to_string()).map_err(|e| format!("not a renew result: {e}"))?)),
        (None, Some(e)) => {
            let code = ErrorCode::parse(&e.code).unwrap_or(ErrorCode::StoreUnavailable);
            Ok(Err(HeartError::new(code, e.message)))
        }
        (None, None) => Err("a renew step without a result".into()),
    }
}

impl BridgeSession {
    /// A session for a lease of `ttl_seconds` renewed every `renew_every_ms` (default: the
    /// reference's `max(1000, ttl*1000/2)`). Bad values are `invalid-input`.
    pub fn new(ttl_seconds: i64, renew_every_ms: Option<i64>) -> BridgeResult<BridgeSession> {
        LeaseSession::new(ttl_seconds, renew_every_ms).map(|inner| BridgeSession { inner })
    }

    /// The heartbeat period in milliseconds.
    pub fn interval_ms(&self) -> i64 {
        self.inner.interval_ms()
    }

    /// Records the acquired token (JSON) at host time `started_ms`.
    pub fn on_acquired(&mut self, fence: &str, started_ms: i64) -> BridgeResult<()> {
        let fence: FencingToken = parse_json(fence, "not a fencing token")?;
        self.inner.on_acquired(fence, started_ms);
        Ok(())
    }

    /// The newest token (JSON), if any.
    pub fn fence_json(&self) -> Option<String> {
        self.inner.fence().and_then(|f| serde_json::to_string(f).ok())
    }

    /// Why the lease was lost (`superseded`, `expired`, `released`, `not-found`,
    /// `store-unavailable`), once it was.
    pub fn lost(&self) -> Option<&'static str> {
        self.inner.lost().map(|c| c.as_str())
    }

    /// Whether a beat should renew now.
    pub fn should_renew(&self) -> bool {
        self.inner.should_renew()
    }

    /// Records a renew that started at host time `started_ms`, given the renew operation's
    /// final step (JSON). Returns the cause when this renew lost the lease.
    pub fn on_renewed(&mut self, done: &str, started_ms: i64) -> BridgeResult<Option<&'static str>> {
        let result = renew_result(done).map_err(invalid)?;
        Ok(self.inner.on_renewed(&result, started_ms).map(|c| c.as_str()))
    }

    /// Loses the lease (`store-unavailable`) if the held expiry passed at host time `now_ms`
    /// without a successful renew. Returns the cause when it did.
    pub fn check_expiry(&mut self, now_ms: i64) -> Option<&'static str> {
        self.inner.check_expiry(now_ms).map(|c| c.as_str())
    }

    /// Whether the final release is worth sending.
    pub fn should_release(&self) -> bool {
        self.inner.should_release()
    }
}

/// The status execute-with-lease releases to (`completed`, `ready` or `failed`; see
/// [`crate::session::release_status`]).
pub fn release_status(work_succeeded: bool, release_to_ready: bool) -> &'static str {
    crate::session::release_status(work_succeeded, release_to_ready).as_str()
}

/// The heartbeat period (ms) for a lease of `ttl_seconds`: `renew_every_ms` when given,
/// else the reference's `max(1000, ttl*1000/2)`.
pub fn heartbeat_interval(ttl_seconds: i64, renew_every_ms: Option<i64>) -> i64 {
    heartbeat_interval_ms(ttl_seconds, renew_every_ms)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    #[test]
    fn the_contract_names_the_code_of_each_lost_cause_and_why_work_did_not_run() {
        let contract: Value = serde_json::from_str(&super::super::contract_json()).unwrap();
        assert_eq!(
            contract["lostCodes"],
            json!({
                "superseded": "fence-rejected",
                "expired": "fence-rejected",
                "released": "fence-rejected",
                "not-found": "fence-rejected",
                "store-unavailable": "store-unavailable",
            })
        );
        assert_eq!(
            contract["notRunReasons"],
            json!({"runFound": "lease-held", "runMissing": "lease-error", "invalidInput": "lease-error"})
        );
    }
}

//! [`NativeLeaseSession`]: the core's execute-with-lease state (heartbeat schedule, newest
//! token, lease-lost cause). JavaScript owns the timers and the work; this decides.

use heart_fleet_core::ops::Fenced;
use heart_fleet_core::session::{LeaseSession, heartbeat_interval_ms};
use heart_fleet_core::{ErrorCode, FencingToken, HeartError};
use napi_derive::napi;
use serde::Deserialize;
use serde_json::Value;

use crate::{Code, from_heart, invalid};

/// The lease state of one `executeWithLease` call.
#[napi]
pub struct NativeLeaseSession {
    inner: LeaseSession,
}

#[derive(Deserialize)]
struct ErrorJson {
    code: String,
    message: String,
}

/// A renew operation's final step, as [`crate::NativeOp`] reports it.
#[derive(Deserialize)]
struct DoneJson {
    #[serde(default)]
    ok: Option<Value>,
    #[serde(default)]
    error: Option<ErrorJson>,
}

fn renew_result(done: &str) -> Result<Result<Fenced<FencingToken>, HeartError>, String> {
    let d: DoneJson = serde_json::from_str(done).map_err(|e| format!("not a renew step: {e}"))?;
    match (d.ok, d.error) {
        (Some(ok), _) => Ok(Ok(serde_json::from_value(ok).map_err(|e| format!("not a renew result: {e}"))?)),
        (None, Some(e)) => {
            let code = ErrorCode::parse(&e.code).unwrap_or(ErrorCode::StoreUnavailable);
            Ok(Err(HeartError::new(code, e.message)))
        }
        (None, None) => Err("a renew step without a result".into()),
    }
}

#[napi]
impl NativeLeaseSession {
    /// A session for a lease of `ttl_seconds` renewed every `renew_every_ms` (default: the
    /// reference's `max(1000, ttl*1000/2)`). Bad values are `invalid-input`.
    #[napi(factory)]
    pub fn create(ttl_seconds: i64, renew_every_ms: Option<i64>) -> napi::Result<NativeLeaseSession, Code> {
        LeaseSession::new(ttl_seconds, renew_every_ms).map(|inner| NativeLeaseSession { inner }).map_err(from_heart)
    }

    /// The heartbeat period in milliseconds.
    #[napi]
    pub fn interval_ms(&self) -> i64 {
        self.inner.interval_ms()
    }

    /// Records the acquired token (JSON) at host time `started_ms`.
    #[napi]
    pub fn on_acquired(&mut self, fence: String, started_ms: i64) -> napi::Result<(), Code> {
        let fence: FencingToken =
            serde_json::from_str(&fence).map_err(|e| invalid(format!("not a fencing token: {e}")))?;
        self.inner.on_acquired(fence, started_ms);
        Ok(())
    }

    /// The newest token (JSON), if any.
    #[napi]
    pub fn fence_json(&self) -> Option<String> {
        self.inner.fence().and_then(|f| serde_json::to_string(f).ok())
    }

    /// Why the lease was lost (`superseded`, `expired`, `released`, `not-found`,
    /// `store-unavailable`), once it was.
    #[napi]
    pub fn lost(&self) -> Option<String> {
        self.inner.lost().map(|c| c.as_str().to_owned())
    }

    /// Whether a beat should renew now.
    #[napi]
    pub fn should_renew(&self) -> bool {
        self.inner.should_renew()
    }

    /// Records a renew that started at host time `started_ms`, given the renew
    /// operation's final step (JSON). Returns the cause when this renew lost the lease.
    #[napi]
    pub fn on_renewed(&mut self, done: String, started_ms: i64) -> napi::Result<Option<String>, Code> {
        let result = renew_result(&done).map_err(invalid)?;
        Ok(self.inner.on_renewed(&result, started_ms).map(|c| c.as_str().to_owned()))
    }

    /// Loses the lease (`store-unavailable`) if the held expiry passed at host time
    /// `now_ms` without a successful renew. Returns the cause when it did.
    #[napi]
    pub fn check_expiry(&mut self, now_ms: i64) -> Option<String> {
        self.inner.check_expiry(now_ms).map(|c| c.as_str().to_owned())
    }

    /// Whether the final release is worth sending.
    #[napi]
    pub fn should_release(&self) -> bool {
        self.inner.should_release()
    }
}

/// The reference's heartbeat cadence: `renewEveryMs ?? max(1000, floor(ttlSeconds*1000/2))`.
#[napi]
pub fn heartbeat_interval(ttl_seconds: i64, renew_every_ms: Option<i64>) -> i64 {
    heartbeat_interval_ms(ttl_seconds, renew_every_ms)
}

//! [`NativeLeaseSession`]: the core's execute-with-lease state (heartbeat schedule, newest
//! token, lease-lost cause). JavaScript owns the timers and the work; this decides. A thin
//! napi wrapper over [`heart_fleet_core::bridge::BridgeSession`].

use heart_fleet_core::bridge::{self, BridgeSession};
use napi_derive::napi;

use crate::{Code, from_heart};

/// The lease state of one `executeWithLease` call.
#[napi]
pub struct NativeLeaseSession {
    inner: BridgeSession,
}

#[napi]
impl NativeLeaseSession {
    /// A session for a lease of `ttl_seconds` renewed every `renew_every_ms` (default: the
    /// reference's `max(1000, ttl*1000/2)`). Bad values are `invalid-input`.
    #[napi(factory)]
    pub fn create(ttl_seconds: i64, renew_every_ms: Option<i64>) -> napi::Result<NativeLeaseSession, Code> {
        BridgeSession::new(ttl_seconds, renew_every_ms).map(|inner| NativeLeaseSession { inner }).map_err(from_heart)
    }

    /// The heartbeat period in milliseconds.
    #[napi]
    pub fn interval_ms(&self) -> i64 {
        self.inner.interval_ms()
    }

    /// Records the acquired token (JSON) at host time `started_ms`.
    #[napi]
    pub fn on_acquired(&mut self, fence: String, started_ms: i64) -> napi::Result<(), Code> {
        self.inner.on_acquired(&fence, started_ms).map_err(from_heart)
    }

    /// The newest token (JSON), if any.
    #[napi]
    pub fn fence_json(&self) -> Option<String> {
        self.inner.fence_json()
    }

    /// Why the lease was lost (`superseded`, `expired`, `released`, `not-found`,
    /// `store-unavailable`), once it was.
    #[napi]
    pub fn lost(&self) -> Option<String> {
        self.inner.lost().map(str::to_owned)
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
        self.inner.on_renewed(&done, started_ms).map(|c| c.map(str::to_owned)).map_err(from_heart)
    }

    /// Loses the lease (`store-unavailable`) if the held expiry passed at host time
    /// `now_ms` without a successful renew. Returns the cause when it did.
    #[napi]
    pub fn check_expiry(&mut self, now_ms: i64) -> Option<String> {
        self.inner.check_expiry(now_ms).map(str::to_owned)
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
    bridge::heartbeat_interval(ttl_seconds, renew_every_ms)
}

/// Where execute-with-lease leaves the run once the work is done: `completed` (`ready` with
/// `releaseToReady`) when it succeeded, `failed` when it threw (the core's
/// `session::release_status`).
#[napi]
pub fn release_status(work_succeeded: bool, release_to_ready: bool) -> &'static str {
    bridge::release_status(work_succeeded, release_to_ready)
}

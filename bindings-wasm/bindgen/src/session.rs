//! [`NativeLeaseSession`]: the core's execute-with-lease state (heartbeat schedule, newest
//! token, lease-lost cause). JavaScript owns the timers and the work; this decides.

use heart_fleet_core::bridge::{self, BridgeSession};
use wasm_bindgen::prelude::*;

use crate::{from_heart, int, num, opt_int, text};

/// The lease state of one `executeWithLease` call.
#[wasm_bindgen]
pub struct NativeLeaseSession {
    inner: BridgeSession,
}

#[wasm_bindgen]
impl NativeLeaseSession {
    /// A session for a lease of `ttlSeconds` renewed every `renewEveryMs` (default: the
    /// reference's `max(1000, ttl*1000/2)`). Bad values are `invalid-input`.
    pub fn create(ttl_seconds: JsValue, renew_every_ms: JsValue) -> Result<NativeLeaseSession, JsValue> {
        let ttl = int("ttlSeconds", &ttl_seconds)?;
        let every = opt_int("renewEveryMs", &renew_every_ms)?;
        BridgeSession::new(ttl, every).map(|inner| NativeLeaseSession { inner }).map_err(from_heart)
    }

    /// The heartbeat period in milliseconds.
    #[wasm_bindgen(js_name = intervalMs)]
    pub fn interval_ms(&self) -> f64 {
        num(self.inner.interval_ms())
    }

    /// Records the acquired token (JSON) at host time `startedMs`.
    #[wasm_bindgen(js_name = onAcquired)]
    pub fn on_acquired(&mut self, fence: JsValue, started_ms: JsValue) -> Result<(), JsValue> {
        let fence = text("fence", &fence)?;
        self.inner.on_acquired(&fence, int("startedMs", &started_ms)?).map_err(from_heart)
    }

    /// The newest token (JSON), if any.
    #[wasm_bindgen(js_name = fenceJson)]
    pub fn fence_json(&self) -> Option<String> {
        self.inner.fence_json()
    }

    /// Why the lease was lost (`superseded`, `expired`, `released`, `not-found`,
    /// `store-unavailable`), once it was.
    pub fn lost(&self) -> Option<String> {
        self.inner.lost().map(str::to_owned)
    }

    /// Whether a beat should renew now.
    #[wasm_bindgen(js_name = shouldRenew)]
    pub fn should_renew(&self) -> bool {
        self.inner.should_renew()
    }

    /// Records a renew that started at host time `startedMs`, given the renew operation's
    /// final step (JSON). Returns the cause when this renew lost the lease.
    #[wasm_bindgen(js_name = onRenewed)]
    pub fn on_renewed(&mut self, done: JsValue, started_ms: JsValue) -> Result<Option<String>, JsValue> {
        let done = text("done", &done)?;
        self.inner.on_renewed(&done, int("startedMs", &started_ms)?).map(|c| c.map(str::to_owned)).map_err(from_heart)
    }

    /// Loses the lease (`store-unavailable`) if the held expiry passed at host time `nowMs`
    /// without a successful renew. Returns the cause when it did.
    #[wasm_bindgen(js_name = checkExpiry)]
    pub fn check_expiry(&mut self, now_ms: JsValue) -> Result<Option<String>, JsValue> {
        Ok(self.inner.check_expiry(int("nowMs", &now_ms)?).map(str::to_owned))
    }

    /// Whether the final release is worth sending.
    #[wasm_bindgen(js_name = shouldRelease)]
    pub fn should_release(&self) -> bool {
        self.inner.should_release()
    }
}

/// The reference's heartbeat cadence: `renewEveryMs ?? max(1000, floor(ttlSeconds*1000/2))`.
#[wasm_bindgen(js_name = heartbeatInterval)]
pub fn heartbeat_interval(ttl_seconds: JsValue, renew_every_ms: JsValue) -> Result<f64, JsValue> {
    let ttl = int("ttlSeconds", &ttl_seconds)?;
    Ok(num(bridge::heartbeat_interval(ttl, opt_int("renewEveryMs", &renew_every_ms)?)))
}

/// Where execute-with-lease leaves the run once the work is done: `completed` (`ready` with
/// `releaseToReady`) when it succeeded, `failed` when it threw (the core's
/// `session::release_status`).
#[wasm_bindgen(js_name = releaseStatus)]
pub fn release_status(work_succeeded: JsValue, release_to_ready: JsValue) -> Result<String, JsValue> {
    match (work_succeeded.as_bool(), release_to_ready.as_bool()) {
        (Some(ok), Some(to_ready)) => Ok(bridge::release_status(ok, to_ready).to_owned()),
        _ => Err(crate::invalid("releaseStatus: workSucceeded and releaseToReady must be booleans")),
    }
}

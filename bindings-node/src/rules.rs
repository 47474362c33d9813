//! The reference's pure helpers, decided by the core's one rule each: lease expiry,
//! `canAcquire`, instance expiry, and the in-process effect ledger. JavaScript reads the
//! clock values (a `Date`, an ISO string or milliseconds) and hands them over as numbers.

use heart_fleet_core::MemoryEffectLedger;
use heart_fleet_core::bridge;
use napi_derive::napi;

/// `isLeaseExpired`: no expiry (`null`), or expiry `<= now` (milliseconds).
#[napi]
pub fn lease_expired_ms(expires_at_ms: Option<f64>, now_ms: f64) -> bool {
    bridge::lease_expired_ms(expires_at_ms, now_ms)
}

/// `canAcquire`: `ready`, or `leased`/`running` with an expired lease.
#[napi]
pub fn can_acquire_ms(status: String, expires_at_ms: Option<f64>, now_ms: f64) -> bool {
    bridge::can_acquire_ms(&status, expires_at_ms, now_ms)
}

/// `isInstanceExpired`: `dead`, or silent for strictly more than `ttlMs`.
#[napi]
pub fn instance_expired_ms(status: String, last_heartbeat_ms: f64, now_ms: f64, ttl_ms: f64) -> bool {
    bridge::instance_expired_ms(&status, last_heartbeat_ms, now_ms, ttl_ms)
}

/// The row `id` of `table` (`agent_runs` or `agent_instances`) with every other column at the
/// value a partial row leaves it (JSON; `at`: ISO text): what a seeded row, or a store's row
/// without every column, starts from.
#[napi]
pub fn seeded_row_json(table: String, id: String, at: String) -> napi::Result<String, crate::Code> {
    bridge::seeded_row_json(&table, &id, &at).map_err(crate::from_heart)
}

/// The reference's in-process effect ledger (`MemoryEffectLedger`): a set of
/// `(runId, effectKey)`, lost with the process.
#[napi]
#[derive(Default)]
pub struct NativeEffectLedger {
    inner: MemoryEffectLedger,
}

#[napi]
impl NativeEffectLedger {
    /// An empty ledger.
    #[napi(constructor)]
    pub fn new() -> Self {
        Self::default()
    }

    /// `recordOnce(runId, effectKey)`: true the first time.
    #[napi]
    pub fn record_once(&mut self, run_id: String, effect_key: String) -> bool {
        self.inner.record_once(&run_id, &effect_key)
    }
}

//! The reference's pure helpers, decided by the core's one rule each: lease expiry,
//! `canAcquire`, instance expiry, and the in-process effect ledger. JavaScript reads the
//! clock values (a `Date`, an ISO string or milliseconds) and hands them over as numbers.

use heart_fleet_core::MemoryEffectLedger;
use heart_fleet_core::bridge;
use wasm_bindgen::prelude::*;

/// A number argument, or `invalid-input`.
fn number(name: &str, v: &JsValue) -> Result<f64, JsValue> {
    v.as_f64().ok_or_else(|| crate::invalid(&format!("{name} must be a number")))
}

/// `isLeaseExpired`: no expiry (`null`), or expiry `<= now` (milliseconds).
#[wasm_bindgen(js_name = leaseExpiredMs)]
pub fn lease_expired_ms(expires_at_ms: JsValue, now_ms: JsValue) -> Result<bool, JsValue> {
    let expires = if expires_at_ms.is_null() { None } else { Some(number("expiresAtMs", &expires_at_ms)?) };
    Ok(bridge::lease_expired_ms(expires, number("nowMs", &now_ms)?))
}

/// `canAcquire`: `ready`, or `leased`/`running` with an expired lease.
#[wasm_bindgen(js_name = canAcquireMs)]
pub fn can_acquire_ms(status: JsValue, expires_at_ms: JsValue, now_ms: JsValue) -> Result<bool, JsValue> {
    let expires = if expires_at_ms.is_null() { None } else { Some(number("expiresAtMs", &expires_at_ms)?) };
    Ok(bridge::can_acquire_ms(&crate::text("status", &status)?, expires, number("nowMs", &now_ms)?))
}

/// `isInstanceExpired`: `dead`, or silent for strictly more than `ttlMs`.
#[wasm_bindgen(js_name = instanceExpiredMs)]
pub fn instance_expired_ms(
    status: JsValue,
    last_heartbeat_ms: JsValue,
    now_ms: JsValue,
    ttl_ms: JsValue,
) -> Result<bool, JsValue> {
    Ok(bridge::instance_expired_ms(
        &crate::text("status", &status)?,
        number("lastHeartbeatMs", &last_heartbeat_ms)?,
        number("nowMs", &now_ms)?,
        number("ttlMs", &ttl_ms)?,
    ))
}

/// The row `id` of `table` (`agent_runs` or `agent_instances`) with every other column at the
/// value a partial row leaves it (JSON; `at`: ISO text): what a seeded row, or a store's row
/// without every column, starts from.
#[wasm_bindgen(js_name = seededRowJson)]
pub fn seeded_row_json(table: JsValue, id: JsValue, at: JsValue) -> Result<String, JsValue> {
    bridge::seeded_row_json(&crate::text("table", &table)?, &crate::text("id", &id)?, &crate::text("at", &at)?)
        .map_err(crate::from_heart)
}

/// The reference's in-process effect ledger (`MemoryEffectLedger`): a set of
/// `(runId, effectKey)`, lost with the page or process.
#[wasm_bindgen]
#[derive(Default)]
pub struct NativeEffectLedger {
    inner: MemoryEffectLedger,
}

#[wasm_bindgen]
impl NativeEffectLedger {
    /// An empty ledger.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Self {
        Self::default()
    }

    /// `recordOnce(runId, effectKey)`: true the first time.
    #[wasm_bindgen(js_name = recordOnce)]
    pub fn record_once(&mut self, run_id: JsValue, effect_key: JsValue) -> Result<bool, JsValue> {
        Ok(self.inner.record_once(&crate::text("runId", &run_id)?, &crate::text("effectKey", &effect_key)?))
    }
}

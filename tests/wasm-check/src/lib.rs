//! A probe that exercises the core (a full lease cycle with receipts on the memory store,
//! the outbox, the reconciler and canonical JSON) from an exported function, so that the
//! linked `wasm32-unknown-unknown` module contains the code paths users run. CI lists the
//! module's imports and fails if there are any (`scripts/wasm_imports.py`).

use heart_fleet_core::ops::ReleaseTo;
use heart_fleet_core::{HeartFleet, MemoryStore, RunRow, Timestamp, canonical};

/// Runs a lease cycle and returns how many receipts it produced (0 on any failure).
pub fn selftest() -> u32 {
    let t0 = Timestamp(1_785_369_600_000);
    let mut store = MemoryStore::new(t0);
    if store.insert(RunRow::ready("r", "k", t0)).is_err() {
        return 0;
    }
    let mut heart = HeartFleet::new(store);
    let Ok(acq) = heart.acquire("r", "w", 60) else { return 0 };
    let Some(fence) = acq.fence else { return 0 };
    let payload = serde_json::json!({ "chatId": 1, "text": "hi" });
    let key = canonical::effect_key("telegram", &payload);
    let sent = heart.send_once(&fence, "telegram", &key, &payload, |_| Ok(serde_json::json!({ "message_id": 1 })));
    if sent.is_err() || heart.release(&fence, ReleaseTo::Completed).is_err() {
        return 0;
    }
    let _ = heart.reconcile_outbox(&mut |_| None, 5, 50);
    let _ = heart.reclaim_expired(100);
    if canonical::canonicalize_json("{\"b\":1,\"a\":[1e21]}").is_err() {
        return 0;
    }
    heart.receipts().len() as u32
}

/// The exported entry point of the wasm module.
#[unsafe(no_mangle)]
pub extern "C" fn heart_fleet_selftest() -> u32 {
    selftest()
}

#[cfg(test)]
mod tests {
    #[test]
    fn selftest_runs_natively() {
        // acquired, fence_verified + effect_committed (send-once), released.
        assert_eq!(super::selftest(), 4);
    }
}

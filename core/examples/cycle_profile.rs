//! Runs many acquire → verify → release cycles on the memory store, for profilers
//! (`valgrind --tool=callgrind target/release/examples/cycle_profile`).

use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::receipt::HeartReceipt;
use heart_fleet_core::{HeartFleet, MemoryStore, RunRow, Timestamp};

fn main() {
    let t0 = Timestamp(1_785_369_600_000);
    let mut store = MemoryStore::new(t0);
    if store.insert(RunRow::ready("r", "heart:resource:r", t0)).is_err() {
        return;
    }
    let mut heart = HeartFleet::new(store).with_sink(Box::new(|_: &HeartReceipt| {}));
    let n: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let mut ok = 0;
    for _ in 0..n {
        let Ok(acq) = heart.acquire("r", "w", 60) else { return };
        let Some(fence) = acq.fence else { return };
        if matches!(heart.verify_fence(&fence), Ok(true))
            && matches!(heart.release(&fence, ReleaseTo::Ready), Ok(Fenced::Ok { .. }))
        {
            ok += 1;
        }
    }
    println!("{ok} cycles");
}

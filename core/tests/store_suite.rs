//! The store conformance suite against the memory store.

use heart_fleet_core::store_suite::{StoreFixture, run_store_suite};
use heart_fleet_core::{InstanceRow, IntentRow, MemoryStore, RunRow, StoreError, Timestamp};

struct Memory;

impl StoreFixture for Memory {
    type Store = MemoryStore;
    fn fresh(&mut self) -> Result<MemoryStore, StoreError> {
        Ok(MemoryStore::new(Timestamp::parse_iso("2026-07-30T10:00:00.000Z").map_err(|e| StoreError(e.to_string()))?))
    }
    fn seed_run(&mut self, store: &mut MemoryStore, row: &RunRow) -> Result<(), StoreError> {
        store.insert_exact(row.clone())
    }
    fn seed_instance(&mut self, store: &mut MemoryStore, row: &InstanceRow) -> Result<(), StoreError> {
        store.insert_instance(row.clone());
        Ok(())
    }
    fn seed_intent(&mut self, store: &mut MemoryStore, row: &IntentRow) -> Result<(), StoreError> {
        store.insert_intent(row.clone());
        Ok(())
    }
}

#[test]
fn the_memory_store_passes_the_store_suite() {
    let report = run_store_suite(&mut Memory);
    println!("{report:#?}");
    assert!(report.ok(), "{:#?}", report.failed);
    assert_eq!(report.passed.len(), 10);
}

//! Inserting rows exactly as given: every column, timestamps and epoch included. The store
//! conformance suite seeds its fixtures this way, and hosts use it to create rows the lease
//! operations do not create (a plain `ready` run with a chosen id, an instance, an intent).
//! The statements are the core's ([`heart_fleet_core::sql::seed_run`] and friends), like
//! every other statement these stores run.

use heart_fleet_core::sql::{self, Dialect};
use heart_fleet_core::{InstanceRow, IntentRow, RunRow, StoreError};

use crate::{PgStore, SqliteStore};

impl SqliteStore {
    /// Inserts a run exactly as given.
    pub fn insert_run(&self, r: &RunRow) -> Result<(), StoreError> {
        self.query(&sql::seed_run(Dialect::Sqlite, r)).map(drop)
    }

    /// Inserts an instance exactly as given.
    pub fn insert_instance(&self, i: &InstanceRow) -> Result<(), StoreError> {
        self.query(&sql::seed_instance(Dialect::Sqlite, i)).map(drop)
    }

    /// Inserts an intent exactly as given.
    pub fn insert_intent(&self, i: &IntentRow) -> Result<(), StoreError> {
        self.query(&sql::seed_intent(Dialect::Sqlite, i)).map(drop)
    }
}

impl PgStore {
    /// Inserts a run exactly as given (`id` and `assignment_id` must be UUID text).
    pub fn insert_run(&self, r: &RunRow) -> Result<(), StoreError> {
        self.query(&sql::seed_run(Dialect::Postgres, r)).map(drop)
    }

    /// Inserts an instance exactly as given.
    pub fn insert_instance(&self, i: &InstanceRow) -> Result<(), StoreError> {
        self.query(&sql::seed_instance(Dialect::Postgres, i)).map(drop)
    }

    /// Inserts an intent exactly as given (`run_id` must be UUID text).
    pub fn insert_intent(&self, i: &IntentRow) -> Result<(), StoreError> {
        self.query(&sql::seed_intent(Dialect::Postgres, i)).map(drop)
    }
}

//! # heart-fleet core
//!
//! The one implementation of heart-fleet, a lease layer for fleets of workers that share a
//! table of runs: fenced leases (acquire, renew, release, verify), recovery of dead
//! holders' runs (TTL sweep, takeover, liveness) with a quarantine ceiling, effects that
//! fire at most once (an effect ledger, and a durable intent outbox with a reconciler),
//! tamper-evident receipts, and the reference's 13 counters.
//!
//! The crate does no I/O: it reads no clock, touches no file or network, spawns no thread
//! and draws no random number. Time and new ids come from the store; storage is supplied by
//! the host. It builds for `wasm32-unknown-unknown` with zero imports.
//!
//! ## The driving loop
//!
//! Every operation in [`ops`] returns a [`Machine`]. A driver runs it like this:
//!
//! 1. Call [`Machine::start`]. It returns a [`Step`].
//! 2. Call [`Machine::drain_events`] and apply the [`Event`]s in order to the fleet's
//!    counters and receipt sink ([`driver::Recorder::absorb`] does this).
//! 3. If the step is [`Step::Done`], the operation's result is final. Stop.
//! 4. Otherwise the step is [`Step::Need`]. Perform it:
//!    * [`Need::Store`]: execute the [`StoreRequest`] atomically on the store (the SQL
//!      stores run the statement [`sql::render`] produced). Its answer carries the store's
//!      `now`. A failure is an [`error::StoreError`], never a miss.
//!    * [`Need::RecordOnce`]: ask the effect ledger.
//!    * [`Need::Effect`]: run the host's irreversible effect (send the message).
//!    * [`Need::Probe`]: ask the channel's probe about a dispatched intent.
//! 5. Call [`Machine::resume`] with the [`Answer`]; go to step 2.
//!
//! [`driver::drive`] is that loop over a sync [`LeaseStore`], [`driver::drive_async`] over
//! an [`driver::AsyncLeaseStore`]; the JavaScript and Python bindings run the same loop
//! from their event loops, awaiting the host's store, over the JSON step protocol of
//! [`bridge`].
//!
//! ## Features
//!
//! * `testkit` (off by default): `conformance`, the scenario replay every binding compares
//!   itself with, and `store_suite`, the checks every store must pass. They are harnesses,
//!   not part of the lease layer's API; the bindings' conformance runners and the stores'
//!   tests turn the feature on.
//!
//! ```
//! use heart_fleet_core::{HeartFleet, MemoryStore, RunRow, Timestamp, ops::ReleaseTo};
//!
//! let t0 = Timestamp::parse_iso("2026-07-30T00:00:00.000Z").unwrap();
//! let mut store = MemoryStore::new(t0);
//! store.insert(RunRow::ready("run-1", "job:1", t0)).unwrap();
//! let mut heart = HeartFleet::new(store);
//!
//! let acq = heart.acquire("run-1", "worker-A", 60).unwrap();
//! let fence = acq.fence.expect("acquired");
//! assert_eq!(fence.lease_expires_at.to_iso(), "2026-07-30T00:01:00.000Z");
//! assert!(heart.verify_fence(&fence).unwrap());
//! heart.release(&fence, ReleaseTo::Completed).unwrap();
//! assert_eq!(heart.metrics().acquire_wins, 1);
//! assert_eq!(heart.receipts().len(), 3); // acquired, fence_verified, released
//! ```

pub mod api;
pub mod bridge;
pub mod canonical;
#[cfg(feature = "chain")]
pub mod chain;
#[cfg(feature = "testkit")]
pub mod conformance;
pub mod driver;
pub mod error;
pub mod fleet;
pub mod machine;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod ops;
pub mod receipt;
#[cfg(feature = "chain")]
pub mod receipt_table;
pub mod request;
pub mod session;
pub mod sql;
#[cfg(feature = "testkit")]
pub mod store_suite;
mod tagged;
pub mod time;

pub use api::{FleetApi, LeaseWork};
pub use driver::{LeaseStore, Ledger, MemoryEffectLedger};
pub use error::{ErrorCode, HeartError, StoreError};
pub use fleet::{ExecuteOutcome, HeartFleet, LeaseContext, LeaseOptions};
pub use machine::{Answer, Event, Machine, Need, ProbeVerdict, Step, keep_store_failure_code};
pub use memory::MemoryStore;
pub use metrics::{Counter, HeartMetrics};
pub use model::{FencingToken, InstanceRow, InstanceStatus, IntentRow, IntentState, RunRow, RunStatus};
pub use receipt::{HeartEvent, HeartReceipt, verify_receipt};
pub use request::{StoreAnswer, StoreReply, StoreRequest};
pub use time::Timestamp;

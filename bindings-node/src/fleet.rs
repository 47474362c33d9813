//! The sans-I/O operation class: [`NativeFleet`] builds and starts core machines and keeps
//! the ones waiting for JavaScript by handle (a number: a JS object per operation, with its
//! finalizer, would cost more than most operations), resumed by the JavaScript driving
//! loop. A thin napi wrapper over [`heart_fleet_core::bridge`], whose docs hold the step
//! protocol (JSON text, one object per step).

use heart_fleet_core::FencingToken;
use heart_fleet_core::bridge::{Admitted, BridgeFleet, BridgeOps, failed_step, token_of};
use heart_fleet_core::metrics::HeartMetrics;
use napi::bindgen_prelude::Either;
use napi_derive::napi;

use crate::store::NativeMemoryStore;

/// The 13 counters of a fleet, with the reference's camelCase names.
#[napi(object)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Metrics {
    /// acquire got past input validation.
    pub acquire_attempts: i64,
    /// acquire won the lease.
    pub acquire_wins: i64,
    /// acquire found the run held or lost the race.
    pub acquire_collisions: i64,
    /// renew succeeded.
    pub renews: i64,
    /// renew was refused.
    pub renew_failures: i64,
    /// release succeeded.
    pub releases: i64,
    /// release was refused.
    pub release_failures: i64,
    /// a dead holder's run was recovered.
    pub reclaims: i64,
    /// a run was quarantined.
    pub quarantines: i64,
    /// verify accepted a token.
    pub fence_verifications: i64,
    /// verify refused a token.
    pub fence_rejections: i64,
    /// an effect fired and was recorded.
    pub effect_commits: i64,
    /// an effect was deduplicated.
    pub effect_dedupes: i64,
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl From<&HeartMetrics> for Metrics {
    fn from(m: &HeartMetrics) -> Metrics {
        Metrics {
            acquire_attempts: count(m.acquire_attempts),
            acquire_wins: count(m.acquire_wins),
            acquire_collisions: count(m.acquire_collisions),
            renews: count(m.renews),
            renew_failures: count(m.renew_failures),
            releases: count(m.releases),
            release_failures: count(m.release_failures),
            reclaims: count(m.reclaims),
            quarantines: count(m.quarantines),
            fence_verifications: count(m.fence_verifications),
            fence_rejections: count(m.fence_rejections),
            effect_commits: count(m.effect_commits),
            effect_dedupes: count(m.effect_dedupes),
        }
    }
}

impl From<&Metrics> for HeartMetrics {
    fn from(m: &Metrics) -> HeartMetrics {
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        HeartMetrics {
            acquire_attempts: n(m.acquire_attempts),
            acquire_wins: n(m.acquire_wins),
            acquire_collisions: n(m.acquire_collisions),
            renews: n(m.renews),
            renew_failures: n(m.renew_failures),
            releases: n(m.releases),
            release_failures: n(m.release_failures),
            reclaims: n(m.reclaims),
            quarantines: n(m.quarantines),
            fence_verifications: n(m.fence_verifications),
            fence_rejections: n(m.fence_rejections),
            effect_commits: n(m.effect_commits),
            effect_dedupes: n(m.effect_dedupes),
        }
    }
}

/// The counters, receipts and configuration of one `HeartFleet`, and the factory of its
/// operations.
#[napi]
pub struct NativeFleet {
    inner: BridgeFleet,
    ops: BridgeOps,
}

/// A begun operation as JavaScript gets it: the final step's text, or the handle to resume.
fn admitted(a: Admitted) -> Either<String, u32> {
    match a {
        Admitted::Done(text) => Either::A(text),
        Admitted::Pending(handle) => Either::B(handle),
    }
}

#[napi]
impl NativeFleet {
    /// A fleet with retry ceiling `max_retries` (`null`: never quarantine). With `sink`,
    /// receipts are handed to JavaScript with each step instead of being kept.
    #[napi(constructor)]
    pub fn new(max_retries: Option<u32>, sink: bool) -> NativeFleet {
        NativeFleet { inner: BridgeFleet::new(max_retries, sink), ops: BridgeOps::new() }
    }

    /// Answers store requests of this fleet's operations from a Rust memory store,
    /// synchronously (the fast path for `MemoryLeaseStore`).
    #[napi]
    pub fn attach_memory_store(&mut self, store: &NativeMemoryStore) {
        self.inner.attach_memory_store(store.bridge());
    }

    /// Builds operation `kind` from `args` (JSON) and starts it. Returns the final step
    /// (JSON text) when it finished without JavaScript, else the handle of the operation to
    /// resume.
    #[napi]
    pub fn begin(&mut self, kind: String, args: String) -> Either<String, u32> {
        let begun = self.inner.begin(&kind, &args);
        admitted(self.ops.admit(begun))
    }

    /// `begin`, but every store request comes back to JavaScript even with a memory store
    /// attached (for a host that routes an operation's requests to several stores).
    #[napi]
    pub fn begin_on_host(&mut self, kind: String, args: String) -> Either<String, u32> {
        let begun = self.inner.begin_on_host(&kind, &args);
        admitted(self.ops.admit(begun))
    }

    /// `begin` over a store with the TypeScript package's `LeaseStore` methods: each store
    /// request comes back as calls of those methods in the core's compact text (its docs:
    /// `bridge::reference`), answered with `resumeClock`, `resumeRead`, `resumeWritten` and `resumeRows`; a
    /// write is decided at most `casRetries` times (taken within 1..=the contract's
    /// `maxCasRetries`) when the row keeps changing.
    #[napi]
    pub fn begin_on_reference(&mut self, kind: String, args: String, cas_retries: u32) -> Either<String, u32> {
        let begun = self.inner.begin_on_reference(&kind, &args, cas_retries);
        admitted(self.ops.admit(begun))
    }

    /// `acquire` on the attached memory store, answered in the core's compact form (its
    /// docs: `bridge::compact`); null without a memory store.
    #[napi]
    pub fn acquire_compact(&self, run_id: String, owner: String, ttl_seconds: i64) -> Option<String> {
        self.inner.acquire_compact(&run_id, &owner, ttl_seconds)
    }

    /// `renew` on the attached memory store, answered compactly; null without one.
    #[napi]
    pub fn renew_compact(
        &self,
        run_id: String,
        owner: String,
        lease_expires_at: String,
        epoch: Option<i64>,
        ttl_seconds: i64,
    ) -> Option<String> {
        self.memory_token(run_id, owner, &lease_expires_at, epoch, |fleet, t| fleet.renew_compact(t, ttl_seconds))
    }

    /// `release` on the attached memory store, answered compactly; null without one.
    #[napi]
    pub fn release_compact(
        &self,
        run_id: String,
        owner: String,
        lease_expires_at: String,
        epoch: Option<i64>,
        next_status: String,
    ) -> Option<String> {
        self.memory_token(run_id, owner, &lease_expires_at, epoch, |fleet, t| fleet.release_compact(t, &next_status))
    }

    /// `verifyFence` on the attached memory store, answered compactly; null without one.
    #[napi]
    pub fn verify_fence_compact(
        &self,
        run_id: String,
        owner: String,
        lease_expires_at: String,
        epoch: Option<i64>,
    ) -> Option<String> {
        self.memory_token(run_id, owner, &lease_expires_at, epoch, BridgeFleet::verify_fence_compact)
    }

    /// The 13 counters.
    #[napi]
    pub fn metrics(&self) -> Metrics {
        Metrics::from(&self.inner.metrics())
    }

    /// Takes back `delta`, what an operation counted for writes its store rolled back with
    /// their receipts (a held transaction, `PgLeaseStore.receiptSink`).
    #[napi]
    pub fn uncount(&self, delta: Metrics) {
        self.inner.uncount(&HeartMetrics::from(&delta));
    }

    /// The counters in the Prometheus text exposition format.
    #[napi]
    pub fn prometheus(&self) -> String {
        self.inner.prometheus()
    }

    /// The receipts kept so far (JSON array; empty when a sink takes them).
    #[napi]
    pub fn receipts_json(&self) -> String {
        self.inner.receipts_json()
    }

    /// How many receipts are kept.
    #[napi]
    pub fn receipt_count(&self) -> u32 {
        u32::try_from(self.inner.receipt_count()).unwrap_or(u32::MAX)
    }
}

impl NativeFleet {
    /// Runs `call` with the token built from its parts; a bad expiry is the failed step.
    fn memory_token(
        &self,
        run_id: String,
        owner: String,
        lease_expires_at: &str,
        epoch: Option<i64>,
        call: impl FnOnce(&BridgeFleet, &FencingToken) -> Option<String>,
    ) -> Option<String> {
        match token_of(run_id, owner, lease_expires_at, epoch) {
            Ok(token) => call(&self.inner, &token),
            Err(e) => Some(failed_step(e)),
        }
    }
}

/// The layouts of the compact answers (JSON; `bridge::compact_layouts` in the core).
#[napi]
pub fn compact_layouts() -> String {
    heart_fleet_core::bridge::compact_layouts()
}

/// The operations waiting for JavaScript, by handle: resume one with the answer to its
/// current need. A finished operation's handle is freed (and reused); an unknown handle is
/// the `store-protocol` step of a finished operation.
#[napi]
impl NativeFleet {
    /// The current need of operation `handle` (JSON text, or a `LeaseStore` call's compact
    /// text).
    #[napi]
    pub fn need(&self, handle: u32) -> String {
        self.ops.need(handle).to_owned()
    }

    /// The store request of the current need (StoreRequest JSON text; empty when the need
    /// is not a store request).
    #[napi]
    pub fn request(&self, handle: u32) -> String {
        self.ops.request(handle).to_owned()
    }

    /// The store's answer (StoreAnswer JSON). Text that is not a StoreAnswer ends the
    /// operation with `store-protocol`.
    #[napi]
    pub fn resume_store(&mut self, handle: u32, answer: String) -> String {
        self.ops.resume(handle, |op| op.resume_store(&answer))
    }

    /// The store failed (it threw or rejected) with `code`: `store-protocol` and
    /// `invalid-input` (what the JS side's own checks found) are kept when the failure ends
    /// the operation; any other code is `store-unavailable`.
    #[napi]
    pub fn resume_store_failure(&mut self, handle: u32, code: String, message: String) -> String {
        self.ops.resume(handle, |op| op.resume_store_failure(&code, &message))
    }

    /// The `LeaseStore`'s `now()` answered, in milliseconds.
    #[napi]
    pub fn resume_clock(&mut self, handle: u32, ms: i64) -> String {
        self.ops.resume(handle, |op| op.resume_clock(ms))
    }

    /// The `LeaseStore`'s `now()` (milliseconds) and `getRun` (the row as JSON, or `null`)
    /// answered.
    #[napi]
    pub fn resume_read(&mut self, handle: u32, ms: i64, row: String) -> String {
        self.ops.resume(handle, |op| op.resume_read(ms, &row))
    }

    /// The `LeaseStore`'s `conditionalUpdate` answered: the row (JSON) or `null`.
    #[napi]
    pub fn resume_written(&mut self, handle: u32, row: String) -> String {
        self.ops.resume(handle, |op| op.resume_written(&row))
    }

    /// The `LeaseStore`'s `findExpiredLeases` answered: the rows (a JSON array).
    #[napi]
    pub fn resume_rows(&mut self, handle: u32, rows: String) -> String {
        self.ops.resume(handle, |op| op.resume_rows(&rows))
    }

    /// The effect ledger's answer: `true` the first time the key was recorded.
    #[napi]
    pub fn resume_recorded(&mut self, handle: u32, first: bool) -> String {
        self.ops.resume(handle, |op| op.resume_recorded(first))
    }

    /// The effect ledger failed.
    #[napi]
    pub fn resume_recorded_error(&mut self, handle: u32, message: String) -> String {
        self.ops.resume(handle, |op| op.resume_recorded_error(&message))
    }

    /// The effect's result (JSON; the `external_ref` evidence for send-once).
    #[napi]
    pub fn resume_effect(&mut self, handle: u32, value: String) -> String {
        self.ops.resume(handle, |op| op.resume_effect(&value))
    }

    /// The effect threw.
    #[napi]
    pub fn resume_effect_error(&mut self, handle: u32, message: String) -> String {
        self.ops.resume(handle, |op| op.resume_effect_error(&message))
    }

    /// The probe's verdict: `{"status":"sent","externalRef":…}`, `{"status":"not-sent"}` or
    /// `{"status":"unknown"}`. Anything else counts as a probe failure.
    #[napi]
    pub fn resume_probe(&mut self, handle: u32, verdict: String) -> String {
        self.ops.resume(handle, |op| op.resume_probe(&verdict))
    }

    /// The probe threw.
    #[napi]
    pub fn resume_probe_error(&mut self, handle: u32, message: String) -> String {
        self.ops.resume(handle, |op| op.resume_probe_error(&message))
    }

    /// Gives up on operation `handle` (frees it; nothing for an unknown handle).
    #[napi]
    pub fn abandon(&mut self, handle: u32) {
        self.ops.abandon(handle);
    }

    /// How many operations wait for JavaScript.
    #[napi]
    pub fn pending(&self) -> u32 {
        u32::try_from(self.ops.pending()).unwrap_or(u32::MAX)
    }
}

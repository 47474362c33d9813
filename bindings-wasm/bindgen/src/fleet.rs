//! [`NativeFleet`]: the step protocol of [`heart_fleet_core::bridge`], with the operations
//! that wait for JavaScript kept by handle (a number: a wasm-bindgen object per operation,
//! with its finalizer, would cost more than most operations).

use heart_fleet_core::FencingToken;
use heart_fleet_core::bridge::{Admitted, BridgeFleet, BridgeOp, BridgeOps, failed_step, token_of};
use wasm_bindgen::prelude::*;

use crate::{NativeMemoryStore, int, num, opt_int, parse, text};

/// The counters, receipts and configuration of one `HeartFleet`, and the factory of its
/// operations.
#[wasm_bindgen]
pub struct NativeFleet {
    inner: BridgeFleet,
    ops: BridgeOps,
}

#[wasm_bindgen]
impl NativeFleet {
    /// A fleet with retry ceiling `maxRetries` (`null`: never quarantine). With `sink`,
    /// receipts are handed to JavaScript with each step instead of being kept.
    #[wasm_bindgen(constructor)]
    pub fn new(max_retries: JsValue, sink: JsValue) -> Result<NativeFleet, JsValue> {
        let max = match opt_int("maxRetries", &max_retries)? {
            None => None,
            Some(n) => Some(crate::uint32("maxRetries", &JsValue::from_f64(num(n)))?),
        };
        let sink = sink.as_bool().ok_or_else(|| crate::invalid("sink must be a boolean"))?;
        Ok(NativeFleet { inner: BridgeFleet::new(max, sink), ops: BridgeOps::new() })
    }

    /// Answers store requests of this fleet's operations from a memory store, inside the
    /// module (the fast path for `MemoryLeaseStore`).
    #[wasm_bindgen(js_name = attachMemoryStore)]
    pub fn attach_memory_store(&mut self, store: &NativeMemoryStore) {
        self.inner.attach_memory_store(store.bridge());
    }

    /// Builds operation `kind` from `args` (JSON) and starts it. Returns the final step
    /// (JSON text) when it finished without JavaScript, else the operation to resume.
    pub fn begin(&mut self, kind: JsValue, args: JsValue) -> Result<JsValue, JsValue> {
        let kind = text("kind", &kind)?;
        let args = text("args", &args)?;
        let begun = self.inner.begin(&kind, &args);
        Ok(admitted(self.ops.admit(begun)))
    }

    /// `begin`, but every store request comes back to JavaScript even with a memory store
    /// attached (for a host that routes an operation's requests to several stores).
    #[wasm_bindgen(js_name = beginOnHost)]
    pub fn begin_on_host(&mut self, kind: JsValue, args: JsValue) -> Result<JsValue, JsValue> {
        let kind = text("kind", &kind)?;
        let args = text("args", &args)?;
        let begun = self.inner.begin_on_host(&kind, &args);
        Ok(admitted(self.ops.admit(begun)))
    }

    /// `begin` over a store with the TypeScript package's `LeaseStore` methods: each store
    /// request comes back as calls of those methods in the core's compact text (its docs:
    /// `bridge::reference`), answered with `resumeClock`, `resumeRead`, `resumeWritten` and `resumeRows`; a
    /// write is decided at most `casRetries` times (taken within 1..=the contract's
    /// `maxCasRetries`) when the row keeps changing.
    #[wasm_bindgen(js_name = beginOnReference)]
    pub fn begin_on_reference(
        &mut self,
        kind: JsValue,
        args: JsValue,
        cas_retries: JsValue,
    ) -> Result<JsValue, JsValue> {
        let kind = text("kind", &kind)?;
        let args = text("args", &args)?;
        let cas_retries = crate::uint32("casRetries", &cas_retries)?;
        let begun = self.inner.begin_on_reference(&kind, &args, cas_retries);
        Ok(admitted(self.ops.admit(begun)))
    }

    /// `acquire` on the attached memory store, answered in the core's compact form (its
    /// docs: `bridge::compact`); `undefined` without a memory store.
    #[wasm_bindgen(js_name = acquireCompact)]
    pub fn acquire_compact(
        &self,
        run_id: JsValue,
        owner: JsValue,
        ttl_seconds: JsValue,
    ) -> Result<Option<String>, JsValue> {
        let (run_id, owner) = (text("runId", &run_id)?, text("owner", &owner)?);
        Ok(self.inner.acquire_compact(&run_id, &owner, int("ttlSeconds", &ttl_seconds)?))
    }

    /// `renew` on the attached memory store, answered compactly; `undefined` without one.
    #[wasm_bindgen(js_name = renewCompact)]
    pub fn renew_compact(
        &self,
        run_id: JsValue,
        owner: JsValue,
        lease_expires_at: JsValue,
        epoch: JsValue,
        ttl_seconds: JsValue,
    ) -> Result<Option<String>, JsValue> {
        let ttl = int("ttlSeconds", &ttl_seconds)?;
        self.with_token(&run_id, &owner, &lease_expires_at, &epoch, |fleet, t| fleet.renew_compact(t, ttl))
    }

    /// `release` on the attached memory store, answered compactly; `undefined` without one.
    #[wasm_bindgen(js_name = releaseCompact)]
    pub fn release_compact(
        &self,
        run_id: JsValue,
        owner: JsValue,
        lease_expires_at: JsValue,
        epoch: JsValue,
        next_status: JsValue,
    ) -> Result<Option<String>, JsValue> {
        let next = text("nextStatus", &next_status)?;
        self.with_token(&run_id, &owner, &lease_expires_at, &epoch, |fleet, t| fleet.release_compact(t, &next))
    }

    /// `verifyFence` on the attached memory store, answered compactly; `undefined` without one.
    #[wasm_bindgen(js_name = verifyFenceCompact)]
    pub fn verify_fence_compact(
        &self,
        run_id: JsValue,
        owner: JsValue,
        lease_expires_at: JsValue,
        epoch: JsValue,
    ) -> Result<Option<String>, JsValue> {
        self.with_token(&run_id, &owner, &lease_expires_at, &epoch, BridgeFleet::verify_fence_compact)
    }

    /// The 13 counters (an object with the reference's camelCase names).
    pub fn metrics(&self) -> Result<JsValue, JsValue> {
        let text = serde_json::to_string(&self.inner.metrics())
            .map_err(|e| crate::coded(heart_fleet_core::ErrorCode::StoreProtocol, &e.to_string()))?;
        parse(&text)
    }

    /// The counters in the Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        self.inner.prometheus()
    }

    /// The receipts kept so far (JSON array; empty when a sink takes them).
    #[wasm_bindgen(js_name = receiptsJson)]
    pub fn receipts_json(&self) -> String {
        self.inner.receipts_json()
    }

    /// How many receipts are kept.
    #[wasm_bindgen(js_name = receiptCount)]
    pub fn receipt_count(&self) -> f64 {
        num(i64::try_from(self.inner.receipt_count()).unwrap_or(i64::MAX))
    }
}

impl NativeFleet {
    /// Runs `call` with the token built from its parts; a bad expiry is the failed step.
    fn with_token(
        &self,
        run_id: &JsValue,
        owner: &JsValue,
        lease_expires_at: &JsValue,
        epoch: &JsValue,
        call: impl FnOnce(&BridgeFleet, &FencingToken) -> Option<String>,
    ) -> Result<Option<String>, JsValue> {
        let (run_id, owner) = (text("fence.runId", run_id)?, text("fence.owner", owner)?);
        let expiry = text("fence.leaseExpiresAt", lease_expires_at)?;
        Ok(match token_of(run_id, owner, &expiry, opt_int("fence.epoch", epoch)?) {
            Ok(token) => call(&self.inner, &token),
            Err(e) => Some(failed_step(e)),
        })
    }
}

/// The layouts of the compact answers (JSON; `bridge::compact_layouts` in the core).
#[wasm_bindgen(js_name = compactLayouts)]
pub fn compact_layouts() -> String {
    heart_fleet_core::bridge::compact_layouts()
}

/// The operations waiting for JavaScript, by handle: resume one with the answer to its
/// current need. A finished operation's handle is freed (and reused); an unknown handle is
/// the `store-protocol` step of a finished operation.
#[wasm_bindgen]
impl NativeFleet {
    /// The current need of operation `handle` (JSON text, or a `LeaseStore` call's compact
    /// text).
    pub fn need(&self, handle: JsValue) -> Result<String, JsValue> {
        Ok(self.ops.need(crate::uint32("handle", &handle)?).to_owned())
    }

    /// The store request of the current need (StoreRequest JSON text; empty when the need
    /// is not a store request).
    pub fn request(&self, handle: JsValue) -> Result<String, JsValue> {
        Ok(self.ops.request(crate::uint32("handle", &handle)?).to_owned())
    }

    fn resume(&mut self, handle: &JsValue, answer: impl FnOnce(&mut BridgeOp) -> String) -> Result<String, JsValue> {
        Ok(self.ops.resume(crate::uint32("handle", handle)?, answer))
    }

    /// The store's answer (StoreAnswer JSON). Text that is not a StoreAnswer ends the
    /// operation with `store-protocol`.
    #[wasm_bindgen(js_name = resumeStore)]
    pub fn resume_store(&mut self, handle: JsValue, answer: JsValue) -> Result<String, JsValue> {
        let answer = text("answer", &answer)?;
        self.resume(&handle, |op| op.resume_store(&answer))
    }

    /// The store failed (it threw or rejected) with `code`: `store-protocol` and
    /// `invalid-input` (what the JS side's own checks found) are kept when the failure ends
    /// the operation; any other code is `store-unavailable`.
    #[wasm_bindgen(js_name = resumeStoreFailure)]
    pub fn resume_store_failure(
        &mut self,
        handle: JsValue,
        code: JsValue,
        message: JsValue,
    ) -> Result<String, JsValue> {
        let (code, message) = (text("code", &code)?, text("message", &message)?);
        self.resume(&handle, |op| op.resume_store_failure(&code, &message))
    }

    /// The `LeaseStore`'s `now()` answered, in milliseconds.
    #[wasm_bindgen(js_name = resumeClock)]
    pub fn resume_clock(&mut self, handle: JsValue, ms: JsValue) -> Result<String, JsValue> {
        let ms = int("ms", &ms)?;
        self.resume(&handle, |op| op.resume_clock(ms))
    }

    /// The `LeaseStore`'s `now()` (milliseconds) and `getRun` (the row as JSON, or `null`)
    /// answered.
    #[wasm_bindgen(js_name = resumeRead)]
    pub fn resume_read(&mut self, handle: JsValue, ms: JsValue, row: JsValue) -> Result<String, JsValue> {
        let (ms, row) = (int("ms", &ms)?, text("row", &row)?);
        self.resume(&handle, |op| op.resume_read(ms, &row))
    }

    /// The `LeaseStore`'s `conditionalUpdate` answered: the row (JSON) or `null`.
    #[wasm_bindgen(js_name = resumeWritten)]
    pub fn resume_written(&mut self, handle: JsValue, row: JsValue) -> Result<String, JsValue> {
        let row = text("row", &row)?;
        self.resume(&handle, |op| op.resume_written(&row))
    }

    /// The `LeaseStore`'s `findExpiredLeases` answered: the rows (a JSON array).
    #[wasm_bindgen(js_name = resumeRows)]
    pub fn resume_rows(&mut self, handle: JsValue, rows: JsValue) -> Result<String, JsValue> {
        let rows = text("rows", &rows)?;
        self.resume(&handle, |op| op.resume_rows(&rows))
    }

    /// The effect ledger's answer: `true` the first time the key was recorded.
    #[wasm_bindgen(js_name = resumeRecorded)]
    pub fn resume_recorded(&mut self, handle: JsValue, first: JsValue) -> Result<String, JsValue> {
        let first = first.as_bool().ok_or_else(|| crate::invalid("first must be a boolean"))?;
        self.resume(&handle, |op| op.resume_recorded(first))
    }

    /// The effect ledger failed.
    #[wasm_bindgen(js_name = resumeRecordedError)]
    pub fn resume_recorded_error(&mut self, handle: JsValue, message: JsValue) -> Result<String, JsValue> {
        let message = text("message", &message)?;
        self.resume(&handle, |op| op.resume_recorded_error(&message))
    }

    /// The effect's result (JSON; the `external_ref` evidence for send-once).
    #[wasm_bindgen(js_name = resumeEffect)]
    pub fn resume_effect(&mut self, handle: JsValue, value: JsValue) -> Result<String, JsValue> {
        let value = text("value", &value)?;
        self.resume(&handle, |op| op.resume_effect(&value))
    }

    /// The effect threw.
    #[wasm_bindgen(js_name = resumeEffectError)]
    pub fn resume_effect_error(&mut self, handle: JsValue, message: JsValue) -> Result<String, JsValue> {
        let message = text("message", &message)?;
        self.resume(&handle, |op| op.resume_effect_error(&message))
    }

    /// The probe's verdict: `{"status":"sent","externalRef":…}`, `{"status":"not-sent"}` or
    /// `{"status":"unknown"}`. Anything else counts as a probe failure.
    #[wasm_bindgen(js_name = resumeProbe)]
    pub fn resume_probe(&mut self, handle: JsValue, verdict: JsValue) -> Result<String, JsValue> {
        let verdict = text("verdict", &verdict)?;
        self.resume(&handle, |op| op.resume_probe(&verdict))
    }

    /// The probe threw.
    #[wasm_bindgen(js_name = resumeProbeError)]
    pub fn resume_probe_error(&mut self, handle: JsValue, message: JsValue) -> Result<String, JsValue> {
        let message = text("message", &message)?;
        self.resume(&handle, |op| op.resume_probe_error(&message))
    }

    /// Gives up on operation `handle` (frees it; nothing for an unknown handle).
    pub fn abandon(&mut self, handle: JsValue) -> Result<(), JsValue> {
        self.ops.abandon(crate::uint32("handle", &handle)?);
        Ok(())
    }

    /// How many operations wait for JavaScript.
    pub fn pending(&self) -> f64 {
        f64::from(u32::try_from(self.ops.pending()).unwrap_or(u32::MAX))
    }
}

/// A begun operation as JavaScript gets it: the final step's JSON text, or its handle.
fn admitted(a: Admitted) -> JsValue {
    match a {
        Admitted::Done(step) => JsValue::from_str(&step),
        Admitted::Pending(handle) => JsValue::from_f64(f64::from(handle)),
    }
}

//! # heart-fleet for Deno, edge runtimes and bundlers
//!
//! The WebAssembly half of the package `heart-fleet-wasm`: a thin wasm-bindgen layer over
//! [`heart_fleet_core::bridge`], with exactly the classes and functions that the Node
//! package's JavaScript driver (`bindings-node/lib/*.cjs`) expects from its napi-rs module
//! (`bindings-node/native.d.ts`). The build bundles that same driver with this module in
//! place of the napi one, so Node and Deno run one JavaScript API over one Rust core.
//!
//! * [`NativeFleet`]: the sans-I/O step protocol (see the bridge's docs), its operations
//!   waiting for JavaScript kept by handle.
//!   Store requests go to the host's store from the JavaScript async loop, so stores may
//!   answer with Promises (Deno KV, `fetch`); a fleet attached to a [`NativeMemoryStore`]
//!   answers them inside the module.
//! * [`NativeMemoryStore`], [`NativeLeaseSession`], canonical JSON, digests, receipts, SQL
//!   rendering and decoding, the evaluator on a snapshot (`simulateRequest`, which the Deno KV
//!   store decides with) and the conformance replay (`nativeReplay`).
//!
//! Cargo features (both on by default): `sql` (the SQL rendering PgLeaseStore runs) and
//! `replay` (the conformance replay and scenario seeding). The edge build leaves both out.
//!
//! Every argument arrives as a plain `JsValue` and is checked here, so a wrong type (a
//! number for a string, `NaN`, `2**60`, an object) is a thrown `Error` whose `code` is
//! `invalid-input`, never a trap and never a silent coercion. Failures carry the core's
//! stable codes ([`heart_fleet_core::ErrorCode`]). Numbers cross as JavaScript numbers
//! (integers checked to be exact, within ±2^53).

mod canonical;
mod fleet;
mod rules;
mod session;
mod store;

pub use canonical::*;
pub use fleet::*;
pub use rules::*;
pub use session::*;
pub use store::*;

use heart_fleet_core::{ErrorCode, HeartError};
use wasm_bindgen::prelude::*;

/// The largest integer a JavaScript number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A JS `Error` with `message` and a stable `code` property.
pub(crate) fn coded(code: ErrorCode, message: &str) -> JsValue {
    let err = js_sys::Error::new(message);
    // Reflect::set only fails on frozen or exotic targets; a fresh Error is neither.
    let _ = js_sys::Reflect::set(&err, &JsValue::from_str("code"), &JsValue::from_str(code.as_str()));
    err.into()
}

/// A core error for JavaScript.
pub(crate) fn from_heart(e: HeartError) -> JsValue {
    coded(e.code, &e.message)
}

/// An `invalid-input` error for JavaScript.
pub(crate) fn invalid(message: &str) -> JsValue {
    coded(ErrorCode::InvalidInput, message)
}

/// What a JS value is, for error messages.
fn describe(v: &JsValue) -> String {
    if v.is_null() {
        "null".into()
    } else if v.is_undefined() {
        "undefined".into()
    } else if let Some(n) = v.as_f64() {
        format!("the number {n}")
    } else if v.is_string() {
        "a string".into()
    } else if v.as_bool().is_some() {
        "a boolean".into()
    } else if v.is_bigint() {
        "a bigint".into()
    } else if v.is_function() {
        "a function".into()
    } else if js_sys::Array::is_array(v) {
        "an array".into()
    } else if v.is_symbol() {
        "a symbol".into()
    } else {
        "an object".into()
    }
}

/// A string argument (may be empty).
pub(crate) fn text(name: &str, v: &JsValue) -> Result<String, JsValue> {
    v.as_string().ok_or_else(|| invalid(&format!("{name} must be a string, got {}", describe(v))))
}

/// An integer argument: a finite JS number without fraction, within ±2^53.
pub(crate) fn int(name: &str, v: &JsValue) -> Result<i64, JsValue> {
    match v.as_f64() {
        // Exact: the guard rules out fractions and values beyond 2^53.
        Some(n) if n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE => Ok(n as i64),
        _ => Err(invalid(&format!("{name} must be an integer number within ±2^53, got {}", describe(v)))),
    }
}

/// An optional integer argument (`undefined` / `null` → `None`).
pub(crate) fn opt_int(name: &str, v: &JsValue) -> Result<Option<i64>, JsValue> {
    if v.is_undefined() || v.is_null() { Ok(None) } else { int(name, v).map(Some) }
}

/// An integer argument in `0..=u32::MAX`.
pub(crate) fn uint32(name: &str, v: &JsValue) -> Result<u32, JsValue> {
    let n = int(name, v)?;
    u32::try_from(n).map_err(|_| invalid(&format!("{name} must be an integer in 0..=4294967295, got {n}")))
}

/// An `i64` that is well inside 2^53 as a JS number (counters, clocks).
pub(crate) fn num(v: i64) -> f64 {
    v as f64
}

/// Parses JSON text produced by the core into a JS value (objects for the metrics).
pub(crate) fn parse(json: &str) -> Result<JsValue, JsValue> {
    js_sys::JSON::parse(json).map_err(|_| coded(ErrorCode::StoreProtocol, "the core produced text that is not JSON"))
}

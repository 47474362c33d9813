//! # heart-fleet-receipts-wasm
//!
//! The core's receipt-log verifier ([`heart_fleet_core::chain::verify_receipts_json`]) as a
//! wasm-bindgen module of its own. With HMAC-SHA-256, Ed25519 and SHA-512 it is too big for
//! the lease module's size budget, so `heart-fleet-wasm`'s full build (`pkg/`) ships it as a
//! second `.wasm` (`heart_fleet_receipts_bg.wasm`), loaded beside the lease module, and its
//! `verifyReceipts` (the Node package's JavaScript, unchanged) calls [`verify_receipts_json`].
//! The edge build (`pkg-edge/`) leaves it out. One export, no imports but wasm-bindgen's.

use heart_fleet_core::HeartError;
use wasm_bindgen::prelude::*;

/// A JS `Error` with the core's message and its stable `code` property.
fn coded(e: HeartError) -> JsValue {
    let err = js_sys::Error::new(&e.message);
    let _ = js_sys::Reflect::set(&err, &JsValue::from_str("code"), &JsValue::from_str(e.code.as_str()));
    err.into()
}

/// `verifyReceiptsJson(log, options)`: the verification report of a JSON Lines log (bytes)
/// as JSON text, given the options' JSON text (`key`, `publicKey`, `run`, `finalSeq`,
/// `requireChain`). A log or options that cannot be read throw an `Error` with code
/// `invalid-input`; the message never holds a key.
#[wasm_bindgen(js_name = verifyReceiptsJson)]
pub fn verify_receipts_json(log: &[u8], options: &str) -> Result<String, JsValue> {
    heart_fleet_core::chain::verify_receipts_json(log, options).map_err(coded)
}

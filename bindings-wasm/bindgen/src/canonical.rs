//! Canonical JSON, digests, identifiers, receipt verification and the error registry,
//! over JSON text (JavaScript hands values over as `JSON.stringify` output).

use heart_fleet_core::bridge;
use wasm_bindgen::prelude::*;

use crate::{from_heart, text};

/// `canonicalize` of JSON text, with the reference's error messages.
#[wasm_bindgen(js_name = canonicalizeJson)]
pub fn canonicalize_json(json: JsValue) -> Result<String, JsValue> {
    bridge::canonicalize_json(&text("json", &json)?).map_err(from_heart)
}

/// `sha256:dreamnet-sorted-json:v0:` + sha256 hex of the canonical form of JSON text.
#[wasm_bindgen(js_name = digestJson)]
pub fn digest_json(json: JsValue) -> Result<String, JsValue> {
    bridge::digest_json(&text("json", &json)?).map_err(from_heart)
}

/// Lowercase sha256 hex of the canonical form of JSON text.
#[wasm_bindgen(js_name = canonicalSha256Json)]
pub fn canonical_sha256_json(json: JsValue) -> Result<String, JsValue> {
    bridge::canonical_sha256_json(&text("json", &json)?).map_err(from_heart)
}

/// Lowercase sha256 hex of the UTF-8 bytes of `text` (`sha256Hex`).
#[wasm_bindgen(js_name = sha256Hex)]
pub fn sha256_hex(input: JsValue) -> Result<String, JsValue> {
    Ok(bridge::sha256_hex(&text("text", &input)?))
}

/// `heart:resource:` + sha256 hex of the canonical `{kind, key}`; both non-empty.
#[wasm_bindgen(js_name = deterministicResourceId)]
pub fn deterministic_resource_id(kind: JsValue, key: JsValue) -> Result<String, JsValue> {
    bridge::deterministic_resource_id(&text("kind", &kind)?, &text("key", &key)?).map_err(from_heart)
}

/// `prefix + ":" + sha256 hex of the canonical form of identity` (JSON text).
#[wasm_bindgen(js_name = effectKeyJson)]
pub fn effect_key_json(prefix: JsValue, identity: JsValue) -> Result<String, JsValue> {
    bridge::effect_key_json(&text("prefix", &prefix)?, &text("identity", &identity)?).map_err(from_heart)
}

/// Checks a receipt (JSON): `receipt-tampered` when its digest does not match its fields,
/// `invalid-input` when it is not a receipt.
#[wasm_bindgen(js_name = verifyReceiptJson)]
pub fn verify_receipt_json(receipt: JsValue) -> Result<(), JsValue> {
    bridge::verify_receipt_json(&text("receipt", &receipt)?).map_err(from_heart)
}

/// Every stable error code of the core's registry.
#[wasm_bindgen(js_name = errorCodes)]
pub fn error_codes() -> js_sys::Array {
    bridge::error_codes().into_iter().map(JsValue::from_str).collect()
}

/// The contract's constants (JSON; `bridge::contract_json` in the core): error codes, run
/// statuses, next statuses, channels, the ttl bound, the operation names and the defaults.
#[wasm_bindgen]
pub fn contract() -> String {
    bridge::contract_json()
}

//! Canonical JSON, digests, identifiers and receipt verification, over JSON text.
//!
//! JavaScript hands values over as JSON text (`JSON.stringify` output, which keeps lone
//! surrogates as `\udxxx` escapes); the core parses it with `JSON.parse` semantics.

use heart_fleet_core::canonical;
use heart_fleet_core::receipt::verify_receipt;
use napi_derive::napi;
use serde_json::Value;

use crate::{Code, from_heart, invalid};

/// `canonicalize` of JSON text, with the reference's error messages.
#[napi]
pub fn canonicalize_json(json: String) -> napi::Result<String, Code> {
    canonical::canonicalize_json(&json).map_err(|e| invalid(e.to_string()))
}

/// `sha256:dreamnet-sorted-json:v0:` + sha256 hex of the canonical form of JSON text.
#[napi]
pub fn digest_json(json: String) -> napi::Result<String, Code> {
    canonical::digest_json(&json).map_err(|e| invalid(e.to_string()))
}

/// Lowercase sha256 hex of the canonical form of JSON text.
#[napi]
pub fn canonical_sha256_json(json: String) -> napi::Result<String, Code> {
    canonical::canonicalize_json(&json).map(|c| canonical::sha256_hex(&c)).map_err(|e| invalid(e.to_string()))
}

/// Lowercase sha256 hex of the UTF-8 bytes of `text` (`sha256Hex`).
#[napi]
pub fn sha256_hex(text: String) -> String {
    canonical::sha256_hex(&text)
}

/// `heart:resource:` + sha256 hex of the canonical `{kind, key}`; both non-empty.
#[napi]
pub fn deterministic_resource_id(kind: String, key: String) -> napi::Result<String, Code> {
    canonical::deterministic_resource_id(&kind, &key).map_err(|e| invalid(e.to_string()))
}

/// `prefix + ":" + sha256 hex of the canonical form of identity` (JSON text).
#[napi]
pub fn effect_key_json(prefix: String, identity: String) -> napi::Result<String, Code> {
    let hex = canonical_sha256_json(identity)?;
    Ok(format!("{prefix}:{hex}"))
}

/// Checks a receipt (JSON): `receipt-tampered` when its digest does not match its fields,
/// `invalid-input` when it is not a receipt.
#[napi]
pub fn verify_receipt_json(receipt: String) -> napi::Result<(), Code> {
    let value: Value =
        serde_json::from_str(&receipt).map_err(|e| invalid(format!("a receipt is a JSON object: {e}")))?;
    verify_receipt(&value).map_err(from_heart)
}

/// Every stable error code of the core's registry.
#[napi]
pub fn error_codes() -> Vec<String> {
    heart_fleet_core::ErrorCode::ALL.iter().map(|c| c.as_str().to_owned()).collect()
}

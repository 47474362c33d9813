//! Canonical JSON, digests, identifiers and receipt verification, over JSON text.
//!
//! JavaScript hands values over as JSON text (`JSON.stringify` output, which keeps lone
//! surrogates as `\udxxx` escapes); the core parses it with `JSON.parse` semantics. Thin
//! napi wrappers over [`heart_fleet_core::bridge`].

use heart_fleet_core::bridge;
use napi_derive::napi;

use crate::{Code, from_heart};

/// `canonicalize` of JSON text, with the reference's error messages.
#[napi]
pub fn canonicalize_json(json: String) -> napi::Result<String, Code> {
    bridge::canonicalize_json(&json).map_err(from_heart)
}

/// `sha256:dreamnet-sorted-json:v0:` + sha256 hex of the canonical form of JSON text.
#[napi]
pub fn digest_json(json: String) -> napi::Result<String, Code> {
    bridge::digest_json(&json).map_err(from_heart)
}

/// Lowercase sha256 hex of the canonical form of JSON text.
#[napi]
pub fn canonical_sha256_json(json: String) -> napi::Result<String, Code> {
    bridge::canonical_sha256_json(&json).map_err(from_heart)
}

/// Lowercase sha256 hex of the UTF-8 bytes of `text` (`sha256Hex`).
#[napi]
pub fn sha256_hex(text: String) -> String {
    bridge::sha256_hex(&text)
}

/// `heart:resource:` + sha256 hex of the canonical `{kind, key}`; both non-empty.
#[napi]
pub fn deterministic_resource_id(kind: String, key: String) -> napi::Result<String, Code> {
    bridge::deterministic_resource_id(&kind, &key).map_err(from_heart)
}

/// `prefix + ":" + sha256 hex of the canonical identity (JSON text)`.
#[napi]
pub fn effect_key_json(prefix: String, identity: String) -> napi::Result<String, Code> {
    bridge::effect_key_json(&prefix, &identity).map_err(from_heart)
}

/// Checks a receipt (JSON): `receipt-tampered` when its digest does not match its fields,
/// `invalid-input` when it is not a receipt.
#[napi]
pub fn verify_receipt_json(receipt: String) -> napi::Result<(), Code> {
    bridge::verify_receipt_json(&receipt).map_err(from_heart)
}

/// Every stable error code of the core's registry.
#[napi]
pub fn error_codes() -> Vec<String> {
    bridge::error_codes().into_iter().map(str::to_owned).collect()
}

/// The contract's constants (JSON; `bridge::contract_json` in the core): error codes, run
/// statuses, next statuses, channels, the ttl bound, the operation names and the defaults.
#[napi]
pub fn contract() -> String {
    bridge::contract_json()
}

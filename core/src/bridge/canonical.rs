//! Canonical JSON, digests, identifiers and receipt verification, over JSON text.
//!
//! Hosts hand values over as JSON text (JavaScript's `JSON.stringify` keeps lone surrogates
//! as `\udxxx` escapes); the core parses it with `JSON.parse` semantics.

use serde_json::Value;

use super::{BridgeResult, invalid, parse_json};
use crate::canonical;
use crate::receipt::verify_receipt;

/// The canonical JSON text of a value given as JSON text.
pub fn canonicalize_json(json: &str) -> BridgeResult<String> {
    canonical::canonicalize_json(json).map_err(|e| invalid(e.to_string()))
}

/// The reference's receipt digest of a value given as JSON text: `sha256:dreamnet-sorted-json:v0:` + the
/// hex SHA-256 of its canonical form.
pub fn digest_json(json: &str) -> BridgeResult<String> {
    canonical::digest_json(json).map_err(|e| invalid(e.to_string()))
}

/// The bare hex SHA-256 of the canonical JSON of a value given as JSON text.
pub fn canonical_sha256_json(json: &str) -> BridgeResult<String> {
    canonical::canonicalize_json(json).map(|c| canonical::sha256_hex(&c)).map_err(|e| invalid(e.to_string()))
}

/// The hex SHA-256 of a string's UTF-8 bytes.
pub fn sha256_hex(text: &str) -> String {
    canonical::sha256_hex(text)
}

/// The reference's `deterministicResourceId(kind, key)`.
pub fn deterministic_resource_id(kind: &str, key: &str) -> BridgeResult<String> {
    canonical::deterministic_resource_id(kind, key).map_err(|e| invalid(e.to_string()))
}

/// `<prefix>:<hex sha-256 of the canonical identity>`: the reference's `effectKey`.
pub fn effect_key_json(prefix: &str, identity: &str) -> BridgeResult<String> {
    Ok(format!("{prefix}:{}", canonical_sha256_json(identity)?))
}

/// Checks a receipt (JSON text): its digest must match its body. A mismatch is
/// `receipt-tampered`.
pub fn verify_receipt_json(receipt: &str) -> BridgeResult<()> {
    let value: Value = parse_json(receipt, "a receipt is a JSON object")?;
    verify_receipt(&value)
}

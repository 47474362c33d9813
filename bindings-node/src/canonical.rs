//! Canonical JSON, digests, identifiers and receipt verification, over JSON text.
//!
//! JavaScript hands values over as JSON text (`JSON.stringify` output, which keeps lone
//! surrogates as `\udxxx` escapes); the core parses it with `JSON.parse` semantics. Thin
//! napi wrappers over [`heart_fleet_core::bridge`].

use heart_fleet_core::bridge;
use heart_fleet_core::canonical::JsText;
use heart_fleet_core::canonical::host::{HostError, HostKind, HostValue, canonicalize_host};
use napi::bindgen_prelude::{JsObjectValue, KeyCollectionMode, KeyConversion, KeyFilter, Object, Uint8Array};
use napi::{Env, JsString, JsValue, Unknown, ValueType};
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

/// Checks a receipt (JSON): `receipt-tampered` when its digest does not match its fields,
/// `invalid-input` when it is not a receipt.
#[napi]
pub fn verify_receipt_json(receipt: String) -> napi::Result<(), Code> {
    bridge::verify_receipt_json(&receipt).map_err(from_heart)
}

/// Checks a receipt log (JSON Lines bytes) with the options' JSON text
/// (`{key?, publicKey?, run?, finalSeq?, requireChain?}`): the report's JSON text, as
/// `heart-fleet verify-receipts --json` prints it. `invalid-input` for a log that is not JSON
/// Lines, a receipt of an unknown schema version or of another run, or bad options.
#[napi]
pub fn verify_receipts_json(log: Uint8Array, options: String) -> napi::Result<String, Code> {
    heart_fleet_core::chain::verify_receipts_json(&log, &options).map_err(from_heart)
}

/// Every stable error code of the core's registry.
#[napi]
pub fn error_codes() -> Vec<String> {
    bridge::error_codes().into_iter().map(str::to_owned).collect()
}

/// The contract's constants (JSON; `bridge::contract_json` in the core): error codes, run
/// statuses, next statuses, channels, the ttl bound, the operation names, the defaults, the
/// error code of each lost cause and why execute-with-lease did not run the work.
#[napi]
pub fn contract() -> String {
    bridge::contract_json()
}

/// A JavaScript value as the core's canonical algorithm reads it
/// ([`heart_fleet_core::canonical::host`]).
#[derive(Clone, Copy)]
struct JsHostValue<'e> {
    env: &'e Env,
    value: Unknown<'e>,
}

impl<'e> JsHostValue<'e> {
    fn object(&self) -> napi::Result<Object<'e>> {
        self.value.coerce_to_object()
    }

    fn wrap(&self, value: Unknown<'e>) -> Self {
        JsHostValue { env: self.env, value }
    }
}

/// A JavaScript string's code units (napi-rs's buffer ends with a NUL terminator, dropped).
fn utf16(s: JsString<'_>) -> napi::Result<JsText<'static>> {
    let units = s.into_utf16()?;
    let text = units.as_slice().split_last().map_or(&[][..], |(_, text)| text);
    Ok(JsText::from_units(text.to_vec()))
}

impl<'e> HostValue for JsHostValue<'e> {
    type Key = Unknown<'e>;
    type Error = napi::Error;

    fn kind(&self) -> napi::Result<HostKind> {
        Ok(match self.value.get_type()? {
            ValueType::Null => HostKind::Null,
            ValueType::Undefined => HostKind::Undefined,
            ValueType::Boolean => HostKind::Bool(self.value.coerce_to_bool()?),
            ValueType::Number => HostKind::Number(self.value.coerce_to_number()?.get_double()?),
            ValueType::String => HostKind::String,
            ValueType::BigInt => HostKind::BigInt,
            ValueType::Function => HostKind::Function,
            ValueType::Symbol => HostKind::Symbol,
            _ if self.value.is_array()? => HostKind::Array,
            _ => HostKind::Object,
        })
    }

    fn text(&self) -> napi::Result<JsText<'static>> {
        utf16(self.value.coerce_to_string()?)
    }

    fn array_length(&self) -> napi::Result<u32> {
        self.object()?.get_array_length()
    }

    fn element(&self, index: u32) -> napi::Result<Option<Self>> {
        let array = self.object()?;
        if !array.has_element(index)? {
            return Ok(None);
        }
        Ok(Some(self.wrap(array.get_element::<Unknown>(index)?)))
    }

    fn keys(&self) -> napi::Result<Vec<(JsText<'static>, Unknown<'e>)>> {
        // `Object.keys`: own, enumerable, string-keyed (symbols dropped below).
        let names = self.object()?.get_all_property_names(
            KeyCollectionMode::OwnOnly,
            KeyFilter::Enumerable,
            KeyConversion::NumbersToStrings,
        )?;
        let mut keys = Vec::new();
        for i in 0..names.get_array_length()? {
            let key = names.get_element::<Unknown>(i)?;
            if key.get_type()? == ValueType::String {
                keys.push((utf16(key.coerce_to_string()?)?, key));
            }
        }
        Ok(keys)
    }

    fn get(&self, key: &Unknown<'e>) -> napi::Result<Self> {
        Ok(self.wrap(self.object()?.get_property::<Unknown, Unknown>(*key)?))
    }

    fn same(&self, other: &Self) -> napi::Result<bool> {
        self.env.strict_equals(self.value, other.value)
    }
}

/// The canonical form of a JavaScript value read directly (not through JSON text), or why
/// it has none.
#[napi(object)]
pub struct CanonicalValue {
    /// The reference's canonical text (absent when `error` is set).
    pub text: Option<String>,
    /// Whether `text` is JSON too (false when it renders a sparse array's hole).
    pub is_json: bool,
    /// The reference's error message when the value has no canonical form.
    pub error: Option<String>,
    /// Whether that error is a `TypeError` in the reference (a circular value).
    pub type_error: bool,
}

/// `canonicalize` of a JavaScript value walked in place: the core's algorithm for what JSON
/// text cannot carry (sparse arrays, `toJSON`, boxed primitives, values that are errors). An
/// exception the value raises while it is read (a throwing getter) propagates as is.
#[napi]
pub fn canonicalize_value(env: &Env, value: Unknown<'_>) -> napi::Result<CanonicalValue> {
    match canonicalize_host(&JsHostValue { env, value }) {
        Ok(c) => Ok(CanonicalValue { text: Some(c.text), is_json: c.is_json, error: None, type_error: false }),
        Err(HostError::Host(e)) => Err(e),
        Err(e) => {
            let type_error = matches!(e, HostError::Circular);
            Ok(CanonicalValue { text: None, is_json: false, error: Some(e.to_string()), type_error })
        }
    }
}

/// What a send records as its evidence when its result cannot be stored as JSON (JSON
/// text): `{"unstorable": {"type": kind, "reason": …}}`, the reason's first line cut to 200
/// UTF-16 code units (the core's `ops::unstorable_evidence`).
#[napi]
pub fn unstorable_evidence(kind: String, reason: String) -> String {
    bridge::unstorable_evidence_json(&kind, &reason)
}

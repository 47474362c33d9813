//! Canonical JSON, digests, identifiers, receipt verification and the error registry,
//! over JSON text (JavaScript hands values over as `JSON.stringify` output), and the
//! canonical form of a value JSON text cannot carry, walked in place (`canonicalizeValue`).

use heart_fleet_core::bridge;
use heart_fleet_core::canonical::JsText;
use heart_fleet_core::canonical::host::{HostError, HostKind, HostValue, canonicalize_host};
use wasm_bindgen::JsCast;
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
/// statuses, next statuses, channels, the ttl bound, the operation names, the defaults, the
/// error code of each lost cause and why execute-with-lease did not run the work.
#[wasm_bindgen]
pub fn contract() -> String {
    bridge::contract_json()
}

#[wasm_bindgen]
extern "C" {
    /// `Object.keys(value)`, an exception (a proxy's trap) returned rather than unwound
    /// through the module.
    #[wasm_bindgen(catch, js_namespace = Object, js_name = keys)]
    fn object_keys(value: &JsValue) -> Result<js_sys::Array, JsValue>;
}

/// A JavaScript value as the core's canonical algorithm reads it
/// ([`heart_fleet_core::canonical::host`]).
#[derive(Clone)]
struct JsHostValue(JsValue);

fn host_str(s: &js_sys::JsString) -> JsText<'static> {
    if s.is_valid_utf16() { JsText::Text(String::from(s).into()) } else { JsText::Units(s.iter().collect()) }
}

impl HostValue for JsHostValue {
    type Key = JsValue;
    type Error = JsValue;

    fn kind(&self) -> Result<HostKind, JsValue> {
        let v = &self.0;
        Ok(if v.is_null() {
            HostKind::Null
        } else if v.is_undefined() {
            HostKind::Undefined
        } else if let Some(b) = v.as_bool() {
            HostKind::Bool(b)
        } else if let Some(n) = v.as_f64() {
            HostKind::Number(n)
        } else if v.is_string() {
            HostKind::String
        } else if v.is_bigint() {
            HostKind::BigInt
        } else if v.is_function() {
            HostKind::Function
        } else if v.is_symbol() {
            HostKind::Symbol
        } else if js_sys::Array::is_array(v) {
            HostKind::Array
        } else {
            HostKind::Object
        })
    }

    fn text(&self) -> Result<JsText<'static>, JsValue> {
        Ok(host_str(self.0.unchecked_ref()))
    }

    fn array_length(&self) -> Result<u32, JsValue> {
        let n = js_sys::Reflect::get(&self.0, &JsValue::from_str("length"))?.as_f64().unwrap_or(0.0);
        // An array's length is a u32 by the language's own rule.
        Ok(if n.is_finite() && n >= 0.0 && n <= f64::from(u32::MAX) { n as u32 } else { 0 })
    }

    fn element(&self, index: u32) -> Result<Option<Self>, JsValue> {
        let at = JsValue::from(index);
        if !js_sys::Reflect::has(&self.0, &at)? {
            return Ok(None);
        }
        Ok(Some(JsHostValue(js_sys::Reflect::get_u32(&self.0, index)?)))
    }

    fn keys(&self) -> Result<Vec<(JsText<'static>, JsValue)>, JsValue> {
        Ok(object_keys(&self.0)?.iter().map(|k| (host_str(k.unchecked_ref()), k)).collect())
    }

    fn get(&self, key: &JsValue) -> Result<Self, JsValue> {
        Ok(JsHostValue(js_sys::Reflect::get(&self.0, key)?))
    }

    fn same(&self, other: &Self) -> Result<bool, JsValue> {
        Ok(self.0 == other.0)
    }
}

/// `canonicalize` of a JavaScript value walked in place: the core's algorithm for what JSON
/// text cannot carry (sparse arrays, `toJSON`, boxed primitives, values that are errors).
/// Returns `{text, isJson, error, typeError}` (as the napi module does); an exception the
/// value raises while it is read (a throwing getter) is thrown as is.
#[wasm_bindgen(js_name = canonicalizeValue)]
pub fn canonicalize_value(value: JsValue) -> Result<JsValue, JsValue> {
    let (text, is_json, error, type_error) = match canonicalize_host(&JsHostValue(value)) {
        Ok(c) => (JsValue::from(c.text), c.is_json, JsValue::NULL, false),
        Err(HostError::Host(e)) => return Err(e),
        Err(e) => (JsValue::NULL, false, JsValue::from(e.to_string()), matches!(e, HostError::Circular)),
    };
    let out = js_sys::Object::new();
    for (name, v) in [("text", text), ("isJson", is_json.into()), ("error", error), ("typeError", type_error.into())] {
        js_sys::Reflect::set(&out, &JsValue::from_str(name), &v)?;
    }
    Ok(out.into())
}

/// What a send records as its evidence when its result cannot be stored as JSON (JSON
/// text): `{"unstorable": {"type": kind, "reason": …}}`, the reason's first line cut to 200
/// UTF-16 code units (the core's `ops::unstorable_evidence`).
#[wasm_bindgen(js_name = unstorableEvidence)]
pub fn unstorable_evidence(kind: JsValue, reason: JsValue) -> Result<String, JsValue> {
    Ok(bridge::unstorable_evidence_json(&text("kind", &kind)?, &text("reason", &reason)?))
}

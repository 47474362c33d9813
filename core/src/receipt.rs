//! Tamper-evident receipts, byte-compatible with the TypeScript package
//! (`zao.heart.receipt.v1`), and the sinks they go to.
//!
//! The digest is `sha256:dreamnet-sorted-json:v0:` + sha256 of the canonical form of exactly
//! `{event, runId, owner, leaseExpiresAt, effectKey}`; `at` and `schemaVersion` are not covered.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical;
use crate::error::{ErrorCode, HeartError};
use crate::time::Timestamp;

/// The receipt schema version, as in the reference.
pub const SCHEMA_VERSION: &str = "zao.heart.receipt.v1";

/// What a receipt records. The first nine are the reference's; the operator events are ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeartEvent {
    /// A lease was acquired.
    Acquired,
    /// A lease was renewed (carries the new expiry).
    Renewed,
    /// A lease was released.
    Released,
    /// A dead holder's run was recovered (carries the previous owner).
    Reclaimed,
    /// A run hit the retry ceiling.
    Quarantined,
    /// A token was checked and is live.
    FenceVerified,
    /// A token was refused (verify, renew or release).
    FenceRejected,
    /// An irreversible effect succeeded (carries the effect key).
    EffectCommitted,
    /// An effect was not fired again because its key was recorded.
    EffectDeduped,
    /// An operator put a quarantined run back to `ready`.
    Requeued,
    /// An operator removed a lease by force.
    ForceReleased,
}

impl HeartEvent {
    /// Every event.
    pub const ALL: [HeartEvent; 11] = [
        HeartEvent::Acquired,
        HeartEvent::Renewed,
        HeartEvent::Released,
        HeartEvent::Reclaimed,
        HeartEvent::Quarantined,
        HeartEvent::FenceVerified,
        HeartEvent::FenceRejected,
        HeartEvent::EffectCommitted,
        HeartEvent::EffectDeduped,
        HeartEvent::Requeued,
        HeartEvent::ForceReleased,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            HeartEvent::Acquired => "acquired",
            HeartEvent::Renewed => "renewed",
            HeartEvent::Released => "released",
            HeartEvent::Reclaimed => "reclaimed",
            HeartEvent::Quarantined => "quarantined",
            HeartEvent::FenceVerified => "fence_verified",
            HeartEvent::FenceRejected => "fence_rejected",
            HeartEvent::EffectCommitted => "effect_committed",
            HeartEvent::EffectDeduped => "effect_deduped",
            HeartEvent::Requeued => "requeued",
            HeartEvent::ForceReleased => "force_released",
        }
    }
}

impl fmt::Display for HeartEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A receipt, with the reference's fields in its order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartReceipt {
    /// Always [`SCHEMA_VERSION`] (borrowed, so emitting a receipt does not copy it).
    pub schema_version: std::borrow::Cow<'static, str>,
    /// What happened.
    pub event: HeartEvent,
    /// The run.
    pub run_id: String,
    /// Who (the previous owner for `reclaimed`/`quarantined`).
    pub owner: String,
    /// The expiry the event is about, or null.
    pub lease_expires_at: Option<String>,
    /// The effect key, for effect events.
    pub effect_key: Option<String>,
    /// The store's clock when it was emitted.
    pub at: String,
    /// The tamper-evidence digest.
    pub digest: String,
}

/// The digest of a receipt's five covered fields (streamed into the hasher, no JSON value built).
pub fn receipt_digest(
    event: &str,
    run_id: &str,
    owner: &str,
    lease_expires_at: Option<&str>,
    effect_key: Option<&str>,
) -> String {
    canonical::receipt_digest(event, run_id, owner, lease_expires_at, effect_key)
}

impl HeartReceipt {
    /// Builds a receipt at `at`, computing its digest.
    pub fn new(
        event: HeartEvent,
        run_id: &str,
        owner: &str,
        lease_expires_at: Option<Timestamp>,
        effect_key: Option<&str>,
        at: Timestamp,
    ) -> HeartReceipt {
        let mut receipt = HeartReceipt {
            schema_version: std::borrow::Cow::Borrowed(SCHEMA_VERSION),
            event,
            run_id: String::new(),
            owner: String::new(),
            lease_expires_at: None,
            effect_key: None,
            at: String::new(),
            digest: String::with_capacity(canonical::DIGEST_PREFIX.len() + 64),
        };
        receipt.rebuild(event, run_id, owner, lease_expires_at, effect_key, at);
        receipt
    }

    /// Turns this receipt into the one [`HeartReceipt::new`] builds from these fields, reusing
    /// its strings' buffers: a sink is handed one receipt rebuilt in place for every emission,
    /// so emitting allocates nothing.
    pub(crate) fn rebuild(
        &mut self,
        event: HeartEvent,
        run_id: &str,
        owner: &str,
        lease_expires_at: Option<Timestamp>,
        effect_key: Option<&str>,
        at: Timestamp,
    ) {
        self.schema_version = std::borrow::Cow::Borrowed(SCHEMA_VERSION);
        self.event = event;
        run_id.clone_into(&mut self.run_id);
        owner.clone_into(&mut self.owner);
        match lease_expires_at {
            Some(t) => {
                let slot = self.lease_expires_at.get_or_insert_default();
                slot.clear();
                t.write_iso(slot);
            }
            None => self.lease_expires_at = None,
        }
        match effect_key {
            Some(k) => k.clone_into(self.effect_key.get_or_insert_default()),
            None => self.effect_key = None,
        }
        self.at.clear();
        at.write_iso(&mut self.at);
        self.digest.clear();
        canonical::receipt_digest_into(
            event.as_str(),
            &self.run_id,
            &self.owner,
            self.lease_expires_at.as_deref(),
            self.effect_key.as_deref(),
            &mut self.digest,
        );
    }

    /// The receipt as one JSON line (fields in the reference's order).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Checks a receipt given as JSON: the schema version, the field types and the digest.
/// Works on receipts with unknown events too (a newer node's), since the digest covers
/// the event's text. `receipt-tampered` when the digest does not match, `invalid-input`
/// when the value is not a receipt at all.
pub fn verify_receipt(value: &Value) -> Result<(), HeartError> {
    let obj = value.as_object().ok_or_else(|| HeartError::invalid("a receipt is a JSON object"))?;
    let text = |k: &str| -> Result<&str, HeartError> {
        obj.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| HeartError::invalid(format!("receipt field {k} must be a string")))
    };
    let nullable = |k: &str| -> Result<Option<&str>, HeartError> {
        match obj.get(k) {
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            _ => Err(HeartError::invalid(format!("receipt field {k} must be a string or null"))),
        }
    };
    if text("schemaVersion")? != SCHEMA_VERSION {
        return Err(HeartError::invalid(format!("unknown receipt schemaVersion (want {SCHEMA_VERSION})")));
    }
    text("at")?;
    let want = receipt_digest(
        text("event")?,
        text("runId")?,
        text("owner")?,
        nullable("leaseExpiresAt")?,
        nullable("effectKey")?,
    );
    let got = text("digest")?;
    if got == want {
        Ok(())
    } else {
        Err(HeartError::new(
            ErrorCode::ReceiptTampered,
            format!("digest {got} does not match the receipt's fields (expected {want})"),
        ))
    }
}

/// Where receipts go. A sink that fails must not break the lease operation (the
/// reference swallows sink errors); a sink reports its own failures out of band.
pub trait ReceiptSink: Send {
    /// Takes one receipt, in emission order.
    fn emit(&mut self, receipt: &HeartReceipt);
}

/// The default sink: keeps receipts in memory (`receipts()` in the reference).
#[derive(Debug, Default, Clone)]
pub struct MemorySink {
    /// Every receipt so far.
    pub receipts: Vec<HeartReceipt>,
}

impl ReceiptSink for MemorySink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        self.receipts.push(receipt.clone());
    }
}

impl<F: FnMut(&HeartReceipt) + Send> ReceiptSink for F {
    fn emit(&mut self, receipt: &HeartReceipt) {
        self(receipt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_the_reference_example() {
        let at = Timestamp::parse_iso("2026-07-30T00:00:00.000Z").unwrap();
        let exp = Timestamp::parse_iso("2026-07-30T00:01:00.000Z").unwrap();
        let r = HeartReceipt::new(
            HeartEvent::Acquired,
            "00000000-0000-4000-8000-000000000001",
            "worker-A",
            Some(exp),
            None,
            at,
        );
        assert_eq!(
            r.digest,
            "sha256:dreamnet-sorted-json:v0:b200a85a1c659d4fa561ec6d137840ea846ea42c2b357849d40e2a274eac7387"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert!(verify_receipt(&v).is_ok());
        let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 8);
    }

    #[test]
    fn a_receipt_rebuilt_in_place_is_the_receipt_built_anew() {
        let fields = [
            (HeartEvent::Acquired, "run-1", "worker-A", Some(Timestamp(1_785_369_660_000)), None, Timestamp(0)),
            (HeartEvent::Released, "r", "w", None, None, Timestamp(1_785_369_600_000)),
            (
                HeartEvent::EffectCommitted,
                "a \"quoted\" run",
                "w\n2",
                Some(Timestamp(5)),
                Some("effect:1"),
                Timestamp(-1),
            ),
            (HeartEvent::FenceVerified, "run-1", "worker-A", Some(Timestamp(7)), None, Timestamp(7)),
            (HeartEvent::EffectDeduped, "", "", None, Some("k"), Timestamp(9)),
        ];
        let mut reused = HeartReceipt::new(HeartEvent::Requeued, "x", "y", None, None, Timestamp(1));
        for _ in 0..2 {
            for (event, run_id, owner, expiry, key, at) in fields {
                reused.rebuild(event, run_id, owner, expiry, key, at);
                assert_eq!(reused, HeartReceipt::new(event, run_id, owner, expiry, key, at));
            }
        }
    }

    #[test]
    fn tampering_is_detected_but_at_is_not_covered() {
        let r = HeartReceipt::new(HeartEvent::Released, "r", "w", None, None, Timestamp(0));
        let mut v = serde_json::to_value(&r).unwrap();
        v["at"] = Value::String("2099-01-01T00:00:00.000Z".into());
        assert!(verify_receipt(&v).is_ok());
        v["owner"] = Value::String("mallory".into());
        assert_eq!(verify_receipt(&v).unwrap_err().code, ErrorCode::ReceiptTampered);
        assert_eq!(verify_receipt(&Value::Null).unwrap_err().code, ErrorCode::InvalidInput);
    }
}

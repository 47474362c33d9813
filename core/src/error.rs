//! The one registry of stable error codes, projected the same way by every binding
//! (a JS `Error` with `.code`, a Python exception with `.code`, a WIT variant).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A stable, kebab-case error code. Codes are never renamed; new ones may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// Bad arguments: empty ids, a ttl outside `1..=31_536_000` s, an unknown status. Nothing changed.
    InvalidInput,
    /// The run does not exist.
    RunNotFound,
    /// Another owner holds a live lease, or the run is in a status that cannot be acquired.
    LeaseHeld,
    /// A conditional write lost a race against another owner.
    Collision,
    /// The fencing token no longer matches the run (superseded, expired or released).
    FenceRejected,
    /// The run is quarantined after too many dead holders.
    Quarantined,
    /// The effect key was already recorded; the effect did not fire again.
    Deduped,
    /// The store failed (connection, timeout, constraint). Never reported as a miss.
    StoreUnavailable,
    /// The store answered with something the core could not use (a protocol bug in a store).
    StoreProtocol,
    /// A receipt's digest does not match its fields.
    ReceiptTampered,
    /// The host's effect or probe failed.
    EffectFailed,
    /// An operator action was not allowed in the run's current status.
    InvalidState,
}

impl ErrorCode {
    /// Every code, for registries and bindings that enumerate them.
    pub const ALL: [ErrorCode; 12] = [
        ErrorCode::InvalidInput,
        ErrorCode::RunNotFound,
        ErrorCode::LeaseHeld,
        ErrorCode::Collision,
        ErrorCode::FenceRejected,
        ErrorCode::Quarantined,
        ErrorCode::Deduped,
        ErrorCode::StoreUnavailable,
        ErrorCode::StoreProtocol,
        ErrorCode::ReceiptTampered,
        ErrorCode::EffectFailed,
        ErrorCode::InvalidState,
    ];

    /// The stable kebab-case text of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "invalid-input",
            ErrorCode::RunNotFound => "run-not-found",
            ErrorCode::LeaseHeld => "lease-held",
            ErrorCode::Collision => "collision",
            ErrorCode::FenceRejected => "fence-rejected",
            ErrorCode::Quarantined => "quarantined",
            ErrorCode::Deduped => "deduped",
            ErrorCode::StoreUnavailable => "store-unavailable",
            ErrorCode::StoreProtocol => "store-protocol",
            ErrorCode::ReceiptTampered => "receipt-tampered",
            ErrorCode::EffectFailed => "effect-failed",
            ErrorCode::InvalidState => "invalid-state",
        }
    }

    /// Looks a code up by its text.
    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == text)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of a heart-fleet operation: a stable code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong, naming the step for multi-write operations.
    pub message: String,
}

impl HeartError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        HeartError { code, message: message.into() }
    }

    /// An `invalid-input` error.
    pub fn invalid(message: impl Into<String>) -> Self {
        HeartError::new(ErrorCode::InvalidInput, message)
    }

    /// A `store-unavailable` error that names the step the operation stopped at.
    pub fn store(step: &str, cause: &StoreError) -> Self {
        HeartError::new(ErrorCode::StoreUnavailable, format!("store failed at {step}: {}", cause.0))
    }
}

impl fmt::Display for HeartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HeartError {}

/// A failure reported by a store. The core turns it into `store-unavailable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

impl From<&str> for StoreError {
    fn from(message: &str) -> Self {
        StoreError(message.to_owned())
    }
}

impl From<String> for StoreError {
    fn from(message: String) -> Self {
        StoreError(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_kebab_case_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text));
            assert!(text.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{text}");
            assert_eq!(ErrorCode::parse(text), Some(code));
        }
        assert_eq!(ErrorCode::parse("nope"), None);
    }
}

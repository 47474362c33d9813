//! # heart-fleet for Node.js
//!
//! The native half of the npm package `heart-fleet`: a thin napi-rs layer over
//! [`heart_fleet_core::bridge`], the JSON step protocol every foreign-language binding
//! shares. It holds no lease logic of its own. The JavaScript half
//! (`index.cjs`) is the public API; this module gives it:
//!
//! * [`NativeFleet`]: the sans-I/O operation class. `NativeFleet::begin` builds one of the
//!   core's [`heart_fleet_core::ops`] machines from JSON arguments and starts it. When the
//!   fleet is attached to a [`NativeMemoryStore`], store requests are answered synchronously
//!   inside Rust; every other need (a JS store's request, a `LeaseStore` method call, the
//!   effect ledger, the effect itself, a reconcile probe) is handed to JavaScript, and the
//!   JS async loop resumes the operation, by its handle, with the answer. Receipts and
//!   counters are applied to the fleet after every step, in order.
//! * [`NativeMemoryStore`]: the core's deterministic [`heart_fleet_core::MemoryStore`].
//! * [`NativeLeaseSession`]: the core's execute-with-lease state ([`heart_fleet_core::session`]);
//!   JavaScript owns the timers.
//! * The canonical-JSON functions, receipt verification, and SQL rendering/decoding for
//!   SQL stores written in JavaScript.
//!
//! Everything that crosses the boundary is JSON text or a plain number/string/boolean, so
//! there is no lossy number mapping (every integer here is an `i64` well inside 2^53).
//! Failures are thrown as JS `Error`s whose `code` is a stable code of the core's registry
//! ([`heart_fleet_core::ErrorCode`]); nothing here panics.

mod canonical;
mod fleet;
mod rules;
mod session;
mod sql;
mod store;

pub use canonical::*;
pub use fleet::*;
pub use rules::*;
pub use session::*;
pub use sql::*;
pub use store::*;

use heart_fleet_core::HeartError;

/// The `code` of an error thrown to JavaScript: one of the core's stable codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code(pub &'static str);

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        self.0
    }
}

/// A result whose error becomes a JS `Error` with a stable `.code`.
pub type CodedResult<T> = napi::Result<T, Code>;

/// A core error for JavaScript: a JS `Error` whose `code` is the core's stable code.
pub(crate) fn from_heart(e: HeartError) -> napi::Error<Code> {
    napi::Error::new(Code(e.code.as_str()), e.message)
}

//! The receipt chain: completeness and origin on top of the reference digest.
//!
//! The reference digest (`receipt::receipt_digest`) covers five fields of one receipt and no
//! key, so it catches an accidental edit of a receipt but not a deleted, reordered, duplicated
//! or forged one. A chained receipt keeps every reference field unchanged (a TypeScript
//! verifier still accepts it) and adds, per run:
//!
//! * `seq`: its position in the run's log, 1 for the run's first receipt;
//! * `prev`: the `link` of the receipt at `seq - 1`, null for the first;
//! * `link`: [`LINK_PREFIX`] + sha256 of the canonical JSON of
//!   `{at, digest, prev, runId, seq}`, so the link covers the reference digest (and through it
//!   the five fields), the time, the position and the whole chain before it;
//! * `hmac` and/or `sig`, when the fleet has a key: HMAC-SHA-256 with a shared fleet key, or an
//!   Ed25519 signature that anyone holding the public key can check, both over the `link` text.
//!
//! [`verify_log`] checks a whole log (a JSON Lines file, or the rows of `heart_receipts` in
//! insertion order) and reports, per run, gaps, reorders, duplicates, forks, broken links and
//! truncation (given the final sequence the verifier expects). Receipts without chain fields
//! (from a TypeScript node, or written before the chain existed) still verify as before and are
//! counted as unchained.
//!
//! A writer of chains keeps the head of each run ([`ChainHeads`], within one process) and asks
//! a [`Signer`] for each next [`ChainLink`]. Writers in several processes appending to one log
//! need the store to refuse a second receipt at a position already taken: the
//! `heart_receipts` table does (migration 0003's unique index; `heart-fleet-stores`'
//! `ReceiptTableSink` chains again after the new head), a JSON Lines file has one writer.
//!
//! Without a key, a chain shows receipts deleted, reordered, duplicated or inserted among the
//! others, but not a whole log rewritten with recomputed links, nor a tail cut off unless the
//! verifier knows the final sequence. Only a signature shows where a receipt came from.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use ed25519_dalek::{Signer as _, Verifier as _};
use hmac::{KeyInit, Mac};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::canonical;
use crate::error::{ErrorCode, HeartError};
use crate::receipt::{HeartReceipt, SCHEMA_VERSION, verify_receipt};

/// The prefix of a receipt's `link`.
pub const LINK_PREFIX: &str = "sha256:heart-chain:v1:";
/// The prefix of a receipt's `hmac`.
pub const HMAC_PREFIX: &str = "hmac-sha256:";
/// The prefix of a receipt's `sig`.
pub const ED25519_PREFIX: &str = "ed25519:";

/// The first word of a key file holding a shared HMAC-SHA-256 fleet key (then `:` and hex).
pub const HMAC_KEY_KIND: &str = "heart-fleet-hmac-sha256-key";
/// The first word of a key file holding an Ed25519 signing key (32-byte seed, hex).
pub const ED25519_SECRET_KIND: &str = "heart-fleet-ed25519-secret-key";
/// The first word of a key file holding an Ed25519 public key (32 bytes, hex).
pub const ED25519_PUBLIC_KIND: &str = "heart-fleet-ed25519-public-key";

/// The shortest HMAC key accepted, in bytes (the hash's output size, as RFC 2104 advises).
pub const MIN_HMAC_KEY_BYTES: usize = 32;

type HmacSha256 = hmac::Hmac<Sha256>;

/// The link of a receipt at `seq` after `prev`, from the receipt's reference `digest`.
pub fn link_digest(digest: &str, run_id: &str, at: &str, seq: u64, prev: Option<&str>) -> String {
    let mut fields = Map::new();
    fields.insert("at".into(), Value::String(at.to_owned()));
    fields.insert("digest".into(), Value::String(digest.to_owned()));
    fields.insert("prev".into(), prev.map_or(Value::Null, |p| Value::String(p.to_owned())));
    fields.insert("runId".into(), Value::String(run_id.to_owned()));
    fields.insert("seq".into(), Value::from(seq));
    let mut out = String::with_capacity(LINK_PREFIX.len() + 64);
    out.push_str(LINK_PREFIX);
    out.push_str(&canonical::canonical_sha256_hex(&Value::Object(fields)));
    out
}

/// A receipt's place in its run's chain, and its signatures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainLink {
    /// Its position in the run's log, from 1.
    pub seq: u64,
    /// The link of the receipt before it, or null for the first.
    pub prev: Option<String>,
    /// Its own link.
    pub link: String,
    /// HMAC-SHA-256 of `link` with the fleet key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hmac: Option<String>,
    /// Ed25519 signature of `link`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

#[derive(Serialize)]
struct ChainedLine<'a> {
    #[serde(flatten)]
    receipt: &'a HeartReceipt,
    #[serde(flatten)]
    link: &'a ChainLink,
}

/// A chained receipt as one JSON line: the reference's eight fields in its order, then `seq`,
/// `prev`, `link` and the signatures.
pub fn chained_json_line(receipt: &HeartReceipt, link: &ChainLink) -> String {
    serde_json::to_string(&ChainedLine { receipt, link }).unwrap_or_default()
}

/// A chained receipt as a JSON value (what the receipts table stores).
pub fn chained_json(receipt: &HeartReceipt, link: &ChainLink) -> Value {
    serde_json::to_value(ChainedLine { receipt, link }).unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// A fleet key, as read from a key file or the environment: `KIND:HEX` on one line.
pub enum FleetKey {
    /// A shared secret for HMAC-SHA-256 (signs and verifies).
    Hmac(Vec<u8>),
    /// An Ed25519 signing key's 32-byte seed (signs; its public key verifies).
    Ed25519Secret([u8; 32]),
    /// An Ed25519 public key's 32 bytes (verifies only).
    Ed25519Public([u8; 32]),
}

impl fmt::Debug for FleetKey {
    // Never the key material: a key printed in a log is a key lost.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FleetKey({})", self.kind())
    }
}

impl FleetKey {
    /// Reads a key's text form. The error names what is wrong, never the key's bytes.
    pub fn parse(text: &str) -> Result<FleetKey, HeartError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(HeartError::invalid("the key is empty"));
        }
        let (kind, hex) = text.split_once(':').ok_or_else(|| {
            HeartError::invalid(format!(
                "not a heart-fleet key: expected {HMAC_KEY_KIND}:HEX, {ED25519_SECRET_KIND}:HEX or {ED25519_PUBLIC_KIND}:HEX"
            ))
        })?;
        let bytes = decode_hex(hex).ok_or_else(|| HeartError::invalid(format!("the {kind} is not hex")))?;
        let key32 = |what: &str| -> Result<[u8; 32], HeartError> {
            <[u8; 32]>::try_from(bytes.as_slice())
                .map_err(|_| HeartError::invalid(format!("an {what} is 32 bytes, this one is {}", bytes.len())))
        };
        match kind {
            HMAC_KEY_KIND if bytes.len() < MIN_HMAC_KEY_BYTES => Err(HeartError::invalid(format!(
                "an HMAC key needs at least {MIN_HMAC_KEY_BYTES} bytes, this one has {}",
                bytes.len()
            ))),
            HMAC_KEY_KIND => Ok(FleetKey::Hmac(bytes)),
            ED25519_SECRET_KIND => Ok(FleetKey::Ed25519Secret(key32("Ed25519 secret key")?)),
            ED25519_PUBLIC_KIND => {
                let key = key32("Ed25519 public key")?;
                ed25519_dalek::VerifyingKey::from_bytes(&key)
                    .map_err(|_| HeartError::invalid("not a valid Ed25519 public key"))?;
                Ok(FleetKey::Ed25519Public(key))
            }
            other => Err(HeartError::invalid(format!("unknown key kind {other:?}"))),
        }
    }

    /// What kind of key it is, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            FleetKey::Hmac(_) => HMAC_KEY_KIND,
            FleetKey::Ed25519Secret(_) => ED25519_SECRET_KIND,
            FleetKey::Ed25519Public(_) => ED25519_PUBLIC_KIND,
        }
    }

    /// A new HMAC key from 32 random bytes the host drew (the core draws no random number).
    pub fn hmac_from_random(bytes: [u8; 32]) -> FleetKey {
        FleetKey::Hmac(bytes.to_vec())
    }

    /// A new Ed25519 signing key from a 32-byte random seed the host drew.
    pub fn ed25519_from_seed(seed: [u8; 32]) -> FleetKey {
        FleetKey::Ed25519Secret(seed)
    }

    /// The public key of an Ed25519 signing key (the key verifiers hold).
    pub fn public_key(&self) -> Option<FleetKey> {
        match self {
            FleetKey::Ed25519Secret(seed) => {
                Some(FleetKey::Ed25519Public(ed25519_dalek::SigningKey::from_bytes(seed).verifying_key().to_bytes()))
            }
            FleetKey::Ed25519Public(k) => Some(FleetKey::Ed25519Public(*k)),
            FleetKey::Hmac(_) => None,
        }
    }

    /// The key's text form, `KIND:HEX`, for a key file (the one place key bytes are written).
    pub fn to_key_file_text(&self) -> String {
        let mut out = String::from(self.kind());
        out.push(':');
        match self {
            FleetKey::Hmac(bytes) => canonical::push_hex(&mut out, bytes),
            FleetKey::Ed25519Secret(k) | FleetKey::Ed25519Public(k) => canonical::push_hex(&mut out, k),
        }
        out.push('\n');
        out
    }
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    text.as_bytes().chunks_exact(2).map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?)).collect()
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    canonical::push_hex(&mut out, bytes);
    out
}

fn hmac_of(key: &[u8], link: &str) -> String {
    // HMAC takes a key of any length (a short one was refused when the key was parsed), so this
    // cannot fail; if it did, the empty text matches no receipt's hmac and verification fails.
    let Ok(mut mac) = <HmacSha256 as KeyInit>::new_from_slice(key) else { return String::new() };
    mac.update(link.as_bytes());
    format!("{HMAC_PREFIX}{}", hex(&mac.finalize().into_bytes()))
}

/// Whether `got` is the HMAC of `link` under `key`, compared in constant time (the hmac
/// crate's `verify_slice`), so a verifier that answers many queries leaks nothing about the
/// expected tag.
fn hmac_matches(key: &[u8], link: &str, got: &str) -> bool {
    let Some(tag) = got.strip_prefix(HMAC_PREFIX).and_then(decode_hex) else { return false };
    let Ok(mut mac) = <HmacSha256 as KeyInit>::new_from_slice(key) else { return false };
    mac.update(link.as_bytes());
    mac.verify_slice(&tag).is_ok()
}

/// What signs a fleet's receipts: an HMAC key, an Ed25519 key, both or neither.
#[derive(Default)]
pub struct Signer {
    hmac: Option<Vec<u8>>,
    ed25519: Option<ed25519_dalek::SigningKey>,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer").field("hmac", &self.hmac.is_some()).field("ed25519", &self.signs_ed25519()).finish()
    }
}

impl Signer {
    /// A signer with no key: chains are written, unsigned.
    pub fn unsigned() -> Signer {
        Signer::default()
    }

    /// Adds a signing key. A public key cannot sign; a second key of one kind replaces nothing.
    pub fn with_key(mut self, key: FleetKey) -> Result<Signer, HeartError> {
        match key {
            FleetKey::Hmac(_) if self.hmac.is_some() => Err(HeartError::invalid("two HMAC signing keys")),
            FleetKey::Hmac(bytes) => {
                self.hmac = Some(bytes);
                Ok(self)
            }
            FleetKey::Ed25519Secret(_) if self.signs_ed25519() => Err(HeartError::invalid("two Ed25519 signing keys")),
            FleetKey::Ed25519Secret(seed) => {
                self.ed25519 = Some(ed25519_dalek::SigningKey::from_bytes(&seed));
                Ok(self)
            }
            FleetKey::Ed25519Public(_) => {
                Err(HeartError::invalid("an Ed25519 public key cannot sign; give the secret key"))
            }
        }
    }

    /// Whether any key signs.
    pub fn signs(&self) -> bool {
        self.hmac.is_some() || self.signs_ed25519()
    }

    fn signs_ed25519(&self) -> bool {
        self.ed25519.is_some()
    }

    /// The link of `receipt` at `seq` after `prev`, signed with this signer's keys.
    pub fn link(&self, receipt: &HeartReceipt, seq: u64, prev: Option<&str>) -> ChainLink {
        let link = link_digest(&receipt.digest, &receipt.run_id, &receipt.at, seq, prev);
        let hmac = self.hmac.as_deref().map(|key| hmac_of(key, &link));
        let sig =
            self.ed25519.as_ref().map(|key| format!("{ED25519_PREFIX}{}", hex(&key.sign(link.as_bytes()).to_bytes())));
        ChainLink { seq, prev: prev.map(str::to_owned), link, hmac, sig }
    }
}

/// The head of every run's chain in one writer (the JSON Lines sink): the next receipt of a run
/// goes at `seq + 1` after `link`.
#[derive(Debug, Default)]
pub struct ChainHeads {
    heads: HashMap<String, (u64, String)>,
}

impl ChainHeads {
    /// No chain yet.
    pub fn new() -> ChainHeads {
        ChainHeads::default()
    }

    /// Takes a line of an existing log into account (a sink appending to a file resumes the
    /// chains in it). Lines that are not chained receipts are ignored.
    pub fn observe(&mut self, value: &Value) {
        let (Some(run), Some(seq), Some(link)) = (
            value.get("runId").and_then(Value::as_str),
            value.get("seq").and_then(Value::as_u64),
            value.get("link").and_then(Value::as_str),
        ) else {
            return;
        };
        let head = self.heads.entry(run.to_owned()).or_insert((0, String::new()));
        if seq > head.0 {
            *head = (seq, link.to_owned());
        }
    }

    /// Chains `receipt` after its run's head and moves the head.
    pub fn append(&mut self, signer: &Signer, receipt: &HeartReceipt) -> ChainLink {
        let head = self.heads.get(&receipt.run_id);
        let link = signer.link(receipt, head.map_or(1, |h| h.0 + 1), head.map(|h| h.1.as_str()));
        self.heads.insert(receipt.run_id.clone(), (link.seq, link.link.clone()));
        link
    }
}

// ---------------------------------------------------------------------------------------------
// Verifying a log
// ---------------------------------------------------------------------------------------------

/// The keys a verifier holds.
#[derive(Default)]
pub struct VerifyKeys {
    hmac: Option<Vec<u8>>,
    ed25519: Option<ed25519_dalek::VerifyingKey>,
}

impl fmt::Debug for VerifyKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifyKeys")
            .field("hmac", &self.hmac.is_some())
            .field("ed25519", &self.checks_ed25519())
            .finish()
    }
}

impl VerifyKeys {
    /// No key: integrity and completeness only.
    pub fn none() -> VerifyKeys {
        VerifyKeys::default()
    }

    /// Whether an Ed25519 public key is held.
    fn checks_ed25519(&self) -> bool {
        self.ed25519.is_some()
    }

    /// Adds the shared HMAC key (`--key`): every chained receipt must then carry a valid `hmac`.
    pub fn with_hmac(mut self, key: FleetKey) -> Result<VerifyKeys, HeartError> {
        match key {
            FleetKey::Hmac(bytes) => {
                self.hmac = Some(bytes);
                Ok(self)
            }
            other => Err(HeartError::invalid(format!("an HMAC key is needed, this is an {}", other.kind()))),
        }
    }

    /// Adds the Ed25519 public key (`--public-key`; a secret key gives its public half): every
    /// chained receipt must then carry a valid `sig`.
    pub fn with_public_key(mut self, key: FleetKey) -> Result<VerifyKeys, HeartError> {
        let Some(FleetKey::Ed25519Public(bytes)) = key.public_key() else {
            return Err(HeartError::invalid(format!("an Ed25519 public key is needed, this is an {}", key.kind())));
        };
        let k = ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map_err(|_| HeartError::invalid("not a valid Ed25519 public key"))?;
        self.ed25519 = Some(k);
        Ok(self)
    }
}

/// What a verifier expects of a log beyond what it holds.
#[derive(Debug, Clone, Default)]
pub struct LogExpectations {
    /// The final sequence of each named run (from its run row, or kept elsewhere): a log that
    /// ends before it was truncated.
    pub final_seq: BTreeMap<String, u64>,
    /// The log is one run's: a receipt of another run is bad input.
    pub run: Option<String>,
    /// Unchained receipts fail the verification instead of being counted.
    pub require_chain: bool,
}

impl LogExpectations {
    /// Expects `seq` as the final sequence of `run`; naming a run twice is bad input.
    pub fn expect_final_seq(&mut self, run: &str, seq: u64) -> Result<(), HeartError> {
        if seq == 0 {
            return Err(HeartError::invalid(format!("the final seq of run {run:?}: a seq counts from 1")));
        }
        match self.final_seq.insert(run.to_owned(), seq) {
            Some(_) => Err(HeartError::invalid(format!("the final seq of run {run:?} is given twice"))),
            None => Ok(()),
        }
    }
}

/// What [`verify_log`] found wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum FindingCode {
    /// A receipt's digest, or its link, does not match its fields.
    #[serde(rename = "receipt-tampered")]
    Tampered,
    /// A line is not a receipt (wrong fields or types).
    #[serde(rename = "invalid-input")]
    Malformed,
    /// Sequence numbers are missing: receipts were deleted.
    #[serde(rename = "chain-gap")]
    Gap,
    /// A receipt comes after one with a higher sequence number.
    #[serde(rename = "chain-reorder")]
    Reorder,
    /// The same receipt appears twice.
    #[serde(rename = "chain-duplicate")]
    Duplicate,
    /// Two different receipts claim one position.
    #[serde(rename = "chain-fork")]
    Fork,
    /// A receipt's `prev` is not the link of the receipt before it (an inserted or replaced one).
    #[serde(rename = "chain-broken")]
    Broken,
    /// The log ends before the run's final sequence.
    #[serde(rename = "chain-truncated")]
    Truncated,
    /// A chained receipt carries no signature for a key the verifier holds.
    #[serde(rename = "signature-missing")]
    SignatureMissing,
    /// A signature does not verify with the verifier's key: the receipt was not signed by it.
    #[serde(rename = "signature-invalid")]
    SignatureInvalid,
    /// A receipt without chain fields where the verifier requires chains.
    #[serde(rename = "receipt-unchained")]
    Unchained,
}

impl FindingCode {
    /// The stable text of the code.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingCode::Tampered => ErrorCode::ReceiptTampered.as_str(),
            FindingCode::Malformed => ErrorCode::InvalidInput.as_str(),
            FindingCode::Gap => "chain-gap",
            FindingCode::Reorder => "chain-reorder",
            FindingCode::Duplicate => "chain-duplicate",
            FindingCode::Fork => "chain-fork",
            FindingCode::Broken => "chain-broken",
            FindingCode::Truncated => "chain-truncated",
            FindingCode::SignatureMissing => "signature-missing",
            FindingCode::SignatureInvalid => "signature-invalid",
            FindingCode::Unchained => "receipt-unchained",
        }
    }
}

impl FindingCode {
    /// Whether the finding is about the receipt itself (it then does not count as ok), rather
    /// than about its place in the chain.
    pub fn is_about_the_receipt(self) -> bool {
        matches!(
            self,
            FindingCode::Tampered
                | FindingCode::Malformed
                | FindingCode::SignatureMissing
                | FindingCode::SignatureInvalid
                | FindingCode::Unchained
        )
    }
}

impl fmt::Display for FindingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing [`verify_log`] found wrong, at a position of the log (a line number or a row id)
/// or about a run as a whole (truncation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The position of the receipt it is about, if it is about one.
    pub position: Option<u64>,
    /// The run it is about, when known.
    pub run_id: Option<String>,
    /// What is wrong.
    pub code: FindingCode,
    /// In words.
    pub message: String,
}

/// One run's chain, as the log holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunChain {
    /// Receipts of the run.
    pub receipts: u64,
    /// Of which chained.
    pub chained: u64,
    /// Of which without chain fields.
    pub unchained: u64,
    /// The highest sequence number seen.
    pub last_seq: Option<u64>,
}

/// The result of [`verify_log`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogReport {
    /// Entries that were checked.
    pub receipts: u64,
    /// Receipts whose digest, link and signatures all verify.
    pub ok: u64,
    /// Receipts whose digest or link does not match.
    pub tampered: u64,
    /// Entries that are not receipts.
    pub malformed: u64,
    /// Receipts with chain fields.
    pub chained: u64,
    /// Receipts without them (verified by digest only).
    pub unchained: u64,
    /// Chained receipts whose signatures were checked against a key and verified.
    pub signed: u64,
    /// Every run in the log, by id.
    pub runs: BTreeMap<String, RunChain>,
    /// Everything found wrong, in log order, then the per-run findings.
    pub findings: Vec<Finding>,
}

impl LogReport {
    /// Whether the log verified: no finding at all.
    pub fn passed(&self) -> bool {
        self.findings.is_empty()
    }

    /// Findings that are about the chains (gaps, reorders, ...), not about single receipts.
    pub fn chain_findings(&self) -> usize {
        self.findings.iter().filter(|f| !f.code.is_about_the_receipt()).count()
    }

    /// Puts the findings in log order, the ones about whole runs last.
    pub fn sort_findings(&mut self) {
        self.findings.sort_by_key(|f| f.position.unwrap_or(u64::MAX));
    }

    /// The one-line summary the CLI prints last.
    pub fn summary_line(&self) -> String {
        format!(
            "{} receipts, {} ok, {} tampered, {} malformed; {} runs, {} chained, {} unchained, {} signed, {} chain findings",
            self.receipts,
            self.ok,
            self.tampered,
            self.malformed,
            self.runs.len(),
            self.chained,
            self.unchained,
            self.signed,
            self.chain_findings()
        )
    }
}

/// One entry of a log: where it is (a line number, a row id) and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// Its position, for messages.
    pub position: u64,
    /// The receipt as read.
    pub value: Value,
}

struct Placed {
    position: u64,
    seq: u64,
    prev: Option<String>,
    link: String,
}

/// The chain fields of a receipt: `None` for an unchained one, an error message for fields of
/// the wrong type.
fn chain_fields(obj: &Map<String, Value>) -> Result<Option<(u64, Option<String>, String)>, String> {
    if !["seq", "prev", "link", "hmac", "sig"].iter().any(|k| obj.contains_key(*k)) {
        return Ok(None);
    }
    let seq = obj
        .get("seq")
        .and_then(Value::as_u64)
        .filter(|s| *s >= 1)
        .ok_or("receipt field seq must be an integer from 1")?;
    let prev = match obj.get("prev") {
        Some(Value::Null) => None,
        Some(Value::String(p)) => Some(p.clone()),
        _ => return Err("receipt field prev must be a string or null".into()),
    };
    let link = obj.get("link").and_then(Value::as_str).ok_or("receipt field link must be a string")?;
    for k in ["hmac", "sig"] {
        if obj.get(k).is_some_and(|v| !v.is_string()) {
            return Err(format!("receipt field {k} must be a string"));
        }
    }
    Ok(Some((seq, prev, link.to_owned())))
}

/// Checks a whole receipt log, in the order it was written: every receipt's digest (as
/// [`verify_receipt`]), every chained receipt's link and, for the keys given, signatures; then
/// each run's chain. Findings come in log order, those about whole runs last. Bad input, which stops the verification: a receipt of an unknown schema
/// version, or of another run than [`LogExpectations::run`] (the message names the position).
pub fn verify_log(entries: &[LogEntry], keys: &VerifyKeys, expect: &LogExpectations) -> Result<LogReport, HeartError> {
    let mut report = LogReport::default();
    let mut placed: BTreeMap<String, Vec<Placed>> = BTreeMap::new();
    for entry in entries {
        report.receipts += 1;
        let at = entry.position;
        let finding = |report: &mut LogReport, run: Option<&str>, code, message: String| {
            report.findings.push(Finding { position: Some(at), run_id: run.map(str::to_owned), code, message });
        };
        let Some(obj) = entry.value.as_object() else {
            report.malformed += 1;
            finding(&mut report, None, FindingCode::Malformed, "a receipt is a JSON object".into());
            continue;
        };
        if let Some(version) = obj.get("schemaVersion").and_then(Value::as_str)
            && version != SCHEMA_VERSION
        {
            return Err(HeartError::invalid(format!(
                "{at}: a receipt of unknown schema version {version:?} (this verifier knows {SCHEMA_VERSION})"
            )));
        }
        let run = obj.get("runId").and_then(Value::as_str);
        if let (Some(want), Some(got)) = (expect.run.as_deref(), run)
            && want != got
        {
            return Err(HeartError::invalid(format!("{at}: a receipt of run {got:?} in the log of run {want:?}")));
        }
        if let Err(e) = verify_receipt(&entry.value) {
            if e.code == ErrorCode::ReceiptTampered {
                report.tampered += 1;
                finding(&mut report, run, FindingCode::Tampered, e.message);
            } else {
                report.malformed += 1;
                finding(&mut report, run, FindingCode::Malformed, e.message);
            }
            continue;
        }
        // verify_receipt checked the types of these.
        let (Some(run), Some(digest), Some(at_time)) =
            (run, obj.get("digest").and_then(Value::as_str), obj.get("at").and_then(Value::as_str))
        else {
            continue;
        };
        let chain = report.runs.entry(run.to_owned()).or_default();
        chain.receipts += 1;
        let (seq, prev, link) = match chain_fields(obj) {
            Err(message) => {
                report.malformed += 1;
                finding(&mut report, Some(run), FindingCode::Malformed, message);
                continue;
            }
            Ok(None) => {
                chain.unchained += 1;
                report.unchained += 1;
                if expect.require_chain {
                    finding(&mut report, Some(run), FindingCode::Unchained, "the receipt has no chain fields".into());
                } else {
                    report.ok += 1;
                }
                continue;
            }
            Ok(Some(fields)) => fields,
        };
        chain.chained += 1;
        chain.last_seq = chain.last_seq.max(Some(seq));
        report.chained += 1;
        let want = link_digest(digest, run, at_time, seq, prev.as_deref());
        if link != want {
            report.tampered += 1;
            finding(
                &mut report,
                Some(run),
                FindingCode::Tampered,
                format!("link {link} does not match the receipt's at, digest, seq and prev (expected {want})"),
            );
        } else {
            let mut verdicts = Vec::new();
            if let Some(key) = keys.hmac.as_deref() {
                verdicts.push(match obj.get("hmac").and_then(Value::as_str) {
                    None => Err((FindingCode::SignatureMissing, "no hmac, and the verifier holds an HMAC key".into())),
                    Some(got) if hmac_matches(key, &link, got) => Ok(()),
                    Some(_) => Err((FindingCode::SignatureInvalid, "the hmac is not this key's".into())),
                });
            }
            if let Some(key) = keys.ed25519.as_ref() {
                verdicts.push(match obj.get("sig").and_then(Value::as_str) {
                    None => Err((FindingCode::SignatureMissing, "no sig, and the verifier holds a public key".into())),
                    Some(got) => match ed25519_check(key, &link, got) {
                        true => Ok(()),
                        false => {
                            Err((FindingCode::SignatureInvalid, "the sig does not verify with the public key".into()))
                        }
                    },
                });
            }
            let failed: Vec<_> = verdicts.into_iter().filter_map(Result::err).collect();
            if failed.is_empty() {
                report.ok += 1;
                if keys.hmac.is_some() || keys.checks_ed25519() {
                    report.signed += 1;
                }
            }
            for (code, message) in failed {
                finding(&mut report, Some(run), code, message);
            }
        }
        placed.entry(run.to_owned()).or_default().push(Placed { position: at, seq, prev, link });
    }
    for (run, receipts) in &placed {
        check_chain(run, receipts, &mut report.findings);
    }
    for (run, &want) in &expect.final_seq {
        let last = report.runs.get(run).and_then(|c| c.last_seq).unwrap_or(0);
        if last < want {
            report.findings.push(Finding {
                position: None,
                run_id: Some(run.clone()),
                code: FindingCode::Truncated,
                message: format!("the log ends at seq {last}, the run's final receipt is seq {want}"),
            });
        }
    }
    report.sort_findings();
    Ok(report)
}

/// Checks a JSON Lines log (a `--receipts FILE`, or any such text a binding is handed): one
/// receipt per line, positions are line numbers from 1, blank lines are skipped and a trailing
/// `\r` is ignored. A line that is not JSON (or not UTF-8) makes the text no JSON Lines log:
/// `Err` with `invalid-input` naming the line, except for a last line without its newline,
/// which is what a writer killed mid-line leaves behind: that one is a malformed receipt.
/// Otherwise as [`verify_log`].
pub fn verify_json_lines(text: &[u8], keys: &VerifyKeys, expect: &LogExpectations) -> Result<LogReport, HeartError> {
    let mut entries = Vec::new();
    let mut torn = None;
    let mut rest = text;
    let mut number = 0u64;
    while !rest.is_empty() {
        number += 1;
        let (line, ended) = match rest.iter().position(|&b| b == b'\n') {
            Some(end) => {
                let line = &rest[..end];
                rest = &rest[end + 1..];
                (line, true)
            }
            None => (std::mem::take(&mut rest), false),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("not UTF-8: {e}"))
            .and_then(|t| serde_json::from_str::<Value>(t).map_err(|e| format!("not JSON: {e}")));
        match parsed {
            Ok(value) => entries.push(LogEntry { position: number, value }),
            Err(why) if !ended => torn = Some((number, why)),
            Err(why) => return Err(HeartError::invalid(format!("line {number}: {why}"))),
        }
    }
    let mut report =
        verify_log(&entries, keys, expect).map_err(|e| HeartError::invalid(format!("line {}", e.message)))?;
    if let Some((position, why)) = torn {
        report.receipts += 1;
        report.malformed += 1;
        report.findings.push(Finding {
            position: Some(position),
            run_id: None,
            code: FindingCode::Malformed,
            message: format!("the last line is cut short (no newline; a writer stopped mid-line): {why}"),
        });
        report.sort_findings();
    }
    Ok(report)
}

/// What a binding's `verifyReceipts(log, options)` is told besides the log, as the JSON object
/// `{"key"?, "publicKey"?, "run"?, "finalSeq"?, "requireChain"?}`: the HMAC key's and the
/// public key's text (as a key file holds it), the run the log must be of, each run's final
/// `seq`, and whether unchained receipts fail. Unknown fields are refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerifyOptions {
    /// The fleet's HMAC key, as a key file holds it.
    #[serde(default)]
    pub key: Option<String>,
    /// An Ed25519 public key, as a key file holds it.
    #[serde(default)]
    pub public_key: Option<String>,
    /// The run the log must be of.
    #[serde(default)]
    pub run: Option<String>,
    /// The final `seq` of each run the caller knows.
    #[serde(default)]
    pub final_seq: BTreeMap<String, u64>,
    /// Unchained receipts fail.
    #[serde(default)]
    pub require_chain: bool,
}

impl VerifyOptions {
    /// Reads the options' JSON text (`""` or `null`: none). Errors name the field, never a key.
    pub fn parse(json: &str) -> Result<VerifyOptions, HeartError> {
        if json.trim().is_empty() || json.trim() == "null" {
            return Ok(VerifyOptions::default());
        }
        // serde quotes a value only when its type is wrong; a key is a string wherever it is
        // accepted, so no key text can end up in the message.
        serde_json::from_str(json).map_err(|e| HeartError::invalid(format!("verifyReceipts options: {e}")))
    }

    /// The verifier's keys and expectations.
    pub fn into_parts(self) -> Result<(VerifyKeys, LogExpectations), HeartError> {
        let mut keys = VerifyKeys::none();
        if let Some(text) = &self.key {
            let key = FleetKey::parse(text).map_err(|e| HeartError::invalid(format!("key: {}", e.message)))?;
            keys = keys.with_hmac(key).map_err(|e| HeartError::invalid(format!("key: {}", e.message)))?;
        }
        if let Some(text) = &self.public_key {
            let key = FleetKey::parse(text).map_err(|e| HeartError::invalid(format!("publicKey: {}", e.message)))?;
            keys = keys.with_public_key(key).map_err(|e| HeartError::invalid(format!("publicKey: {}", e.message)))?;
        }
        if self.run.as_deref() == Some("") {
            return Err(HeartError::invalid("run: an empty run id"));
        }
        let mut expect = LogExpectations { run: self.run, require_chain: self.require_chain, ..Default::default() };
        for (run, seq) in &self.final_seq {
            expect.expect_final_seq(run, *seq).map_err(|e| HeartError::invalid(format!("finalSeq: {}", e.message)))?;
        }
        Ok((keys, expect))
    }
}

/// The one entry of every binding's `verifyReceipts`: a JSON Lines log and the options' JSON
/// text ([`VerifyOptions`]) in, the report's JSON text out (the CLI's `verify-receipts --json`).
pub fn verify_receipts_json(log: &[u8], options: &str) -> Result<String, HeartError> {
    let (keys, expect) = VerifyOptions::parse(options)?.into_parts()?;
    let report = verify_json_lines(log, &keys, &expect)?;
    serde_json::to_string(&report).map_err(|e| HeartError::invalid(format!("the report: {e}")))
}

fn ed25519_check(key: &ed25519_dalek::VerifyingKey, link: &str, sig: &str) -> bool {
    let Some(bytes) = sig.strip_prefix(ED25519_PREFIX).and_then(decode_hex) else { return false };
    let Ok(bytes) = <[u8; 64]>::try_from(bytes.as_slice()) else { return false };
    key.verify(link.as_bytes(), &ed25519_dalek::Signature::from_bytes(&bytes)).is_ok()
}

/// One run's chain: positions in log order.
fn check_chain(run: &str, receipts: &[Placed], findings: &mut Vec<Finding>) {
    let mut push = |position: u64, code, message: String| {
        findings.push(Finding { position: Some(position), run_id: Some(run.to_owned()), code, message });
    };
    let mut first_at: BTreeMap<u64, &Placed> = BTreeMap::new();
    let mut highest = 0u64;
    for r in receipts {
        if let Some(first) = first_at.get(&r.seq) {
            if first.link == r.link {
                push(r.position, FindingCode::Duplicate, format!("seq {} again (first at {})", r.seq, first.position));
            } else {
                push(
                    r.position,
                    FindingCode::Fork,
                    format!("a second, different receipt at seq {} (the first at {})", r.seq, first.position),
                );
            }
            continue;
        }
        if r.seq < highest {
            push(r.position, FindingCode::Reorder, format!("seq {} comes after seq {highest}", r.seq));
        }
        highest = highest.max(r.seq);
        first_at.insert(r.seq, r);
    }
    let mut expected = 1u64;
    for (&seq, r) in &first_at {
        if seq > expected {
            let missing = if seq - expected == 1 {
                format!("seq {expected} is")
            } else {
                format!("seqs {expected}..{} are", seq - 1)
            };
            push(r.position, FindingCode::Gap, format!("{missing} missing before seq {seq}"));
        } else if seq == 1 && r.prev.is_some() {
            push(r.position, FindingCode::Broken, "seq 1 has a prev".into());
        } else if let Some(before) = seq.checked_sub(1).and_then(|s| first_at.get(&s))
            && r.prev.as_deref() != Some(before.link.as_str())
        {
            push(
                r.position,
                FindingCode::Broken,
                format!("the prev of seq {seq} is not the link of seq {} (at {})", seq - 1, before.position),
            );
        }
        expected = seq + 1;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::receipt::HeartEvent;
    use crate::time::Timestamp;

    fn receipts(run: &str, n: usize) -> Vec<HeartReceipt> {
        (0..n)
            .map(|i| {
                let event = if i % 2 == 0 { HeartEvent::Acquired } else { HeartEvent::Released };
                let expiry = (i % 2 == 0).then_some(Timestamp(60_000 + i as i64));
                HeartReceipt::new(event, run, "worker-A", expiry, None, Timestamp(i as i64))
            })
            .collect()
    }

    fn chained(signer: &Signer, rs: &[HeartReceipt]) -> Vec<Value> {
        let mut heads = ChainHeads::new();
        rs.iter().map(|r| chained_json(r, &heads.append(signer, r))).collect()
    }

    fn entries(values: &[Value]) -> Vec<LogEntry> {
        values.iter().enumerate().map(|(i, v)| LogEntry { position: i as u64 + 1, value: v.clone() }).collect()
    }

    fn codes(report: &LogReport) -> Vec<(Option<u64>, &'static str)> {
        report.findings.iter().map(|f| (f.position, f.code.as_str())).collect()
    }

    fn verify(values: &[Value]) -> LogReport {
        verify_log(&entries(values), &VerifyKeys::none(), &LogExpectations::default()).unwrap()
    }

    #[test]
    fn an_intact_chain_verifies_and_keeps_the_reference_fields_first() {
        let log = chained(&Signer::unsigned(), &receipts("run-1", 4));
        let r = verify(&log);
        assert!(r.passed(), "{:?}", r.findings);
        assert_eq!((r.receipts, r.ok, r.chained, r.unchained), (4, 4, 4, 0));
        assert_eq!(r.runs["run-1"].last_seq, Some(4));
        // The line keeps the reference's order, then the chain's.
        let rs = receipts("run-1", 2);
        let mut heads = ChainHeads::new();
        heads.append(&Signer::unsigned(), &rs[0]);
        let line = chained_json_line(&rs[1], &heads.append(&Signer::unsigned(), &rs[1]));
        let names = [
            "schemaVersion",
            "event",
            "runId",
            "owner",
            "leaseExpiresAt",
            "effectKey",
            "at",
            "digest",
            "seq",
            "prev",
            "link",
        ];
        let offsets: Vec<usize> = names.iter().map(|n| line.find(&format!("\"{n}\":")).unwrap()).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{line}");
        assert_eq!(serde_json::from_str::<Value>(&line).unwrap(), log[1]);
        assert_eq!(log[0]["prev"], Value::Null);
        assert_eq!(log[1]["prev"], log[0]["link"]);
        // A reference verifier still accepts every chained receipt.
        assert!(log.iter().all(|v| verify_receipt(v).is_ok()));
    }

    #[test]
    fn every_kind_of_tampering_is_named() {
        let log = chained(&Signer::unsigned(), &receipts("run-1", 5));
        // Deleted.
        let deleted = [log[0].clone(), log[1].clone(), log[3].clone(), log[4].clone()];
        assert_eq!(codes(&verify(&deleted)), [(Some(3), "chain-gap")]);
        // Reordered.
        let reordered = [log[0].clone(), log[2].clone(), log[1].clone(), log[3].clone()];
        assert_eq!(codes(&verify(&reordered)), [(Some(3), "chain-reorder")]);
        // Duplicated.
        let duplicated = [log[0].clone(), log[1].clone(), log[1].clone(), log[2].clone()];
        assert_eq!(codes(&verify(&duplicated)), [(Some(3), "chain-duplicate")]);
        // Truncated: only a verifier that knows the final sequence can tell.
        let head = &log[..3];
        assert!(verify(head).passed());
        let expect = LogExpectations { final_seq: [("run-1".to_owned(), 5)].into(), ..Default::default() };
        let r = verify_log(&entries(head), &VerifyKeys::none(), &expect).unwrap();
        assert_eq!(codes(&r), [(None, "chain-truncated")]);
        // The first receipt deleted.
        assert_eq!(codes(&verify(&log[1..])), [(Some(1), "chain-gap")]);
        // A forged receipt at an existing position, chained correctly after its predecessor: a fork.
        let forged = HeartReceipt::new(HeartEvent::Released, "run-1", "mallory", None, None, Timestamp(2));
        let prev = log[0]["link"].as_str().unwrap();
        let fork = chained_json(&forged, &Signer::unsigned().link(&forged, 2, Some(prev)));
        let forked = [log[0].clone(), log[1].clone(), fork.clone(), log[2].clone()];
        assert_eq!(codes(&verify(&forked)), [(Some(3), "chain-fork")]);
        // The same forgery replacing seq 2: the next receipt's prev gives it away.
        let replaced = [log[0].clone(), fork, log[2].clone()];
        assert_eq!(codes(&verify(&replaced)), [(Some(3), "chain-broken")]);
        // An edited at (not covered by the reference digest) breaks the link.
        let mut edited = log.clone();
        edited[1]["at"] = Value::String("2099-01-01T00:00:00.000Z".into());
        assert_eq!(codes(&verify(&edited)), [(Some(2), "receipt-tampered")]);
        // An edited seq too.
        let mut moved = log.clone();
        moved[4]["seq"] = Value::from(9);
        assert_eq!(codes(&verify(&moved)), [(Some(5), "receipt-tampered"), (Some(5), "chain-gap")]);
    }

    #[test]
    fn runs_are_chained_separately_and_unchained_receipts_are_counted() {
        let a = chained(&Signer::unsigned(), &receipts("run-a", 3));
        let b = chained(&Signer::unsigned(), &receipts("run-b", 2));
        let old = serde_json::to_value(&receipts("run-c", 1)[0]).unwrap();
        let log = [a[0].clone(), b[0].clone(), a[1].clone(), old.clone(), b[1].clone(), a[2].clone()];
        let r = verify(&log);
        assert!(r.passed(), "{:?}", r.findings);
        assert_eq!((r.chained, r.unchained, r.runs.len()), (5, 1, 3));
        let strict = LogExpectations { require_chain: true, ..Default::default() };
        let r = verify_log(&entries(&log), &VerifyKeys::none(), &strict).unwrap();
        assert_eq!(codes(&r), [(Some(4), "receipt-unchained")]);
        // One run's log refuses another's receipt, naming the position.
        let only_a = LogExpectations { run: Some("run-a".into()), ..Default::default() };
        let e = verify_log(&entries(&log), &VerifyKeys::none(), &only_a).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput);
        assert!(e.message.starts_with("2: a receipt of run \"run-b\""), "{}", e.message);
        // An unknown schema version is bad input, not a tampered receipt.
        let mut newer = a[0].clone();
        newer["schemaVersion"] = Value::String("zao.heart.receipt.v9".into());
        let e = verify_log(&entries(&[newer]), &VerifyKeys::none(), &LogExpectations::default()).unwrap_err();
        assert!(e.message.contains("unknown schema version"), "{}", e.message);
    }

    #[test]
    fn signatures_prove_origin() {
        let hmac_key = FleetKey::parse(&FleetKey::hmac_from_random([7; 32]).to_key_file_text()).unwrap();
        let secret = FleetKey::ed25519_from_seed([9; 32]);
        let public = FleetKey::parse(&secret.public_key().unwrap().to_key_file_text()).unwrap();
        let signer = Signer::unsigned().with_key(hmac_key).unwrap().with_key(secret).unwrap();
        let log = chained(&signer, &receipts("run-1", 3));
        let keys = || {
            VerifyKeys::none()
                .with_hmac(FleetKey::hmac_from_random([7; 32]))
                .unwrap()
                .with_public_key(FleetKey::parse(&public.to_key_file_text()).unwrap())
                .unwrap()
        };
        let r = verify_log(&entries(&log), &keys(), &LogExpectations::default()).unwrap();
        assert!(r.passed(), "{:?}", r.findings);
        assert_eq!(r.signed, 3);
        // A forgery chained correctly but signed with nothing, or with another key.
        let forged = HeartReceipt::new(HeartEvent::Released, "run-1", "mallory", None, None, Timestamp(3));
        let prev = log[2]["link"].as_str().unwrap();
        let unsigned = chained_json(&forged, &Signer::unsigned().link(&forged, 4, Some(prev)));
        let other = Signer::unsigned().with_key(FleetKey::hmac_from_random([8; 32])).unwrap();
        let wrong = chained_json(&forged, &other.link(&forged, 4, Some(prev)));
        let mut with_unsigned = log.clone();
        with_unsigned.push(unsigned.clone());
        let r = verify_log(&entries(&with_unsigned), &keys(), &LogExpectations::default()).unwrap();
        assert_eq!(codes(&r), [(Some(4), "signature-missing"), (Some(4), "signature-missing")]);
        // Without a key the same forgery passes: the chain alone cannot prove origin.
        assert!(verify(&with_unsigned).passed());
        let mut with_wrong = log.clone();
        with_wrong.push(wrong);
        let r = verify_log(&entries(&with_wrong), &keys(), &LogExpectations::default()).unwrap();
        assert_eq!(codes(&r), [(Some(4), "signature-invalid"), (Some(4), "signature-missing")]);
    }

    #[test]
    fn keys_are_typed_and_never_printed() {
        let secret = FleetKey::ed25519_from_seed([1; 32]);
        let text = secret.to_key_file_text();
        assert!(text.starts_with("heart-fleet-ed25519-secret-key:"));
        assert_eq!(format!("{secret:?}"), "FleetKey(heart-fleet-ed25519-secret-key)");
        let signer = Signer::unsigned().with_key(FleetKey::parse(&text).unwrap()).unwrap();
        assert_eq!(format!("{signer:?}"), "Signer { hmac: false, ed25519: true }");
        for (bad, want) in [
            ("", "the key is empty"),
            ("  \n", "the key is empty"),
            ("abcdef", "not a heart-fleet key"),
            ("heart-fleet-hmac-sha256-key:zz", "not hex"),
            ("heart-fleet-hmac-sha256-key:0011", "at least 32 bytes"),
            ("heart-fleet-ed25519-public-key:00", "32 bytes"),
            ("ssh-ed25519:00", "unknown key kind"),
        ] {
            let e = FleetKey::parse(bad).unwrap_err();
            assert!(e.message.contains(want), "{bad:?}: {}", e.message);
        }
        // The wrong kind for the job.
        let public = secret.public_key().unwrap();
        assert!(VerifyKeys::none().with_hmac(public).unwrap_err().message.contains("an HMAC key is needed"));
        let public = FleetKey::ed25519_from_seed([1; 32]).public_key().unwrap();
        assert!(Signer::unsigned().with_key(public).unwrap_err().message.contains("cannot sign"));
        let hmac = FleetKey::hmac_from_random([2; 32]);
        assert!(VerifyKeys::none().with_public_key(hmac).unwrap_err().message.contains("public key is needed"));
    }

    #[test]
    fn a_sink_resumes_the_chains_of_an_existing_log() {
        let rs = receipts("run-1", 4);
        let whole = chained(&Signer::unsigned(), &rs);
        let mut heads = ChainHeads::new();
        for v in &whole[..2] {
            heads.observe(v);
        }
        let rest: Vec<Value> = rs[2..].iter().map(|r| chained_json(r, &heads.append(&Signer::unsigned(), r))).collect();
        assert_eq!(rest, whole[2..]);
    }

    #[test]
    fn json_lines_skip_blanks_name_lines_and_tolerate_only_a_torn_last_line() {
        let signer = Signer::unsigned();
        let lines: Vec<String> = chained(&signer, &receipts("run-1", 3)).iter().map(Value::to_string).collect();
        let tampered = lines[1].replace("worker-A", "mallory");
        let text = format!("{}\n\n{tampered}\r\n{{\"a\":1}}\n{}\n{{\"schemaVer", lines[0], lines[2]);
        let report = verify_json_lines(text.as_bytes(), &VerifyKeys::none(), &LogExpectations::default()).unwrap();
        assert_eq!((report.receipts, report.ok, report.tampered, report.malformed), (5, 2, 1, 2));
        // The tampered receipt holds no place in the chain: the one after it follows a gap.
        assert_eq!(
            codes(&report),
            [
                (Some(3), "receipt-tampered"),
                (Some(4), "invalid-input"),
                (Some(5), "chain-gap"),
                (Some(6), "invalid-input")
            ]
        );
        assert!(report.findings[3].message.starts_with("the last line is cut short"), "{}", report.findings[2].message);

        // Not JSON, or not UTF-8, before the last line: no JSON Lines log at all.
        for bad in [format!("{}\nnot json\n{}\n", lines[0], lines[1]).into_bytes(), b"\xff\xfe\n".to_vec()] {
            let e = verify_json_lines(&bad, &VerifyKeys::none(), &LogExpectations::default()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput);
            assert!(e.message.starts_with("line "), "{}", e.message);
        }
        // A receipt of another run than the log's, and an unknown schema version, name the line.
        let expect = LogExpectations { run: Some("run-2".into()), ..Default::default() };
        let e = verify_json_lines(format!("\n{}\n", lines[0]).as_bytes(), &VerifyKeys::none(), &expect).unwrap_err();
        assert!(e.message.starts_with("line 2: a receipt of run \"run-1\""), "{}", e.message);
        let future = lines[0].replace(SCHEMA_VERSION, "heart-fleet.receipt.v9");
        let e = verify_json_lines(future.as_bytes(), &VerifyKeys::none(), &LogExpectations::default()).unwrap_err();
        assert!(e.message.starts_with("line 1: a receipt of unknown schema version"), "{}", e.message);
    }

    #[test]
    fn the_bindings_entry_takes_key_text_and_refuses_bad_options() {
        let seed = FleetKey::ed25519_from_seed([3; 32]);
        let signer = Signer::unsigned().with_key(FleetKey::hmac_from_random([9; 32])).unwrap().with_key(seed).unwrap();
        let log: String = chained(&signer, &receipts("run-1", 3)).iter().map(|v| format!("{v}\n")).collect();
        let hmac = FleetKey::hmac_from_random([9; 32]).to_key_file_text();
        let public = FleetKey::ed25519_from_seed([3; 32]).public_key().unwrap().to_key_file_text();
        let options = serde_json::json!({"key": hmac, "publicKey": public, "finalSeq": {"run-1": 4}}).to_string();
        let report: Value = serde_json::from_str(&verify_receipts_json(log.as_bytes(), &options).unwrap()).unwrap();
        assert_eq!(
            (report["signed"].as_u64(), report["findings"][0]["code"].as_str()),
            (Some(3), Some("chain-truncated"))
        );
        let none: Value = serde_json::from_str(&verify_receipts_json(log.as_bytes(), "").unwrap()).unwrap();
        assert_eq!((none["ok"].as_u64(), none["signed"].as_u64()), (Some(3), Some(0)));
        for (bad, says) in [
            (r#"{"keys": "x"}"#.to_owned(), "unknown field `keys`"),
            (r#"{"key": 5}"#.to_owned(), "invalid type"),
            (serde_json::json!({"key": public}).to_string(), "key: an HMAC key is needed"),
            (serde_json::json!({"publicKey": hmac}).to_string(), "publicKey: an Ed25519 public key is needed"),
            (
                r#"{"finalSeq": {"run-1": 0}}"#.to_owned(),
                "finalSeq: the final seq of run \"run-1\": a seq counts from 1",
            ),
            (r#"{"run": ""}"#.to_owned(), "run: an empty run id"),
            ("[".to_owned(), "verifyReceipts options: "),
        ] {
            let e = verify_receipts_json(log.as_bytes(), &bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput);
            assert!(e.message.contains(says), "{bad}: {}", e.message);
            let secret = hmac.trim().split_once(':').unwrap().1;
            assert!(!e.message.contains(secret));
        }
    }
}

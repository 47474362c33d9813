//! The lease cycle on an attached memory store without JSON: compact answers.
//!
//! [`BridgeFleet::begin`] speaks JSON text both ways; on the memory store, where no host
//! code runs between the steps, that JSON is most of an operation's cost (the bridge cycle
//! is several times the native one, `core/benches/lease_cycle.rs`). The four operations of
//! the lease cycle (acquire, renew, release, verify) therefore also take typed arguments and
//! answer in a compact text a host splits on one character and builds its objects from with
//! a fixed layout, instead of parsing JSON:
//!
//! * the values are separated by [`COMPACT_SEPARATOR`] (U+001F), a null is
//!   [`COMPACT_NULL`] (U+001E) alone;
//! * the first value is the answer's tag: `A` acquired (a run row, then its token), `N`
//!   renewed (the new token), `R` released (the row), `V` verified (`1` or `0`);
//! * then the number of receipts handed to the host's sink with this answer, then each
//!   receipt;
//! * a run row, a token and a receipt are their fields in the order of their JSON form,
//!   each written by kind: `s` text, `s?` text or null, `n` an integer, `j` JSON text (or
//!   null). [`compact_layouts`] exports the names and kinds, so a host builds its decoders
//!   from the one definition here.
//!
//! Anything else (a refusal, a miss, bad input, an error, a value that holds one of the two
//! marker characters, a token without an epoch) is answered with the step's JSON text, as
//! [`BridgeFleet::begin`] would answer it; it starts with `{`, which no tag does. So the
//! compact form is an encoding of the common answers, never a second set of rules.
//!
//! The typed outcomes these answers are written from, [`BridgeFleet::acquire_typed`] and its
//! siblings, are public too: a host that builds its objects from Rust values, as the Python
//! module does, takes them instead.

use std::fmt::Write as _;

use serde::Serialize;

use super::memory::poisoned;
use super::op::{BridgeFleet, step_json};
use crate::driver::{NoHost, drive};
use crate::machine::Step;
use crate::model::{FencingToken, RunRow};
use crate::ops::{self, AcquireResult, Fenced, ReleaseTo};
use crate::receipt::HeartReceipt;
use crate::{HeartError, Timestamp};

/// Separates the values of a compact answer.
pub const COMPACT_SEPARATOR: char = '\u{1f}';
/// A null value of a compact answer.
pub const COMPACT_NULL: char = '\u{1e}';

/// How a record's fields are visited: written as values, or listed as its layout.
trait Fields {
    fn text(&mut self, name: &'static str, v: &str);
    fn opt_text(&mut self, name: &'static str, v: Option<&str>);
    fn time(&mut self, name: &'static str, v: Timestamp);
    fn opt_time(&mut self, name: &'static str, v: Option<Timestamp>);
    fn int(&mut self, name: &'static str, v: i64);
    /// An integer the JSON form omits when absent: the compact form cannot say "absent".
    fn present_int(&mut self, name: &'static str, v: Option<i64>);
    fn json<T: Serialize + ?Sized>(&mut self, name: &'static str, v: Option<&T>);
}

/// A record with a compact form: its fields in the order of its JSON form.
trait Record {
    fn fields(&self, f: &mut impl Fields);
}

impl Record for RunRow {
    fn fields(&self, f: &mut impl Fields) {
        f.text("id", &self.id);
        f.opt_text("task_id", self.task_id.as_deref());
        f.text("assignment_id", &self.assignment_id);
        f.text("objective", &self.objective);
        f.json("required_capabilities", Some(&self.required_capabilities));
        f.text("status", self.status.as_str());
        f.opt_text("assigned_agent", self.assigned_agent.as_deref());
        f.opt_text("lease_owner", self.lease_owner.as_deref());
        f.opt_time("lease_expires_at", self.lease_expires_at);
        f.int("retries", self.retries);
        f.json("budget", self.budget.as_ref());
        f.text("approval_state", &self.approval_state);
        f.text("visibility", &self.visibility);
        f.text("idempotency_key", &self.idempotency_key);
        f.text("created_by", &self.created_by);
        f.time("created_at", self.created_at);
        f.time("updated_at", self.updated_at);
        f.int("fencing_epoch", self.fencing_epoch);
    }
}

impl Record for FencingToken {
    fn fields(&self, f: &mut impl Fields) {
        f.text("runId", &self.run_id);
        f.text("owner", &self.owner);
        f.time("leaseExpiresAt", self.lease_expires_at);
        f.present_int("epoch", self.epoch);
    }
}

impl Record for HeartReceipt {
    fn fields(&self, f: &mut impl Fields) {
        f.text("schemaVersion", &self.schema_version);
        f.text("event", self.event.as_str());
        f.text("runId", &self.run_id);
        f.text("owner", &self.owner);
        f.opt_text("leaseExpiresAt", self.lease_expires_at.as_deref());
        f.opt_text("effectKey", self.effect_key.as_deref());
        f.text("at", &self.at);
        f.text("digest", &self.digest);
    }
}

/// Writes values; `clean` turns false when a value cannot be written compactly.
pub(super) struct Writer {
    out: String,
    clean: bool,
}

impl Writer {
    fn new(tag: &str) -> Writer {
        let mut out = String::with_capacity(512);
        out.push_str(tag);
        Writer { out, clean: true }
    }

    fn raw(&mut self, v: &str) {
        // Byte by byte: both markers are ASCII, and a char-set search is several times slower.
        if v.as_bytes().iter().any(|&b| b == 0x1e || b == 0x1f) {
            self.clean = false;
        }
        self.out.push(COMPACT_SEPARATOR);
        self.out.push_str(v);
    }

    fn null(&mut self) {
        self.out.push(COMPACT_SEPARATOR);
        self.out.push(COMPACT_NULL);
    }

    fn count(&mut self, n: usize) {
        let _ = write!(self.out, "{COMPACT_SEPARATOR}{n}");
    }

    fn record(&mut self, r: &impl Record) {
        r.fields(self);
    }
}

impl Fields for Writer {
    fn text(&mut self, _: &'static str, v: &str) {
        self.raw(v);
    }
    fn opt_text(&mut self, _: &'static str, v: Option<&str>) {
        match v {
            Some(v) => self.raw(v),
            None => self.null(),
        }
    }
    fn time(&mut self, _: &'static str, v: Timestamp) {
        self.out.push(COMPACT_SEPARATOR);
        v.write_iso(&mut self.out);
    }
    fn opt_time(&mut self, name: &'static str, v: Option<Timestamp>) {
        match v {
            Some(v) => self.time(name, v),
            None => self.null(),
        }
    }
    fn int(&mut self, _: &'static str, v: i64) {
        let _ = write!(self.out, "{COMPACT_SEPARATOR}{v}");
    }
    fn present_int(&mut self, name: &'static str, v: Option<i64>) {
        match v {
            Some(v) => self.int(name, v),
            None => self.clean = false,
        }
    }
    fn json<T: Serialize + ?Sized>(&mut self, _: &'static str, v: Option<&T>) {
        // JSON escapes every control character inside its strings, so JSON text never holds
        // a marker.
        match v.map(serde_json::to_string) {
            Some(Ok(text)) => {
                self.out.push(COMPACT_SEPARATOR);
                self.out.push_str(&text);
            }
            Some(Err(_)) => self.clean = false,
            None => self.null(),
        }
    }
}

/// Lists a record's fields as `[name, kind]` pairs.
#[derive(Default)]
struct Layout(Vec<(&'static str, &'static str)>);

impl Fields for Layout {
    fn text(&mut self, name: &'static str, _: &str) {
        self.0.push((name, "s"));
    }
    fn opt_text(&mut self, name: &'static str, _: Option<&str>) {
        self.0.push((name, "s?"));
    }
    fn time(&mut self, name: &'static str, _: Timestamp) {
        self.0.push((name, "s"));
    }
    fn opt_time(&mut self, name: &'static str, _: Option<Timestamp>) {
        self.0.push((name, "s?"));
    }
    fn int(&mut self, name: &'static str, _: i64) {
        self.0.push((name, "n"));
    }
    fn present_int(&mut self, name: &'static str, _: Option<i64>) {
        self.0.push((name, "n"));
    }
    fn json<T: Serialize + ?Sized>(&mut self, name: &'static str, _: Option<&T>) {
        self.0.push((name, "j"));
    }
}

fn layout_of(r: &impl Record) -> Vec<(&'static str, &'static str)> {
    let mut l = Layout::default();
    r.fields(&mut l);
    l.0
}

/// The layouts of the compact answers (JSON): the two markers, and for `run`, `token` and
/// `receipt` their fields as `[name, kind]` pairs in order.
pub fn compact_layouts() -> String {
    let t0 = Timestamp(0);
    let run = RunRow::ready("", "", t0);
    let token = FencingToken { run_id: String::new(), owner: String::new(), lease_expires_at: t0, epoch: Some(0) };
    let receipt = HeartReceipt::new(crate::HeartEvent::Acquired, "", "", None, None, t0);
    serde_json::json!({
        "separator": COMPACT_SEPARATOR.to_string(),
        "null": COMPACT_NULL.to_string(),
        "run": layout_of(&run),
        "token": layout_of(&token),
        "receipt": layout_of(&receipt),
    })
    .to_string()
}

/// How an operation's result is written compactly: `Some(writer)` with its tag and fields,
/// or `None` for the JSON form.
pub(super) type Encode<T> = fn(&T) -> Option<Writer>;

/// The compact answer of `value` (encoded by `encode`) with the receipts handed to the host
/// with it; `None` when it has no compact form or a value holds a marker character.
pub(super) fn compact_answer<T>(value: &T, encode: Encode<T>, receipts: &[HeartReceipt]) -> Option<String> {
    let mut w = encode(value)?;
    w.count(receipts.len());
    for r in receipts {
        w.record(r);
    }
    w.clean.then_some(w.out)
}

pub(super) fn acquired(r: &AcquireResult) -> Option<Writer> {
    let (true, Some(run), Some(fence)) = (r.acquired, &r.run, &r.fence) else { return None };
    let mut w = Writer::new("A");
    w.record(run);
    w.record(fence);
    Some(w)
}

pub(super) fn renewed(r: &Fenced<FencingToken>) -> Option<Writer> {
    let Fenced::Ok { value } = r else { return None };
    let mut w = Writer::new("N");
    w.record(value);
    Some(w)
}

pub(super) fn released(r: &Fenced<RunRow>) -> Option<Writer> {
    let Fenced::Ok { value } = r else { return None };
    let mut w = Writer::new("R");
    w.record(value);
    Some(w)
}

pub(super) fn verified(live: &bool) -> Option<Writer> {
    let mut w = Writer::new("V");
    w.raw(if *live { "1" } else { "0" });
    Some(w)
}

/// The final step of an operation that failed before it started (a token's bad expiry
/// text, say), as JSON text: what [`BridgeFleet::begin`] answers for bad arguments.
pub fn failed_step(e: HeartError) -> String {
    step_json(&Step::Done(Err(e)), Vec::new())
}

/// A token from its parts as a host holds them; an expiry that is not an ISO-8601 instant is
/// `invalid-input`.
pub fn token_of(
    run_id: String,
    owner: String,
    lease_expires_at: &str,
    epoch: Option<i64>,
) -> Result<FencingToken, HeartError> {
    let lease_expires_at = Timestamp::parse_iso(lease_expires_at)
        .map_err(|e| HeartError::invalid(format!("fence.leaseExpiresAt: {e}")))?;
    Ok(FencingToken { run_id, owner, lease_expires_at, epoch })
}

/// A lease-cycle operation's outcome on the attached memory store, typed: its result (or
/// error) and the receipts handed to the host's sink with it (none when the fleet keeps them).
pub type TypedOutcome<T> = (Result<T, HeartError>, Vec<HeartReceipt>);

impl BridgeFleet {
    /// Runs one lease-cycle operation on the attached memory store: its typed outcome, or
    /// `None` without a memory store.
    fn typed<T>(
        &self,
        run: impl FnOnce(&mut crate::MemoryStore, &mut super::op::Shared) -> Result<T, HeartError>,
    ) -> Option<TypedOutcome<T>> {
        let memory = self.memory.as_ref()?;
        let Ok(mut shared) = self.shared.lock() else {
            return Some((Err(poisoned()), Vec::new()));
        };
        let result = match memory.inner.lock() {
            Ok(mut store) => run(&mut store, &mut shared),
            Err(_) => Err(poisoned()),
        };
        Some((result, shared.take_pending()))
    }

    /// Writes a typed outcome as a compact answer when it has one, else as the final step's JSON text.
    fn compact<T: Serialize>(outcome: Option<TypedOutcome<T>>, encode: Encode<T>) -> Option<String> {
        let (result, pending) = outcome?;
        if let Ok(value) = &result
            && let Some(text) = compact_answer(value, encode, &pending)
        {
            return Some(text);
        }
        Some(step_json(&Step::Done(result.map(|v| super::to_text(&v))), pending))
    }

    /// `acquire` on the attached memory store, typed (`None` without one). Bad input keeps
    /// the reference's `Invalid input` result, as [`BridgeFleet::begin`] gives it.
    pub fn acquire_typed(&self, run_id: &str, owner: &str, ttl_seconds: i64) -> Option<TypedOutcome<AcquireResult>> {
        self.typed(|store, shared| {
            let machine = ops::acquire(shared.config, run_id, owner, ttl_seconds);
            drive(machine, store, &mut shared.recorder, &mut NoHost)
        })
    }

    /// `renew` on the attached memory store, typed.
    pub fn renew_typed(&self, fence: &FencingToken, ttl_seconds: i64) -> Option<TypedOutcome<Fenced<FencingToken>>> {
        self.typed(|store, shared| drive(ops::renew(fence, ttl_seconds), store, &mut shared.recorder, &mut NoHost))
    }

    /// `release` on the attached memory store, typed. A next status that is not one of
    /// `completed`, `failed`, `cancelled`, `ready` is `invalid-input`.
    pub fn release_typed(&self, fence: &FencingToken, next_status: &str) -> Option<TypedOutcome<Fenced<RunRow>>> {
        self.typed(|store, shared| {
            let to = ReleaseTo::parse(next_status)?;
            ops::lease::release_on(fence, to, store, &mut shared.recorder)
        })
    }

    /// `verifyFence` on the attached memory store, typed.
    pub fn verify_fence_typed(&self, fence: &FencingToken) -> Option<TypedOutcome<bool>> {
        self.typed(|store, shared| ops::lease::verify_fence_on(fence, store, &mut shared.recorder))
    }

    /// `acquire` on the attached memory store, answered compactly (the format: the module docs of `bridge::compact`).
    pub fn acquire_compact(&self, run_id: &str, owner: &str, ttl_seconds: i64) -> Option<String> {
        Self::compact(self.acquire_typed(run_id, owner, ttl_seconds), acquired)
    }

    /// `renew` on the attached memory store, answered compactly.
    pub fn renew_compact(&self, fence: &FencingToken, ttl_seconds: i64) -> Option<String> {
        Self::compact(self.renew_typed(fence, ttl_seconds), renewed)
    }

    /// `release` on the attached memory store, answered compactly. A next status that is not
    /// one of `completed`, `failed`, `cancelled`, `ready` is `invalid-input`.
    pub fn release_compact(&self, fence: &FencingToken, next_status: &str) -> Option<String> {
        Self::compact(self.release_typed(fence, next_status), released)
    }

    /// `verifyFence` on the attached memory store, answered compactly.
    pub fn verify_fence_compact(&self, fence: &FencingToken) -> Option<String> {
        Self::compact(self.verify_fence_typed(fence), verified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::{Begun, BridgeMemoryStore};
    use serde_json::{Map, Value, json};

    const T0: i64 = 1_785_369_600_000;

    /// The decoder a host writes from the layouts.
    fn decode(values: &mut std::slice::Iter<'_, &str>, layout: &Value) -> Value {
        let mut out = Map::new();
        for field in layout.as_array().unwrap() {
            let (name, kind) = (field[0].as_str().unwrap(), field[1].as_str().unwrap());
            let v = *values.next().unwrap();
            let value = if v == COMPACT_NULL.to_string() {
                Value::Null
            } else {
                match kind {
                    "s" | "s?" => json!(v),
                    "n" => json!(v.parse::<i64>().unwrap()),
                    "j" => serde_json::from_str(v).unwrap(),
                    other => panic!("kind {other}"),
                }
            };
            out.insert(name.to_owned(), value);
        }
        Value::Object(out)
    }

    fn fleet(sink: bool) -> (BridgeFleet, BridgeMemoryStore) {
        let store = BridgeMemoryStore::new(T0);
        let mut row = RunRow::ready("r", "k", Timestamp(T0));
        row.budget = Some(json!({"usd": 1.5}));
        row.required_capabilities = vec!["gpu".into()];
        store.insert(&serde_json::to_string(&row).unwrap()).unwrap();
        let mut f = BridgeFleet::new(Some(5), sink);
        f.attach_memory_store(&store);
        (f, store)
    }

    fn json_step(f: &BridgeFleet, kind: &str, args: &str) -> Value {
        let Begun::Done(text) = f.begin(kind, args) else { panic!("the memory store answers in place") };
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn the_layouts_are_the_json_fields_in_their_order() {
        let layouts: Value = serde_json::from_str(&compact_layouts()).unwrap();
        let t0 = Timestamp(T0);
        let token = FencingToken { run_id: "r".into(), owner: "w".into(), lease_expires_at: t0, epoch: Some(1) };
        let samples = [
            ("run", serde_json::to_string(&RunRow::ready("r", "k", t0)).unwrap()),
            ("token", serde_json::to_string(&token).unwrap()),
            (
                "receipt",
                serde_json::to_string(&HeartReceipt::new(crate::HeartEvent::Acquired, "r", "w", Some(t0), None, t0))
                    .unwrap(),
            ),
        ];
        for (name, text) in samples {
            let names: Vec<&str> = layouts[name].as_array().unwrap().iter().map(|f| f[0].as_str().unwrap()).collect();
            let keys: Vec<String> = {
                let v: Map<String, Value> = serde_json::from_str(&text).unwrap();
                v.keys().cloned().collect()
            };
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, keys, "{name}: the same fields");
            let positions: Vec<usize> = names.iter().map(|n| text.find(&format!("\"{n}\":")).unwrap()).collect();
            assert!(positions.windows(2).all(|w| w[0] < w[1]), "{name}: in the JSON's order: {text}");
        }
    }

    #[test]
    fn the_compact_cycle_decodes_to_what_the_json_bridge_answers() {
        let layouts: Value = serde_json::from_str(&compact_layouts()).unwrap();
        let (compact, _) = fleet(true);
        let (by_json, _) = fleet(true);
        let sep = COMPACT_SEPARATOR;
        let a = compact.acquire_compact("r", "w", 60).unwrap();
        let values: Vec<&str> = a.split(sep).collect();
        let mut it = values[1..].iter();
        assert_eq!(values[0], "A");
        let run = decode(&mut it, &layouts["run"]);
        let fence = decode(&mut it, &layouts["token"]);
        assert_eq!(*it.next().unwrap(), "1", "one receipt");
        let receipt = decode(&mut it, &layouts["receipt"]);
        assert!(it.next().is_none());
        let expected = json_step(&by_json, "acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60}"#);
        assert_eq!(run, expected["ok"]["run"]);
        assert_eq!(fence, expected["ok"]["fence"]);
        assert_eq!(receipt, expected["receipts"][0]);

        let token: FencingToken = serde_json::from_value(fence.clone()).unwrap();
        let v = compact.verify_fence_compact(&token).unwrap();
        assert!(v.starts_with("V\u{1f}1\u{1f}1\u{1f}"), "{v}");
        assert_eq!(json_step(&by_json, "verifyFence", &json!({ "fence": fence }).to_string())["ok"], true);
        let n = compact.renew_compact(&token, 30).unwrap();
        let values: Vec<&str> = n.split(sep).collect();
        let renewed = decode(&mut values[1..].iter(), &layouts["token"]);
        let args = json!({ "fence": fence, "ttlSeconds": 30 }).to_string();
        assert_eq!(renewed, json_step(&by_json, "renew", &args)["ok"]["value"]);
        let token: FencingToken = serde_json::from_value(renewed).unwrap();
        let args = json!({ "fence": token, "nextStatus": "completed" }).to_string();
        let r = compact.release_compact(&token, "completed").unwrap();
        let values: Vec<&str> = r.split(sep).collect();
        let row = decode(&mut values[1..].iter(), &layouts["run"]);
        assert_eq!(row, json_step(&by_json, "release", &args)["ok"]["value"]);
        assert_eq!(compact.metrics(), by_json.metrics());
    }

    #[test]
    fn refusals_errors_and_marker_characters_answer_in_json() {
        let (f, _) = fleet(false);
        // Bad input: the JSON step of the reference's invalid acquire.
        let bad = f.acquire_compact("", "w", 60).unwrap();
        let bad: Value = serde_json::from_str(&bad).unwrap();
        assert_eq!(bad["ok"]["reason"], "Invalid input");
        // An owner holding the separator is acquired, answered in JSON.
        let odd = f.acquire_compact("r", "w\u{1f}x", 60).unwrap();
        let odd: Value = serde_json::from_str(&odd).unwrap();
        assert_eq!(odd["ok"]["acquired"], true);
        assert_eq!(odd["ok"]["fence"]["owner"], "w\u{1f}x");
        // A token that lost the lease: the refusal in JSON.
        let stale =
            FencingToken { run_id: "r".into(), owner: "other".into(), lease_expires_at: Timestamp(T0), epoch: Some(9) };
        let refused: Value = serde_json::from_str(&f.renew_compact(&stale, 30).unwrap()).unwrap();
        assert_eq!(refused["ok"]["outcome"], "rejected");
        assert_eq!(f.verify_fence_compact(&stale).unwrap(), "V\u{1f}0\u{1f}0");
        let status: Value = serde_json::from_str(&f.release_compact(&stale, "bogus").unwrap()).unwrap();
        assert_eq!(status["error"]["code"], "invalid-input");
        // Without a memory store there is no compact path.
        assert!(BridgeFleet::new(None, false).verify_fence_compact(&stale).is_none());
        // Kept receipts (no sink) are not in the answers.
        assert_eq!(f.receipt_count(), 3, "acquired, and the two refusals' receipts");
    }
}

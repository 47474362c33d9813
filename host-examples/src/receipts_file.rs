//! Receipts as JSON Lines: one receipt per line, with its chain fields
//! ([`heart_fleet_core::chain::chained_json_line`]).
//!
//! * [`JsonlFileSink`] appends every receipt of a command to a file (`--receipts FILE`),
//!   chained per run after what the file already holds and signed with the fleet's keys.
//!   A sink cannot fail a lease operation (the core's rule), so write errors are kept in
//!   the [`SinkHealth`] handle and the command reports them when it finishes.
//! * `verify-receipts FILE` checks such a file with the core's
//!   [`heart_fleet_core::chain::verify_json_lines`].
//!
//! The file sink chains correctly for one writer at a time: two processes appending to one
//! file would both take the next position (the verifier then reports a fork). Fleets share
//! the store's `heart_receipts` table, whose unique index keeps one receipt per position.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use heart_fleet_core::HeartReceipt;
use heart_fleet_core::chain::{self, ChainHeads, Signer};
use heart_fleet_core::receipt::ReceiptSink;

#[derive(Debug, Default)]
struct HealthState {
    written: u64,
    error: Option<String>,
}

/// What a [`JsonlFileSink`] managed to do: receipts written, and the first write error.
#[derive(Debug, Clone, Default)]
pub struct SinkHealth {
    state: Arc<Mutex<HealthState>>,
}

impl SinkHealth {
    /// Receipts appended so far.
    pub fn written(&self) -> u64 {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).written
    }

    /// The first write error, if any (later receipts were not written).
    pub fn error(&self) -> Option<String> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).error.clone()
    }
}

/// Appends receipts to a file as JSON Lines. Each receipt is one `write` of its line and
/// newline to a file opened in append mode, so a crash leaves at most one partial last
/// line and concurrent appenders do not interleave within a line.
#[derive(Debug)]
pub struct JsonlFileSink {
    path: PathBuf,
    file: File,
    health: SinkHealth,
    signer: Arc<Signer>,
    heads: ChainHeads,
}

impl JsonlFileSink {
    /// Opens (creating if needed) `path` for appending; each run's chain goes on after the
    /// last receipt of it the file holds. A last line cut short by a crash is ended with a
    /// newline first, so it stays one bad line instead of spoiling the next receipt.
    pub fn open(path: &Path, signer: Arc<Signer>) -> io::Result<(JsonlFileSink, SinkHealth)> {
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(path)?;
        let mut heads = ChainHeads::new();
        let mut reader = BufReader::new(&mut file);
        let mut line = Vec::new();
        let mut ends_with_newline = true;
        while reader.read_until(b'\n', &mut line)? > 0 {
            ends_with_newline = line.ends_with(b"\n");
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&line) {
                heads.observe(&value);
            }
            line.clear();
        }
        drop(reader);
        if !ends_with_newline {
            file.write_all(b"\n")?;
        }
        let health = SinkHealth::default();
        let sink = JsonlFileSink { path: path.to_owned(), file, health: health.clone(), signer, heads };
        Ok((sink, health))
    }
}

impl ReceiptSink for JsonlFileSink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        let mut state = self.health.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.error.is_some() {
            return;
        }
        let link = self.heads.append(&self.signer, receipt);
        let mut line = chain::chained_json_line(receipt, &link);
        line.push('\n');
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => state.written += 1,
            Err(e) => state.error = Some(format!("cannot append to {}: {e}", self.path.display())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use heart_fleet_core::chain::{FleetKey, LogExpectations, VerifyKeys, verify_json_lines};
    use heart_fleet_core::{HeartEvent, Timestamp};

    fn temp_file(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hf-sink-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let _ = std::fs::remove_file(&path);
        path
    }

    fn released(run: &str, owner: &str) -> HeartReceipt {
        HeartReceipt::new(HeartEvent::Released, run, owner, None, None, Timestamp(0))
    }

    #[test]
    fn file_sink_resumes_each_runs_chain_and_signs() {
        let path = temp_file("resume");
        let key = FleetKey::hmac_from_random([7; 32]);
        let text = key.to_key_file_text();
        let signer = Arc::new(Signer::unsigned().with_key(FleetKey::parse(&text).unwrap()).unwrap());
        for owner in ["a", "b"] {
            let (mut sink, health) = JsonlFileSink::open(&path, signer.clone()).unwrap();
            sink.emit(&released("run-1", owner));
            sink.emit(&released("run-2", owner));
            assert_eq!(health.written(), 2);
            assert!(health.error().is_none());
        }
        let bytes = std::fs::read(&path).unwrap();
        let lines: Vec<serde_json::Value> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        let seqs: Vec<(&str, u64)> =
            lines.iter().map(|v| (v["runId"].as_str().unwrap(), v["seq"].as_u64().unwrap())).collect();
        assert_eq!(seqs, [("run-1", 1), ("run-2", 1), ("run-1", 2), ("run-2", 2)]);
        assert_eq!(lines[2]["prev"], lines[0]["link"]);
        let keys = VerifyKeys::none().with_hmac(FleetKey::parse(&text).unwrap()).unwrap();
        let report = verify_json_lines(&bytes, &keys, &LogExpectations::default()).unwrap();
        assert!(report.passed(), "{:?}", report.findings);
        assert_eq!((report.receipts, report.ok, report.chained, report.signed, report.runs.len()), (4, 4, 4, 4, 2));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn file_sink_ends_a_torn_last_line_before_appending() {
        let path = temp_file("torn");
        let (mut sink, _) = JsonlFileSink::open(&path, Arc::new(Signer::unsigned())).unwrap();
        sink.emit(&released("run-1", "a"));
        drop(sink);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"{\"schemaVersion\":\"heart-fl").unwrap();
        drop(file);
        let bytes = std::fs::read(&path).unwrap();
        let report = verify_json_lines(&bytes, &VerifyKeys::none(), &LogExpectations::default()).unwrap();
        assert_eq!((report.receipts, report.ok, report.malformed), (2, 1, 1));
        assert_eq!(report.findings[0].position, Some(2));

        let (mut sink, _) = JsonlFileSink::open(&path, Arc::new(Signer::unsigned())).unwrap();
        sink.emit(&released("run-1", "b"));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1], "{\"schemaVersion\":\"heart-fl");
        let third: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(third["seq"], 2, "the chain goes on after the last whole receipt");
        // The torn line is now a line in the middle: the file is no JSON Lines log any more,
        // and the error names the line.
        let e = verify_json_lines(text.as_bytes(), &VerifyKeys::none(), &LogExpectations::default()).unwrap_err();
        assert!(e.message.starts_with("line 2: not JSON"), "{}", e.message);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

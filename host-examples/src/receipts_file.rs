//! Receipts as JSON Lines: one receipt per line, exactly as
//! [`HeartReceipt::to_json_line`] writes it.
//!
//! * [`JsonlFileSink`] appends every receipt of a command to a file (`--receipts FILE`).
//!   A sink cannot fail a lease operation (the core's rule), so write errors are kept in
//!   the [`SinkHealth`] handle and the command reports them when it finishes.
//! * [`verify_lines`] checks such a file with the core's
//!   [`heart_fleet_core::verify_receipt`] (`verify-receipts`).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::{ErrorCode, HeartReceipt, verify_receipt};
use serde::Serialize;

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
}

impl JsonlFileSink {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: &Path) -> io::Result<(JsonlFileSink, SinkHealth)> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let health = SinkHealth::default();
        Ok((JsonlFileSink { path: path.to_owned(), file, health: health.clone() }, health))
    }
}

impl ReceiptSink for JsonlFileSink {
    fn emit(&mut self, receipt: &HeartReceipt) {
        let mut state = self.health.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.error.is_some() {
            return;
        }
        let mut line = receipt.to_json_line();
        line.push('\n');
        match self.file.write_all(line.as_bytes()) {
            Ok(()) => state.written += 1,
            Err(e) => state.error = Some(format!("cannot append to {}: {e}", self.path.display())),
        }
    }
}

/// Counts of a `verify-receipts` pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct VerifySummary {
    /// Non-blank lines.
    pub receipts: u64,
    /// Lines that are receipts whose digest matches.
    pub ok: u64,
    /// Receipts whose digest does not match their fields (`receipt-tampered`).
    pub tampered: u64,
    /// Lines that are not receipts at all: not UTF-8, not JSON, wrong schema or field types.
    pub malformed: u64,
}

impl VerifySummary {
    /// Whether every receipt verified.
    pub fn all_ok(&self) -> bool {
        self.ok == self.receipts
    }
}

/// Checks receipts, one per line, from `input`. Blank lines are skipped (and not counted);
/// a trailing `\r` is ignored. For every receipt that does not verify, writes
/// `line N: CODE: MESSAGE` to `report`, where `CODE` is `receipt-tampered` (the digest does
/// not match) or `invalid-input` (the line is not a receipt); line numbers count every line,
/// blank or not, from 1. Reading stops at the first I/O error, which is returned.
pub fn verify_lines(input: &mut dyn BufRead, report: &mut dyn Write) -> io::Result<VerifySummary> {
    let mut summary = VerifySummary::default();
    let mut buf = Vec::new();
    let mut number = 0u64;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        number += 1;
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        summary.receipts += 1;
        let verdict = match std::str::from_utf8(bytes) {
            Err(e) => Err((ErrorCode::InvalidInput, format!("not UTF-8: {e}"))),
            Ok(text) => match serde_json::from_str::<serde_json::Value>(text) {
                Err(e) => Err((ErrorCode::InvalidInput, format!("not JSON: {e}"))),
                Ok(value) => verify_receipt(&value).map_err(|e| (e.code, e.message)),
            },
        };
        match verdict {
            Ok(()) => summary.ok += 1,
            Err((code, message)) => {
                if code == ErrorCode::ReceiptTampered {
                    summary.tampered += 1;
                } else {
                    summary.malformed += 1;
                }
                writeln!(report, "line {number}: {code}: {message}")?;
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use heart_fleet_core::{HeartEvent, Timestamp};

    fn receipt(owner: &str) -> String {
        HeartReceipt::new(HeartEvent::Acquired, "run-1", owner, Some(Timestamp(60_000)), None, Timestamp(0))
            .to_json_line()
    }

    #[test]
    fn counts_ok_tampered_and_malformed() {
        let tampered = receipt("worker-A").replace("worker-A", "mallory");
        let text = format!("{}\n\n{tampered}\r\nnot json\n{{\"a\":1}}\n{}", receipt("w"), receipt("x"));
        let mut report = Vec::new();
        let s = verify_lines(&mut text.as_bytes(), &mut report).unwrap();
        assert_eq!(s, VerifySummary { receipts: 5, ok: 2, tampered: 1, malformed: 2 });
        let report = String::from_utf8(report).unwrap();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("line 3: receipt-tampered: digest "), "{}", lines[0]);
        assert!(lines[1].starts_with("line 4: invalid-input: not JSON"), "{}", lines[1]);
        assert!(lines[2].starts_with("line 5: invalid-input: "), "{}", lines[2]);
    }

    #[test]
    fn file_sink_appends_lines_that_verify() {
        let dir = std::env::temp_dir().join(format!("hf-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let _ = std::fs::remove_file(&path);
        for owner in ["a", "b"] {
            let (mut sink, health) = JsonlFileSink::open(&path).unwrap();
            sink.emit(&HeartReceipt::new(HeartEvent::Released, "run-1", owner, None, None, Timestamp(0)));
            assert_eq!(health.written(), 1);
            assert!(health.error().is_none());
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        let s = verify_lines(&mut text.as_bytes(), &mut Vec::new()).unwrap();
        assert!(s.all_ok() && s.receipts == 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

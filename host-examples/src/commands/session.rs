//! What the commands share: one-line failures and their exit statuses, opening `--store`
//! and `--receipts FILE`, and the [`Session`] (a fleet over the store whose receipts go to
//! the table, the optional file and a queue the command drains).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use heart_fleet_core::chain::Signer;
use heart_fleet_core::receipt::ReceiptSink;
use heart_fleet_core::{ErrorCode, HeartError};
use heart_fleet_stores::receipts::{ReceiptTableSink, TableSinkHealth};
use heart_fleet_stores::{AnyStore, DEFAULT_STORE_URL};
use serde::Serialize;

use crate::Exit;
use crate::cli::{Global, ReceiptsArg};
use crate::engine::Engine;
use crate::receipts_file::{JsonlFileSink, SinkHealth};
use crate::sinks::{FanoutSink, QueueSink, ReceiptQueue};

/// Writes `heart-fleet: {message}` to `err` and returns `exit`.
pub fn fail(err: &mut dyn Write, exit: Exit, message: impl std::fmt::Display) -> Exit {
    let _ = writeln!(err, "heart-fleet: {message}");
    exit
}

/// The exit status for an operation's error: a refusal of the input (1) or a failure (2).
pub fn heart_exit(e: &HeartError) -> Exit {
    match e.code {
        ErrorCode::StoreUnavailable | ErrorCode::StoreProtocol => Exit::Error,
        _ => Exit::Failure,
    }
}

/// The store URL a command uses (`--store`, or the embedded default).
pub fn store_url(global: &Global) -> &str {
    global.store.as_deref().unwrap_or(DEFAULT_STORE_URL)
}

/// Opens the store of `--store`. The embedded default ([`DEFAULT_STORE_URL`], when no
/// `--store` is given) is created and migrated on first use; any other store must exist
/// and be migrated (`heart-fleet migrate`). (`--engine` plays no part: commands that only
/// read the store, `metrics` and `verify-receipts --table`, run no lease operation.)
pub fn open_store(global: &Global, err: &mut dyn Write) -> Result<AnyStore, Exit> {
    match global.store.as_deref() {
        Some(url) => heart_fleet_stores::open(url).map_err(|e| fail(err, Exit::Error, e)),
        None => match heart_fleet_stores::open_migrated(DEFAULT_STORE_URL) {
            Ok((store, applied)) => {
                if applied.iter().any(|m| m.applied) {
                    let _ = writeln!(err, "heart-fleet: created the tables of the embedded store {DEFAULT_STORE_URL}");
                }
                Ok(store)
            }
            Err(e) => Err(fail(err, Exit::Error, e)),
        },
    }
}

/// A fleet over an opened store, with its receipts going to the table, the optional file,
/// and a queue the command drains.
pub struct Session {
    /// The engine.
    pub fleet: Box<dyn Engine<Store = AnyStore>>,
    /// Receipts of the command, in emission order.
    pub queue: ReceiptQueue,
    table: TableSinkHealth,
    file: Option<SinkHealth>,
    receipts_path: Option<std::path::PathBuf>,
}

impl Session {
    /// Opens the store and builds the fleet (`max_retries`: the retry ceiling, default 5).
    pub fn open(
        global: &Global,
        receipts: &ReceiptsArg,
        max_retries: Option<u32>,
        err: &mut dyn Write,
    ) -> Result<Session, Exit> {
        // The engine first: a missing component is reported before any store is touched.
        let engine = global.prepare_engine().map_err(|e| fail(err, Exit::Error, e))?;
        let signer = global.signer().map_err(|e| fail(err, Exit::Error, e))?;
        let store = open_store(global, err)?;
        let (file_sink, file) = match open_receipts(receipts, &signer, err)? {
            Some((sink, health)) => (Some(sink), Some(health)),
            None => (None, None),
        };
        let (table_sink, table) = ReceiptTableSink::signed(&store, signer);
        let (queue_sink, queue) = QueueSink::new();
        let mut sinks: Vec<Box<dyn ReceiptSink>> = vec![Box::new(table_sink), Box::new(queue_sink)];
        sinks.extend(file_sink);
        let fleet = engine
            .build(store, max_retries, Box::new(FanoutSink::new(sinks)))
            .map_err(|e| fail(err, heart_exit(&e), format!("--engine {}: {e}", global.engine.as_str())))?;
        Ok(Session { fleet, queue, table, file, receipts_path: receipts.receipts.clone() })
    }

    /// Reports a sink that failed (the table or the file): `Err(Exit::Error)` then.
    pub fn finish(&self, err: &mut dyn Write) -> Result<(), Exit> {
        if let Some(e) = self.table.error() {
            return Err(fail(err, Exit::Error, e));
        }
        check_receipts(self.file.as_ref(), self.receipts_path.as_deref(), err)
    }
}

/// Writes `lines` to `out`, one per line, and flushes.
pub fn write_lines(out: &mut dyn Write, err: &mut dyn Write, lines: &[String]) -> Result<(), Exit> {
    for line in lines {
        if let Err(e) = writeln!(out, "{line}") {
            return Err(crate::io_failure(err, &e));
        }
    }
    out.flush().map_err(|e| crate::io_failure(err, &e))
}

/// `value` as one line of JSON.
pub fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Writes the lines of an operation (or its error), then reports a failed sink.
pub fn finish_lines(
    s: &Session,
    lines: Result<Vec<String>, HeartError>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Exit {
    let sinks = s.finish(err);
    let lines = match lines {
        Ok(l) => l,
        Err(e) => return fail(err, heart_exit(&e), e),
    };
    match write_lines(out, err, &lines).and(sinks) {
        Ok(()) => Exit::Success,
        Err(exit) => exit,
    }
}

/// An opened `--receipts` file: the sink to hand to the fleet, and its health handle.
pub type OpenedReceipts = (Box<dyn ReceiptSink>, SinkHealth);

/// Opens the `--receipts` file, if any, its receipts signed by `signer`.
pub fn open_receipts(
    arg: &ReceiptsArg,
    signer: &Arc<Signer>,
    err: &mut dyn Write,
) -> Result<Option<OpenedReceipts>, Exit> {
    let Some(path) = arg.receipts.as_deref() else { return Ok(None) };
    match JsonlFileSink::open(path, signer.clone()) {
        Ok((sink, health)) => Ok(Some((Box::new(sink), health))),
        Err(e) => {
            let _ = writeln!(err, "heart-fleet: cannot open {}: {e}", path.display());
            Err(Exit::Error)
        }
    }
}

/// Opens the `--receipts` file, if any, its receipts signed with the fleet key of
/// `--signing-key` (or none).
pub fn signed_receipts_file(
    global: &Global,
    arg: &ReceiptsArg,
    err: &mut dyn Write,
) -> Result<Option<OpenedReceipts>, Exit> {
    let signer = global.signer().map_err(|e| fail(err, Exit::Error, e))?;
    open_receipts(arg, &signer, err)
}

/// Reports a receipts file that could not be written to: `Exit::Error` then.
pub fn check_receipts(health: Option<&SinkHealth>, path: Option<&Path>, err: &mut dyn Write) -> Result<(), Exit> {
    match health.and_then(SinkHealth::error) {
        Some(e) => {
            let shown = path.map(|p| p.display().to_string()).unwrap_or_default();
            let _ = writeln!(err, "heart-fleet: receipts file {shown}: {e}");
            Err(Exit::Error)
        }
        None => Ok(()),
    }
}

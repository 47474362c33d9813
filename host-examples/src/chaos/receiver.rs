//! The receiving side of the fleet's effects: a small HTTP server in the harness that every
//! worker, whatever its runtime, delivers to (`POST /deliver`), over tables of its own in the
//! shared store.
//!
//! It fences as a careful downstream system does: a delivery whose epoch is older than the
//! newest it has accepted for that run is refused, and so is an epoch the reconciler has
//! declared not sent for that key (`chaos_refused`), which makes the probe's `not-sent` final
//! (a worker frozen past its lease cannot land the send after the intent was reopened). It
//! does **not** deduplicate: a second delivery of a key is recorded, so the checker can count
//! it. A delivery, its checks and the probe's refusal run under one lock per run (PostgreSQL:
//! an advisory transaction lock; SQLite: `BEGIN IMMEDIATE`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use heart_fleet_core::sql::{Dialect, SqlParam, SqlRow, SqlValue, Statement};
use heart_fleet_core::{IntentRow, ProbeVerdict, StoreError, Timestamp};
use heart_fleet_stores::{AnyStore, Tx};
use serde::Deserialize;
use serde_json::{Value, json};

use super::history::Delivery;

/// The longest a delivery request may take to arrive or be answered.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request body taken.
const MAX_BODY: usize = 16 * 1024;

fn stmt(sql: &str, params: Vec<SqlParam>) -> Statement {
    Statement { sql: sql.to_owned(), params }
}

fn text(s: &str) -> SqlParam {
    SqlParam::Text(s.to_owned())
}

pub(super) fn cell<'a>(row: &'a SqlRow, name: &str) -> Option<&'a SqlValue> {
    row.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

pub(super) fn cell_text(row: &SqlRow, name: &str) -> Option<String> {
    match cell(row, name) {
        Some(SqlValue::Text(t)) => Some(t.clone()),
        Some(SqlValue::Int(n)) => Some(n.to_string()),
        _ => None,
    }
}

pub(super) fn cell_int(row: &SqlRow, name: &str) -> Option<i64> {
    match cell(row, name) {
        Some(SqlValue::Int(n)) => Some(*n),
        Some(SqlValue::Text(t)) => t.parse().ok(),
        _ => None,
    }
}

/// The receiving side's clock as `toISOString()` text, in an expression of each dialect: the
/// server's on PostgreSQL, the harness process's on SQLite (it records; it decides nothing).
pub(super) fn now_sql(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
        Dialect::Postgres => {
            "to_char(date_trunc('milliseconds', clock_timestamp()) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        }
    }
}

/// Creates the receiving side's tables (idempotent).
pub fn create_tables(store: &mut AnyStore) -> Result<(), StoreError> {
    let id = match store.dialect() {
        Dialect::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
    };
    store.batch(&format!(
        "CREATE TABLE IF NOT EXISTS chaos_deliveries (id {id}, run_id TEXT NOT NULL, effect_key TEXT NOT NULL, \
         owner TEXT NOT NULL, epoch BIGINT NOT NULL, at TEXT NOT NULL); \
         CREATE INDEX IF NOT EXISTS chaos_deliveries_run ON chaos_deliveries (run_id, epoch); \
         CREATE TABLE IF NOT EXISTS chaos_refused (effect_key TEXT NOT NULL, epoch BIGINT NOT NULL, \
         PRIMARY KEY (effect_key, epoch));"
    ))
}

fn lock_run(tx: &mut Tx<'_>, run_id: &str) -> Result<(), StoreError> {
    if tx.dialect() == Dialect::Postgres {
        tx.query(&stmt(
            "SELECT 1::int AS ok FROM (SELECT pg_advisory_xact_lock(hashtext($1::text))) l",
            vec![text(&format!("chaos/{run_id}"))],
        ))?;
    }
    Ok(())
}

/// What a worker hands over with a delivery.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryRequest {
    /// The run whose lease fires it.
    pub run: String,
    /// The effect key.
    pub key: String,
    /// The firing token's owner.
    pub owner: String,
    /// The epoch `sendOnce` handed to the effect.
    pub epoch: i64,
}

/// Takes a delivery: `Ok(Ok(id))` accepted, `Ok(Err(why))` refused.
pub fn deliver(store: &mut AnyStore, d: &DeliveryRequest) -> Result<Result<i64, String>, StoreError> {
    store.transaction(|tx| {
        lock_run(tx, &d.run)?;
        let pg = tx.dialect() == Dialect::Postgres;
        let pick = |sqlite: &str, postgres: &str| if pg { postgres.to_owned() } else { sqlite.to_owned() };
        let refused = stmt(
            &pick(
                "SELECT count(*) AS n FROM chaos_refused WHERE effect_key = ?1 AND epoch = ?2",
                "SELECT count(*) AS n FROM chaos_refused WHERE effect_key = $1::text AND epoch = $2::bigint",
            ),
            vec![text(&d.key), SqlParam::Int(d.epoch)],
        );
        if tx.query(&refused)?.first().and_then(|r| cell_int(r, "n")).unwrap_or(0) > 0 {
            return Ok(Err(format!("epoch {} of this effect was reconciled as not sent", d.epoch)));
        }
        let newest = stmt(
            &pick(
                "SELECT max(epoch) AS top FROM chaos_deliveries WHERE run_id = ?1",
                "SELECT max(epoch) AS top FROM chaos_deliveries WHERE run_id = $1::text",
            ),
            vec![text(&d.run)],
        );
        if let Some(top) = tx.query(&newest)?.first().and_then(|r| cell_int(r, "top")).filter(|top| *top > d.epoch) {
            return Ok(Err(format!("epoch {} is older than epoch {top}, already seen for this run", d.epoch)));
        }
        let values = pick("?1, ?2, ?3, ?4", "$1::text, $2::text, $3::text, $4::bigint");
        let insert = stmt(
            &format!(
                "INSERT INTO chaos_deliveries (run_id, effect_key, owner, epoch, at) VALUES ({values}, {}) RETURNING id",
                now_sql(tx.dialect())
            ),
            vec![text(&d.run), text(&d.key), text(&d.owner), SqlParam::Int(d.epoch)],
        );
        let id = tx.query(&insert)?.first().and_then(|r| cell_int(r, "id"));
        id.map(Ok).ok_or_else(|| StoreError("the delivery insert returned no id".into()))
    })
}

/// The reconciler's probe: a delivery with the intent's key and epoch means sent (its id is
/// the evidence); otherwise that epoch is refused for the key from now on, and it was not sent.
pub fn probe(store: &mut AnyStore, intent: &IntentRow) -> Result<ProbeVerdict, StoreError> {
    let Some(epoch) = intent.fence_epoch else { return Ok(ProbeVerdict::Unknown) };
    store.transaction(|tx| {
        lock_run(tx, &intent.run_id)?;
        let d = tx.dialect();
        let (k, e) = match d {
            Dialect::Sqlite => ("?1", "?2"),
            Dialect::Postgres => ("$1::text", "$2::bigint"),
        };
        let params = vec![text(&intent.effect_key), SqlParam::Int(epoch)];
        let find = stmt(
            &format!("SELECT id FROM chaos_deliveries WHERE effect_key = {k} AND epoch = {e} ORDER BY id LIMIT 1"),
            params.clone(),
        );
        if let Some(id) = tx.query(&find)?.first().and_then(|r| cell_int(r, "id")) {
            return Ok(ProbeVerdict::Sent(json!({ "delivery": id, "epoch": epoch })));
        }
        let refuse = stmt(
            &format!("INSERT INTO chaos_refused (effect_key, epoch) VALUES ({k}, {e}) ON CONFLICT DO NOTHING"),
            params,
        );
        tx.query(&refuse)?;
        Ok(ProbeVerdict::NotSent)
    })
}

/// Every accepted delivery, in acceptance order.
pub fn deliveries(store: &mut AnyStore) -> Result<Vec<Delivery>, String> {
    let rows = store
        .query(&stmt("SELECT id, run_id, effect_key, owner, epoch, at FROM chaos_deliveries ORDER BY id", vec![]))
        .map_err(|e| e.to_string())?;
    rows.iter()
        .map(|r| {
            let at = cell_text(r, "at").unwrap_or_default();
            Ok(Delivery {
                id: cell_int(r, "id").ok_or("a delivery without an id")?,
                run_id: cell_text(r, "run_id").unwrap_or_default(),
                effect_key: cell_text(r, "effect_key").unwrap_or_default(),
                owner: cell_text(r, "owner").unwrap_or_default(),
                epoch: cell_int(r, "epoch").ok_or("a delivery without an epoch")?,
                at: Timestamp::parse_iso(&at).map_err(|e| e.to_string())?,
            })
        })
        .collect()
}

/// The running server.
pub struct Receiver {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    errors: Arc<Mutex<u64>>,
}

impl Receiver {
    /// Serves `POST /deliver` on a loopback port over `store` (its own connection).
    pub fn start(store: AnyStore) -> Result<Receiver, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("receiver: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("receiver: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| format!("receiver: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(Mutex::new(0));
        let store = Arc::new(Mutex::new(store));
        let (s, errs) = (stop.clone(), errors.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (store, errs) = (store.clone(), errs.clone());
                        std::thread::spawn(move || serve(conn, &store, &errs));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        Ok(Receiver { addr, stop, thread: Some(thread), errors })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Deliveries that failed on the store (the worker was told 503).
    pub fn store_errors(&self) -> u64 {
        *self.errors.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn respond(conn: &mut TcpStream, status: &str, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.flush();
}

fn serve(mut conn: TcpStream, store: &Mutex<AnyStore>, errors: &Mutex<u64>) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(IO_TIMEOUT));
    let _ = conn.set_write_timeout(Some(IO_TIMEOUT));
    let body = match read_request(&conn) {
        Ok(b) => b,
        Err(e) => return respond(&mut conn, "400 Bad Request", &json!({ "error": e })),
    };
    let req: DeliveryRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return respond(&mut conn, "400 Bad Request", &json!({ "error": e.to_string() })),
    };
    let outcome = deliver(&mut store.lock().unwrap_or_else(PoisonError::into_inner), &req);
    match outcome {
        Ok(Ok(id)) => respond(&mut conn, "200 OK", &json!({ "delivery": id, "epoch": req.epoch })),
        Ok(Err(why)) => respond(&mut conn, "409 Conflict", &json!({ "refused": why })),
        Err(e) => {
            *errors.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            respond(&mut conn, "503 Service Unavailable", &json!({ "error": e.to_string() }));
        }
    }
}

/// The largest request head (request line and headers) taken.
const MAX_HEAD: u64 = 8 * 1024;

/// Reads a `POST /deliver` request and returns its body.
fn read_request(conn: &TcpStream) -> Result<Vec<u8>, String> {
    // The head is read through a limit, so a line without an end cannot grow without bound.
    let mut reader = BufReader::new(conn.take(MAX_HEAD + MAX_BODY as u64));
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    if !line.starts_with("POST /deliver ") {
        return Err(format!("only POST /deliver is served, not {:?}", line.trim_end()));
    }
    let mut length = None;
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("the request ended inside its headers".into());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let n = length.ok_or("a request without Content-Length")?;
    if n > MAX_BODY {
        return Err(format!("a body of {n} bytes (at most {MAX_BODY})"));
    }
    let mut body = vec![0; n];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok(body)
}

/// The Rust workers' client: delivers and returns the receiver's answer, or why it failed.
pub fn post_delivery(url: &str, req: &Value) -> Result<Value, String> {
    let addr = url.strip_prefix("http://").ok_or("the receiver URL is not http://")?;
    let addr: SocketAddr = addr.parse().map_err(|e| format!("receiver address {addr}: {e}"))?;
    let mut conn = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| format!("receiver: {e}"))?;
    conn.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
    let body = req.to_string();
    write!(
        conn,
        "POST /deliver HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("receiver: {e}"))?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).map_err(|e| format!("receiver: {e}"))?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or("receiver: an answer without a body")?;
    let status = head.split(' ').nth(1).unwrap_or("");
    let value: Value = serde_json::from_str(body).map_err(|e| format!("receiver: {e}"))?;
    if status == "200" { Ok(value) } else { Err(format!("receiver {status}: {value}")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (AnyStore, std::path::PathBuf) {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let path = std::env::temp_dir().join(format!("heart-chaos-receiver-{}-{nanos}.db", std::process::id()));
        let (mut s, _) = heart_fleet_stores::open_migrated(&format!("sqlite:{}", path.display())).unwrap();
        create_tables(&mut s).unwrap();
        (s, path)
    }

    fn req(run: &str, key: &str, epoch: i64) -> DeliveryRequest {
        DeliveryRequest { run: run.into(), key: key.into(), owner: "w:1".into(), epoch }
    }

    fn intent(run: &str, key: &str, epoch: i64) -> IntentRow {
        serde_json::from_value(json!({
            "run_id": run, "effect_key": key, "state": "dispatched", "channel": "internal", "payload_digest": "",
            "fence_epoch": epoch, "attempts": 0, "created_at": "2026-01-01T00:00:00.000Z"
        }))
        .unwrap()
    }

    #[test]
    fn the_receiver_fences_by_epoch_keeps_duplicates_and_makes_not_sent_final() {
        let (mut s, path) = store();
        let first = deliver(&mut s, &req("r", "k1", 2)).unwrap().unwrap();
        // A second delivery of a key is recorded, for the checker to count.
        let again = deliver(&mut s, &req("r", "k1", 2)).unwrap().unwrap();
        assert!(again > first);
        // An epoch older than one accepted for the run is refused.
        let stale = deliver(&mut s, &req("r", "k2", 1)).unwrap().unwrap_err();
        assert!(stale.contains("older than epoch 2"), "{stale}");
        // Other runs have their own newest epoch.
        deliver(&mut s, &req("other", "k3", 1)).unwrap().unwrap();
        // The probe: delivered means sent with its delivery as evidence ...
        match probe(&mut s, &intent("r", "k1", 2)).unwrap() {
            ProbeVerdict::Sent(e) => assert_eq!(e, json!({ "delivery": first, "epoch": 2 })),
            other => panic!("{other:?}"),
        }
        // ... not delivered means not sent, and that epoch of that key is refused from then on.
        assert!(matches!(probe(&mut s, &intent("r", "k4", 3)).unwrap(), ProbeVerdict::NotSent));
        let late = deliver(&mut s, &req("r", "k4", 3)).unwrap().unwrap_err();
        assert!(late.contains("reconciled as not sent"), "{late}");
        deliver(&mut s, &req("r", "k4", 4)).unwrap().unwrap();
        let all = deliveries(&mut s).unwrap();
        let got: Vec<(&str, &str, i64)> =
            all.iter().map(|d| (d.run_id.as_str(), d.effect_key.as_str(), d.epoch)).collect();
        assert_eq!(got, [("r", "k1", 2), ("r", "k1", 2), ("other", "k3", 1), ("r", "k4", 4)]);
        drop(s);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_receiver_answers_over_http() {
        let (s, path) = store();
        let r = Receiver::start(s).unwrap();
        let ok = post_delivery(&r.url(), &json!({ "run": "r", "key": "k", "owner": "w:1", "epoch": 5 })).unwrap();
        assert_eq!(ok["epoch"], 5);
        assert!(ok["delivery"].as_i64().is_some());
        let refused =
            post_delivery(&r.url(), &json!({ "run": "r", "key": "k", "owner": "w:1", "epoch": 4 })).unwrap_err();
        assert!(refused.starts_with("receiver 409"), "{refused}");
        let bad = post_delivery(&r.url(), &json!({ "run": "r", "key": "k", "epoch": 5, "extra": 1 })).unwrap_err();
        assert!(bad.starts_with("receiver 400"), "{bad}");
        drop(r);
        let _ = std::fs::remove_file(path);
    }
}

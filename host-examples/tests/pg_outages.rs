//! A multi-process simulation on PostgreSQL rides through a server outage: a restart (every
//! connection reset, new connections refused for a while) and a stop (nothing answers for
//! 5 s, as with `kill -STOP` on the server, then everything resumes). The outages are made by
//! a TCP proxy between the simulation and the server, so the test needs no control over the
//! server (and disturbs no other test); to the client they look like the real thing.
//!
//! Each failed request is a store failure the worker or the sweeper rides through (the store
//! reconnects on the next request); the run ends with its report, safe.
//!
//! Needs `DATABASE_URL`; without it the test prints SKIPPED, except under `CI`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;
#[path = "../../tests/sql-exec/tests/pg_route/mod.rs"]
mod pg_route;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use common::{check_safe_report, cmd, temp_dir};
use pg_route::{Namespace, Route, with};

const FORWARD: u8 = 0;
/// Connections are held open, nothing moves either way: a stopped server.
const FROZEN: u8 = 1;
/// New connections are closed at once: a server that is restarting.
const DOWN: u8 = 2;

/// The proxy's state, shared with its threads.
struct Outage {
    mode: AtomicU8,
    /// Bumped by a restart: connections of an older generation are reset.
    generation: AtomicU64,
}

/// A TCP proxy to `upstream` on a local port of its own.
struct FaultProxy {
    port: u16,
    state: Arc<Outage>,
}

impl FaultProxy {
    fn start(upstream: String) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Outage { mode: AtomicU8::new(FORWARD), generation: AtomicU64::new(0) });
        let shared = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if shared.mode.load(Ordering::SeqCst) == DOWN {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let generation = shared.generation.load(Ordering::SeqCst);
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (from, to, state) = (from.try_clone().unwrap(), to.try_clone().unwrap(), shared.clone());
                    thread::spawn(move || pump(from, to, &state, generation));
                }
            }
        });
        FaultProxy { port, state }
    }

    /// Resets every connection and refuses new ones for `down`.
    fn restart(&self, down: Duration) {
        self.state.mode.store(DOWN, Ordering::SeqCst);
        self.state.generation.fetch_add(1, Ordering::SeqCst);
        thread::sleep(down);
        self.state.mode.store(FORWARD, Ordering::SeqCst);
    }

    /// Nothing moves for `stopped`, then everything resumes where it was.
    fn freeze(&self, stopped: Duration) {
        self.state.mode.store(FROZEN, Ordering::SeqCst);
        thread::sleep(stopped);
        self.state.mode.store(FORWARD, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` while the connection's generation is current; frozen, it reads nothing.
fn pump(mut from: TcpStream, mut to: TcpStream, state: &Outage, generation: u64) {
    from.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if state.generation.load(Ordering::SeqCst) != generation {
            break;
        }
        if state.mode.load(Ordering::SeqCst) == FROZEN {
            thread::sleep(Duration::from_millis(10));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// `url` with its `host:port` replaced by the proxy's.
fn via(url: &str, port: u16) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, rest) = rest.rsplit_once('@').map_or(("", rest), |(u, r)| (u, r));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let upstream = rest[..end].to_owned();
    let at = if userinfo.is_empty() { String::new() } else { format!("{userinfo}@") };
    (format!("{scheme}://{at}127.0.0.1:{port}{}", &rest[end..]), upstream)
}

#[test]
fn simulate_processes_rides_through_a_server_restart_and_a_stop() {
    let dir = temp_dir("heart-pg-outages");
    let Some(ns) = Namespace::migrated(Route::Direct, "heart-fleet CLI PostgreSQL outages") else { return };
    let (_, upstream) = via(&ns.url, 0);
    let proxy = FaultProxy::start(upstream);
    // A short statement deadline, so requests caught by the stop fail instead of waiting it out.
    let url = with(&via(&ns.url, proxy.port).0, "heart_statement_timeout_ms=1500");
    let args = [
        "--store",
        &url,
        "simulate",
        "--processes",
        "3",
        "--runs",
        "40",
        "--ttl",
        "2",
        "--seed",
        "11",
        "--json",
        "--max-seconds",
        "120",
    ];
    let mut child = cmd(&dir, &args).spawn().unwrap();
    thread::sleep(Duration::from_millis(1000));
    proxy.restart(Duration::from_millis(1500));
    thread::sleep(Duration::from_millis(1000));
    proxy.freeze(Duration::from_secs(5));
    if child.try_wait().unwrap().is_some() {
        let out = child.wait_with_output().unwrap();
        panic!(
            "the simulation ended before the outages did, the test proves nothing: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = child.wait_with_output().unwrap();
    let r = check_safe_report(&out);
    // Shown with --nocapture: how the outages landed this time.
    eprintln!("{r}");
    assert!(r["store_errors"].as_u64().unwrap() > 0, "the outages showed as store errors ridden through: {r}");
}

#[test]
fn the_proxy_url_keeps_everything_but_the_address() {
    let (url, upstream) = via("postgres://u:p@db.example:5432/x?options=-c%20a%3Db", 7000);
    assert_eq!(url, "postgres://u:p@127.0.0.1:7000/x?options=-c%20a%3Db");
    assert_eq!(upstream, "db.example:5432");
}

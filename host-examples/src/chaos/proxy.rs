//! A TCP proxy on loopback between a worker and PostgreSQL, with the network's faults:
//! latency ([`Proxy::set_delay`]), dropped connections ([`Proxy::drop_connections`]) and a
//! partition ([`Proxy::partition`]: bytes in both directions vanish and new connections hang,
//! until [`Proxy::heal`] closes everything, as a network that came back after the peers gave
//! up would).
//!
//! One proxy per proxied worker, so a partition cuts one worker off while its peers go on.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a pump looks at the proxy's state while its socket is quiet.
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct State {
    delay_ms: AtomicU64,
    partitioned: AtomicBool,
    /// Bumped to close every connection opened before.
    generation: AtomicU64,
    /// Client connections accepted and not yet closed.
    open: AtomicU64,
    stop: AtomicBool,
}

/// A running proxy.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a loopback port and forwards each connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Proxy, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("proxy: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("proxy: {e}"))?;
        listener.set_nonblocking(true).map_err(|e| format!("proxy: {e}"))?;
        let state = Arc::new(State::default());
        let st = state.clone();
        let thread = std::thread::spawn(move || {
            while !st.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let st = st.clone();
                        std::thread::spawn(move || connect(client, upstream, &st));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => std::thread::sleep(POLL),
                }
            }
        });
        Ok(Proxy { addr, state, thread: Some(thread) })
    }

    /// The port workers connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Client connections open now (a fault on a proxy nobody uses injects nothing).
    pub fn open_connections(&self) -> u64 {
        self.state.open.load(Ordering::Relaxed)
    }

    /// Latency added to every chunk, each way (0: none).
    pub fn set_delay(&self, delay: Duration) {
        self.state.delay_ms.store(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Latency for `how_long`, ended by a timer of its own (so a harness busy elsewhere, e.g.
    /// waiting on a lock a paused worker holds, cannot make it last longer).
    pub fn delay_for(&self, delay: Duration, how_long: Duration) {
        self.set_delay(delay);
        let st = self.state.clone();
        std::thread::spawn(move || {
            std::thread::sleep(how_long);
            st.delay_ms.store(0, Ordering::Relaxed);
        });
    }

    /// Closes every open connection (the peers see a reset network).
    pub fn drop_connections(&self) {
        self.state.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// From now on nothing gets through, and nothing is closed either.
    pub fn partition(&self) {
        self.state.partitioned.store(true, Ordering::Relaxed);
    }

    /// A partition for `how_long`, healed by a timer of its own (see [`Proxy::delay_for`]).
    pub fn partition_for(&self, how_long: Duration) {
        self.partition();
        let st = self.state.clone();
        std::thread::spawn(move || {
            std::thread::sleep(how_long);
            heal(&st);
        });
    }

    /// Ends a partition: the connections it froze are closed, new ones go through.
    pub fn heal(&self) {
        heal(&self.state);
    }
}

fn heal(st: &State) {
    st.partitioned.store(false, Ordering::Relaxed);
    st.generation.fetch_add(1, Ordering::Relaxed);
}

/// Counts a client connection while it is open.
struct Open<'a>(&'a State);

impl<'a> Open<'a> {
    fn new(st: &'a State) -> Open<'a> {
        st.open.fetch_add(1, Ordering::Relaxed);
        Open(st)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        self.drop_connections();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn connect(client: TcpStream, upstream: SocketAddr, st: &Arc<State>) {
    let _open = Open::new(st);
    let generation = st.generation.load(Ordering::Relaxed);
    let stale = |st: &State| st.stop.load(Ordering::Relaxed) || st.generation.load(Ordering::Relaxed) != generation;
    // A partitioned network: the connection attempt hangs (the client's connect deadline ends it).
    while st.partitioned.load(Ordering::Relaxed) {
        if stale(st) {
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        std::thread::sleep(POLL);
    }
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(3)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nonblocking(false);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { return };
    let st2 = st.clone();
    let up = std::thread::spawn(move || pump(client, server, &st2, generation));
    pump(s2, c2, st, generation);
    let _ = up.join();
}

fn pump(mut from: TcpStream, mut to: TcpStream, st: &State, generation: u64) {
    let _ = from.set_read_timeout(Some(POLL));
    let mut buf = [0u8; 16 * 1024];
    let close = |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    loop {
        if st.stop.load(Ordering::Relaxed) || st.generation.load(Ordering::Relaxed) != generation {
            return close(&from, &to);
        }
        match from.read(&mut buf) {
            Ok(0) => return close(&from, &to),
            Ok(n) => {
                if st.partitioned.load(Ordering::Relaxed) {
                    continue;
                }
                let delay = st.delay_ms.load(Ordering::Relaxed);
                if delay > 0 {
                    std::thread::sleep(Duration::from_millis(delay));
                }
                if to.write_all(&buf[..n]).is_err() {
                    return close(&from, &to);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => return close(&from, &to),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0; 1024];
                    while let Ok(n @ 1..) = conn.read(&mut buf) {
                        if conn.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(p: &Proxy) -> TcpStream {
        let c = TcpStream::connect(("127.0.0.1", p.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(700))).unwrap();
        c
    }

    fn round_trip(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        c.write_all(msg)?;
        let mut buf = vec![0; msg.len()];
        c.read_exact(&mut buf)?;
        Ok(buf)
    }

    fn closed(c: &mut TcpStream) -> bool {
        let mut buf = [0; 8];
        // A closed connection reads 0 bytes (or fails), a live one would time out.
        let _ = c.write_all(b"x");
        matches!(c.read(&mut buf), Ok(0)) || matches!(c.read(&mut buf), Err(e) if e.kind() != ErrorKind::WouldBlock)
    }

    #[test]
    fn the_proxy_forwards_delays_drops_and_partitions() {
        let p = Proxy::start(echo_server()).unwrap();
        let mut c = connect(&p);
        assert_eq!(round_trip(&mut c, b"hello").unwrap(), b"hello");

        p.set_delay(Duration::from_millis(100));
        let t = Instant::now();
        assert_eq!(round_trip(&mut c, b"slow").unwrap(), b"slow");
        assert!(t.elapsed() >= Duration::from_millis(200), "{:?}", t.elapsed());
        p.set_delay(Duration::ZERO);

        p.drop_connections();
        std::thread::sleep(POLL * 3);
        assert!(closed(&mut c));
        let mut c = connect(&p);
        assert_eq!(round_trip(&mut c, b"again").unwrap(), b"again");

        p.partition();
        assert!(round_trip(&mut c, b"lost").is_err(), "a partition lets nothing through");
        let mut during = connect(&p);
        assert!(round_trip(&mut during, b"new").is_err(), "nor a new connection");
        p.heal();
        std::thread::sleep(POLL * 3);
        assert!(closed(&mut c), "healing closes what the partition froze");
        let mut c = connect(&p);
        assert_eq!(round_trip(&mut c, b"healed").unwrap(), b"healed");
        assert_eq!(p.open_connections(), 1);

        // The timed forms end by themselves.
        p.partition_for(Duration::from_millis(300));
        assert!(round_trip(&mut c, b"cut").is_err());
        std::thread::sleep(Duration::from_millis(300));
        let mut c = connect(&p);
        assert_eq!(round_trip(&mut c, b"back").unwrap(), b"back");
        p.delay_for(Duration::from_millis(100), Duration::from_millis(400));
        std::thread::sleep(Duration::from_millis(500));
        let t = Instant::now();
        assert_eq!(round_trip(&mut c, b"fast").unwrap(), b"fast");
        assert!(t.elapsed() < Duration::from_millis(150), "{:?}", t.elapsed());
        drop(c);
        std::thread::sleep(POLL * 3);
        assert_eq!(p.open_connections(), 0);
    }
}

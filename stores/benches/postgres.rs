//! PostgreSQL benchmarks of the Rust stores (issue 3), on a real server through `DATABASE_URL`.
//!
//! * **cycle**: acquire → release cycles per second through `HeartFleet<PgStore>` (a resource
//!   run released back to `ready`, receipts discarded), one connection per client, 1 and 4
//!   clients in threads, each client on a run of its own. Against the floor: the same number
//!   of plain single-row conditional `UPDATE … RETURNING` statements (one for acquire, one for
//!   release), through the same `postgres` driver and connection count, prepared once
//!   (`plain_prepared`, as `pgbench -M prepared` does) and sent as text the way `PgStore` sends
//!   its statements (`plain_text`: `Client::query(&str)`). Two variants of the fleet over
//!   stores defined here, not shipped, show what a change to `PgStore` would give:
//!   `heart_typed` executes the same rendered statement with `Client::query_typed` (one
//!   round trip: parse, bind and execute in one message batch) and `heart_prepared` keeps a
//!   prepared statement per rendered SQL text. Variants are interleaved, in a rotated order,
//!   for `--rounds` rounds of `--secs` seconds each; the median round is reported.
//! * **wire**: the same cycles through a counting TCP proxy: statements executed per cycle
//!   (`LeaseStore::execute` calls), the frontend protocol messages (Parse, Bind, Sync,
//!   Close, …), client→server turns (the real round trips) and bytes per cycle, and the CPU
//!   time per cycle of the server backend and of the client thread (`/proc/…/schedstat`, so
//!   the server must run on this machine). Then the planning time of each statement of a
//!   cycle (`EXPLAIN (SUMMARY ON)`).
//! * **verify**: `verify_fence` calls per second on a lease each client holds, 1 and 4
//!   clients: `HeartFleet<PgStore>` (its statement returns only whether the write hit), the
//!   same fleet over a store that asks every write for the row after it (`heart_rows`, the
//!   statement verify sent before it asked only for the hit), and the floor, one prepared
//!   plain `UPDATE … SET updated_at … RETURNING id` with the same condition. Same rounds and
//!   rotation as the cycle.
//! * **sweep**: `reclaim_expired(100)` on a table of `--rows` runs (1,000,000) with 10,000
//!   expired leases (1 %), against a table of 10,000 runs that are all expired: the scan
//!   statement alone (its median over repeated executions), one batch of 100, and batches
//!   until nothing expired is left; plus `EXPLAIN (ANALYZE, BUFFERS)` of the scan statement
//!   the sweep renders, before and after the sweep, and after the sweep and a `VACUUM` (the
//!   idle sweep of a healthy fleet). The tables are loaded with `INSERT … SELECT
//!   generate_series`, then `VACUUM ANALYZE`; between rounds the expired rows are expired
//!   again (one `UPDATE`, then `VACUUM ANALYZE`).
//!
//! Every section works in schemas of its own (`bench_pg_<pid>_…`, selected with the URL's
//! `options=-csearch_path=…`), dropped at the end.
//!
//! Run (everything, full sizes):
//!
//! ```text
//! DATABASE_URL=postgres://heart:heart@127.0.0.1:5432/heart_test \
//!   cargo bench -p heart-fleet-stores --bench postgres -- [cycle] [wire] [verify] [sweep] [--secs=3] [--rounds=3] \
//!   [--rows=1000000] [--sync-off]
//! ```
//!
//! `--sync-off` runs the cycles and the sweep's writes with `synchronous_commit = off` (set
//! per connection), so a commit does not wait for the WAL flush: on a machine whose disk
//! flushes are slow, durable commits dominate both the fleet and the floor and hide what the
//! statements themselves cost.
//!
//! Without `--bench` on the command line (as under `cargo test --all-targets`, which runs a
//! `harness = false` bench once as a test) it runs every section with tiny sizes, in a few
//! seconds, and checks the invariants (two statements per cycle, every expired lease
//! reclaimed); without `DATABASE_URL` it prints a SKIPPED line and succeeds.

use std::collections::HashMap;
use std::error::Error;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::sql::{self, Dialect, SqlParam, SqlValue, Statement};
use heart_fleet_core::{HeartFleet, HeartReceipt, LeaseStore, StoreAnswer, StoreError, StoreRequest};
use heart_fleet_stores::pg::sql_rows;
use heart_fleet_stores::receipts::ReceiptTableSink;
use heart_fleet_stores::{AnyStore, PgStore, connect, migrate};
use postgres::types::{ToSql, Type};

type BoxError = Box<dyn Error + Send + Sync>;
type Res<T> = Result<T, BoxError>;

fn fail<T>(message: impl Into<String>) -> Res<T> {
    Err(message.into().into())
}

// ------------------------------------------------------------------------------------------
// Options
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Opts {
    url: String,
    full: bool,
    cycle: bool,
    verify: bool,
    wire: bool,
    sweep: bool,
    secs: f64,
    rounds: usize,
    rows: i64,
    expired: i64,
    wire_cycles: u64,
    scan_reps: usize,
    /// Cycles with `synchronous_commit = off` (no WAL flush wait at commit).
    sync_off: bool,
}

fn opts(url: String) -> Res<Opts> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let full = args.iter().any(|a| a == "--bench");
    let mut o = Opts {
        url,
        full,
        cycle: false,
        verify: false,
        wire: false,
        sweep: false,
        secs: if full { 3.0 } else { 0.1 },
        rounds: if full { 3 } else { 1 },
        rows: if full { 1_000_000 } else { 1_000 },
        expired: if full { 10_000 } else { 100 },
        wire_cycles: if full { 1_000 } else { 10 },
        scan_reps: if full { 200 } else { 5 },
        sync_off: false,
    };
    for a in &args {
        match a.as_str() {
            "--bench" => {}
            "cycle" => o.cycle = true,
            "verify" => o.verify = true,
            "wire" => o.wire = true,
            "sweep" => o.sweep = true,
            "--sync-off" => o.sync_off = true,
            _ => {
                if let Some(v) = a.strip_prefix("--secs=") {
                    o.secs = v.parse()?;
                } else if let Some(v) = a.strip_prefix("--rounds=") {
                    o.rounds = v.parse()?;
                } else if let Some(v) = a.strip_prefix("--rows=") {
                    o.rows = v.parse()?;
                } else if a.starts_with('-') {
                    // libtest-style flags (`--nocapture`, `--quiet`, …): not ours, ignored.
                } else {
                    return fail(format!(
                        "unknown argument {a:?}: use cycle, wire, verify, sweep, --secs=, --rounds=, --rows=, --sync-off"
                    ));
                }
            }
        }
    }
    if !(o.cycle || o.wire || o.verify || o.sweep) {
        (o.cycle, o.wire, o.verify, o.sweep) = (true, true, true, true);
    }
    if o.rows < o.expired || o.rows % o.expired != 0 {
        return fail(format!("--rows must be a multiple of {} (the expired count)", o.expired));
    }
    Ok(o)
}

fn main() -> Res<()> {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            println!("SKIPPED: heart-fleet-stores PostgreSQL benchmarks (set DATABASE_URL to run them)");
            return Ok(());
        }
    };
    let o = opts(url)?;
    println!("mode: {}; load average at start: {}", if o.full { "bench" } else { "test (tiny sizes)" }, loadavg());
    if o.cycle || o.wire || o.verify {
        let mut schema = Schema::new(&o.url, "cycle")?;
        if o.sync_off {
            // The schema's URL ends in its `options`: add one more.
            schema.url.push_str("%20-csynchronous_commit%3Doff");
            println!("cycles and wire with synchronous_commit = off");
        }
        if o.wire {
            wire_section(&o, &schema)?;
        }
        if o.cycle {
            cycle_section(&o, &schema)?;
        }
        if o.verify {
            verify_section(&o, &schema)?;
        }
    }
    if o.sweep {
        sweep_section(&o)?;
    }
    println!("load average at end: {}", loadavg());
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

// ------------------------------------------------------------------------------------------
// Schemas
// ------------------------------------------------------------------------------------------

/// A migrated schema of its own, dropped on drop; `url` selects it.
struct Schema {
    admin: postgres::Client,
    name: String,
    url: String,
}

impl Schema {
    fn new(base: &str, tag: &str) -> Res<Schema> {
        let name = format!("bench_pg_{}_{tag}", std::process::id());
        let mut admin = postgres::Client::connect(base, postgres::NoTls)?;
        admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"))?;
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{name}");
        let schema = Schema { admin, name, url };
        let mut store = connect(&schema.url)?;
        migrate(&mut store)?;
        Ok(schema)
    }

    fn store(&self) -> Res<PgStore> {
        Ok(PgStore::connect(&self.url)?)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Err(e) = self.admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name)) {
            eprintln!("could not drop schema {}: {e}", self.name);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Stores
// ------------------------------------------------------------------------------------------

/// Counts the requests a fleet executes (one statement each on PostgreSQL) and keeps the
/// last scan, so the benchmark can render exactly what the sweep issued.
struct Counted<S> {
    inner: S,
    statements: u64,
    last_scan: Option<StoreRequest>,
    /// Every request, while `Some` (to explain what a cycle issued).
    kept: Option<Vec<StoreRequest>>,
}

impl<S> Counted<S> {
    fn new(inner: S) -> Counted<S> {
        Counted { inner, statements: 0, last_scan: None, kept: None }
    }
}

impl<S: LeaseStore> LeaseStore for Counted<S> {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        self.statements += 1;
        if matches!(req, StoreRequest::ScanRuns { .. }) {
            self.last_scan = Some(req.clone());
        }
        if let Some(kept) = &mut self.kept {
            kept.push(req.clone());
        }
        self.inner.execute(req)
    }

    fn settle(&mut self) -> Result<(), StoreError> {
        self.inner.settle()
    }

    fn abandon(&mut self) {
        self.inner.abandon();
    }
}

/// Not shipped: `PgStore` with `Client::query_typed` (Parse, Bind, Describe, Execute, Sync in
/// one batch: one round trip) instead of `Client::query(&str)` (prepare, then execute).
struct TypedPg(postgres::Client);

/// Not shipped: `PgStore` with a prepared statement kept per rendered SQL text.
struct PreparedPg {
    client: postgres::Client,
    cache: HashMap<String, postgres::Statement>,
}

/// The one PostgreSQL statement of a request.
fn render_one(req: &StoreRequest) -> Result<Statement, StoreError> {
    let mut stmts = sql::render(req, Dialect::Postgres).map_err(|e| StoreError(format!("render: {e}")))?;
    match (stmts.pop(), stmts.is_empty()) {
        (Some(stmt), true) => Ok(stmt),
        _ => Err(StoreError("render: not one statement".into())),
    }
}

/// A statement's parameters, with the types `query_typed` needs.
type Params = Vec<(Box<dyn ToSql + Sync>, Type)>;

fn boxed_params(stmt: &Statement) -> Result<Params, StoreError> {
    stmt.params
        .iter()
        .map(|p| match p {
            SqlParam::Int(n) => Ok((Box::new(*n) as Box<dyn ToSql + Sync>, Type::INT8)),
            SqlParam::Text(t) => Ok((Box::new(t.clone()) as Box<dyn ToSql + Sync>, Type::TEXT)),
            SqlParam::Now => Err(StoreError("SqlParam::Now in a PostgreSQL statement".into())),
        })
        .collect()
}

fn decode(req: &StoreRequest, rows: &[postgres::Row]) -> Result<StoreAnswer, StoreError> {
    sql::decode(req, Dialect::Postgres, vec![sql_rows(rows)?]).map_err(|e| StoreError(format!("decode: {e}")))
}

impl LeaseStore for TypedPg {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let stmt = render_one(&req)?;
        let params = boxed_params(&stmt)?;
        let typed: Vec<(&(dyn ToSql + Sync), Type)> = params.iter().map(|(b, t)| (b.as_ref(), t.clone())).collect();
        let rows = self.0.query_typed(&stmt.sql, &typed).map_err(|e| StoreError(format!("postgres: {e}")))?;
        decode(&req, &rows)
    }
}

impl LeaseStore for PreparedPg {
    fn execute(&mut self, req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        let stmt = render_one(&req)?;
        let params = boxed_params(&stmt)?;
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(b, _)| b.as_ref()).collect();
        let prepared = match self.cache.get(&stmt.sql) {
            Some(p) => p.clone(),
            None => {
                let p = self.client.prepare(&stmt.sql).map_err(|e| StoreError(format!("postgres prepare: {e}")))?;
                self.cache.insert(stmt.sql.clone(), p.clone());
                p
            }
        };
        let rows = self.client.query(&prepared, &refs).map_err(|e| StoreError(format!("postgres: {e}")))?;
        decode(&req, &rows)
    }
}

// ------------------------------------------------------------------------------------------
// Cycles
// ------------------------------------------------------------------------------------------

#[path = "shared/plain_floor.rs"]
mod plain_floor;
use plain_floor::{PLAIN_ACQUIRE, PLAIN_RELEASE};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Variant {
    /// `HeartFleet<PgStore>`, as shipped.
    Heart,
    /// `HeartFleet` over [`TypedPg`] (not shipped).
    HeartTyped,
    /// `HeartFleet` over [`PreparedPg`] (not shipped).
    HeartPrepared,
    /// Plain UPDATEs, prepared once.
    PlainPrepared,
    /// Plain UPDATEs sent as text with `Client::query(&str)`, as `PgStore` sends its statements.
    PlainText,
    /// `HeartFleet<PgStore>` with its receipts going to `heart_receipts` through a
    /// `ReceiptTableSink` on a clone of the store: each receipt in its write's transaction
    /// (as the CLI and the Rust workers run).
    ReceiptsHeld,
    /// The same, the sink on a connection of its own: each receipt inserted after its write,
    /// in a statement of its own (what the Rust sink did before receipts were held, and what
    /// the Node and Python sinks do).
    ReceiptsAfter,
}

const VARIANTS: [Variant; 7] = [
    Variant::Heart,
    Variant::HeartTyped,
    Variant::HeartPrepared,
    Variant::PlainPrepared,
    Variant::PlainText,
    Variant::ReceiptsHeld,
    Variant::ReceiptsAfter,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Heart => "heart (HeartFleet<PgStore>)",
            Variant::HeartTyped => "heart_typed (not shipped)",
            Variant::HeartPrepared => "heart_prepared (not shipped)",
            Variant::PlainPrepared => "plain_prepared",
            Variant::PlainText => "plain_text",
            Variant::ReceiptsHeld => "heart + receipts table, in the write's transaction",
            Variant::ReceiptsAfter => "heart + receipts table, after the write",
        }
    }
}

/// One client's cycle, with whatever it holds.
trait Cycler {
    fn cycle(&mut self) -> Res<()>;
    /// Statements executed so far (fleet requests or plain UPDATEs).
    fn statements(&self) -> u64;
}

struct FleetCycler<S: LeaseStore> {
    fleet: HeartFleet<Counted<S>>,
    run_id: String,
    owner: String,
}

impl<S: LeaseStore> Cycler for FleetCycler<S> {
    fn cycle(&mut self) -> Res<()> {
        let acq = self.fleet.acquire(&self.run_id, &self.owner, 60)?;
        let Some(fence) = acq.fence.filter(|_| acq.acquired) else {
            return fail(format!("acquire missed: {:?} {:?}", acq.code, acq.reason));
        };
        match self.fleet.release(&fence, ReleaseTo::Ready)? {
            Fenced::Ok { .. } => Ok(()),
            Fenced::Rejected { cause } => fail(format!("release rejected: {cause:?}")),
        }
    }
    fn statements(&self) -> u64 {
        self.fleet.store().statements
    }
}

/// `HeartFleet<PgStore>` itself, no counting wrapper (for the timed runs).
struct PureFleetCycler {
    fleet: HeartFleet<PgStore>,
    run_id: String,
    owner: String,
}

impl Cycler for PureFleetCycler {
    fn cycle(&mut self) -> Res<()> {
        let acq = self.fleet.acquire(&self.run_id, &self.owner, 60)?;
        let Some(fence) = acq.fence.filter(|_| acq.acquired) else {
            return fail(format!("acquire missed: {:?} {:?}", acq.code, acq.reason));
        };
        match self.fleet.release(&fence, ReleaseTo::Ready)? {
            Fenced::Ok { .. } => Ok(()),
            Fenced::Rejected { cause } => fail(format!("release rejected: {cause:?}")),
        }
    }
    fn statements(&self) -> u64 {
        0
    }
}

struct PlainCycler {
    client: postgres::Client,
    prepared: Option<(postgres::Statement, postgres::Statement)>,
    run_id: String,
    owner: String,
    statements: u64,
}

impl Cycler for PlainCycler {
    fn cycle(&mut self) -> Res<()> {
        let (id, owner) = (&self.run_id, &self.owner);
        let rows = match &self.prepared {
            Some((acq, _)) => self.client.query(acq, &[id, owner])?,
            None => self.client.query(PLAIN_ACQUIRE, &[id, owner])?,
        };
        let [row] = rows.as_slice() else { return fail("plain acquire missed") };
        let expiry: String = row.try_get(0)?;
        let rows = match &self.prepared {
            Some((_, rel)) => self.client.query(rel, &[id, owner, &expiry])?,
            None => self.client.query(PLAIN_RELEASE, &[id, owner, &expiry])?,
        };
        self.statements += 2;
        if rows.len() != 1 {
            return fail("plain release missed");
        }
        Ok(())
    }
    fn statements(&self) -> u64 {
        self.statements
    }
}

fn discard(_: &HeartReceipt) {}

fn counted_fleet<S: LeaseStore>(store: S) -> HeartFleet<Counted<S>> {
    HeartFleet::new(Counted::new(store)).with_sink(Box::new(discard))
}

/// A client of `variant` on `config`'s database, cycling `run_id`. `counted`: wrap the shipped
/// fleet's store in [`Counted`] (for the wire counts); the timed runs use `HeartFleet<PgStore>`.
fn cycler(variant: Variant, config: &postgres::Config, run_id: &str, counted: bool) -> Res<Box<dyn Cycler>> {
    let (run_id, owner) = (run_id.to_owned(), format!("bench-{}", run_id));
    let client = || config.connect(postgres::NoTls);
    Ok(match variant {
        Variant::Heart => {
            // The shipped store connects from a URL (so that it can reconnect).
            let store = PgStore::connect(&url_of(config))?;
            if counted {
                Box::new(FleetCycler { fleet: counted_fleet(store), run_id, owner })
            } else {
                Box::new(PureFleetCycler { fleet: HeartFleet::new(store).with_sink(Box::new(discard)), run_id, owner })
            }
        }
        Variant::HeartTyped => Box::new(FleetCycler { fleet: counted_fleet(TypedPg(client()?)), run_id, owner }),
        Variant::HeartPrepared => Box::new(FleetCycler {
            fleet: counted_fleet(PreparedPg { client: client()?, cache: HashMap::new() }),
            run_id,
            owner,
        }),
        Variant::PlainPrepared => {
            let mut client = client()?;
            let acq = client.prepare(PLAIN_ACQUIRE)?;
            let rel = client.prepare(PLAIN_RELEASE)?;
            Box::new(PlainCycler { client, prepared: Some((acq, rel)), run_id, owner, statements: 0 })
        }
        Variant::PlainText => Box::new(PlainCycler { client: client()?, prepared: None, run_id, owner, statements: 0 }),
        Variant::ReceiptsHeld | Variant::ReceiptsAfter => {
            let store = PgStore::connect(&url_of(config))?;
            let sink_store = match variant {
                Variant::ReceiptsHeld => store.clone(),
                _ => PgStore::connect(&url_of(config))?,
            };
            let (sink, _) = ReceiptTableSink::new(&AnyStore::Postgres(sink_store));
            Box::new(PureFleetCycler { fleet: HeartFleet::new(store).with_sink(Box::new(sink)), run_id, owner })
        }
    })
}

/// One resource run per client, created through the fleet.
fn client_runs(schema: &Schema, clients: usize) -> Res<Vec<String>> {
    let mut fleet = HeartFleet::new(schema.store()?).with_sink(Box::new(discard));
    (0..clients)
        .map(|i| Ok(fleet.ensure_resource_run("bench", &format!("client-{i}"), "bench cycle", "bench")?.0.id))
        .collect()
}

/// `clients` threads, each with its own connection, cycling until `secs` have passed after
/// they all connected: total cycles per second.
fn timed(variant: Variant, config: &postgres::Config, runs: &[String], secs: f64) -> Res<f64> {
    timed_with(&|run| cycler(variant, config, run, false), runs, secs)
}

/// [`timed`] with the clients `make` makes, one per run.
fn timed_with(make: &(dyn Fn(&str) -> Res<Box<dyn Cycler>> + Sync), runs: &[String], secs: f64) -> Res<f64> {
    let barrier = Barrier::new(runs.len());
    let results: Vec<Res<(u64, Duration)>> = thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|run| {
                let barrier = &barrier;
                s.spawn(move || -> Res<(u64, Duration)> {
                    let made = make(run);
                    // Wait for the others even when connecting failed, so nobody hangs.
                    barrier.wait();
                    let mut c = made?;
                    c.cycle()?; // warm: the first statement of a connection pays for catalog lookups
                    let start = Instant::now();
                    let deadline = start + Duration::from_secs_f64(secs);
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        c.cycle()?;
                        n += 1;
                    }
                    Ok((n, start.elapsed()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| fail("a client thread panicked"))).collect()
    });
    let mut total = 0u64;
    let mut longest = Duration::ZERO;
    for r in results {
        let (n, d) = r?;
        total += n;
        longest = longest.max(d);
    }
    Ok(total as f64 / longest.as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn cycle_section(o: &Opts, schema: &Schema) -> Res<()> {
    let config = postgres::Config::from_str(&schema.url)?;
    println!(
        "\n## cycle: acquire -> release cycles/s, {} round(s) of {} s per variant and client count",
        o.rounds, o.secs
    );
    // Test mode: the shipped fleet and the floor only (the wire section ran every variant);
    // each connection costs ~0.1 s there (SCRAM in an unoptimized build).
    let variants: &[Variant] =
        if o.full { &VARIANTS } else { &[Variant::Heart, Variant::PlainPrepared, Variant::ReceiptsHeld] };
    for clients in [1usize, 4] {
        let runs = client_runs(schema, clients)?;
        let mut per: HashMap<Variant, Vec<f64>> = HashMap::new();
        for round in 0..o.rounds {
            // Rotate the order each round, so no variant always runs first or last.
            for k in 0..variants.len() {
                let v = variants[(k + round) % variants.len()];
                let rate = timed(v, &config, &runs, o.secs)?;
                per.entry(v).or_default().push(rate);
            }
        }
        println!("\n{clients} client(s), load average now {}:", loadavg());
        println!(
            "| variant | cycles/s, median of rounds | min–max | ratio to plain_prepared in the same round: median (min–max) |"
        );
        println!("|---|---|---|---|");
        let floor = per.get(&Variant::PlainPrepared).cloned().unwrap_or_default();
        let spread = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        };
        for &v in variants {
            let rates = per.get(&v).cloned().unwrap_or_default();
            let ratios: Vec<f64> = rates.iter().zip(&floor).map(|(r, f)| r / f).collect();
            let ((lo, hi), (rlo, rhi)) = (spread(&rates), spread(&ratios));
            println!(
                "| {} | {:.0} | {lo:.0}–{hi:.0} | {:.2}x ({rlo:.2}–{rhi:.2}) |",
                v.name(),
                median(rates),
                median(ratios.clone())
            );
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Verify
// ------------------------------------------------------------------------------------------

/// The floor of a verification: one conditional single-row `UPDATE` with verify's condition
/// that returns only the id.
const PLAIN_VERIFY: &str = "UPDATE agent_runs SET updated_at = clock_timestamp() \
     WHERE id = $1::text::uuid AND status IN ('leased', 'running') AND lease_owner = $2::text \
     AND lease_expires_at = $3::text::timestamptz AND lease_expires_at > clock_timestamp() \
     AND fencing_epoch = $4::int8 RETURNING id::text";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum VerifyVariant {
    /// `HeartFleet<PgStore>`, as shipped: the statement returns only whether it hit.
    Heart,
    /// `HeartFleet` over [`WantRows`]`<PgStore>`: the statement returns the row after the
    /// write, as verify's did before it asked only for the hit.
    HeartRows,
    /// [`PLAIN_VERIFY`], prepared once.
    PlainPrepared,
}

impl VerifyVariant {
    const ALL: [VerifyVariant; 3] = [VerifyVariant::Heart, VerifyVariant::HeartRows, VerifyVariant::PlainPrepared];

    fn name(self) -> &'static str {
        match self {
            VerifyVariant::Heart => "heart (HeartFleet<PgStore>, the hit only)",
            VerifyVariant::HeartRows => "heart_rows (the row after the write, as before)",
            VerifyVariant::PlainPrepared => "plain_prepared",
        }
    }
}

/// Not shipped: a store that asks every conditional write for the row after it.
struct WantRows<S>(S);

impl<S: LeaseStore> LeaseStore for WantRows<S> {
    fn execute(&mut self, mut req: StoreRequest) -> Result<StoreAnswer, StoreError> {
        if let StoreRequest::UpdateRun { want_after, .. } = &mut req {
            *want_after = true;
        }
        self.0.execute(req)
    }
}

/// A client verifying the lease it took on its run (an hour long: it outlives the bench),
/// which it gives back when dropped, so the next variant can take it.
struct FleetVerifier<S: LeaseStore> {
    fleet: HeartFleet<S>,
    fence: heart_fleet_core::FencingToken,
}

impl<S: LeaseStore> FleetVerifier<S> {
    fn new(store: S, run_id: &str) -> Res<FleetVerifier<S>> {
        let mut fleet = HeartFleet::new(store).with_sink(Box::new(discard));
        let acq = fleet.acquire(run_id, &format!("verify-{run_id}"), 3600)?;
        match acq.fence.filter(|_| acq.acquired) {
            Some(fence) => Ok(FleetVerifier { fleet, fence }),
            None => fail(format!("verify: acquire missed: {:?}", acq.reason)),
        }
    }
}

impl<S: LeaseStore> Drop for FleetVerifier<S> {
    fn drop(&mut self) {
        match self.fleet.release(&self.fence, ReleaseTo::Ready) {
            Ok(Fenced::Ok { .. }) => {}
            Ok(Fenced::Rejected { cause }) => eprintln!("verify: release rejected: {cause:?}"),
            Err(e) => eprintln!("verify: could not release: {e}"),
        }
    }
}

impl<S: LeaseStore> Cycler for FleetVerifier<S> {
    fn cycle(&mut self) -> Res<()> {
        if self.fleet.verify_fence(&self.fence)? { Ok(()) } else { fail("verify: the lease was not live") }
    }
    fn statements(&self) -> u64 {
        0
    }
}

/// The floor's client: the lease taken (and given back) by `holder`, verified by
/// [`PLAIN_VERIFY`].
struct PlainVerifier {
    client: postgres::Client,
    prepared: postgres::Statement,
    holder: FleetVerifier<PgStore>,
}

impl Cycler for PlainVerifier {
    fn cycle(&mut self) -> Res<()> {
        let f = &self.holder.fence;
        let expiry = f.lease_expires_at.to_iso();
        let epoch = f.epoch.unwrap_or(0);
        let rows = self.client.query(&self.prepared, &[&f.run_id, &f.owner, &expiry, &epoch])?;
        if rows.len() == 1 { Ok(()) } else { fail("plain verify missed") }
    }
    fn statements(&self) -> u64 {
        0
    }
}

/// A verifying client of `variant`: takes the lease, verifies, releases it when dropped.
fn verifier(variant: VerifyVariant, config: &postgres::Config, run_id: &str) -> Res<Box<dyn Cycler>> {
    let store = PgStore::connect(&url_of(config))?;
    Ok(match variant {
        VerifyVariant::Heart => Box::new(FleetVerifier::new(store, run_id)?),
        VerifyVariant::HeartRows => Box::new(FleetVerifier::new(WantRows(store), run_id)?),
        VerifyVariant::PlainPrepared => {
            let holder = FleetVerifier::new(store, run_id)?;
            let mut client = config.connect(postgres::NoTls)?;
            let prepared = client.prepare(PLAIN_VERIFY)?;
            Box::new(PlainVerifier { client, prepared, holder })
        }
    })
}

fn verify_section(o: &Opts, schema: &Schema) -> Res<()> {
    let config = postgres::Config::from_str(&schema.url)?;
    println!(
        "\n## verify: verify_fence calls/s on a held lease, {} round(s) of {} s per variant and client count",
        o.rounds, o.secs
    );
    for clients in [1usize, 4] {
        let runs = client_runs(schema, clients)?;
        let mut per: HashMap<VerifyVariant, Vec<f64>> = HashMap::new();
        for round in 0..o.rounds {
            for k in 0..VerifyVariant::ALL.len() {
                let v = VerifyVariant::ALL[(k + round) % VerifyVariant::ALL.len()];
                let rate = timed_with(&|run| verifier(v, &config, run), &runs, o.secs)?;
                per.entry(v).or_default().push(rate);
            }
        }
        println!("\n{clients} client(s), load average now {}:", loadavg());
        println!("| variant | verifications/s, median of rounds | ratio to plain_prepared in the same round: median |");
        println!("|---|---|---|");
        let floor = per.get(&VerifyVariant::PlainPrepared).cloned().unwrap_or_default();
        for v in VerifyVariant::ALL {
            let rates = per.get(&v).cloned().unwrap_or_default();
            let ratios: Vec<f64> = rates.iter().zip(&floor).map(|(r, f)| r / f).collect();
            println!("| {} | {:.0} | {:.2}x |", v.name(), median(rates), median(ratios));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Wire: a counting proxy
// ------------------------------------------------------------------------------------------

/// Frontend protocol messages seen by the proxy.
#[derive(Default)]
struct Wire {
    parse: AtomicU64,
    bind: AtomicU64,
    describe: AtomicU64,
    execute: AtomicU64,
    sync: AtomicU64,
    close: AtomicU64,
    simple: AtomicU64,
    /// Bytes the client sent.
    bytes: AtomicU64,
    /// Client→server sends that follow data from the server: the round trips.
    turns: AtomicU64,
    server_spoke: AtomicBool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct WireCounts {
    parse: u64,
    bind: u64,
    describe: u64,
    execute: u64,
    sync: u64,
    close: u64,
    simple: u64,
    bytes: u64,
    turns: u64,
}

impl Wire {
    fn snapshot(&self) -> WireCounts {
        let g = |a: &AtomicU64| a.load(Ordering::SeqCst);
        WireCounts {
            parse: g(&self.parse),
            bind: g(&self.bind),
            describe: g(&self.describe),
            execute: g(&self.execute),
            sync: g(&self.sync),
            close: g(&self.close),
            simple: g(&self.simple),
            bytes: g(&self.bytes),
            turns: g(&self.turns),
        }
    }

    fn count(&self, kind: u8) {
        let counter = match kind {
            b'P' => &self.parse,
            b'B' => &self.bind,
            b'D' => &self.describe,
            b'E' => &self.execute,
            b'S' => &self.sync,
            b'C' => &self.close,
            b'Q' => &self.simple,
            _ => return,
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Splits the client's byte stream into protocol messages: untyped (length-prefixed) until
/// the startup message, typed (`kind`, length) after it.
struct Frames {
    buf: Vec<u8>,
    started: bool,
}

impl Frames {
    fn feed(&mut self, data: &[u8], wire: &Wire) {
        self.buf.extend_from_slice(data);
        loop {
            let header = if self.started { 5 } else { 8 };
            if self.buf.len() < header {
                return;
            }
            let at = usize::from(self.started);
            let len = u32::from_be_bytes([self.buf[at], self.buf[at + 1], self.buf[at + 2], self.buf[at + 3]]);
            let total = at + len as usize;
            if self.buf.len() < total {
                return;
            }
            if self.started {
                wire.count(self.buf[0]);
            } else {
                let code = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
                // SSLRequest and GSSENCRequest come before the startup message.
                self.started = code != 80_877_103 && code != 80_877_104;
            }
            self.buf.drain(..total);
        }
    }
}

/// A proxy for one connection to `upstream`, counting what the client sends.
fn proxy(upstream: SocketAddr) -> Res<(SocketAddr, Arc<Wire>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let wire = Arc::new(Wire::default());
    let counted = Arc::clone(&wire);
    thread::spawn(move || {
        if let Ok((client, _)) = listener.accept()
            && let Err(e) = pump(client, upstream, &counted)
        {
            eprintln!("proxy: {e}");
        }
    });
    Ok((addr, wire))
}

fn pump(client: TcpStream, upstream: SocketAddr, wire: &Arc<Wire>) -> Res<()> {
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut from_client, mut to_client) = (client.try_clone()?, client);
    let (mut from_server, mut to_server) = (server.try_clone()?, server);
    let down = Arc::clone(wire);
    thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n @ 1..) = from_server.read(&mut buf) {
            down.server_spoke.store(true, Ordering::SeqCst);
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
    });
    let mut frames = Frames { buf: Vec::new(), started: false };
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n @ 1..) = from_client.read(&mut buf) {
        if wire.server_spoke.swap(false, Ordering::SeqCst) {
            wire.turns.fetch_add(1, Ordering::SeqCst);
        }
        wire.bytes.fetch_add(n as u64, Ordering::SeqCst);
        frames.feed(&buf[..n], wire);
        to_server.write_all(&buf[..n])?;
    }
    let _ = to_server.shutdown(Shutdown::Both);
    Ok(())
}

/// `config` pointed at `addr` instead of its own host.
/// `config` as a URL, for [`PgStore::connect`] (TCP hosts; user, password, database, options,
/// application name).
fn url_of(config: &postgres::Config) -> String {
    fn enc(s: &str) -> String {
        s.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().map(enc).unwrap_or_default();
    let password = config.get_password().map(|p| format!(":{}", enc(&String::from_utf8_lossy(p)))).unwrap_or_default();
    let at = if user.is_empty() { String::new() } else { format!("{user}{password}@") };
    let db = config.get_dbname().map(enc).unwrap_or_default();
    let mut query = Vec::new();
    if let Some(options) = config.get_options() {
        query.push(format!("options={}", enc(options)));
    }
    if let Some(app) = config.get_application_name() {
        query.push(format!("application_name={}", enc(app)));
    }
    let q = if query.is_empty() { String::new() } else { format!("?{}", query.join("&")) };
    format!("postgres://{at}{host}:{port}/{db}{q}")
}

fn via(config: &postgres::Config, addr: SocketAddr, application: &str) -> postgres::Config {
    let mut c = postgres::Config::new();
    c.host(&addr.ip().to_string()).port(addr.port()).application_name(application);
    if let Some(user) = config.get_user() {
        c.user(user);
    }
    if let Some(password) = config.get_password() {
        c.password(password);
    }
    if let Some(db) = config.get_dbname() {
        c.dbname(db);
    }
    if let Some(options) = config.get_options() {
        c.options(options);
    }
    c
}

fn upstream(config: &postgres::Config) -> Res<SocketAddr> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        _ => return fail("the wire section needs a TCP host in DATABASE_URL"),
    };
    match (host.as_str(), port).to_socket_addrs()?.next() {
        Some(a) => Ok(a),
        None => fail(format!("cannot resolve {host}")),
    }
}

fn wire_section(o: &Opts, schema: &Schema) -> Res<()> {
    let config = postgres::Config::from_str(&schema.url)?;
    let target = upstream(&config)?;
    let runs = client_runs(schema, 1)?;
    let n = o.wire_cycles;
    println!("\n## wire: per acquire -> release cycle, {n} cycles through a counting proxy (1 connection)");
    println!(
        "| variant | statements | Parse | Bind | Describe | Execute | Sync | Close | round trips (turns) | bytes sent \
         | server CPU | client CPU |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut admin = postgres::Client::connect(&schema.url, postgres::NoTls)?;
    // The receipts variants are timed only: their sinks' statements are not counted here.
    let fleet_only = VARIANTS.into_iter().filter(|v| !matches!(v, Variant::ReceiptsHeld | Variant::ReceiptsAfter));
    for (i, v) in fleet_only.enumerate() {
        let (addr, wire) = proxy(target)?;
        let application = format!("bench-wire-{}-{i}", std::process::id());
        let mut c = cycler(v, &via(&config, addr, &application), &runs[0], true)?;
        c.cycle()?; // warm, as in the timed runs
        let backend: i32 = admin
            .query_one("SELECT pid FROM pg_stat_activity WHERE application_name = $1", &[&application])?
            .try_get(0)?;
        let backend_cpu = || cpu_ns(&format!("/proc/{backend}/schedstat"));
        let (s0, w0, b0, c0) =
            (c.statements(), wire.snapshot(), backend_cpu()?, cpu_ns("/proc/thread-self/schedstat")?);
        for _ in 0..n {
            c.cycle()?;
        }
        let (s1, w1, b1, c1) =
            (c.statements(), wire.snapshot(), backend_cpu()?, cpu_ns("/proc/thread-self/schedstat")?);
        drop(c);
        let per = |a: u64, b: u64| (b - a) as f64 / n as f64;
        let statements = per(s0, s1);
        println!(
            "| {} | {statements:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} µs | {:.0} µs |",
            v.name(),
            per(w0.parse, w1.parse),
            per(w0.bind, w1.bind),
            per(w0.describe, w1.describe),
            per(w0.execute, w1.execute),
            per(w0.sync, w1.sync),
            per(w0.close, w1.close),
            per(w0.turns, w1.turns),
            per(w0.bytes, w1.bytes),
            per(b0, b1) / 1000.0,
            per(c0, c1) / 1000.0,
        );
        if s1 - s0 != 2 * n {
            return fail(format!("{}: {statements} statements per cycle, not 2", v.name()));
        }
    }
    plan_costs(o, schema, &runs[0])
}

/// Time on CPU (ns) of a process or thread: the first field of its `schedstat`.
fn cpu_ns(path: &str) -> Res<u64> {
    let text = std::fs::read_to_string(path)?;
    match text.split_whitespace().next().map(str::parse::<u64>) {
        Some(Ok(ns)) => Ok(ns),
        _ => fail(format!("cannot read {path}")),
    }
}

/// Median `Planning Time` of `EXPLAIN (SUMMARY ON)` of `stmt`, with its parameters.
fn planning_ms(client: &mut postgres::Client, stmt: &Statement, reps: usize) -> Res<f64> {
    let params = boxed_params(stmt)?;
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(b, _)| b.as_ref()).collect();
    let sql = format!("EXPLAIN (SUMMARY ON) {}", stmt.sql);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let rows = client.query(sql.as_str(), &refs)?;
        let line = rows.iter().filter_map(|r| r.try_get::<_, String>(0).ok()).find(|l| l.starts_with("Planning Time:"));
        let Some(ms) = line.and_then(|l| l.split_whitespace().nth(2).and_then(|v| v.parse::<f64>().ok())) else {
            return fail("no Planning Time in EXPLAIN (SUMMARY ON)");
        };
        times.push(ms);
    }
    Ok(median(times))
}

/// What the server spends planning each statement of a cycle (a statement sent as text is
/// planned on every execution; a prepared one reuses its plan).
fn plan_costs(o: &Opts, schema: &Schema, run_id: &str) -> Res<()> {
    let mut fleet = counted_fleet(schema.store()?);
    fleet.store_mut().kept = Some(Vec::new());
    let owner = "bench-plan";
    let acq = fleet.acquire(run_id, owner, 60)?;
    let Some(fence) = acq.fence.filter(|_| acq.acquired) else { return fail("plan: acquire missed") };
    if !matches!(fleet.release(&fence, ReleaseTo::Ready)?, Fenced::Ok { .. }) {
        return fail("plan: release rejected");
    }
    let kept = fleet.store_mut().kept.take().unwrap_or_default();
    let [acquire, release] = kept.as_slice() else { return fail("plan: a cycle was not two requests") };
    let (acquire, release) = (render_one(acquire)?, render_one(release)?);
    let text = |s: &str| SqlParam::Text(s.to_owned());
    let expiry = fence.lease_expires_at.to_iso();
    let plain_acquire = Statement { sql: PLAIN_ACQUIRE.into(), params: vec![text(run_id), text(owner)] };
    let plain_release = Statement { sql: PLAIN_RELEASE.into(), params: vec![text(run_id), text(owner), text(&expiry)] };
    let mut client = postgres::Client::connect(&schema.url, postgres::NoTls)?;
    let reps = if o.full { 50 } else { 3 };
    println!("\nplanning time per statement (median of {reps} `EXPLAIN (SUMMARY ON)`), and SQL length:");
    println!("| statement | planning | SQL characters |");
    println!("|---|---|---|");
    for (name, stmt) in [
        ("heart acquire (UpdateRun, want_before)", &acquire),
        ("heart release (UpdateRun)", &release),
        ("plain acquire", &plain_acquire),
        ("plain release", &plain_release),
    ] {
        println!("| {name} | {:.3} ms | {} |", planning_ms(&mut client, stmt, reps)?, stmt.sql.len());
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Sweep
// ------------------------------------------------------------------------------------------

/// The columns of an expired lease for row number `g` (SQL) when every `stride`-th row is
/// expired: `(status, lease_owner, lease_expires_at)`, all in the past (2 h to 37 min ago).
fn expired_cols(g: &str, stride: i64) -> (String, String, String) {
    let e = format!("({g} / {stride})");
    (
        format!("CASE WHEN {e} % 2 = 0 THEN 'running' ELSE 'leased' END"),
        format!("'dead-' || ({e} % 64)"),
        format!("date_trunc('milliseconds', now()) - interval '2 hours' + ({e} % 10000) * interval '500 milliseconds'"),
    )
}

/// Loads `rows` runs: every `stride`-th one an expired lease (`task_id = 'bench-expired'`);
/// when `stride > 1`, of the others per stride: one live lease (expiring in 1–2 h), three
/// `ready`, the rest `completed`. Then `VACUUM ANALYZE`.
fn load(client: &mut postgres::Client, rows: i64, stride: i64) -> Res<Duration> {
    let start = Instant::now();
    let (status, owner, expiry) = expired_cols("g", stride);
    let live = format!("{stride} > 1 AND g % {stride} = 1");
    client.batch_execute(&format!(
        "INSERT INTO agent_runs (assignment_id, task_id, objective, status, lease_owner, lease_expires_at, \
         idempotency_key, created_by, created_at, updated_at) \
         SELECT gen_random_uuid(), \
           CASE WHEN g % {stride} = 0 THEN 'bench-expired' END, \
           'bench sweep', \
           CASE WHEN g % {stride} = 0 THEN {status} WHEN {live} THEN 'leased' \
                WHEN g % {stride} BETWEEN 2 AND 4 THEN 'ready' ELSE 'completed' END, \
           CASE WHEN g % {stride} = 0 THEN {owner} WHEN {live} THEN 'live-' || (g % 64) END, \
           CASE WHEN g % {stride} = 0 THEN {expiry} \
                WHEN {live} THEN date_trunc('milliseconds', now()) + interval '1 hour' + (g % 3600) * interval '1 second' END, \
           'bench:' || g, 'bench', now() - interval '1 day', now() - interval '1 day' \
         FROM generate_series(1, {rows}) g"
    ))?;
    client.batch_execute("VACUUM ANALYZE agent_runs")?;
    Ok(start.elapsed())
}

/// Expires the swept rows again (as `load` wrote them), then `VACUUM ANALYZE`.
fn reset(client: &mut postgres::Client, stride: i64) -> Res<()> {
    let (status, owner, expiry) = expired_cols("substr(idempotency_key, 7)::bigint", stride);
    client.batch_execute(&format!(
        "UPDATE agent_runs SET status = {status}, lease_owner = {owner}, lease_expires_at = {expiry}, \
         retries = 0, updated_at = now() WHERE task_id = 'bench-expired'"
    ))?;
    client.batch_execute("VACUUM ANALYZE agent_runs")?;
    Ok(())
}

/// The request `reclaim_expired(limit)` scans with (checked against what the sweep issues).
fn scan_request(limit: u32) -> StoreRequest {
    use heart_fleet_core::request::{Cond, RunCol, RunOrder, held};
    StoreRequest::ScanRuns {
        when: Cond::And(vec![held(), Cond::ExpiredAt(RunCol::LeaseExpiresAt)]),
        order: RunOrder::ExpiresAt,
        limit,
    }
}

fn explain(store: &PgStore, req: &StoreRequest) -> Res<Vec<String>> {
    let stmt = render_one(req)?;
    let explained = Statement { sql: format!("EXPLAIN (ANALYZE, BUFFERS) {}", stmt.sql), params: stmt.params };
    let rows = store.query(&explained)?;
    Ok(rows
        .into_iter()
        .flat_map(|r| r.into_iter().map(|(_, v)| if let SqlValue::Text(t) = v { t } else { format!("{v:?}") }))
        .collect())
}

struct SweepTable {
    label: String,
    schema: Schema,
    /// One connection for loading, scans, EXPLAIN and sizes.
    store: PgStore,
    /// The URL the sweep's fleet connects with (`--sync-off`: `synchronous_commit = off`).
    writes_url: String,
    rows: i64,
    stride: i64,
    loaded_in: Duration,
    scans_ms: Vec<f64>,
    sweeps: Vec<Sweep>,
}

/// One sweep from `expired` expired leases to none.
struct Sweep {
    total: Duration,
    batches: Vec<Duration>,
    statements: u64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn sweep_once(table: &SweepTable, expired: i64) -> Res<Sweep> {
    let store =
        if table.writes_url == table.schema.url { table.store.clone() } else { PgStore::connect(&table.writes_url)? };
    let mut fleet = counted_fleet(store);
    let mut batches = Vec::new();
    let mut reclaimed = 0u64;
    let start = Instant::now();
    loop {
        let t = Instant::now();
        let s = fleet.reclaim_expired(100)?;
        batches.push(t.elapsed());
        if !s.errors.is_empty() || !s.quarantined_ids.is_empty() {
            return fail(format!("sweep: {} errors, {} quarantined", s.errors.len(), s.quarantined_ids.len()));
        }
        reclaimed += s.reclaimed_count;
        if s.reclaimed_count == 0 {
            break;
        }
    }
    let total = start.elapsed();
    if reclaimed != expired as u64 {
        return fail(format!("{}: the sweep reclaimed {reclaimed}, not {expired}", table.label));
    }
    if fleet.store().last_scan.as_ref() != Some(&scan_request(100)) {
        return fail("the sweep scanned with another request than the one explained");
    }
    Ok(Sweep { total, batches, statements: fleet.store().statements })
}

fn scan_times(table: &SweepTable, reps: usize) -> Res<Vec<f64>> {
    let mut store = table.store.clone();
    let req = scan_request(100);
    store.execute(req.clone())?; // warm
    let mut out = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        store.execute(req.clone())?;
        out.push(ms(t.elapsed()));
    }
    Ok(out)
}

fn print_explain(table: &SweepTable, when: &str) -> Res<()> {
    let store = &table.store;
    println!("\nEXPLAIN (ANALYZE, BUFFERS) of the sweep's scan (limit 100), {}, {when}:", table.label);
    println!("```");
    for line in explain(store, &scan_request(100))? {
        println!("{line}");
    }
    println!("```");
    Ok(())
}

fn sweep_section(o: &Opts) -> Res<()> {
    let big_stride = o.rows / o.expired;
    if o.sync_off {
        println!("sweep writes with synchronous_commit = off");
    }
    println!(
        "\n## sweep: reclaim_expired(100) until nothing is expired; {} rows vs {} rows, {} expired in each",
        o.rows, o.expired, o.expired
    );
    let mut tables = Vec::new();
    for (tag, rows, stride) in [("big", o.rows, big_stride), ("small", o.expired, 1)] {
        let schema = Schema::new(&o.url, &format!("sweep_{tag}"))?;
        let store = schema.store()?;
        let loaded_in = load(&mut postgres::Client::connect(&schema.url, postgres::NoTls)?, rows, stride)?;
        let label = format!("{rows} runs, {} expired", o.expired);
        println!("loaded {label} in {:.1} s", loaded_in.as_secs_f64());
        let writes_url =
            if o.sync_off { format!("{}%20-csynchronous_commit%3Doff", schema.url) } else { schema.url.clone() };
        tables.push(SweepTable {
            label,
            schema,
            store,
            writes_url,
            rows,
            stride,
            loaded_in,
            scans_ms: Vec::new(),
            sweeps: Vec::new(),
        });
    }
    let before = format!("before the sweep ({} expired)", o.expired);
    print_explain(&tables[0], &before)?;
    print_explain(&tables[1], &before)?;
    for round in 0..o.rounds {
        for k in 0..tables.len() {
            let table = &mut tables[(k + round) % 2];
            if round > 0 {
                reset(&mut postgres::Client::connect(&table.schema.url, postgres::NoTls)?, table.stride)?;
            }
            let scans = scan_times(table, o.scan_reps)?;
            table.scans_ms.extend(scans);
            let sweep = sweep_once(table, o.expired)?;
            table.sweeps.push(sweep);
        }
    }
    print_explain(&tables[0], "after the sweep (nothing expired)")?;
    print_explain(&tables[1], "after the sweep (nothing expired)")?;
    // The idle case of a healthy fleet: the index entries of the reclaimed runs, dead since
    // the sweep, are gone once (auto)vacuum has run; the scan then reads a handful of buffers.
    for t in &tables {
        t.store.batch("VACUUM agent_runs")?;
    }
    print_explain(&tables[0], "after the sweep and VACUUM (nothing expired)")?;
    print_explain(&tables[1], "after the sweep and VACUUM (nothing expired)")?;

    println!("\nload average now {}:", loadavg());
    println!(
        "| table | scan (limit 100), median | full sweep (median of rounds) | rounds | expired/s | batch of 100, median | \
         last (empty) batch | statements per sweep | table / sweep index size |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for t in &mut tables {
        let sizes = postgres::Client::connect(&t.schema.url, postgres::NoTls)?.query_one(
            "SELECT pg_size_pretty(pg_table_size('agent_runs')), \
             pg_size_pretty(pg_relation_size('idx_agent_runs_lease_sweep'))",
            &[],
        )?;
        let (table_size, index_size): (String, String) = (sizes.try_get(0)?, sizes.try_get(1)?);
        let totals: Vec<f64> = t.sweeps.iter().map(|s| s.total.as_secs_f64()).collect();
        let shown: Vec<String> = totals.iter().map(|s| format!("{s:.2} s")).collect();
        let total = median(totals);
        let batches: Vec<f64> =
            t.sweeps.iter().flat_map(|s| s.batches[..s.batches.len() - 1].iter().map(|d| ms(*d))).collect();
        let last = median(t.sweeps.iter().filter_map(|s| s.batches.last().map(|d| ms(*d))).collect());
        let statements = t.sweeps.first().map_or(0, |s| s.statements);
        println!(
            "| {} ({} rows; loaded in {:.1} s) | {:.3} ms | {total:.2} s | {} | {:.0} | {:.1} ms | {last:.3} ms | {statements} | {table_size} / {index_size} |",
            t.label,
            t.rows,
            t.loaded_in.as_secs_f64(),
            median(std::mem::take(&mut t.scans_ms)),
            shown.join(", "),
            o.expired as f64 / total,
            median(batches),
        );
    }
    Ok(())
}

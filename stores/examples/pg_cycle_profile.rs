//! Runs acquire → release cycles on one PostgreSQL connection, for profilers and instruction
//! counts (`valgrind --tool=callgrind target/release/examples/pg_cycle_profile 3000`): through
//! `HeartFleet<PgStore>`, or with `plain` as the second argument through the floor of
//! `benches/postgres.rs` (one prepared conditional `UPDATE … RETURNING` for each, on the
//! `postgres` driver). It cycles one resource run in a schema of its own (`DATABASE_URL`,
//! dropped at the end), with `synchronous_commit = off`, and prints the cycles per second.
//! Setting up (connecting, migrating) costs the same at any count, so the difference between
//! two counts is what the cycles cost.

use std::time::Instant;

use heart_fleet_core::HeartFleet;
use heart_fleet_core::ops::{Fenced, ReleaseTo};
use heart_fleet_core::receipt::HeartReceipt;
use heart_fleet_stores::{PgStore, connect, migrate};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[path = "../benches/shared/plain_floor.rs"]
mod plain_floor;
use plain_floor::{PLAIN_ACQUIRE, PLAIN_RELEASE};

fn heart_cycles(url: &str, run_id: &str, n: u32) -> Res<u32> {
    let mut heart = HeartFleet::new(PgStore::connect(url)?).with_sink(Box::new(|_: &HeartReceipt| {}));
    let mut ok = 0;
    for _ in 0..n {
        let acq = heart.acquire(run_id, "worker", 60)?;
        let Some(fence) = acq.fence else { return Err("acquire missed".into()) };
        if let Fenced::Ok { .. } = heart.release(&fence, ReleaseTo::Ready)? {
            ok += 1;
        }
    }
    Ok(ok)
}

fn plain_cycles(url: &str, run_id: &str, n: u32) -> Res<u32> {
    let config: postgres::Config = url.parse()?;
    let mut client = config.connect(postgres::NoTls)?;
    let (acquire, release) = (client.prepare(PLAIN_ACQUIRE)?, client.prepare(PLAIN_RELEASE)?);
    let mut ok = 0;
    for _ in 0..n {
        let rows = client.query(&acquire, &[&run_id, &"worker"])?;
        let [row] = rows.as_slice() else { return Err("plain acquire missed".into()) };
        let expiry: String = row.try_get(0)?;
        if client.query(&release, &[&run_id, &"worker", &expiry])?.len() == 1 {
            ok += 1;
        }
    }
    Ok(ok)
}

fn main() -> Res<()> {
    let base = std::env::var("DATABASE_URL").map_err(|_| "DATABASE_URL is not set")?;
    let mut args = std::env::args().skip(1);
    let n: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let plain = args.next().as_deref() == Some("plain");
    let schema = format!("cycle_profile_{}", std::process::id());
    let mut admin = postgres::Client::connect(&base, postgres::NoTls)?;
    admin.batch_execute(&format!("CREATE SCHEMA {schema}"))?;
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}%20-csynchronous_commit%3Doff");
    let outcome = (|| -> Res<(u32, f64)> {
        migrate(&mut connect(&url)?)?;
        let mut setup = HeartFleet::new(PgStore::connect(&url)?);
        let (run, _) = setup.ensure_resource_run("profile", "cycle", "profile cycle", "profile")?;
        let started = Instant::now();
        let ok = if plain { plain_cycles(&url, &run.id, n)? } else { heart_cycles(&url, &run.id, n)? };
        Ok((ok, started.elapsed().as_secs_f64()))
    })();
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))?;
    let (ok, secs) = outcome?;
    println!("{ok} cycles ({}), {:.0} cycles/s", if plain { "plain" } else { "heart" }, f64::from(ok) / secs);
    Ok(())
}

#!/usr/bin/env bash
# The console's load test: `heart-fleet serve` on a 1,000,000-run PostgreSQL table, scraped by
# concurrent /metrics scrapers over loopback (bounded: a fixed number of scrapers for a fixed
# time). A benchmark, not part of the README's test command; its figures go to BENCHMARKS.md.
#
#   bash scripts/console-load.sh [--runs 1000000] [--scrapers 200] [--seconds 30]
#
# Makes the database heart_console_load on the server of scripts/postgres.sh (dropped first),
# fills it with generate_series (runs in every status, held leases from 2 minutes expired to 4
# minutes left, a receipt per
# run spread over the last two hours, 60 instances), VACUUM ANALYZE; prints the plan of each
# statement a scrape runs (exit 1 if one scans agent_runs or heart_receipts sequentially); then
# one scraper alone and N scrapers at once, each for the given time, side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=1000000 scrapers=200 seconds=30
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --scrapers) scrapers=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "console-load: unknown argument $1" >&2; exit 2 ;;
  esac
done
say() { printf '# console-load: %s\n' "$*" >&2; }

source scripts/postgres.sh
ensure_postgres >/dev/null
url="${DATABASE_URL%/*}/heart_console_load"
cargo build -q --release -p heart-fleet-host --bin heart-fleet --example console_plans
cli=${CARGO_TARGET_DIR:-$PWD/target}/release/heart-fleet
plans=${CARGO_TARGET_DIR:-$PWD/target}/release/examples/console_plans
venv=target/console-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import prometheus_client' 2>/dev/null || "$venv/bin/pip" install -q prometheus-client==0.26.0

say "a fresh database heart_console_load with $runs runs"
su postgres -c "psql -qc 'DROP DATABASE IF EXISTS heart_console_load WITH (FORCE)' -c 'CREATE DATABASE heart_console_load OWNER heart'" >/dev/null
"$cli" --store "$url" migrate >/dev/null
started=$(date +%s)
psql -q -v ON_ERROR_STOP=1 "$url" <<SQL
-- Per 1,000 runs: 970 completed, 15 ready, 10 leased and 3 running (their leases from 2 minutes
-- expired to 4 minutes left), 2 quarantined.
INSERT INTO agent_runs (assignment_id, objective, status, lease_owner, lease_expires_at, retries,
                        idempotency_key, created_by, fencing_epoch, created_at, updated_at)
SELECT gen_random_uuid(), 'load ' || g,
       CASE WHEN g % 1000 < 970 THEN 'completed' WHEN g % 1000 < 985 THEN 'ready'
            WHEN g % 1000 < 995 THEN 'leased' WHEN g % 1000 < 998 THEN 'running' ELSE 'quarantined' END,
       CASE WHEN g % 1000 BETWEEN 985 AND 997 THEN 'worker-' || (g % 60) END,
       CASE WHEN g % 1000 BETWEEN 985 AND 997 THEN now() + ((g % 7) - 2) * interval '1 minute' END,
       CASE WHEN g % 1000 >= 998 THEN 5 ELSE 0 END,
       'load/' || g, 'console-load', 1, now() - interval '1 day', now()
FROM generate_series(1, $runs) g;
-- One receipt per run, spread over the last two hours: 96 % acquired or released, the rest
-- recoveries and quarantines.
INSERT INTO heart_receipts (schema_version, event, run_id, owner, at, digest, receipt)
SELECT 'zao.heart.receipt.v1', e.event, 'load-run-' || g, 'worker-' || (g % 60), e.at, md5(g::text),
       jsonb_build_object('schemaVersion', 'zao.heart.receipt.v1', 'event', e.event, 'runId', 'load-run-' || g,
                          'owner', 'worker-' || (g % 60), 'at', e.at, 'seq', 1)
FROM generate_series(1, $runs) g,
LATERAL (SELECT CASE WHEN g % 100 < 50 THEN 'acquired' WHEN g % 100 < 96 THEN 'released'
                     WHEN g % 100 < 99 THEN 'reclaimed' ELSE 'quarantined' END AS event,
                to_char((now() - (g % 7200) * interval '1 second') AT TIME ZONE 'UTC',
                        'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at) e;
INSERT INTO agent_instances (instance_id, hostname, pid, status, last_heartbeat)
SELECT 'worker-' || i, 'box-' || (i % 6), 1000 + i, CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'alive' END, now()
FROM generate_series(0, 59) i;
VACUUM ANALYZE;
SQL
say "filled in $(( $(date +%s) - started )) s: $(psql -Atq "$url" -c "SELECT pg_size_pretty(pg_database_size('heart_console_load'))")"

say "the plan of each statement of a scrape"
"$plans" "$url"

port_file=$(mktemp)
"$cli" --store "$url" serve --listen 127.0.0.1:0 2> >(tee "$port_file" | grep -v ' GET /metrics ' >&2) &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$port_file"' EXIT
for _ in $(seq 100); do grep -q 'serving http://' "$port_file" && break; sleep 0.1; done
base=$(grep -o 'http://[0-9.:]*' "$port_file" | head -n 1) || true
[ -n "$base" ] || { say "serve did not start: $(cat "$port_file")"; exit 2; }
say "serve at $base (pid $server)"

say "one scraper for ${seconds} s"
"$venv/bin/python" host-examples/console/load.py "$base" "$server" --scrapers 1 --seconds "$seconds" --expect-runs "$runs"
say "$scrapers scrapers for ${seconds} s"
"$venv/bin/python" host-examples/console/load.py "$base" "$server" --scrapers "$scrapers" --seconds "$seconds" --expect-runs "$runs"

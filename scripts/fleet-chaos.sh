#!/usr/bin/env bash
# A mixed fleet under faults, judged from what the store recorded (`heart-fleet fleet-chaos`,
# host-examples/src/chaos/):
#
#   bash scripts/fleet-chaos.sh [--store postgres|sqlite] [--seconds N] [--seed S] [--json]
#
# Rust (native and --engine component), Node (bindings-node over pg) and Python (the wheel
# over psycopg or sqlite3) workers share one fresh store while the harness kills them, pauses
# them past their TTL, terminates their backends, restarts PostgreSQL, delays, drops and
# partitions their connections through a proxy, skews their clocks by an hour (libfaketime)
# and routes some through PgBouncer in transaction mode. SQLite gets the faults a file has:
# kill, pause, clock skew (Node has no SQLite driver, so its workers are PostgreSQL-only).
# Then `check-history` counts exclusion violations, epoch regressions, duplicate and stale
# effects, lost evidence, receipt mismatches and unfinished runs. With --json the last line is
# the report, one JSON object; the exit status is 0 for verdict pass, 1 for fail, 2 when the
# harness could not run. Defaults: --store postgres --seconds 60 --seed 1.
#
# Installs what is missing (Debian's libfaketime, PostgreSQL and PgBouncer through
# scripts/postgres.sh; the npm packages and the native module of bindings-node; a Python venv
# in target/chaos-venv with the wheel of bindings-python/dist, built when absent, and psycopg)
# and builds the release CLI and the component when absent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

store=postgres seconds=60 seed=1 json=()
while [ $# -gt 0 ]; do
  case "$1" in
    --store) store=${2:?--store needs postgres or sqlite}; shift 2 ;;
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --seed) seed=${2:?--seed needs a number}; shift 2 ;;
    --json) json=(--json); shift ;;
    *) echo "fleet-chaos.sh: unknown argument $1 (see the header of this script)" >&2; exit 2 ;;
  esac
done
case "$store" in postgres|sqlite) ;; *) echo "fleet-chaos.sh: --store is postgres or sqlite, not $store" >&2; exit 2 ;; esac

say() { printf '# fleet-chaos.sh: %s\n' "$*" >&2; }

# `|| true`: with pipefail, a failed ls (no libfaketime yet) would end the script here.
find_faketime() { ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n 1 || true; }
faketime=$(find_faketime)
if [ -z "$faketime" ]; then
  say "installing libfaketime (Debian)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfaketime >/dev/null
  faketime=$(find_faketime)
fi

# HEART_FLEET_CLI: a CLI built already (scripts/test-all.sh); else this tree's, built now
# (incremental: quick when nothing changed).
if [ -n "${HEART_FLEET_CLI:-}" ]; then
  cli=$HEART_FLEET_CLI
else
  cargo build -q --release -p heart-fleet-host
  cli=$root/target/release/heart-fleet
fi
[ -f target/component/heart_fleet.wasm ] || { say "building the component"; bash scripts/npm-bindgen.sh; cargo run -q -p xtask -- component; }

if [ ! -f bindings-node/heart-fleet.linux-x64-gnu.node ] || [ ! -d bindings-node/node_modules/pg ]; then
  say "building bindings-node"
  (cd bindings-node && npm ci --no-audit --no-fund >/dev/null && npm run -s build >/dev/null)
fi

venv=$root/target/chaos-venv
if ! ls bindings-python/dist/heart_fleet-*.whl >/dev/null 2>&1; then
  say "building the Python wheel"
  tools=$root/bindings-python/.venv-build
  "$tools/bin/maturin" --version >/dev/null 2>&1 || {
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q --disable-pip-version-check "maturin>=1.16,<1.17"
  }
  (cd bindings-python && "$tools/bin/maturin" build --release -o dist 2>&1 | tail -n 1)
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import psycopg' 2>/dev/null || "$venv/bin/pip" install -q --disable-pip-version-check "psycopg[binary]"
# The newest wheel in bindings-python/dist, reinstalled every run (scripts/test-python.sh
# builds it from this tree; by hand, rebuild it after changing the core).
wheel=$(ls -t bindings-python/dist/heart_fleet-*.whl | head -n 1)
"$venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"

args=(--store-kind "$store" --seconds "$seconds" --seed "$seed"
  --faketime "$faketime" --node-worker scripts/chaos/worker.mjs
  --python "$venv/bin/python" --python-worker scripts/chaos/worker.py
  --dir "$root/target/fleet-chaos/$store-$seed")
if [ "$store" = postgres ]; then
  # shellcheck source=scripts/postgres.sh
  source scripts/postgres.sh
  ensure_postgres >&2
  ensure_pgbouncer >&2
  # The cluster that serves DATABASE_URL's port (the harness checks that it did restart).
  port=$(printf '%s' "$DATABASE_URL" | sed -nE 's#^[a-z]+://[^/]*:([0-9]+)/.*#\1#p')
  cluster=$(pg_lsclusters -h | awk -v port="${port:-5432}" '$3 == port { print $1 " " $2; exit }')
  [ -n "$cluster" ] || { echo "fleet-chaos.sh: no PostgreSQL cluster listens on port ${port:-5432}" >&2; exit 2; }
  args+=(--database-url "$DATABASE_URL" --pooler-url "$HEART_PGBOUNCER_URL"
    --restart-command "pg_ctlcluster $cluster restart -m fast")
fi
rm -rf "$root/target/fleet-chaos/$store-$seed"
exec "$cli" fleet-chaos "${args[@]}" "${json[@]}"

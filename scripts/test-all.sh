#!/usr/bin/env bash
# Installs whatever is missing on a fresh machine, then runs every test.
# (The README's test command; `.ci/run` calls it after the static checks.)
#
#   bash scripts/test-all.sh
#
# What it installs when absent: the rustfmt/clippy components, the wasm32-unknown-unknown
# target, and a PostgreSQL server from Debian's packages (started here, with a database
# `heart_test` owned by role `heart`, TLS on with a self-signed certificate, and Debian's
# PgBouncer in transaction mode in front of it), which the Postgres tests use through
# DATABASE_URL, HEART_PG_TLS_CA and HEART_PGBOUNCER_URL;
# Node and npm (Debian's packages); deno, esbuild and binaryen (scripts/npm-bindgen.sh: `npm ci`
# in bindings-wasm/bindgen; the component's build runs binaryen's wasm-opt); the npm packages of
# bindings-node, host-examples/node and host-examples/jco (jco 1.35.0); then, through
# scripts/test-python.sh, maturin (in a tools venv) and the wheel's test dependencies (pytest,
# psycopg, mypy in a fresh venv); through scripts/test-deno.sh, wasm-bindgen-cli 0.2.130 (cargo
# install); through scripts/fleet-chaos.sh, Debian's libfaketime and a Python venv
# (target/chaos-venv) with the wheel and psycopg; and through scripts/test-console.sh,
# prometheus-client (PyPI) in target/console-venv, Debian's chromium and puppeteer-core (npm ci
# in host-examples/console) for the console's browser test.
set -euo pipefail
cd "$(dirname "$0")/.."

# A run from scratch: no incremental caches to write, and only line tables in the dev
# profile's debug info (a panic still names its file and line). Neither changes what a test
# checks; both shorten the workspace's build. Set either variable to override.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"

# Each step says when it started (seconds since this script did), so a slow run shows where.
step() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }

step "toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

step "postgresql"
source scripts/postgres.sh
ensure_postgres
echo "DATABASE_URL=$DATABASE_URL"
# TLS with a self-signed certificate, and a PgBouncer in transaction mode in front of the
# server: the PostgreSQL suites run directly, over TLS, and through the pooler.
ensure_postgres_tls
echo "HEART_PG_TLS_CA=$HEART_PG_TLS_CA"
ensure_pgbouncer
echo "HEART_PGBOUNCER_URL=$HEART_PGBOUNCER_URL"

# Before `cargo test`: the canonical-JSON oracle test (host-examples/tests/canonical_oracle.rs)
# runs the reference algorithm in Node.
step "node and npm"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
}
node --version

step "the escape-follower vectors are what the JavaScript oracle produces"
node tests/canonical-oracle/escape-vectors.mjs --check

# Before `cargo test`: the wasmtime host's tests, the CLI's `--engine component` tests and the
# component-vs-native benchmark (run once by --all-targets) load it, and fail without it.
step "the heart:fleet component: build, wasm-opt (binaryen from npm), wrap, validate, import gate"
bash scripts/npm-bindgen.sh
cargo run -q -p xtask -- component

step "cargo test (workspace)"
# The component guests are wasm-only cdylibs (their export names do not link natively); xtask builds them.
cargo test --workspace --exclude heart-fleet-component --exclude heart-fleet-receipts-component --all-targets --no-fail-fast
cargo test --workspace --exclude heart-fleet-component --exclude heart-fleet-receipts-component --doc

step "conformance scenarios are what the generator produces"
python3 tests/conformance/tools/generate.py >/dev/null
if ! git diff --quiet -- tests/conformance; then
  git diff --stat -- tests/conformance
  echo "tests/conformance/*.json differ from tools/generate.py output" >&2
  exit 1
fi

step "the core links into a wasm32-unknown-unknown module with zero imports"
cargo build -p heart-fleet-wasm-check --target wasm32-unknown-unknown --release
python3 scripts/wasm_imports.py target/wasm32-unknown-unknown/release/heart_fleet_wasm_check.wasm

# The CLI every step below runs: the one `cargo test --all-targets` built above for the CLI's
# own integration tests (dev profile, every feature the workspace turns on). A release build
# of it (wasmtime's compiler at full optimisation) took about ten minutes of this script and
# none of these steps needs its speed; the README's `cargo run --release` stays the user's path.
cli="${CARGO_TARGET_DIR:-$PWD/target}/debug/heart-fleet"
[ -x "$cli" ] || { echo "test-all: cargo test did not leave the CLI at $cli" >&2; exit 1; }
export HEART_FLEET_CLI="$cli"

step "the CLI's main job (simulate) on a fresh store"
"$cli" simulate --json --seed 7 --crash-rate 0.2 | tee /tmp/heart-simulate.json
python3 - <<'PY'
import json
r = json.load(open("/tmp/heart-simulate.json"))
bad = {k: r[k] for k in ("exclusion_violations", "duplicate_effects", "stale_commits", "unfinished_runs") if r[k] != 0}
assert not bad, bad
print("simulate safety report: all counts 0")
PY

step "the same simulation through the component gives the same report"
"$cli" --engine component simulate --json --seed 7 --crash-rate 0.2 \
  > /tmp/heart-simulate-component.json
cmp /tmp/heart-simulate.json /tmp/heart-simulate-component.json
echo "simulate --engine component: the native report, byte for byte"

step "the canary on the embedded SQLite default, from a fresh directory"
canary_dir=$(mktemp -d)
(cd "$canary_dir" && "$cli" canary && "$cli" canary) | tail -n 1
rm -rf "$canary_dir"

step "the operator console: heart-fleet serve over HTTP (SQLite and PostgreSQL), /metrics parsed by prometheus_client, the dashboard in chromium"
command -v chromium >/dev/null 2>&1 || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
}
bash scripts/test-console.sh

step "Node: the napi-rs binding (npm package heart-fleet) and the bot example"
node --version
# The PostgreSQL tests migrate with Node and with this CLI ($HEART_FLEET_CLI) at once.
(cd bindings-node && npm ci --no-audit --no-fund && npm test)
(cd host-examples/node && npm ci --no-audit --no-fund && npm test)

step "A second component host: the component transpiled by jco, run in Node with a JavaScript lease-store"
(cd host-examples/jco && npm ci --no-audit --no-fund && npm test)

step "Python: the pyo3 wheel (maturin), installed into a fresh venv, pytest incl. PostgreSQL, mypy --strict"
bash scripts/test-python.sh

step "Deno and edge runtimes: the wasm-bindgen module in a real Deno and in Node, Deno KV, the Deno.serve example"
bash scripts/test-deno.sh

# Last: the PostgreSQL run restarts the server. Bounded runs; longer ones on demand
# (bash scripts/fleet-chaos.sh --seconds 1800). Each fails the build unless its verdict is pass.
step "a mixed fleet under faults: PostgreSQL with every fault kind (scripts/fleet-chaos.sh)"
bash scripts/fleet-chaos.sh --store postgres --seconds 60 --seed "${HEART_CHAOS_SEED:-1}"
step "a mixed fleet under faults: SQLite with kill, pause and clock skew"
bash scripts/fleet-chaos.sh --store sqlite --seconds 30 --seed "${HEART_CHAOS_SEED:-1}"
step "fleet-chaos fails a run whose workers cannot start"
broken=$(mktemp -d)
printf 'exit 3\n' > "$broken/worker.py"
set +e
"$HEART_FLEET_CLI" fleet-chaos --store-kind sqlite --seconds 10 --json --dir "$broken/run" \
  --faketime "$(ls /usr/lib/*/faketime/libfaketime.so.1 | head -n 1)" --python /bin/sh --python-worker "$broken/worker.py" \
  > "$broken/report.json"
status=$?
set -e
python3 - "$broken/report.json" "$status" <<'PY'
import json, sys
report = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert sys.argv[2] == "1", f"exit status {sys.argv[2]}"
assert report["verdict"] == "fail", report
assert any("exited by itself" in e for e in report["errors"]), report["errors"]
assert any("no python worker ever took a lease" in e for e in report["errors"]), report["errors"]
print("a fleet whose Python workers cannot start: verdict fail, and the report says why")
PY
rm -rf "$broken"

echo
echo "all tests passed"

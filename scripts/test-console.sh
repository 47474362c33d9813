#!/usr/bin/env bash
# The operator console (`heart-fleet serve`) over real HTTP: a seeded SQLite store (a live
# lease, an expired one, a quarantined run, a dead instance, a tampered receipt) for the JSON
# API, /metrics parsed by prometheus_client, the refusals and a requeue with the token; then a
# real PostgreSQL behind a proxy that is cut and restored (503 and heart_fleet_store_up 0, then
# recovery); then the dashboard in a real browser (Debian's chromium, headless, driven by
# puppeteer-core from npm) at 1280×800 and on a phone-sized screen, screenshots saved to
# target/console-screenshots. Needs HEART_FLEET_CLI, DATABASE_URL and chromium
# (scripts/test-all.sh provides all three); installs prometheus-client into target/console-venv
# and puppeteer-core into host-examples/console/node_modules when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export HEART_FLEET_CLI="${HEART_FLEET_CLI:-${CARGO_TARGET_DIR:-$PWD/target}/release/heart-fleet}"
[ -x "$HEART_FLEET_CLI" ] || { echo "test-console: no CLI at $HEART_FLEET_CLI (cargo build --release -p heart-fleet-host)" >&2; exit 2; }
venv=target/console-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import prometheus_client' 2>/dev/null || "$venv/bin/pip" install -q prometheus-client==0.26.0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$venv/bin/python" host-examples/console/test_console.py seed "$dir" >/dev/null
"$venv/bin/python" host-examples/console/test_console.py api "$dir"
# That every statement of a scrape is served from an index is checked by the workspace's
# tests on SQLite (host-examples/tests/console_plans.rs) and by scripts/console-load.sh on
# 1,000,000 PostgreSQL runs. (Building the example here would resolve the host crate's
# features on their own, unlike the workspace's release build of the CLI, and compile
# wasmtime a second time: eight minutes.)
"$venv/bin/python" host-examples/console/test_console.py outage

# The browser gets a store of its own (the API checks above requeued the seeded run).
command -v "${CHROMIUM:-chromium}" >/dev/null || { echo "test-console: no chromium (apt-get install chromium)" >&2; exit 2; }
mkdir "$dir/browser"
"$venv/bin/python" host-examples/console/test_console.py seed "$dir/browser" >/dev/null
export SCREENSHOTS="${SCREENSHOTS:-$PWD/target/console-screenshots}"
export CHROMIUM="$(command -v "${CHROMIUM:-chromium}")"
# node_modules/.heart-lock: the package-lock.json the last `npm ci` installed.
(cd host-examples/console && { cmp -s package-lock.json node_modules/.heart-lock || { npm ci --no-audit --no-fund && cp package-lock.json node_modules/.heart-lock; }; } && node browser.mjs "$dir/browser")

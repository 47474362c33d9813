#!/usr/bin/env bash
# The Deno / edge binding (bindings-wasm/bindgen, host-examples/deno): installs what is
# missing, builds the wasm-bindgen package and runs every test of it, in a real Deno and in
# Node. Idempotent; fast when everything is installed.
#
#   bash scripts/test-deno.sh
#
# Installs when absent: the wasm32-unknown-unknown target, wasm-bindgen-cli 0.2.130 (cargo
# install, about 3.5 minutes once), Node and npm (Debian's packages), and through `npm ci`
# in bindings-wasm/bindgen: deno 2.9.6, esbuild and binaryen (wasm-opt).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
pkg=$root/bindings-wasm/bindgen
start=$(date +%s)
export DENO_NO_UPDATE_CHECK=1

step() { printf '\n== %s\n' "$*"; }

step "toolchain: wasm32 target, wasm-bindgen-cli 0.2.130, Node"
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
if [ "$(wasm-bindgen --version 2>/dev/null || true)" != "wasm-bindgen 0.2.130" ]; then
  # Not --locked: the CLI's lockfile pins a crate version this registry mirror lacks.
  cargo install wasm-bindgen-cli --version 0.2.130
fi
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
}
wasm-bindgen --version
node --version

# The receipt-log test compares verifyReceipts with `heart-fleet verify-receipts`.
export HEART_FLEET_CLI="${HEART_FLEET_CLI:-${CARGO_TARGET_DIR:-$root/target}/release/heart-fleet}"
[ -x "$HEART_FLEET_CLI" ] || cargo build --release -q -p heart-fleet-host --bin heart-fleet

step "npm ci (deno 2.9.6, esbuild, binaryen)"
bash "$root/scripts/npm-bindgen.sh"
deno=$pkg/node_modules/.bin/deno
"$deno" --version | head -n 1

step "build pkg/ and pkg-edge/: cargo (wasm profile) → wasm-bindgen --target web → wasm-opt -Oz → esbuild"
node "$pkg/build.mjs"
# Regression ceilings, not the aim (pkg 450,000 and pkg-edge 300,000 bytes, not met: see
# BENCHMARKS.md, "Deno and edge runtimes"), a few per cent above the sizes measured last.
# The receipt verifier's module (pkg only): 254,295 bytes when it was added.
for file in pkg/heart_fleet_bg.wasm:900000 pkg-edge/heart_fleet_bg.wasm:720000 pkg/heart_fleet_receipts_bg.wasm:262000; do
  size=$(wc -c < "$pkg/${file%%:*}")
  if [ "$size" -gt "${file##*:}" ]; then
    echo "${file%%:*} is $size bytes, over its ${file##*:}-byte ceiling" >&2
    exit 1
  fi
done
[ ! -e "$pkg/pkg-edge/heart_fleet_receipts_bg.wasm" ] || { echo "pkg-edge must not ship the receipt verifier" >&2; exit 1; }

step "clippy for the wasm target (the workspace clippy in .ci/run checks it natively)"
cargo clippy -q -p heart-fleet-wasm --target wasm32-unknown-unknown -- -D warnings
cargo clippy -q -p heart-fleet-wasm --target wasm32-unknown-unknown --no-default-features -- -D warnings
cargo clippy -q -p heart-fleet-receipts-wasm --target wasm32-unknown-unknown -- -D warnings

step "deno test (pkg): conformance (all scenarios × memory, JS stores, Deno KV), store suite (memory, Deno KV), raw exports, Deno KV"
(cd "$pkg" && "$deno" test -A --no-check --unstable-kv test/)

step "deno test (pkg-edge): the same tests on the edge build"
(cd "$pkg" && HEART_FLEET_PKG=pkg-edge "$deno" test -A --no-check --unstable-kv test/)

step "deno test: the Node package's own test files, against this package (import map)"
node_tests=(api bad-input properties supabase canonical-oracle canonical-walk dropin-seams dropin-outbox hardening)
(cd "$pkg" && "$deno" test -A --no-check --unstable-kv --import-map=test/import-map.json \
  $(printf '../../bindings-node/test/%s.test.mjs ' "${node_tests[@]}"))

step "node --test: the same module loaded in Node (conformance, store suite, raw exports, the Node package's tests)"
(cd "$pkg" && node --test test/conformance.test.mjs test/store-suite.test.mjs test/native.test.mjs test/receipt-log.test.mjs)
(cd "$pkg" && HEART_FLEET_PKG=pkg-edge node --test test/conformance.test.mjs test/store-suite.test.mjs test/native.test.mjs)
(cd "$pkg" && node --import ./test/node-hooks.mjs --test $(printf '../../bindings-node/test/%s.test.mjs ' "${node_tests[@]}"))

step "host-examples/deno: type check, then the Deno.serve handler as a real server"
(cd host-examples/deno && "$deno" check handler.ts handler.test.ts && "$deno" test -A --unstable-kv handler.test.ts)

echo
echo "test-deno: all passed in $(( $(date +%s) - start )) s (wasm after wasm-opt: pkg $(wc -c < "$pkg/pkg/heart_fleet_bg.wasm") bytes + the receipt verifier $(wc -c < "$pkg/pkg/heart_fleet_receipts_bg.wasm"), pkg-edge $(wc -c < "$pkg/pkg-edge/heart_fleet_bg.wasm") bytes)"

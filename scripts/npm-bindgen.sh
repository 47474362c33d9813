#!/usr/bin/env bash
# `npm ci` in bindings-wasm/bindgen when its lockfile changed since the last one: deno 2.9.6,
# esbuild, and binaryen, whose wasm-opt both the wasm-bindgen build (build.mjs) and the
# component build (`cargo run -p xtask -- component`) run. Needs node and npm.
set -euo pipefail
pkg="$(cd "$(dirname "$0")/.." && pwd)/bindings-wasm/bindgen"
# node_modules/.heart-lock: the package-lock.json that the last `npm ci` installed.
if ! cmp -s "$pkg/package-lock.json" "$pkg/node_modules/.heart-lock"; then
  (cd "$pkg" && npm ci --no-audit --no-fund && cp package-lock.json node_modules/.heart-lock)
fi

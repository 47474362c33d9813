// The component in Node through jco: `open` instantiates build/heart_fleet.js (see
// transpile.mjs) with the imports of lease-store.mjs and returns its exports.
import { readFileSync } from 'node:fs';
import { instantiate } from './build/heart_fleet.js';
import { instantiate as instantiateVerifier } from './build/heart_fleet_receipts.js';
import { effects } from './lease-store.mjs';

const build = new URL('./build/', import.meta.url);
const modules = new Map();

function coreModule(path) {
  if (!modules.has(path)) modules.set(path, new WebAssembly.Module(readFileSync(new URL(path, build))));
  return modules.get(path);
}

/** A fresh instance over `store` (a lease-store import) with effect hooks by handle. */
export function open(store, hooks = new Map()) {
  return instantiate(coreModule, {
    'heart:fleet/lease-store': store,
    'heart:fleet/effects': effects(hooks),
    'heart:fleet/types': {},
  });
}

/** The receipt-log verifier component's `receipts` export (it imports only types). */
export function openVerifier() {
  return instantiateVerifier(coreModule, { 'heart:fleet/types': {} }).receipts;
}

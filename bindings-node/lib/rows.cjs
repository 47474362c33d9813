'use strict';
// A run row with the core's defaults (RunRow::seeded): MemoryLeaseStore.insert fills a run in
// from it, and so do the LivenessStore pass (rows a store returns without every column),
// heart-fleet-wasm's DenoKvLeaseStore.seed (bundled from here) and tests that build rows by
// hand. The defaults live in Rust only.

const native = require('./native.cjs');

/** The run `id` with every other column at its default, created and updated at `at` (ISO text). */
function runRow(id, at) {
  return JSON.parse(native.seededRunJson(id, at));
}

module.exports = { runRow };

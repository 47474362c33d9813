'use strict';
// Rows with the core's defaults (RunRow::seeded, InstanceRow::registered): MemoryLeaseStore's
// inserts fill rows in from them, and so do the LivenessStore pass (rows a store returns
// without every column), heart-fleet-wasm's DenoKvLeaseStore.seed (bundled from here) and
// tests that build rows by hand. The defaults live in Rust only.

const native = require('./native.cjs');

/** The run `id` with every other column at its default, created and updated at `at` (ISO text). */
function runRow(id, at) {
  return JSON.parse(native.seededRowJson('agent_runs', id, at));
}

/**
 * The columns of an `agent_instances` row as registering it at `at` (ISO text) leaves them
 * (the core's InstanceRow::registered: alive, started and heard from at `at`), without the
 * instance's id.
 */
function instanceDefaults(at) {
  const { instance_id: _, ...columns } = JSON.parse(native.seededRowJson('agent_instances', '-', at));
  return columns;
}

module.exports = { runRow, instanceDefaults };

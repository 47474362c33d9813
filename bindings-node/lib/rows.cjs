'use strict';
// The schema's defaults of an agent_runs row, in one place: MemoryLeaseStore.insert fills a
// run in with them, and so do heart-fleet-wasm's DenoKvLeaseStore.seed (bundled from here)
// and the tests that build rows by hand.

/** An agent_runs row with the schema's defaults: id `id`, created and updated at `at` (ISO text). */
function runRow(id, at) {
  return {
    id,
    task_id: null,
    assignment_id: id,
    objective: 'run',
    required_capabilities: [],
    status: 'ready',
    assigned_agent: null,
    lease_owner: null,
    lease_expires_at: null,
    retries: 0,
    budget: null,
    approval_state: 'auto',
    visibility: 'team',
    idempotency_key: `key:${id}`,
    created_by: 'heart-fleet',
    created_at: at,
    updated_at: at,
    fencing_epoch: 0,
  };
}

module.exports = { runRow };

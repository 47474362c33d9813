-- heart-fleet migration 0001 (PostgreSQL): the reference schema.
--
-- The four tables the TypeScript heart-fleet package works on, with the columns, defaults,
-- CHECKs and index names of its scripts (1410-agent-control-plane, 2033-agent-instances-liveness,
-- 2148-transactional-outbox), so old and new nodes can share one database during a rollout.
-- agent_runs follows the package's row type: the 12 run statuses, default 'created'.
--
-- Idempotent: every object is created IF NOT EXISTS, so running this file twice, or on a
-- database the reference scripts already set up, changes nothing. Run each migration file in
-- one transaction (e.g. `psql --single-transaction -f`).
--
-- Left out on purpose:
-- * Row level security. The reference enables RLS with service-role-only policies written
--   against Supabase's `auth.role()`; a plain PostgreSQL has no `auth` schema. On Supabase,
--   keep the reference's policies; elsewhere, grant the tables to the role the stores use.
-- * The unrelated `receipts` audit table of script 1410 (heart-fleet never writes it; its own
--   receipts table is `heart_receipts`, migration 0002).
--
-- gen_random_uuid() is built into PostgreSQL 13 and later.

-- agent_runs: one row per run; the lease lives in lease_owner / lease_expires_at.
CREATE TABLE IF NOT EXISTS agent_runs (
  id                    UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  task_id               TEXT NULL,
  assignment_id         UUID NOT NULL UNIQUE,
  objective             TEXT NOT NULL,
  required_capabilities TEXT[] NOT NULL DEFAULT '{}',
  status                TEXT NOT NULL DEFAULT 'created' CHECK (status IN (
                          'created', 'ready', 'leased', 'running', 'waiting_approval', 'blocked',
                          'verifying', 'recovering', 'completed', 'failed', 'cancelled', 'quarantined'
                        )),
  assigned_agent        TEXT NULL,
  lease_owner           TEXT NULL,
  lease_expires_at      TIMESTAMPTZ NULL,
  retries               INT NOT NULL DEFAULT 0,
  budget                JSONB NULL DEFAULT NULL,
  approval_state        TEXT NOT NULL DEFAULT 'auto' CHECK (approval_state IN (
                          'auto', 'pending', 'approved', 'rejected'
                        )),
  visibility            TEXT NOT NULL DEFAULT 'team' CHECK (visibility IN (
                          'private', 'team', 'public'
                        )),
  idempotency_key       TEXT NOT NULL UNIQUE,
  created_by            TEXT NOT NULL,
  created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
  CONSTRAINT assignment_id_not_empty CHECK (assignment_id IS NOT NULL)
);

CREATE INDEX IF NOT EXISTS idx_agent_runs_task_id ON agent_runs (task_id);
CREATE INDEX IF NOT EXISTS idx_agent_runs_assignment_id ON agent_runs (assignment_id);
CREATE INDEX IF NOT EXISTS idx_agent_runs_status ON agent_runs (status);
CREATE INDEX IF NOT EXISTS idx_agent_runs_assigned_agent ON agent_runs (assigned_agent);
CREATE INDEX IF NOT EXISTS idx_agent_runs_idempotency_key ON agent_runs (idempotency_key);
CREATE INDEX IF NOT EXISTS idx_agent_runs_lease_owner ON agent_runs (lease_owner);

-- agent_instances: workers register and heartbeat; a stale or dead instance's runs are
-- reclaimed by the liveness pass. lease_owner refers to instance_id logically (no FK).
CREATE TABLE IF NOT EXISTS agent_instances (
  instance_id    TEXT PRIMARY KEY,
  hostname       TEXT,
  pid            INTEGER,
  status         TEXT NOT NULL DEFAULT 'alive'
                   CHECK (status = ANY (ARRAY['alive', 'draining', 'dead'])),
  started_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  last_heartbeat TIMESTAMPTZ NOT NULL DEFAULT now(),
  metadata       JSONB
);

CREATE INDEX IF NOT EXISTS agent_instances_status_heartbeat_idx
  ON agent_instances (status, last_heartbeat);

-- effect_intents: the durable at-most-once ledger; PRIMARY KEY (run_id, effect_key) is the lock.
CREATE TABLE IF NOT EXISTS effect_intents (
  run_id           UUID NOT NULL,
  effect_key       TEXT NOT NULL,
  state            TEXT NOT NULL DEFAULT 'intent'
                     CHECK (state IN ('intent', 'dispatched', 'committed', 'abandoned')),
  channel          TEXT NOT NULL
                     CHECK (channel IN ('telegram', 'farcaster', 'mail', 'onchain', 'internal')),
  payload_digest   TEXT NOT NULL,
  fence_owner      TEXT,
  fence_expires_at TIMESTAMPTZ,
  external_ref     JSONB,
  attempts         INT NOT NULL DEFAULT 0,
  last_error       TEXT,
  created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
  committed_at     TIMESTAMPTZ,
  PRIMARY KEY (run_id, effect_key)
);

-- The reconciler's scan: dispatched rows whose fence has expired.
CREATE INDEX IF NOT EXISTS idx_effect_intents_reconcile
  ON effect_intents (state, fence_expires_at)
  WHERE state = 'dispatched';
CREATE INDEX IF NOT EXISTS idx_effect_intents_run ON effect_intents (run_id);

-- outbox_dispatch_log: append-only history of claims, sends, reconciliations.
CREATE TABLE IF NOT EXISTS outbox_dispatch_log (
  id         UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  run_id     UUID NOT NULL,
  effect_key TEXT NOT NULL,
  attempt    INT NOT NULL,
  outcome    TEXT NOT NULL
               CHECK (outcome IN ('claimed', 'sent', 'failed', 'deduped', 'reconciled', 'abandoned')),
  at         TIMESTAMPTZ NOT NULL DEFAULT now(),
  detail     JSONB
);

CREATE INDEX IF NOT EXISTS idx_outbox_log_effect ON outbox_dispatch_log (run_id, effect_key);

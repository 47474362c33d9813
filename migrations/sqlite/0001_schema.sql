-- heart-fleet migration 0001 (SQLite): the whole schema.
--
-- The same tables and columns as the PostgreSQL migrations (0001 reference schema + 0002
-- heart-fleet additions), in SQLite's types:
-- * timestamps are TEXT in JavaScript's toISOString() form, YYYY-MM-DDTHH:MM:SS.sssZ (UTC,
--   exactly three fractional digits). The CHECKs enforce that form: it is what makes text
--   order equal time order, which the statements heart_fleet_core::sql renders rely on;
-- * JSON (budget, metadata, external_ref, detail, receipt, required_capabilities) is TEXT;
-- * UUIDs are TEXT (the statements generate version-4 UUIDs with randomblob());
-- * the dispatch log's insertion order is its rowid (ORDER BY at, rowid).
-- Needs SQLite 3.35 or later (RETURNING). Idempotent: safe to run twice.

CREATE TABLE IF NOT EXISTS agent_runs (
  id                    TEXT NOT NULL PRIMARY KEY,
  task_id               TEXT NULL,
  assignment_id         TEXT NOT NULL UNIQUE,
  objective             TEXT NOT NULL,
  required_capabilities TEXT NOT NULL DEFAULT '[]',
  status                TEXT NOT NULL DEFAULT 'created' CHECK (status IN (
                          'created', 'ready', 'leased', 'running', 'waiting_approval', 'blocked',
                          'verifying', 'recovering', 'completed', 'failed', 'cancelled', 'quarantined'
                        )),
  assigned_agent        TEXT NULL,
  lease_owner           TEXT NULL,
  lease_expires_at      TEXT NULL CHECK (lease_expires_at IS NULL OR lease_expires_at GLOB
                          '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  retries               INTEGER NOT NULL DEFAULT 0,
  budget                TEXT NULL DEFAULT NULL,
  approval_state        TEXT NOT NULL DEFAULT 'auto' CHECK (approval_state IN (
                          'auto', 'pending', 'approved', 'rejected'
                        )),
  visibility            TEXT NOT NULL DEFAULT 'team' CHECK (visibility IN (
                          'private', 'team', 'public'
                        )),
  idempotency_key       TEXT NOT NULL UNIQUE,
  created_by            TEXT NOT NULL,
  created_at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) CHECK (created_at GLOB
                          '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  updated_at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) CHECK (updated_at GLOB
                          '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  fencing_epoch         INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX IF NOT EXISTS idx_agent_runs_task_id ON agent_runs (task_id);
CREATE INDEX IF NOT EXISTS idx_agent_runs_assignment_id ON agent_runs (assignment_id);
CREATE INDEX IF NOT EXISTS idx_agent_runs_status ON agent_runs (status);
CREATE INDEX IF NOT EXISTS idx_agent_runs_assigned_agent ON agent_runs (assigned_agent);
CREATE INDEX IF NOT EXISTS idx_agent_runs_idempotency_key ON agent_runs (idempotency_key);
CREATE INDEX IF NOT EXISTS idx_agent_runs_lease_owner ON agent_runs (lease_owner);
-- The TTL sweep (NULLs sort first in SQLite).
CREATE INDEX IF NOT EXISTS idx_agent_runs_lease_sweep
  ON agent_runs (lease_expires_at, id)
  WHERE status IN ('leased', 'running');

CREATE TABLE IF NOT EXISTS agent_instances (
  instance_id    TEXT NOT NULL PRIMARY KEY,
  hostname       TEXT,
  pid            INTEGER,
  status         TEXT NOT NULL DEFAULT 'alive' CHECK (status IN ('alive', 'draining', 'dead')),
  started_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) CHECK (started_at GLOB
                   '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  last_heartbeat TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) CHECK (last_heartbeat GLOB
                   '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  metadata       TEXT
);

CREATE INDEX IF NOT EXISTS agent_instances_status_heartbeat_idx
  ON agent_instances (status, last_heartbeat);

CREATE TABLE IF NOT EXISTS effect_intents (
  run_id           TEXT NOT NULL,
  effect_key       TEXT NOT NULL,
  state            TEXT NOT NULL DEFAULT 'intent'
                     CHECK (state IN ('intent', 'dispatched', 'committed', 'abandoned')),
  channel          TEXT NOT NULL
                     CHECK (channel IN ('telegram', 'farcaster', 'mail', 'onchain', 'internal')),
  payload_digest   TEXT NOT NULL,
  fence_owner      TEXT,
  fence_expires_at TEXT CHECK (fence_expires_at IS NULL OR fence_expires_at GLOB
                     '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  fence_epoch      INTEGER NULL,
  external_ref     TEXT,
  attempts         INTEGER NOT NULL DEFAULT 0,
  last_error       TEXT,
  created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) CHECK (created_at GLOB
                     '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  committed_at     TEXT CHECK (committed_at IS NULL OR committed_at GLOB
                     '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  PRIMARY KEY (run_id, effect_key)
);

CREATE INDEX IF NOT EXISTS idx_effect_intents_reconcile
  ON effect_intents (state, fence_expires_at)
  WHERE state = 'dispatched';
CREATE INDEX IF NOT EXISTS idx_effect_intents_run ON effect_intents (run_id);

CREATE TABLE IF NOT EXISTS outbox_dispatch_log (
  id         TEXT NOT NULL PRIMARY KEY,
  run_id     TEXT NOT NULL,
  effect_key TEXT NOT NULL,
  attempt    INTEGER NOT NULL,
  outcome    TEXT NOT NULL
               CHECK (outcome IN ('claimed', 'sent', 'failed', 'deduped', 'reconciled', 'abandoned')),
  at         TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) CHECK (at GLOB
               '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]Z'),
  detail     TEXT
);

CREATE INDEX IF NOT EXISTS idx_outbox_log_effect ON outbox_dispatch_log (run_id, effect_key);

CREATE TABLE IF NOT EXISTS heart_receipts (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  schema_version   TEXT NOT NULL,
  event            TEXT NOT NULL,
  run_id           TEXT NOT NULL,
  owner            TEXT NOT NULL,
  lease_expires_at TEXT NULL,
  effect_key       TEXT NULL,
  at               TEXT NOT NULL,
  digest           TEXT NOT NULL,
  receipt          TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS idx_heart_receipts_run ON heart_receipts (run_id, id);

-- heart_fencing_epoch_monotonic: the rule of the PostgreSQL trigger of the same name
-- (migrations/postgres/0002_heart_fleet.sql), as an AFTER UPDATE trigger, because a SQLite
-- trigger cannot assign NEW:
--   1. the epoch never decreases (a write that lowers it is put back to OLD's);
--   2. it is raised by one when the write takes a lease (NEW.status = 'leased', owner not
--      null, status/owner/expiry changed) without raising the epoch itself, while OLD was not
--      a live lease of that same owner (OLD.status not leased/running, another owner, or
--      OLD.lease_expires_at null or <= the write's clock). The write's clock is the
--      updated_at it stamps, or the current time when it leaves updated_at unchanged.
-- heart-fleet's own writes never trip it (acquire raises the epoch itself); it is there so
-- the two dialects hold the same invariant. Because it runs after the row is written, the
-- value an UPDATE ... RETURNING reports is the one before the trigger's correction.
-- Recursive triggers are off by default in SQLite; with them on, the trigger's own UPDATE
-- raises nothing further (its NEW epoch is above its OLD one).
CREATE TRIGGER IF NOT EXISTS heart_fencing_epoch_monotonic
AFTER UPDATE ON agent_runs
FOR EACH ROW
WHEN NEW.fencing_epoch < OLD.fencing_epoch
  OR (NEW.fencing_epoch = OLD.fencing_epoch
      AND NEW.status = 'leased'
      AND NEW.lease_owner IS NOT NULL
      AND (NEW.status IS NOT OLD.status
           OR NEW.lease_owner IS NOT OLD.lease_owner
           OR NEW.lease_expires_at IS NOT OLD.lease_expires_at)
      AND NOT (OLD.status IN ('leased', 'running')
               AND OLD.lease_owner IS NEW.lease_owner
               AND OLD.lease_expires_at IS NOT NULL
               AND OLD.lease_expires_at > COALESCE(NULLIF(NEW.updated_at, OLD.updated_at),
                                                   strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))))
BEGIN
  UPDATE agent_runs
  SET fencing_epoch = OLD.fencing_epoch + (
    CASE WHEN NEW.status = 'leased'
          AND NEW.lease_owner IS NOT NULL
          AND (NEW.status IS NOT OLD.status
               OR NEW.lease_owner IS NOT OLD.lease_owner
               OR NEW.lease_expires_at IS NOT OLD.lease_expires_at)
          AND NOT (OLD.status IN ('leased', 'running')
                   AND OLD.lease_owner IS NEW.lease_owner
                   AND OLD.lease_expires_at IS NOT NULL
                   AND OLD.lease_expires_at > COALESCE(NULLIF(NEW.updated_at, OLD.updated_at),
                                                       strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))
         THEN 1 ELSE 0 END)
  WHERE id = NEW.id;
END;

//! Inserting rows exactly as given: every column, timestamps and epoch included. The store
//! conformance suite seeds its fixtures this way, and hosts use it to create rows the lease
//! operations do not create (a plain `ready` run with a chosen id, an instance, an intent).
//! Timestamps are written as `toISOString()` text, JSON as text.

use heart_fleet_core::{InstanceRow, IntentRow, RunRow, StoreError, Timestamp};

use crate::{PgStore, SqliteStore, failed};

fn iso(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.to_iso())
}

fn json_text(v: Option<&serde_json::Value>) -> Option<String> {
    v.map(|v| v.to_string())
}

fn capabilities(row: &RunRow) -> String {
    serde_json::Value::from(row.required_capabilities.clone()).to_string()
}

impl SqliteStore {
    /// Inserts a run exactly as given.
    pub fn insert_run(&self, r: &RunRow) -> Result<(), StoreError> {
        self.connection()
            .execute(
                "INSERT INTO agent_runs (id, task_id, assignment_id, objective, required_capabilities, status, \
                 assigned_agent, lease_owner, lease_expires_at, retries, budget, approval_state, visibility, \
                 idempotency_key, created_by, created_at, updated_at, fencing_epoch) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                rusqlite::params![
                    r.id,
                    r.task_id,
                    r.assignment_id,
                    r.objective,
                    capabilities(r),
                    r.status.as_str(),
                    r.assigned_agent,
                    r.lease_owner,
                    iso(r.lease_expires_at),
                    r.retries,
                    json_text(r.budget.as_ref()),
                    r.approval_state,
                    r.visibility,
                    r.idempotency_key,
                    r.created_by,
                    r.created_at.to_iso(),
                    r.updated_at.to_iso(),
                    r.fencing_epoch,
                ],
            )
            .map_err(|e| failed("sqlite insert run", e))?;
        Ok(())
    }

    /// Inserts an instance exactly as given.
    pub fn insert_instance(&self, i: &InstanceRow) -> Result<(), StoreError> {
        self.connection()
            .execute(
                "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![
                    i.instance_id,
                    i.hostname,
                    i.pid,
                    i.status.as_str(),
                    i.started_at.to_iso(),
                    i.last_heartbeat.to_iso(),
                    json_text(i.metadata.as_ref()),
                ],
            )
            .map_err(|e| failed("sqlite insert instance", e))?;
        Ok(())
    }

    /// Inserts an intent exactly as given.
    pub fn insert_intent(&self, i: &IntentRow) -> Result<(), StoreError> {
        self.connection()
            .execute(
                "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, \
                 fence_expires_at, fence_epoch, external_ref, attempts, last_error, created_at, committed_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                rusqlite::params![
                    i.run_id,
                    i.effect_key,
                    i.state.as_str(),
                    i.channel,
                    i.payload_digest,
                    i.fence_owner,
                    iso(i.fence_expires_at),
                    i.fence_epoch,
                    json_text(i.external_ref.as_ref()),
                    i.attempts,
                    i.last_error,
                    i.created_at.to_iso(),
                    iso(i.committed_at),
                ],
            )
            .map_err(|e| failed("sqlite insert intent", e))?;
        Ok(())
    }
}

impl PgStore {
    /// Inserts a run exactly as given (`id` and `assignment_id` must be UUID text).
    pub fn insert_run(&self, r: &RunRow) -> Result<(), StoreError> {
        self.client()
            .execute(
                "INSERT INTO agent_runs (id, task_id, assignment_id, objective, required_capabilities, status, \
                 assigned_agent, lease_owner, lease_expires_at, retries, budget, approval_state, visibility, \
                 idempotency_key, created_by, created_at, updated_at, fencing_epoch) \
                 VALUES ($1::text::uuid, $2::text, $3::text::uuid, $4::text, \
                 ARRAY(SELECT json_array_elements_text($5::text::json)), $6::text, $7::text, $8::text, \
                 $9::text::timestamptz, $10::bigint, $11::text::jsonb, $12::text, $13::text, $14::text, $15::text, \
                 $16::text::timestamptz, $17::text::timestamptz, $18::bigint)",
                &[
                    &r.id,
                    &r.task_id,
                    &r.assignment_id,
                    &r.objective,
                    &capabilities(r),
                    &r.status.as_str(),
                    &r.assigned_agent,
                    &r.lease_owner,
                    &iso(r.lease_expires_at),
                    &r.retries,
                    &json_text(r.budget.as_ref()),
                    &r.approval_state,
                    &r.visibility,
                    &r.idempotency_key,
                    &r.created_by,
                    &r.created_at.to_iso(),
                    &r.updated_at.to_iso(),
                    &r.fencing_epoch,
                ],
            )
            .map_err(|e| failed("postgres insert run", e))?;
        Ok(())
    }

    /// Inserts an instance exactly as given.
    pub fn insert_instance(&self, i: &InstanceRow) -> Result<(), StoreError> {
        self.client()
            .execute(
                "INSERT INTO agent_instances (instance_id, hostname, pid, status, started_at, last_heartbeat, metadata) \
                 VALUES ($1::text, $2::text, $3::bigint, $4::text, $5::text::timestamptz, $6::text::timestamptz, \
                 $7::text::jsonb)",
                &[
                    &i.instance_id,
                    &i.hostname,
                    &i.pid,
                    &i.status.as_str(),
                    &i.started_at.to_iso(),
                    &i.last_heartbeat.to_iso(),
                    &json_text(i.metadata.as_ref()),
                ],
            )
            .map_err(|e| failed("postgres insert instance", e))?;
        Ok(())
    }

    /// Inserts an intent exactly as given (`run_id` must be UUID text).
    pub fn insert_intent(&self, i: &IntentRow) -> Result<(), StoreError> {
        self.client()
            .execute(
                "INSERT INTO effect_intents (run_id, effect_key, state, channel, payload_digest, fence_owner, \
                 fence_expires_at, fence_epoch, external_ref, attempts, last_error, created_at, committed_at) \
                 VALUES ($1::text::uuid, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text::timestamptz, \
                 $8::bigint, $9::text::jsonb, $10::bigint, $11::text, $12::text::timestamptz, $13::text::timestamptz)",
                &[
                    &i.run_id,
                    &i.effect_key,
                    &i.state.as_str(),
                    &i.channel,
                    &i.payload_digest,
                    &i.fence_owner,
                    &iso(i.fence_expires_at),
                    &i.fence_epoch,
                    &json_text(i.external_ref.as_ref()),
                    &i.attempts,
                    &i.last_error,
                    &i.created_at.to_iso(),
                    &iso(i.committed_at),
                ],
            )
            .map_err(|e| failed("postgres insert intent", e))?;
        Ok(())
    }
}

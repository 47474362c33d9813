//! The plain floor of the PostgreSQL benchmarks, shared by `benches/postgres.rs` and
//! `examples/pg_cycle_profile.rs`.

/// The plain floor: one conditional single-row `UPDATE … RETURNING` for acquire and one for
/// release, on the same table (so the same indexes and the epoch trigger).
pub const PLAIN_ACQUIRE: &str = "UPDATE agent_runs SET status = 'leased', lease_owner = $2::text, \
     lease_expires_at = clock_timestamp() + interval '60 seconds', updated_at = clock_timestamp(), \
     fencing_epoch = fencing_epoch + 1 \
     WHERE id = $1::text::uuid AND (status = 'ready' OR (status IN ('leased', 'running') \
     AND (lease_expires_at IS NULL OR lease_expires_at <= clock_timestamp()))) \
     RETURNING lease_expires_at::text";
pub const PLAIN_RELEASE: &str = "UPDATE agent_runs SET status = 'ready', lease_owner = NULL, lease_expires_at = NULL, \
     retries = 0, updated_at = clock_timestamp() \
     WHERE id = $1::text::uuid AND status IN ('leased', 'running') AND lease_owner = $2::text \
     AND lease_expires_at = $3::text::timestamptz AND lease_expires_at > clock_timestamp() \
     RETURNING id::text";

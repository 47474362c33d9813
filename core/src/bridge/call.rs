//! [`Call`]: one operation of the API with its arguments, named as the API names it.
//!
//! A host starts an operation with its name and its arguments as JSON text
//! ([`BridgeFleet::begin`](super::BridgeFleet::begin)); [`Call::parse`] turns the two into one
//! typed value, and [`Call::NAMES`] lists the names. The arguments of each operation are
//! exactly its fields: an unknown field is `invalid-input` (a misspelt `ttlSecond` is never
//! ignored), and an optional field left out takes the core's default ([`ops`]'s
//! `DEFAULT_*` constants), so no host keeps a copy of them.

use serde::Deserialize;
use serde_json::Value;

use crate::HeartError;
use crate::model::{FencingToken, RunStatus};
use crate::ops::{self, ReleaseTo};

/// One operation of the API with its arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `acquire(runId, owner, ttlSeconds)`.
    Acquire {
        /// The run.
        run_id: String,
        /// Who takes the lease.
        owner: String,
        /// The lease length (validated by the operation, which keeps the reference's
        /// `Invalid input` result for a bad one).
        ttl_seconds: i64,
    },
    /// `renew(fence, ttlSeconds)`.
    Renew {
        /// The token.
        fence: FencingToken,
        /// The new lease length.
        ttl_seconds: i64,
    },
    /// `release(fence, nextStatus)`.
    Release {
        /// The token.
        fence: FencingToken,
        /// Where the run goes.
        next_status: ReleaseTo,
    },
    /// `verifyFence(fence)`.
    VerifyFence {
        /// The token.
        fence: FencingToken,
    },
    /// `guardIrreversible(fence, effectKey)` (the effect itself is the host's).
    GuardIrreversible {
        /// The token.
        fence: FencingToken,
        /// The effect's key.
        effect_key: String,
    },
    /// `sendOnce(fence, channel, effectKey, payload)` (the send itself is the host's).
    SendOnce {
        /// The token.
        fence: FencingToken,
        /// The channel.
        channel: String,
        /// The effect's key.
        effect_key: String,
        /// What is sent.
        payload: Value,
    },
    /// `reclaimExpired({limit})`.
    ReclaimExpired {
        /// At most this many runs (default [`ops::DEFAULT_SWEEP_LIMIT`]).
        limit: u32,
    },
    /// `reconcileOutbox({maxAttempts, limit})` (the probes are the host's).
    ReconcileOutbox {
        /// Probes per intent before it is failed (default
        /// [`ops::DEFAULT_RECONCILE_MAX_ATTEMPTS`]).
        max_attempts: i64,
        /// At most this many intents (default [`ops::DEFAULT_RECONCILE_LIMIT`]).
        limit: u32,
    },
    /// `reclaimDeadInstanceRuns({ttlMs, maxReclaimsPerCycle})`.
    ReclaimDeadInstanceRuns {
        /// Silence after which an instance is dead (default [`ops::DEFAULT_LIVENESS_TTL_MS`]).
        ttl_ms: i64,
        /// At most this many runs (default [`ops::DEFAULT_LIVENESS_LIMIT`]).
        limit: u32,
    },
    /// `listRuns({status, limit})`.
    ListRuns {
        /// Only runs of this status.
        status: Option<RunStatus>,
        /// At most this many (default [`ops::DEFAULT_SWEEP_LIMIT`]).
        limit: u32,
    },
    /// `DurableEffectLedger.recordOnce(runId, effectKey)`.
    RecordOnce {
        /// The run.
        run_id: String,
        /// The effect's key.
        effect_key: String,
    },
    /// `registerInstance(instanceId, {hostname, pid, metadata})`.
    RegisterInstance {
        /// The instance.
        instance_id: String,
        /// Its host name.
        hostname: Option<String>,
        /// Its process id.
        pid: Option<i64>,
        /// Free-form metadata.
        metadata: Option<Value>,
    },
    /// `heartbeatInstance(instanceId)`.
    HeartbeatInstance {
        /// The instance.
        instance_id: String,
    },
    /// `drainInstance(instanceId)`.
    DrainInstance {
        /// The instance.
        instance_id: String,
    },
    /// `listInstances()`.
    ListInstances,
    /// `getRun(runId)`.
    GetRun {
        /// The run.
        run_id: String,
    },
    /// `requeueRun(runId, operator)`.
    RequeueRun {
        /// The run.
        run_id: String,
        /// Who requeues it.
        operator: String,
    },
    /// `forceRelease(runId)`.
    ForceRelease {
        /// The run.
        run_id: String,
    },
    /// `ensureResourceRun(kind, key, {objective, createdBy})`.
    EnsureResourceRun {
        /// The resource's kind.
        kind: String,
        /// Its key.
        key: String,
        /// The run's objective.
        objective: String,
        /// Who creates it.
        created_by: String,
    },
}

// The arguments of each operation as JSON carries them: exactly these fields.

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AcquireArgs {
    run_id: String,
    owner: String,
    ttl_seconds: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RenewArgs {
    fence: FencingToken,
    ttl_seconds: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReleaseArgs {
    fence: FencingToken,
    next_status: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FenceArgs {
    fence: FencingToken,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GuardArgs {
    fence: FencingToken,
    effect_key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SendArgs {
    fence: FencingToken,
    channel: String,
    effect_key: String,
    #[serde(default)]
    payload: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReclaimArgs {
    #[serde(default = "sweep_limit")]
    limit: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ReconcileArgs {
    #[serde(default = "reconcile_max_attempts")]
    max_attempts: i64,
    #[serde(default = "reconcile_limit")]
    limit: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LivenessArgs {
    #[serde(default = "liveness_ttl_ms")]
    ttl_ms: i64,
    #[serde(default = "liveness_limit")]
    limit: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListRunsArgs {
    #[serde(default)]
    status: Option<String>,
    #[serde(default = "sweep_limit")]
    limit: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RecordArgs {
    run_id: String,
    effect_key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RegisterArgs {
    instance_id: String,
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    pid: Option<i64>,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InstanceArgs {
    instance_id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RunArgs {
    run_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RequeueArgs {
    run_id: String,
    operator: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResourceArgs {
    kind: String,
    key: String,
    /// Absent or null: [`ops::default_resource_objective`].
    #[serde(default)]
    objective: Option<String>,
    /// Absent or null: [`ops::default_resource_creator`].
    #[serde(default)]
    created_by: Option<String>,
}

fn sweep_limit() -> u32 {
    ops::DEFAULT_SWEEP_LIMIT
}
fn reconcile_max_attempts() -> i64 {
    ops::DEFAULT_RECONCILE_MAX_ATTEMPTS
}
fn reconcile_limit() -> u32 {
    ops::DEFAULT_RECONCILE_LIMIT
}
fn liveness_ttl_ms() -> i64 {
    ops::DEFAULT_LIVENESS_TTL_MS
}
fn liveness_limit() -> u32 {
    ops::DEFAULT_LIVENESS_LIMIT
}

fn args<'a, T: Deserialize<'a>>(name: &str, text: &'a str) -> Result<T, HeartError> {
    serde_json::from_str(text).map_err(|e| HeartError::invalid(format!("{name}: bad arguments: {e}")))
}

impl Call {
    /// Every operation's name, as the API names it.
    pub const NAMES: [&'static str; 19] = [
        "acquire",
        "renew",
        "release",
        "verifyFence",
        "guardIrreversible",
        "sendOnce",
        "reclaimExpired",
        "reconcileOutbox",
        "reclaimDeadInstanceRuns",
        "listRuns",
        "recordOnce",
        "registerInstance",
        "heartbeatInstance",
        "drainInstance",
        "listInstances",
        "getRun",
        "requeueRun",
        "forceRelease",
        "ensureResourceRun",
    ];

    /// The call of operation `name` with its arguments (a JSON object). An unknown
    /// operation, an unknown field, a missing one or one of the wrong type is `invalid-input`.
    pub fn parse(name: &str, text: &str) -> Result<Call, HeartError> {
        Ok(match name {
            "acquire" => {
                let a: AcquireArgs = args(name, text)?;
                Call::Acquire { run_id: a.run_id, owner: a.owner, ttl_seconds: a.ttl_seconds }
            }
            "renew" => {
                let a: RenewArgs = args(name, text)?;
                Call::Renew { fence: a.fence, ttl_seconds: a.ttl_seconds }
            }
            "release" => {
                let a: ReleaseArgs = args(name, text)?;
                Call::Release { fence: a.fence, next_status: ReleaseTo::parse(&a.next_status)? }
            }
            "verifyFence" => Call::VerifyFence { fence: args::<FenceArgs>(name, text)?.fence },
            "guardIrreversible" => {
                let a: GuardArgs = args(name, text)?;
                Call::GuardIrreversible { fence: a.fence, effect_key: a.effect_key }
            }
            "sendOnce" => {
                let a: SendArgs = args(name, text)?;
                Call::SendOnce { fence: a.fence, channel: a.channel, effect_key: a.effect_key, payload: a.payload }
            }
            "reclaimExpired" => Call::ReclaimExpired { limit: args::<ReclaimArgs>(name, text)?.limit },
            "reconcileOutbox" => {
                let a: ReconcileArgs = args(name, text)?;
                Call::ReconcileOutbox { max_attempts: a.max_attempts, limit: a.limit }
            }
            "reclaimDeadInstanceRuns" => {
                let a: LivenessArgs = args(name, text)?;
                Call::ReclaimDeadInstanceRuns { ttl_ms: a.ttl_ms, limit: a.limit }
            }
            "listRuns" => {
                let a: ListRunsArgs = args(name, text)?;
                Call::ListRuns { status: a.status.as_deref().map(RunStatus::parse).transpose()?, limit: a.limit }
            }
            "recordOnce" => {
                let a: RecordArgs = args(name, text)?;
                Call::RecordOnce { run_id: a.run_id, effect_key: a.effect_key }
            }
            "registerInstance" => {
                let a: RegisterArgs = args(name, text)?;
                Call::RegisterInstance {
                    instance_id: a.instance_id,
                    hostname: a.hostname,
                    pid: a.pid,
                    metadata: a.metadata,
                }
            }
            "heartbeatInstance" => {
                Call::HeartbeatInstance { instance_id: args::<InstanceArgs>(name, text)?.instance_id }
            }
            "drainInstance" => Call::DrainInstance { instance_id: args::<InstanceArgs>(name, text)?.instance_id },
            "listInstances" => {
                args::<NoArgs>(name, text)?;
                Call::ListInstances
            }
            "getRun" => Call::GetRun { run_id: args::<RunArgs>(name, text)?.run_id },
            "requeueRun" => {
                let a: RequeueArgs = args(name, text)?;
                Call::RequeueRun { run_id: a.run_id, operator: a.operator }
            }
            "forceRelease" => Call::ForceRelease { run_id: args::<RunArgs>(name, text)?.run_id },
            "ensureResourceRun" => {
                let a: ResourceArgs = args(name, text)?;
                let objective = a.objective.unwrap_or_else(|| ops::default_resource_objective(&a.kind, &a.key));
                let created_by = a.created_by.unwrap_or_else(|| ops::default_resource_creator(&a.kind));
                Call::EnsureResourceRun { kind: a.kind, key: a.key, objective, created_by }
            }
            other => {
                return Err(HeartError::invalid(format!(
                    "unknown operation {other:?} (the operations are {})",
                    Call::NAMES.join(", ")
                )));
            }
        })
    }

    /// The operation's name.
    pub fn name(&self) -> &'static str {
        match self {
            Call::Acquire { .. } => "acquire",
            Call::Renew { .. } => "renew",
            Call::Release { .. } => "release",
            Call::VerifyFence { .. } => "verifyFence",
            Call::GuardIrreversible { .. } => "guardIrreversible",
            Call::SendOnce { .. } => "sendOnce",
            Call::ReclaimExpired { .. } => "reclaimExpired",
            Call::ReconcileOutbox { .. } => "reconcileOutbox",
            Call::ReclaimDeadInstanceRuns { .. } => "reclaimDeadInstanceRuns",
            Call::ListRuns { .. } => "listRuns",
            Call::RecordOnce { .. } => "recordOnce",
            Call::RegisterInstance { .. } => "registerInstance",
            Call::HeartbeatInstance { .. } => "heartbeatInstance",
            Call::DrainInstance { .. } => "drainInstance",
            Call::ListInstances => "listInstances",
            Call::GetRun { .. } => "getRun",
            Call::RequeueRun { .. } => "requeueRun",
            Call::ForceRelease { .. } => "forceRelease",
            Call::EnsureResourceRun { .. } => "ensureResourceRun",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_to_its_call_and_back() {
        let fence = r#"{"runId":"r","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z","epoch":1}"#;
        let minimal = |name: &str| -> String {
            match name {
                "acquire" => r#"{"runId":"r","owner":"w","ttlSeconds":60}"#.into(),
                "renew" => format!(r#"{{"fence":{fence},"ttlSeconds":60}}"#),
                "release" => format!(r#"{{"fence":{fence},"nextStatus":"ready"}}"#),
                "verifyFence" => format!(r#"{{"fence":{fence}}}"#),
                "guardIrreversible" => format!(r#"{{"fence":{fence},"effectKey":"k"}}"#),
                "sendOnce" => format!(r#"{{"fence":{fence},"channel":"mail","effectKey":"k"}}"#),
                "recordOnce" => r#"{"runId":"r","effectKey":"k"}"#.into(),
                "registerInstance" | "heartbeatInstance" | "drainInstance" => r#"{"instanceId":"i"}"#.into(),
                "getRun" | "forceRelease" => r#"{"runId":"r"}"#.into(),
                "requeueRun" => r#"{"runId":"r","operator":"o"}"#.into(),
                "ensureResourceRun" => r#"{"kind":"k","key":"y","objective":"o","createdBy":"c"}"#.into(),
                _ => "{}".into(),
            }
        };
        for name in Call::NAMES {
            let call = Call::parse(name, &minimal(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(call.name(), name);
        }
    }

    #[test]
    fn left_out_options_take_the_cores_defaults() {
        assert_eq!(
            Call::parse("reclaimExpired", "{}").unwrap(),
            Call::ReclaimExpired { limit: ops::DEFAULT_SWEEP_LIMIT }
        );
        assert_eq!(
            Call::parse("reclaimDeadInstanceRuns", r#"{"limit":3}"#).unwrap(),
            Call::ReclaimDeadInstanceRuns { ttl_ms: ops::DEFAULT_LIVENESS_TTL_MS, limit: 3 }
        );
        assert_eq!(
            Call::parse("reconcileOutbox", "{}").unwrap(),
            Call::ReconcileOutbox {
                max_attempts: ops::DEFAULT_RECONCILE_MAX_ATTEMPTS,
                limit: ops::DEFAULT_RECONCILE_LIMIT
            }
        );
        assert_eq!(
            Call::parse("listRuns", "{}").unwrap(),
            Call::ListRuns { status: None, limit: ops::DEFAULT_SWEEP_LIMIT }
        );
        let resource = |objective: &str, created_by: &str| Call::EnsureResourceRun {
            kind: "cache".into(),
            key: "eu".into(),
            objective: objective.into(),
            created_by: created_by.into(),
        };
        assert_eq!(
            Call::parse("ensureResourceRun", r#"{"kind":"cache","key":"eu"}"#).unwrap(),
            resource("resource cache:eu", "heart-fleet:cache")
        );
        assert_eq!(
            Call::parse("ensureResourceRun", r#"{"kind":"cache","key":"eu","objective":null,"createdBy":"me"}"#)
                .unwrap(),
            resource("resource cache:eu", "me")
        );
    }

    #[test]
    fn unknown_fields_names_and_bad_values_are_invalid_input() {
        for (name, text) in [
            ("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60,"ttlSecond":1}"#),
            ("reclaimExpired", r#"{"limt":5}"#),
            ("reclaimExpired", r#"{"limit":null}"#),
            ("reclaimExpired", r#"{"limit":-1}"#),
            ("reclaimExpired", r#"{"limit":1.5}"#),
            ("listInstances", r#"{"x":1}"#),
            ("listRuns", r#"{"status":"nope"}"#),
            (
                "release",
                r#"{"fence":{"runId":"r","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"},"nextStatus":"leased"}"#,
            ),
            ("verify", "{}"),
            ("reclaim", "{}"),
        ] {
            let e = Call::parse(name, text).expect_err(name);
            assert_eq!(e.code, crate::ErrorCode::InvalidInput, "{name} {text}: {e:?}");
        }
        let e = Call::parse("acquire", r#"{"runId":"r","owner":"w","ttlSeconds":60,"ttlSecond":1}"#).unwrap_err();
        assert!(e.message.contains("ttlSecond"), "{}", e.message);
    }
}

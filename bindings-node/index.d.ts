// Type declarations of the npm package `heart-fleet` (the Node.js binding of the Rust
// heart-fleet core). The same declarations serve `import` (index.mjs) and `require`
// (index.cjs).

// ---------------------------------------------------------------------------------------
// Data model (snake_case rows, camelCase tokens and receipts, as in the TypeScript package)
// ---------------------------------------------------------------------------------------

/** The 12 run statuses, in the reference's order. */
export type RunStatus =
  | 'created'
  | 'ready'
  | 'leased'
  | 'running'
  | 'waiting_approval'
  | 'blocked'
  | 'verifying'
  | 'recovering'
  | 'completed'
  | 'failed'
  | 'cancelled'
  | 'quarantined';

/** How `release` leaves a run. `ready` is for resource runs only (fix 8). */
export type NextStatus = 'completed' | 'failed' | 'cancelled' | 'ready';

/** An `agent_runs` row. Timestamps are `toISOString()` text. */
export interface AgentRunRow {
  id: string;
  task_id: string | null;
  assignment_id: string;
  objective: string;
  required_capabilities: string[];
  status: RunStatus;
  assigned_agent: string | null;
  lease_owner: string | null;
  lease_expires_at: string | null;
  retries: number;
  budget: unknown | null;
  approval_state: string;
  visibility: string;
  idempotency_key: string;
  created_by: string;
  created_at: string;
  updated_at: string;
  /** Monotonic fencing epoch, raised by every successful acquire (not in the reference). */
  fencing_epoch: number;
}

/** A run for `MemoryLeaseStore.insert`: `id` is required, the rest take the schema defaults. */
export type NewRun = { id: string } & Partial<Omit<AgentRunRow, 'id' | 'created_at' | 'updated_at' | 'lease_expires_at'>> & {
  lease_expires_at?: string | Date | null;
};

/**
 * Proof of a lease. Tokens minted by the TypeScript package have no `epoch`; they are
 * checked by the three-field equality. Frozen.
 */
export interface FencingToken {
  readonly runId: string;
  readonly owner: string;
  readonly leaseExpiresAt: string;
  readonly epoch?: number;
}

/** What a receipt records. The first nine are the reference's; the operator events are new. */
export type HeartEvent =
  | 'acquired'
  | 'renewed'
  | 'released'
  | 'reclaimed'
  | 'quarantined'
  | 'fence_verified'
  | 'fence_rejected'
  | 'effect_committed'
  | 'effect_deduped'
  | 'requeued'
  | 'force_released';

/** A tamper-evident receipt (`zao.heart.receipt.v1`), frozen, fields in the reference's order. */
export interface HeartReceipt {
  readonly schemaVersion: 'zao.heart.receipt.v1';
  readonly event: HeartEvent;
  readonly runId: string;
  readonly owner: string;
  readonly leaseExpiresAt: string | null;
  readonly effectKey: string | null;
  /** The store's clock when it was emitted. Not covered by the digest. */
  readonly at: string;
  /** `sha256:dreamnet-sorted-json:v0:` + sha256 of canonical {event, runId, owner, leaseExpiresAt, effectKey}. */
  readonly digest: string;
}

/** The reference's 13 counters. */
export interface HeartMetrics {
  acquireAttempts: number;
  acquireWins: number;
  acquireCollisions: number;
  renews: number;
  renewFailures: number;
  releases: number;
  releaseFailures: number;
  reclaims: number;
  quarantines: number;
  fenceVerifications: number;
  fenceRejections: number;
  effectCommits: number;
  effectDedupes: number;
}

/** The stable error codes of the core's registry. */
export type ErrorCode =
  | 'invalid-input'
  | 'run-not-found'
  | 'lease-held'
  | 'collision'
  | 'fence-rejected'
  | 'quarantined'
  | 'deduped'
  | 'store-unavailable'
  | 'store-protocol'
  | 'receipt-tampered'
  | 'effect-failed'
  | 'invalid-state';

/** Why a token stopped proving its lease. */
export type LostCause = 'superseded' | 'expired' | 'released' | 'not-found' | 'store-unavailable';

/** An `effect_intents` row. */
export interface IntentRow {
  run_id: string;
  effect_key: string;
  state: 'intent' | 'dispatched' | 'committed' | 'abandoned';
  channel: string;
  payload_digest: string;
  fence_owner: string | null;
  fence_expires_at: string | null;
  fence_epoch: number | null;
  external_ref: unknown | null;
  attempts: number;
  last_error: string | null;
  created_at: string;
  committed_at: string | null;
}

/** An `outbox_dispatch_log` entry. */
export interface DispatchLogEntry {
  run_id: string;
  effect_key: string;
  attempt: number;
  outcome: 'claimed' | 'sent' | 'failed' | 'deduped' | 'reconciled' | 'abandoned';
  at: string | null;
  detail: unknown | null;
}

/** An `agent_instances` row. */
export interface InstanceRow {
  instance_id: string;
  hostname: string | null;
  pid: number | null;
  status: 'alive' | 'draining' | 'dead';
  started_at: string;
  last_heartbeat: string;
  metadata: unknown | null;
}

// ---------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------

/**
 * `acquire`'s result: the reference's shape plus a `code` on failure. On success there is
 * no `reason`; on failure there is no `fence`, and `run` is the row as read before the
 * attempt (null for invalid input and a missing run).
 */
export interface AcquireResult {
  acquired: boolean;
  run: AgentRunRow | null;
  fence?: FencingToken;
  reason?: string;
  code?: ErrorCode;
}

/** A renew or release with its outcome. */
export type Fenced<T> = { outcome: 'ok'; value: T } | { outcome: 'rejected'; cause: LostCause; code: 'fence-rejected' };

export interface ReclaimSummary {
  reclaimedCount: number;
  reclaimedIds: string[];
  quarantinedIds: string[];
  errors: { runId: string; error: string }[];
}

export interface LivenessSummary {
  deadInstanceIds: string[];
  reclaimedCount: number;
  reclaimedIds: string[];
  quarantinedIds: string[];
  errors: { runId: string; error: string }[];
}

export type GuardResult<T> =
  | { committed: true; result: T }
  | { committed: false; reason: 'fence-rejected'; code: 'fence-rejected' }
  | { committed: false; reason: 'already-committed'; code: 'deduped' };

export type SendResult<T> =
  | { sent: true; result: T; externalRef: unknown; committed: boolean }
  | { sent: false; reason: 'fence-rejected' | 'deduped' | 'lost-dispatch-race'; code: ErrorCode };

export interface ReconcileSummary {
  scanned: number;
  committed: number;
  reopened: number;
  abandoned: number;
  left: number;
  errors: { effectKey: string; error: string }[];
}

export type ExecuteResult<T> =
  | { ran: true; result: T; released: boolean; lost?: LostCause }
  | { ran: false; reason: 'lease-held' | 'lease-error'; code?: ErrorCode; released: false };

// ---------------------------------------------------------------------------------------
// The store contract
// ---------------------------------------------------------------------------------------

/** A column value in a store request: `{type, value}`. */
export type Val =
  | { type: 'null' }
  | { type: 'text'; value: string }
  | { type: 'int'; value: number }
  | { type: 'time'; value: string }
  | { type: 'json'; value: unknown };

/** A condition (the core's `Cond`, externally tagged). */
export type Cond =
  | 'true'
  | { eq: [string, Val] }
  | { in: [string, Val[]] }
  | { at_most: [string, number] }
  | { expired_at: string }
  | { live_at: string }
  | { older_than: [string, number] }
  | { starts_with: [string, string] }
  | { and: Cond[] }
  | { or: Cond[] }
  | { not: Cond }
  | { run_held_by: { owner: string; lease_expires_at: string; epoch: number | null } }
  | { owner_instance_dead: { ttl_ms: number } };

/** An assigned value (the core's `Expr`). */
export type Expr = { val: Val } | 'now' | { now_plus: number } | { add: [string, number] } | { case: [Cond, Expr, Expr] };

/**
 * One store request (the core's `StoreRequest`, tagged by `op`). Every request is a read,
 * a scan, or one atomic conditional write; conditions and assignments may use the store's
 * clock (`now`). See core/src/request.rs for the exact semantics, and `MemoryLeaseStore`,
 * `PgLeaseStore` for implementations.
 */
export type StoreRequest =
  | { op: 'now' }
  | { op: 'read_run'; run_id: string }
  /**
   * `want_after` (absent means `true`): `false` when the operation needs only whether the
   * write hit (verifyFence); the store may then answer `run_hit` instead of the rows.
   */
  | { op: 'update_run'; run_id: string; when: Cond; set: [string, Expr][]; want_before: boolean; want_after?: boolean }
  | { op: 'scan_runs'; when: Cond; order: 'expires_at' | 'updated_at_desc'; limit: number }
  | { op: 'ensure_run'; idempotency_key: string; objective: string; created_by: string }
  | { op: 'claim_intent'; run_id: string; effect_key: string; channel: string; payload_digest: string }
  | {
      op: 'update_intent';
      run_id: string;
      effect_key: string;
      when: Cond;
      set: [string, Expr][];
      log: Omit<DispatchLogEntry, 'at'> | null;
    }
  | { op: 'scan_intents'; when: Cond; limit: number }
  | { op: 'read_log'; run_id: string; effect_key: string }
  | { op: 'upsert_instance'; instance_id: string; hostname: string | null; pid: number | null; metadata: unknown | null }
  | { op: 'update_instances'; when: Cond; set: [string, Expr][] }
  | { op: 'scan_instances'; when: Cond };

/** The reply inside a store answer (tagged by `kind`). */
export type StoreReply =
  | { kind: 'now' }
  | { kind: 'run'; run: AgentRunRow | null }
  | { kind: 'run_write'; before: AgentRunRow | null; after: AgentRunRow | null }
  /** For an `update_run` that wants neither row (`want_after: false`, no `want_before`): whether the write hit. */
  | { kind: 'run_hit'; hit: boolean }
  | { kind: 'runs'; runs: AgentRunRow[] }
  | { kind: 'ensured'; run: AgentRunRow; created: boolean }
  | { kind: 'claim'; intent: IntentRow; claimed: boolean }
  | { kind: 'intent'; intent: IntentRow | null }
  | { kind: 'intents'; intents: IntentRow[] }
  | { kind: 'log'; entries: DispatchLogEntry[] }
  | { kind: 'instances'; instances: InstanceRow[] };

/** A store's answer: the reply and the store's clock (whole milliseconds) it used. */
export interface StoreAnswer {
  now: string;
  reply: StoreReply;
}

/**
 * The store contract. `execute` runs one request atomically and returns its answer (or its
 * JSON text), synchronously or as a Promise. A failure must throw or reject (never answer
 * a miss): the operation then fails with `store-unavailable` and nothing changes. An answer
 * that is not a StoreAnswer fails the operation with `store-protocol`.
 */
export interface LeaseStore {
  execute(request: StoreRequest): StoreAnswer | string | Promise<StoreAnswer | string>;
}

/**
 * A run as a user's store hands it over: the TypeScript package's schema, where missing
 * columns (`fencing_epoch` and the rest) take the schema's defaults.
 */
export type StoredRun = { id: string } & Partial<Omit<AgentRunRow, 'lease_expires_at' | 'updated_at' | 'created_at'>> & {
  lease_expires_at?: string | Date | null;
  updated_at?: string | Date;
  created_at?: string | Date;
};

/** The conditions of `conditionalUpdate`: strict equality, membership, a timestamp strictly before. */
export interface LeaseConditions {
  eq?: Record<string, unknown>;
  in?: Record<string, unknown[]>;
  lt?: Record<string, string>;
}

/**
 * The TypeScript package's `LeaseStore` contract, accepted by `HeartFleet` as its store:
 * each request is decided by the core on the row `getRun` returns and written back with
 * `conditionalUpdate` conditioned on every column the decision read (re-decided at most
 * `casRetries` times when the row changed); renew, verifyFence and a release to a final status
 * are one `conditionalUpdate` with the token's `eq` and `in` conditions, as the TypeScript
 * package writes them; sweeps go through `findExpiredLeases`; `now()` is
 * the clock (so skewed worker clocks disagree about expiry). It cannot hold effect intents,
 * instances or run listings: those requests fail with `invalid-input`.
 */
export interface ReferenceLeaseStore {
  getRun(runId: string): StoredRun | null | Promise<StoredRun | null>;
  /** Atomic: merges `updates` when every condition holds; the updated row, or null. */
  conditionalUpdate(runId: string, updates: Record<string, unknown>, conditions: LeaseConditions): StoredRun | null | Promise<StoredRun | null>;
  findExpiredLeases(nowIso: string, limit: number): StoredRun[] | Promise<StoredRun[]>;
  now(): Date | Promise<Date>;
}

/** An instance as a LivenessStore hands it over. */
export type StoredInstance = Pick<InstanceRow, 'instance_id' | 'status'> & { last_heartbeat: string | Date } & Partial<InstanceRow>;

/**
 * The TypeScript package's `LivenessStore`, accepted by `LivenessReclaimer({store})`.
 * `reclaimRun(runId, owner, retries)` returns the run to `ready` with those retries when
 * it is still owned by `owner`, and answers whether it did.
 */
export interface LivenessStore {
  now(): Date | Promise<Date>;
  liveInstances(): StoredInstance[] | Promise<StoredInstance[]>;
  markInstancesDead(instanceIds: string[]): unknown;
  runsOwnedBy(instanceIds: string[], limit: number): StoredRun[] | Promise<StoredRun[]>;
  reclaimRun(runId: string, owner: string, retries: number): boolean | Promise<boolean>;
}

/** The effect-ledger contract of `guardIrreversible` (the reference's `EffectLedger`). */
export interface EffectLedger {
  recordOnce(runId: string, effectKey: string): boolean | Promise<boolean>;
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/** An error with a stable code. Wrong argument types are `TypeError`s with `code: 'invalid-input'`. */
export declare class HeartFleetError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string);
}

/** The lease-lost signal's `reason`. */
export declare class LeaseLostError extends Error {
  /** Why the lease was lost. */
  readonly lost: LostCause;
  /** `store-unavailable` when renewals kept failing, else `fence-rejected`. */
  readonly code: 'fence-rejected' | 'store-unavailable';
  readonly runId: string;
}

export declare const ERROR_CODES: readonly ErrorCode[];
export declare const RUN_STATUSES: readonly RunStatus[];
export declare const CHANNELS: readonly ('telegram' | 'farcaster' | 'mail' | 'onchain' | 'internal')[];
/** The longest lease: one year, in seconds. */
export declare const MAX_TTL_SECONDS: 31536000;
export declare const DEFAULT_LIVENESS_TTL_MS: 90000;
export declare const DIGEST_PREFIX: 'sha256:dreamnet-sorted-json:v0:';
export declare const RECEIPT_SCHEMA_VERSION: 'zao.heart.receipt.v1';

// ---------------------------------------------------------------------------------------
// Stores
// ---------------------------------------------------------------------------------------

/**
 * The deterministic in-memory store (the core's, in Rust). Its clock starts at the Unix
 * epoch unless given. A `HeartFleet` over it runs operations synchronously inside Rust.
 */
export declare class MemoryLeaseStore implements LeaseStore, ReferenceLeaseStore {
  constructor(now?: Date | string | number);
  /** A store seeded by a conformance scenario (JSON text). */
  static fromScenario(scenario: string): MemoryLeaseStore;
  now(): Date;
  setNow(now: Date | string | number): void;
  advance(ms: number): void;
  /** Inserts a run (timestamps = the clock); a reused idempotency key throws `Idempotency key collision: <key>`. */
  insert(run: NewRun): AgentRunRow;
  getRun(runId: string): AgentRunRow | null;
  /**
   * The TypeScript package's conditional update (one of the core's conditional writes): eq is
   * strict equality (text for a timestamp compares the instant), in is membership, lt a
   * timestamp strictly before; a shallow merge (`updated_at` only when given). Conditions and
   * updates may name id, status, lease_owner, idempotency_key, lease_expires_at, updated_at,
   * retries, fencing_epoch.
   */
  conditionalUpdate(runId: string, updates: Partial<Omit<AgentRunRow, 'id' | 'idempotency_key'>>, conditions?: LeaseConditions): Promise<AgentRunRow | null>;
  /** Held runs expired at `nowIso` (`lease_expires_at <= nowIso`, or no expiry), insertion order. */
  findExpiredLeases(nowIso: string | Date, limit?: number): Promise<AgentRunRow[]>;
  runs(): AgentRunRow[];
  intents(): IntentRow[];
  dispatchLog(): DispatchLogEntry[];
  instances(): InstanceRow[];
  insertInstance(row: Partial<InstanceRow> & { instance_id: string }): void;
  insertIntent(row: IntentRow): void;
  /** The next `times` requests named `request` (`update_run`, `read_run`, …, or `*`) fail. */
  failNext(request?: string, times?: number): void;
  failAfter(request: string, after: number, times: number): void;
  requestCount(): number;
  execute(request: StoreRequest | string): StoreAnswer;
}

/** What `PgLeaseStore` needs of a node-postgres `Pool` or `Client`. */
export interface PgQueryable {
  query(config: { text: string; values?: unknown[]; name?: string; rowMode?: 'array' }): Promise<{ rows: unknown[][]; fields: { name: string }[] }>;
}

/**
 * A store over PostgreSQL (node-postgres): each request is the one statement the core
 * renders, run in autocommit (with its own `receiptSink()` as the fleet's sink, in one
 * transaction per operation with its receipts); the clock is the database's. Pass `{pool}` or `{client}` (yours
 * to close), or `{connectionString, max?}` (requires the `pg` package; `end()` closes it).
 */
export declare class PgLeaseStore implements LeaseStore {
  constructor(
    options:
      | { pool: PgQueryable; prepare?: boolean }
      | { client: PgQueryable; prepare?: boolean }
      | { connectionString: string; max?: number; prepare?: boolean },
  );
  execute(request: StoreRequest | string): Promise<string>;
  /** Runs the core's migrations (idempotent). */
  /** The core's migration protocol; resolves to each migration and whether this call applied it. */
  migrate(): Promise<{ name: string; applied: boolean }[]>;
  /**
   * An `onReceipt` sink appending to `heart_receipts`, chained per run. Given to a `HeartFleet`
   * over this same store, each operation's writes and their receipts commit in one transaction
   * (a receipt that cannot be inserted rolls its write back: store-unavailable); anywhere else
   * it appends in the background after the write, and `flush()` waits for it.
   */
  receiptSink(options?: {
    onError?: (error: unknown, receipt: HeartReceipt) => void;
    /** Key file texts (an HMAC key and/or an Ed25519 secret key) that sign each receipt's link. */
    signingKeys?: string[];
  }): ((receipt: HeartReceipt) => void) & {
    flush(): Promise<void>;
  };
  end(): Promise<void>;
}

/** What `SupabaseLeaseStore` needs of a supabase-js client (`createClient(url, serviceRoleKey)`). */
export interface SupabaseLike {
  from(table: string): any;
}

/** The reference's name for a client `SupabaseLeaseStore` takes. */
export type SupabaseLikeClient = SupabaseLike;

/**
 * A store over Supabase's REST API (PostgREST) through a supabase-js client. It decides
 * with the core's evaluator on the rows it reads and writes back with a compare-and-set.
 * It cannot guarantee what PgLeaseStore does: the worker's clock decides expiry (keep clocks
 * synchronized), a request is a read plus a conditional write (retried `casRetries` times
 * when the row changed), cross-table conditions and dispatch-log entries are not atomic
 * with the write, and scans read every candidate row. Errors are errors, never misses.
 */
export declare class SupabaseLeaseStore implements LeaseStore {
  /** The reference's form: the client, and the runs table (default `agent_runs`). */
  constructor(client: SupabaseLikeClient, table?: string);
  constructor(options: {
    client: SupabaseLike;
    /** The worker's clock (default `Date.now`). */
    now?: () => Date | number;
    tables?: { runs?: string; intents?: string; log?: string; instances?: string };
    casRetries?: number;
    pageSize?: number;
  });
  readonly tables: { runs: string; intents: string; log: string; instances: string };
  execute(request: StoreRequest | string): Promise<StoreAnswer>;
}

// ---------------------------------------------------------------------------------------
// HeartFleet
// ---------------------------------------------------------------------------------------

export interface HeartFleetOptions {
  /** MemoryLeaseStore, a store executing the core's requests, or the TypeScript package's LeaseStore. */
  store: LeaseStore | ReferenceLeaseStore;
  /** Receives every receipt (errors swallowed); `receipts()` is then empty. */
  onReceipt?: ((receipt: HeartReceipt) => void | Promise<void>) | null;
  /** Retry ceiling (default 5); `Infinity` or `null` never quarantines. */
  maxRetries?: number | null;
  /** The longest wait for one answer of a JS store (default 30000 ms); then `store-unavailable`. */
  storeTimeoutMs?: number;
  /** ReferenceLeaseStore only: decisions per write when the row keeps changing (default 5). */
  casRetries?: number;
}

export declare class HeartFleet {
  /** An unknown option is a TypeError. */
  constructor(options: HeartFleetOptions);
  readonly store: LeaseStore | ReferenceLeaseStore;
  /** The ceiling (`Infinity` when unlimited). */
  readonly maxRetries: number;
  /** The 13 counters (a snapshot). */
  readonly metrics: HeartMetrics;
  /** The counters in the Prometheus text exposition format. */
  prometheus(): string;
  /** The receipts kept so far (empty when `onReceipt` was given). */
  receipts(): HeartReceipt[];
  /** Bad input resolves to `{acquired:false, run:null, reason:"Invalid input", code:"invalid-input"}`. */
  acquire(runId: string, owner: string, ttlSeconds: number): Promise<AcquireResult>;
  renew(fence: FencingToken, ttlSeconds: number): Promise<FencingToken | null>;
  tryRenew(fence: FencingToken, ttlSeconds: number): Promise<Fenced<FencingToken>>;
  release(fence: FencingToken, nextStatus: NextStatus): Promise<AgentRunRow | null>;
  tryRelease(fence: FencingToken, nextStatus: NextStatus): Promise<Fenced<AgentRunRow>>;
  verifyFence(fence: FencingToken): Promise<boolean>;
  reclaimExpired(options?: { limit?: number }): Promise<ReclaimSummary>;
  reclaimDeadInstanceRuns(options?: { ttlMs?: number; maxReclaimsPerCycle?: number }): Promise<LivenessSummary>;
  registerInstance(instanceId: string, options?: { hostname?: string | null; pid?: number | null; metadata?: unknown }): Promise<InstanceRow>;
  heartbeatInstance(instanceId: string): Promise<boolean>;
  drainInstance(instanceId: string): Promise<boolean>;
  listInstances(): Promise<InstanceRow[]>;
  ensureResourceRun(kind: string, key: string, options?: { objective?: string; createdBy?: string }): Promise<{ run: AgentRunRow; created: boolean }>;
  listRuns(options?: { status?: RunStatus | null; limit?: number }): Promise<AgentRunRow[]>;
  getRun(runId: string): Promise<AgentRunRow | null>;
  requeueRun(runId: string, operator: string): Promise<AgentRunRow>;
  forceRelease(runId: string): Promise<AgentRunRow>;
}

// ---------------------------------------------------------------------------------------
// Leases, effects, the outbox, liveness
// ---------------------------------------------------------------------------------------

export interface LeaseOptions {
  runId: string;
  owner: string;
  ttlSeconds: number;
  /** Heartbeat period; default `max(1000, floor(ttlSeconds*1000/2))`. */
  renewEveryMs?: number | null;
  /** Resource runs: release to `ready` (retries reset) after a success (fix 8). */
  releaseToReady?: boolean;
  /** Monotonic milliseconds for the heartbeat schedule (default `performance.now`). */
  clock?: () => number;
  /** `false`: no timer; the work calls `lease.heartbeat()`. */
  autoHeartbeat?: boolean;
}

/** What the work sees while it holds the lease. */
export interface LeaseHandle {
  /** The newest token. */
  readonly fence: FencingToken;
  /** Aborts when the lease is lost; `reason` is a `LeaseLostError`. */
  readonly signal: AbortSignal;
  readonly lost: LostCause | null;
  /** Renews now if a heartbeat period has passed; resolves to the lost cause or null. */
  heartbeat(): Promise<LostCause | null>;
}

export declare function executeWithLease<T>(
  heart: HeartFleet,
  options: LeaseOptions,
  work: (getFence: () => FencingToken, signal: AbortSignal, lease: LeaseHandle) => T | Promise<T>,
): Promise<ExecuteResult<T>>;

/** The reference's in-process effect ledger (lost on restart). */
export declare class MemoryEffectLedger implements EffectLedger {
  constructor();
  recordOnce(runId: string, effectKey: string): boolean;
}

/**
 * What `DurableEffectLedger({client})` needs of a supabase-js client (the reference's
 * OutboxClient): `from(table)` with insert / update / select, eq / in / lt, limit and
 * maybeSingle; an error with code `23505` is a duplicate claim.
 */
export interface OutboxClient {
  from(table: string): any;
}

export type EffectChannel = 'telegram' | 'farcaster' | 'mail' | 'onchain' | 'internal';

/** The reference's `DurableEffectLedger` options. */
export interface DurableEffectLedgerOpts {
  client: OutboxClient;
  /** Default `effect_intents`. */
  intentsTable?: string;
  /** Default `outbox_dispatch_log`. */
  logTable?: string;
  /** The clock of the rows it writes and of the stale-dispatch scan (default the wall clock). */
  now?: () => Date | number;
}

/**
 * The durable ledger: `effect_intents` and `outbox_dispatch_log`, over a supabase-js-like
 * client (`{client}`, the reference's form; `sendOnce` and `reconcileOutbox` then take a heart
 * over any store), or over a heart's store (`{heart}`, `{store}`). The reference's single
 * transitions are there for code that drives the protocol by hand (unfenced, as in the
 * reference); a failure throws `<method> failed: <message>` (code `store-unavailable`).
 */
export declare class DurableEffectLedger implements EffectLedger {
  constructor(options: DurableEffectLedgerOpts | { heart: HeartFleet } | { store: LeaseStore });
  readonly heart: HeartFleet;
  readonly store: LeaseStore;
  recordOnce(runId: string, effectKey: string): Promise<boolean>;
  /** true when this call inserted the intent; false for a duplicate (logged `deduped`). */
  claimIntent(input: { runId: string; effectKey: string; channel: EffectChannel; payloadDigest: string }): Promise<boolean>;
  /** intent → dispatched with the fence recorded; true when it happened. */
  markDispatched(input: { runId: string; effectKey: string; fenceOwner: string; fenceExpiresAt: Instant }): Promise<boolean>;
  /** dispatched → committed with the evidence, logged `sent`; true when it happened. */
  markCommitted(input: { runId: string; effectKey: string; externalRef: unknown }): Promise<boolean>;
  /**
   * Dispatched intents whose fence expired (`<= now`), at most `limit` (50). `{client}`: at
   * `nowIso` when given, else the ledger's clock; a store ledger uses the store's clock.
   */
  findStaleDispatched(nowIso?: Instant, limit?: number): Promise<IntentRow[]>;
  /** dispatched → intent (proved not sent); logged `reconciled` only when it happened. */
  reopen(runId: string, effectKey: string, lastError: string): Promise<void>;
  /** attempts = currentAttempts + 1 on a dispatched intent; returns that count. */
  noteUnresolved(runId: string, effectKey: string, currentAttempts: number): Promise<number>;
  /** intent | dispatched → abandoned; logged `abandoned` only when it happened. */
  abandon(runId: string, effectKey: string, reason: string): Promise<void>;
  /** A dispatch-log entry by hand, best-effort (`{client}` form only). */
  logAttempt(runId: string, effectKey: string, attempt: number, outcome: string, detail?: unknown): Promise<void>;
  dispatchLog(runId: string, effectKey: string): Promise<DispatchLogEntry[]>;
}

/** The effect receives the run's fencing epoch to hand to the receiving system. */
export type Effect<T> = (context: { epoch: number | null; effectKey: string }) => T | Promise<T>;

export declare function guardIrreversible<T>(
  heart: HeartFleet,
  fence: FencingToken,
  ledger: EffectLedger,
  effectKey: string,
  effect: Effect<T>,
): Promise<GuardResult<T>>;

export interface SendOnceOptions<T> {
  fence: FencingToken;
  channel: 'telegram' | 'farcaster' | 'mail' | 'onchain' | 'internal';
  effectKey: string;
  payload: unknown;
  send: Effect<T>;
  /** The commit evidence stored as `external_ref` (default: the send's result). */
  toExternalRef?: (result: T) => unknown;
}

export declare function sendOnce<T>(heart: HeartFleet, ledger: DurableEffectLedger, options: SendOnceOptions<T>): Promise<SendResult<T>>;

/** The reference's names for sendOnce's input and outcome. */
export type SendOnceInput<T> = SendOnceOptions<T>;
export type SendOnceOutcome<T> = SendResult<T>;

export type ProbeVerdict = { status: 'sent'; externalRef?: unknown } | { status: 'not-sent' } | { status: 'unknown' };
/** The reference's names for a probe's answer and a probe. */
export type ProbeResult = ProbeVerdict;
export type ChannelProbe = (intent: IntentRow) => ProbeVerdict | 'not-sent' | 'unknown' | Promise<ProbeVerdict | 'not-sent' | 'unknown'>;

export interface ReconcileOptions {
  /** By channel; a channel without a probe is `unknown`. */
  probes?: Partial<Record<string, ChannelProbe>>;
  maxAttempts?: number;
  limit?: number;
  /** The clock over a `{client}` ledger (default the ledger's); a store ledger's store decides. */
  now?: () => Date | number;
  /** Where receipts and counters go (default the ledger's heart). */
  heart?: HeartFleet;
}

export declare function reconcileOutbox(ledger: DurableEffectLedger, options?: ReconcileOptions): Promise<ReconcileSummary>;

export declare function ensureResourceRun(
  heart: HeartFleet,
  kind: string,
  key: string,
  options?: { objective?: string; createdBy?: string },
): Promise<{ run: AgentRunRow; created: boolean }>;

/**
 * `LivenessReclaimer`'s summary, the TypeScript package's shape. Over a heart, the
 * quarantined runs are in the non-enumerable `quarantinedIds`; over a LivenessStore nothing
 * is quarantined (reclaimRun cannot express it).
 */
export interface ReclaimerSummary {
  deadInstanceIds: string[];
  reclaimedCount: number;
  reclaimedIds: string[];
  errors: { id: string; error: string }[];
  readonly quarantinedIds?: string[];
}

export declare class LivenessReclaimer {
  constructor(
    options:
      | { heart: HeartFleet; ttlMs?: number }
      | { store: LeaseStore | ReferenceLeaseStore; ttlMs?: number; maxRetries?: number | null; storeTimeoutMs?: number }
      /** The TypeScript package's form; a `heart` gets the receipts and counters of each pass. */
      | { store: LivenessStore; heart?: HeartFleet; ttlMs?: number; storeTimeoutMs?: number },
  );
  /** null over a LivenessStore without a heart. */
  readonly heart: HeartFleet | null;
  ttlMs: number;
  reclaimDeadInstanceRuns(options?: { maxReclaimsPerCycle?: number }): Promise<ReclaimerSummary>;
  registerInstance(instanceId: string, options?: { hostname?: string | null; pid?: number | null; metadata?: unknown }): Promise<InstanceRow>;
  heartbeat(instanceId: string): Promise<boolean>;
  drainInstance(instanceId: string): Promise<boolean>;
}

type Instant = Date | string | number;
export declare function isLeaseExpired(run: Pick<AgentRunRow, 'lease_expires_at'>, now: Instant): boolean;
export declare function canAcquire(run: Pick<AgentRunRow, 'status' | 'lease_expires_at'>, now: Instant): boolean;
export declare function isInstanceExpired(instance: Pick<InstanceRow, 'status' | 'last_heartbeat'>, now: Instant, ttlMs?: number): boolean;
export declare function deadInstanceIds(instances: Pick<InstanceRow, 'instance_id' | 'status' | 'last_heartbeat'>[], now: Instant, ttlMs?: number): string[];
export declare function runsLeasedToDeadInstances<R extends Pick<AgentRunRow, 'lease_owner' | 'status'>>(runs: R[], deadIds: string[]): R[];
export declare function heartbeatIntervalMs(ttlSeconds: number, renewEveryMs?: number | null): number;

// ---------------------------------------------------------------------------------------
// Canonical JSON, digests, identifiers
// ---------------------------------------------------------------------------------------

/** DreamNet sorted JSON (`sha256:dreamnet-sorted-json:v0`), byte for byte the reference's. */
export declare function canonicalize(value: unknown): string;
/** Lowercase hex SHA-256 of the UTF-8 bytes. */
export declare function sha256Hex(text: string): string;
/** `sha256:dreamnet-sorted-json:v0:` + sha256Hex(canonicalize(value)). */
export declare function digest(value: unknown): string;
/** `heart:resource:` + sha256Hex(canonicalize({kind, key})): a resource run's idempotency key. */
export declare function deterministicResourceId(kind: string, key: string): string;
/** `prefix + ":" + sha256Hex(canonicalize(identity))`. */
export declare function effectKey(prefix: string, identity: unknown): string;
/** `true`, or throws `receipt-tampered` / `invalid-input`. */
export declare function verifyReceipt(receipt: HeartReceipt | Record<string, unknown>): true;
/** What `verifyReceipts` is told besides the log. */
export interface VerifyReceiptsOptions {
  /** The fleet's HMAC key (a key file's text): every chained receipt must carry a valid `hmac`. */
  key?: string;
  /** An Ed25519 public key (a `.pub` key file's text): every chained receipt must carry a valid `sig`. */
  publicKey?: string;
  /** The log is this run's: a receipt of another run is `invalid-input`. */
  run?: string;
  /** The `seq` of each run's last receipt, known from elsewhere: a shorter log is `chain-truncated`. */
  finalSeq?: Record<string, number>;
  /** Receipts without chain fields fail (`receipt-unchained`) instead of being counted. */
  requireChain?: boolean;
}
/** The stable codes of what a receipt log verification finds. */
export type FindingCode =
  | 'receipt-tampered'
  | 'invalid-input'
  | 'chain-gap'
  | 'chain-reorder'
  | 'chain-duplicate'
  | 'chain-fork'
  | 'chain-broken'
  | 'chain-truncated'
  | 'signature-missing'
  | 'signature-invalid'
  | 'receipt-unchained';
/** One thing found wrong: at a line of the log, or about a whole run (`position` null). */
export interface Finding {
  position: number | null;
  runId: string | null;
  code: FindingCode;
  message: string;
}
/** One run's chain, as the log holds it. */
export interface RunChain {
  receipts: number;
  chained: number;
  unchained: number;
  lastSeq: number | null;
}
/** The result of `verifyReceipts` (and of `heart-fleet verify-receipts --json`). */
export interface LogReport {
  receipts: number;
  ok: number;
  tampered: number;
  malformed: number;
  chained: number;
  unchained: number;
  signed: number;
  runs: Record<string, RunChain>;
  /** Empty when the log verified. */
  findings: Finding[];
}
/**
 * Checks a receipt log (JSON Lines text or bytes, or an array of receipts): digests, chains, signatures.
 * Not in heart-fleet-wasm's edge build (pkg-edge): there it throws `invalid-state`.
 */
export declare function verifyReceipts(
  log: string | Uint8Array | ReadonlyArray<HeartReceipt | Record<string, unknown>>,
  options?: VerifyReceiptsOptions,
): LogReport;

// ---------------------------------------------------------------------------------------
// Deno KV (heart-fleet-wasm only)
// ---------------------------------------------------------------------------------------

/**
 * The part of `Deno.Kv` the store uses, typed loosely so that this file needs no Deno types
 * and a real `Deno.Kv` (whose methods are generic) is assignable.
 */
export interface DenoKvLike {
  get(...args: any[]): Promise<any>;
  getMany(...args: any[]): Promise<any>;
  set(...args: any[]): Promise<any>;
  delete(...args: any[]): Promise<any>;
  list(...args: any[]): AsyncIterable<any>;
  atomic(): any;
  close(): void;
}

/**
 * heart-fleet's edge-native store over Deno KV. Every request is decided by the core's
 * evaluator on the rows it touches and committed with one atomic operation that checks the
 * versionstamp of every row the decision read (retried `casRetries` times when another
 * writer got there first, then `store-unavailable`). The worker's clock decides expiry.
 * Scans list the whole prefix. Key layout: see deno-kv-store.mjs.
 */
export declare class DenoKvLeaseStore implements LeaseStore {
  constructor(options: {
    kv: DenoKvLike;
    /** Key prefix (default `["heart-fleet"]`). */
    prefix?: (string | number)[];
    /** The worker's clock (default `Date.now`). */
    now?: () => Date | number;
    /** Re-decisions after a lost atomic check (default 5, at most 100, as every store's `casRetries`). */
    casRetries?: number;
  });
  /** `Deno.openKv(path)` and a store over it; `close()` closes the database. */
  static open(
    path?: string,
    options?: { prefix?: (string | number)[]; now?: () => Date | number; casRetries?: number },
  ): Promise<DenoKvLeaseStore>;
  readonly kv: DenoKvLike;
  readonly prefix: readonly (string | number)[];
  execute(request: StoreRequest | string): Promise<StoreAnswer>;
  /** Writes rows exactly as given (checked and normalized by the core). */
  seed(rows: { runs?: Partial<AgentRunRow>[]; intents?: Partial<IntentRow>[]; instances?: Partial<InstanceRow>[] }): Promise<void>;
  runs(): Promise<AgentRunRow[]>;
  getRun(runId: string): Promise<AgentRunRow | null>;
  intents(): Promise<IntentRow[]>;
  instances(): Promise<InstanceRow[]>;
  dispatchLog(): Promise<DispatchLogEntry[]>;
  /** Deletes every key under the prefix. */
  clear(): Promise<void>;
  close(): void;
}

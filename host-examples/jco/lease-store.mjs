// The component's imports written in JavaScript, for a second component host: jco's
// transpiled component in Node (`transpile.mjs`).
//
// `leaseStore(backend)` is `heart:fleet/lease-store`: it takes the component's typed
// `store-request` (conditions and expressions as flat node lists, root first), checks the
// lists as the wasmtime host does (each child after its parent and inside the list, each node
// read once, at most 32 deep), turns the request into the core's request language in its
// JSON form, hands it to `backend.execute` (here the Node package's `MemoryLeaseStore`, the
// core's memory store, so no store rule is written twice), and turns the answer (an object or
// JSON text) into the typed `store-answer`. A
// thrown error becomes a `store-error`: `protocol` for a malformed list or an error whose code
// is `store-protocol`, else `unavailable`. jco's mapping: records are objects with camelCase
// keys, variants `{tag, val}`, enums kebab-case strings, `s64` BigInt, `option` undefined.
//
// `effects(hooks)` is `heart:fleet/effects`, answered by the hooks registered for a handle.

const MAX_DEPTH = 32;

/** A `store-error` for jco to return as the import's `err` (thrown as is). */
class StoreFailure {
  constructor(tag, message) {
    this.tag = tag;
    this.val = message;
  }
}

const protocol = (message) => new StoreFailure('protocol', message);

export const snake = (kebab) => kebab.replaceAll('-', '_');
export const kebab = (snakeCase) => snakeCase.replaceAll('_', '-');

/** An s64 as a JSON number: exact, or refused. */
function int(b) {
  const n = Number(b);
  if (!Number.isSafeInteger(n)) throw protocol(`${b} is not an integer JSON can carry exactly`);
  return n;
}

/** Epoch milliseconds (BigInt) as the core's ISO text. */
export function iso(ms) {
  const d = new Date(int(ms));
  if (Number.isNaN(d.getTime())) throw protocol(`${ms} ms is not a time`);
  return d.toISOString();
}

/** The core's ISO text as epoch milliseconds (BigInt). */
const millis = (text) => BigInt(Date.parse(text));

function column(c, table) {
  if (c.tag !== table) throw protocol(`a ${c.tag} column in a request about ${table} rows`);
  return snake(c.val);
}

function value(v) {
  switch (v.tag) {
    case 'null':
      return { type: 'null' };
    case 'text':
      return { type: 'text', value: v.val };
    case 'int':
      return { type: 'int', value: int(v.val) };
    case 'time':
      return { type: 'time', value: iso(v.val) };
    case 'json':
      try {
        return { type: 'json', value: JSON.parse(v.val) };
      } catch {
        throw protocol('a json value that is not JSON');
      }
    default:
      throw protocol(`an unknown value ${v.tag}`);
  }
}

/** Reads a node list: each node once, children after their parent. */
class Tree {
  constructor(what, nodes) {
    if (nodes.length === 0) throw protocol(`an empty ${what}`);
    this.what = what;
    this.nodes = nodes;
    this.read = new Uint8Array(nodes.length);
  }
  node(index, parent, depth) {
    if (index >= this.nodes.length) throw protocol(`${this.what} node ${index} is outside its list of ${this.nodes.length}`);
    if (parent !== null && index <= parent) throw protocol(`${this.what} node ${parent} refers to node ${index}, which is not after it`);
    if (depth > MAX_DEPTH) throw protocol(`a ${this.what} nested deeper than ${MAX_DEPTH}`);
    if (this.read[index]) throw protocol(`${this.what} node ${index} is referred to twice`);
    this.read[index] = 1;
    return this.nodes[index];
  }
}

function condition(nodes, table) {
  const tree = new Tree('condition', nodes);
  const at = (i, parent, depth) => {
    const n = tree.node(i, parent, depth);
    const kids = (ix) => Array.from(ix, (k) => at(k, i, depth + 1));
    const v = n.val;
    switch (n.tag) {
      case 'always':
        return 'true';
      case 'eq':
        return { eq: [column(v.column, table), value(v.value)] };
      case 'in-list':
        return { in: [column(v.column, table), v.values.map(value)] };
      case 'at-most':
        return { at_most: [column(v.column, table), int(v.n)] };
      case 'expired-at':
        return { expired_at: column(v, table) };
      case 'live-at':
        return { live_at: column(v, table) };
      case 'older-than':
        return { older_than: [column(v.column, table), int(v.n)] };
      case 'starts-with':
        return { starts_with: [column(v.column, table), v.prefix] };
      case 'all':
        return { and: kids(v) };
      case 'any':
        return { or: kids(v) };
      case 'not':
        return { not: at(v, i, depth + 1) };
      case 'run-held-by':
        return {
          run_held_by: { owner: v.owner, lease_expires_at: iso(v.leaseExpiresAt), epoch: v.epoch === undefined ? null : int(v.epoch) },
        };
      case 'owner-instance-dead':
        return { owner_instance_dead: { ttl_ms: int(v) } };
      default:
        throw protocol(`an unknown condition ${n.tag}`);
    }
  };
  return at(0, null, 0);
}

function assignments(set, table) {
  return set.map((a) => {
    const tree = new Tree('expression', a.expression);
    const at = (i, parent, depth) => {
      const n = tree.node(i, parent, depth);
      switch (n.tag) {
        case 'value':
          return { val: value(n.val) };
        case 'now':
          return 'now';
        case 'now-plus':
          return { now_plus: int(n.val) };
        case 'add':
          return { add: [column(n.val.column, table), int(n.val.n)] };
        case 'choose':
          return { case: [condition(n.val.when, table), at(n.val.then, i, depth + 1), at(n.val.otherwise, i, depth + 1)] };
        default:
          throw protocol(`an unknown expression ${n.tag}`);
      }
    };
    return [column(a.column, table), at(0, null, 0)];
  });
}

const optional = (v, f = (x) => x) => (v === undefined ? null : f(v));
const json = (text) => optional(text, (t) => JSON.parse(t));

function logEntry(e) {
  return { run_id: e.runId, effect_key: e.effectKey, attempt: int(e.attempt), outcome: e.outcome, at: optional(e.at, iso), detail: json(e.detail) };
}

/** The typed request as the core's JSON request. */
export function requestJson(r) {
  const v = r.val;
  switch (r.tag) {
    case 'now':
      return { op: 'now' };
    case 'read-run':
      return { op: 'read_run', run_id: v };
    case 'update-run':
      return {
        op: 'update_run',
        run_id: v.runId,
        when: condition(v.when, 'run'),
        set: assignments(v.set, 'run'),
        want_before: v.wantBefore,
        want_after: v.wantAfter,
      };
    case 'scan-runs':
      return { op: 'scan_runs', when: condition(v.when, 'run'), order: snake(v.order), limit: v.limit };
    case 'ensure-run':
      return { op: 'ensure_run', idempotency_key: v.idempotencyKey, objective: v.objective, created_by: v.createdBy };
    case 'claim-intent':
      return { op: 'claim_intent', run_id: v.runId, effect_key: v.effectKey, channel: v.channel, payload_digest: v.payloadDigest };
    case 'update-intent':
      return {
        op: 'update_intent',
        run_id: v.runId,
        effect_key: v.effectKey,
        when: condition(v.when, 'intent'),
        set: assignments(v.set, 'intent'),
        log: optional(v.log, logEntry),
      };
    case 'scan-intents':
      return { op: 'scan_intents', when: condition(v.when, 'intent'), limit: v.limit };
    case 'read-log':
      return { op: 'read_log', run_id: v.runId, effect_key: v.effectKey };
    case 'upsert-instance':
      return { op: 'upsert_instance', instance_id: v.instanceId, hostname: optional(v.hostname), pid: optional(v.pid, int), metadata: json(v.metadata) };
    case 'update-instances':
      return { op: 'update_instances', when: condition(v.when, 'instance'), set: assignments(v.set, 'instance') };
    case 'scan-instances':
      return { op: 'scan_instances', when: condition(v, 'instance') };
    default:
      throw protocol(`an unknown request ${r.tag}`);
  }
}

const some = (v, f = (x) => x) => (v === null || v === undefined ? undefined : f(v));
const text = (v) => some(v, (x) => JSON.stringify(x));

function runRow(r) {
  return {
    id: r.id,
    taskId: some(r.task_id),
    assignmentId: r.assignment_id,
    objective: r.objective,
    requiredCapabilities: r.required_capabilities ?? [],
    status: kebab(r.status),
    assignedAgent: some(r.assigned_agent),
    leaseOwner: some(r.lease_owner),
    leaseExpiresAt: some(r.lease_expires_at, millis),
    retries: BigInt(r.retries),
    budget: text(r.budget),
    approvalState: r.approval_state,
    visibility: r.visibility,
    idempotencyKey: r.idempotency_key,
    createdBy: r.created_by,
    createdAt: millis(r.created_at),
    updatedAt: millis(r.updated_at),
    fencingEpoch: BigInt(r.fencing_epoch),
  };
}

function intentRow(r) {
  return {
    runId: r.run_id,
    effectKey: r.effect_key,
    state: kebab(r.state),
    channel: r.channel,
    payloadDigest: r.payload_digest,
    fenceOwner: some(r.fence_owner),
    fenceExpiresAt: some(r.fence_expires_at, millis),
    fenceEpoch: some(r.fence_epoch, BigInt),
    externalRef: text(r.external_ref),
    attempts: BigInt(r.attempts),
    lastError: some(r.last_error),
    createdAt: millis(r.created_at),
    committedAt: some(r.committed_at, millis),
  };
}

function instanceRow(r) {
  return {
    instanceId: r.instance_id,
    hostname: some(r.hostname),
    pid: some(r.pid, BigInt),
    status: kebab(r.status),
    startedAt: millis(r.started_at),
    lastHeartbeat: millis(r.last_heartbeat),
    metadata: text(r.metadata),
  };
}

function entry(e) {
  return { runId: e.run_id, effectKey: e.effect_key, attempt: BigInt(e.attempt), outcome: e.outcome, at: some(e.at, millis), detail: text(e.detail) };
}

/** The core's JSON answer as the typed answer. */
export function typedAnswer(a) {
  const r = a.reply;
  const reply = (() => {
    switch (r.kind) {
      case 'now':
        return { tag: 'now' };
      case 'run':
        return { tag: 'run', val: some(r.run, runRow) };
      case 'run_write':
        return { tag: 'run-write', val: { before: some(r.before, runRow), after: some(r.after, runRow) } };
      case 'run_hit':
        return { tag: 'run-hit', val: r.hit };
      case 'runs':
        return { tag: 'runs', val: r.runs.map(runRow) };
      case 'ensured':
        return { tag: 'ensured', val: { run: runRow(r.run), created: r.created } };
      case 'claim':
        return { tag: 'claim', val: { intent: intentRow(r.intent), claimed: r.claimed } };
      case 'intent':
        return { tag: 'intent', val: some(r.intent, intentRow) };
      case 'intents':
        return { tag: 'intents', val: r.intents.map(intentRow) };
      case 'log':
        return { tag: 'log', val: r.entries.map(entry) };
      case 'instances':
        return { tag: 'instances', val: r.instances.map(instanceRow) };
      default:
        throw protocol(`an unknown reply ${r.kind}`);
    }
  })();
  return { now: millis(a.now), reply };
}

/**
 * `heart:fleet/lease-store` over `backend.execute(request) -> answer` (the core's request
 * and answer in their JSON form; the answer may be JSON text). `answer(typed)` may rewrite
 * each typed answer before the component sees it (tests use it to answer badly).
 */
export function leaseStore(backend, { answer = (a) => a } = {}) {
  return {
    execute(request) {
      let reply;
      try {
        reply = backend.execute(requestJson(request));
        if (typeof reply === 'string') reply = JSON.parse(reply);
      } catch (e) {
        if (e instanceof StoreFailure) throw e;
        throw new StoreFailure(e && e.code === 'store-protocol' ? 'protocol' : 'unavailable', String(e && e.message));
      }
      return answer(typedAnswer(reply));
    },
  };
}

/** `heart:fleet/effects`, answered by `hooks.get(handle)` ({runEffect, recordOnce, probe}). */
export function effects(hooks) {
  const of = (handle) => {
    const h = hooks.get(handle);
    if (!h) throw `no hooks for handle ${handle}`;
    return h;
  };
  return {
    runEffect: (handle, effectKey, epoch) => of(handle).runEffect(effectKey, epoch),
    recordOnce: (handle, runId, effectKey) => of(handle).recordOnce(runId, effectKey),
    probe: (handle, intent) => of(handle).probe(intent),
  };
}

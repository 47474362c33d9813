// The conformance scenario runner for the Node binding: a port of the semantics of
// core/src/conformance.rs (`replay`), driving every op through this package's public API.
//
// Three store modes: `memory` (HeartFleet over MemoryLeaseStore: the Rust store, driven
// synchronously inside Rust), `js-store` (HeartFleet over a JS store object whose async
// `execute` forwards to the same memory store: every store request goes through the JS
// async driving loop as an object) and `text-store` (the same through `executeJson`, the
// JSON-text fast path that PgLeaseStore uses).

import { createRequire } from 'node:module';
import { FakeSupabase } from './fake-supabase.mjs';
import {
  HeartFleet,
  MemoryLeaseStore,
  SupabaseLeaseStore,
  MemoryEffectLedger,
  DurableEffectLedger,
  executeWithLease,
  guardIrreversible,
  sendOnce,
  reconcileOutbox,
  canonicalize,
  digest,
  deterministicResourceId,
  effectKey,
  verifyReceipt,
  ERROR_CODES,
} from '../../index.mjs';

const require = createRequire(import.meta.url);
export const native = require('../../lib/native.cjs');

/** An async JS store object over a memory store: every call yields before answering. */
export class AsyncJsStore {
  constructor(memory) {
    this.memory = memory;
    this.calls = 0;
  }
  async execute(request) {
    this.calls += 1;
    await null;
    return this.memory.execute(request);
  }
}

/** An async JS store object that takes and returns JSON text (the `executeJson` fast path). */
export class AsyncTextStore extends AsyncJsStore {
  async executeJson(text) {
    this.calls += 1;
    await null;
    return this.memory.executeJson(text);
  }
}

/** MemoryStore::fail_after's semantics in front of any store (the supabase mode). */
export class FailingStore {
  constructor(inner) {
    this.inner = inner;
    this.rules = [];
    this.calls = 0;
  }
  failAfter(request, after, times) {
    this.rules.push({ request, skip: after, left: times });
  }
  async execute(req) {
    this.calls += 1;
    for (const r of this.rules) {
      if (r.left > 0 && (r.request === req.op || r.request === '*')) {
        if (r.skip > 0) {
          r.skip -= 1;
          break;
        }
        r.left -= 1;
        throw new Error(`injected failure on ${req.op}`);
      }
    }
    return this.inner.execute(req);
  }
}

/** Partial match: objects on the keys `want` names, arrays elementwise with equal length. */
export function matches(want, got, path) {
  if (want !== null && typeof want === 'object' && !Array.isArray(want)) {
    if (got === null || typeof got !== 'object' || Array.isArray(got)) {
      throw new Error(`${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
    }
    for (const [k, wv] of Object.entries(want)) matches(wv, got[k] === undefined ? null : got[k], `${path}.${k}`);
    return;
  }
  if (Array.isArray(want)) {
    if (!Array.isArray(got)) throw new Error(`${path}: expected an array, got ${JSON.stringify(got)}`);
    if (want.length !== got.length) {
      throw new Error(`${path}: expected ${want.length} items, got ${got.length}: ${JSON.stringify(got)}`);
    }
    want.forEach((w, i) => matches(w, got[i], `${path}[${i}]`));
    return;
  }
  if (want === got) return;
  throw new Error(`${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
}

function errJson(e) {
  if (e && typeof e.code === 'string' && ERROR_CODES.includes(e.code)) return { error: e.code, message: e.message };
  throw e;
}

/** An error from a host callback of the scenario (the effect, the send): the core's effect-failed. */
class EffectThrew extends Error {}

function effectOutcome(spec) {
  if (spec && typeof spec.throws === 'string') throw new EffectThrew(spec.throws);
  return spec && spec.returns !== undefined ? spec.returns : null;
}

function effectErr(e, prefix = '') {
  if (e instanceof EffectThrew) return { error: 'effect-failed', message: prefix + e.message };
  return errJson(e);
}

function probeFns(probes) {
  const out = {};
  for (const [channel, p] of Object.entries(probes ?? {})) {
    out[channel] = async () => {
      if (p === 'not-sent') return { status: 'not-sent' };
      if (typeof p === 'string') return { status: 'unknown' };
      if (p && typeof p === 'object') {
        if ('sent' in p) return { status: 'sent', externalRef: p.sent };
        throw new Error(typeof p.throws === 'string' ? p.throws : 'probe failed');
      }
      return { status: 'unknown' };
    };
  }
  return out;
}

/** Ops this runner cannot run, with the reason (printed by the test); empty: it runs all. */
export const SKIPPED_OPS = Object.freeze({});

/**
 * Replays one scenario (JSON text) in `mode` ('memory' or 'js-store'). Returns the replay
 * in the Rust runner's shape: {name, steps:[{op, result}], receipts, metrics, runs, intents,
 * dispatchLog, instances, fired, failure}.
 */
export async function replay(text, mode) {
  const sc = JSON.parse(text);
  const memory = MemoryLeaseStore.fromScenario(text);
  const { maxRetries } = JSON.parse(native.scenarioConfig(text));
  let store;
  let fake = null;
  if (mode === 'supabase') {
    // The scenario's rows, in the recording fake PostgREST; the memory store keeps the clock.
    fake = new FakeSupabase();
    fake.seed('agent_runs', memory.runs());
    fake.seed('effect_intents', memory.intents());
    fake.seed('agent_instances', memory.instances());
    store = new FailingStore(new SupabaseLeaseStore({ client: fake, now: () => memory.now() }));
  } else {
    store = mode === 'js-store' ? new AsyncJsStore(memory) : mode === 'text-store' ? new AsyncTextStore(memory) : memory;
  }
  const heart = new HeartFleet({ store, maxRetries: maxRetries === null ? Infinity : maxRetries });
  const ledger = new MemoryEffectLedger();
  const durable = new DurableEffectLedger({ heart });
  const fired = {};
  const fire = (key) => {
    fired[key] = (fired[key] ?? 0) + 1;
  };
  const saved = new Map();
  const resolve = (v) => {
    if (typeof v === 'string' && v.startsWith('$')) {
      const name = v.slice(1);
      if (!saved.has(name)) throw new Error(`unknown variable ${v}`);
      return saved.get(name);
    }
    if (Array.isArray(v)) return v.map(resolve);
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, resolve(x)]));
    return v;
  };

  async function run(op, args) {
    const a = args ?? {};
    const tryJson = async (f) => {
      try {
        return await f();
      } catch (e) {
        return errJson(e);
      }
    };
    switch (op) {
      case 'advance':
        memory.advance(a.ms ?? 0);
        return [null];
      case 'setClock':
        memory.setNow(a.at);
        return [null];
      case 'failNext':
        (fake ? store : memory).failAfter(a.request, a.after ?? 0, a.times ?? 1);
        return [null];
      case 'acquire': {
        const v = await tryJson(() => heart.acquire(a.runId ?? '', a.owner ?? '', a.ttlSeconds ?? 0));
        return [v, v.fence ?? null];
      }
      case 'renew': {
        const v = await tryJson(() => heart.renew(a.fence, a.ttlSeconds ?? 0));
        return [v, v];
      }
      case 'release':
        return [await tryJson(() => heart.release(a.fence, a.nextStatus))];
      case 'verifyFence':
        return [await tryJson(() => heart.verifyFence(a.fence))];
      case 'reclaimExpired':
        return [await tryJson(() => heart.reclaimExpired({ limit: a.limit ?? 100 }))];
      case 'guardIrreversible': {
        const key = a.effectKey ?? '';
        const l = a.ledger === 'durable' ? durable : ledger;
        try {
          return [
            await guardIrreversible(heart, a.fence, l, key, () => {
              fire(key);
              return effectOutcome(a.effect);
            }),
          ];
        } catch (e) {
          return [effectErr(e)];
        }
      }
      case 'sendOnce': {
        const key = a.effectKey ?? '';
        try {
          return [
            await sendOnce(heart, durable, {
              fence: a.fence,
              channel: a.channel,
              effectKey: key,
              payload: a.payload,
              send: () => {
                fire(key);
                return effectOutcome(a.send);
              },
            }),
          ];
        } catch (e) {
          return [effectErr(e, 'send failed; the intent stays dispatched for the reconciler: ')];
        }
      }
      case 'reconcileOutbox':
        return [
          await tryJson(() =>
            reconcileOutbox(durable, { probes: probeFns(a.probes), maxAttempts: a.maxAttempts ?? 5, limit: a.limit ?? 50 }),
          ),
        ];
      case 'executeWithLease':
        return [await execute(a)];
      case 'registerInstance':
        return [await tryJson(() => heart.registerInstance(a.instanceId))];
      case 'heartbeatInstance':
        return [await tryJson(() => heart.heartbeatInstance(a.instanceId))];
      case 'drainInstance':
        return [await tryJson(() => heart.drainInstance(a.instanceId))];
      case 'livenessSweep':
        return [
          await tryJson(() =>
            heart.reclaimDeadInstanceRuns({ ttlMs: a.ttlMs ?? 90_000, maxReclaimsPerCycle: a.limit ?? 200 }),
          ),
        ];
      case 'ensureResourceRun': {
        const v = await tryJson(() =>
          heart.ensureResourceRun(a.kind, a.key, { objective: a.objective, createdBy: a.createdBy }),
        );
        return [v, v.run ? v.run.id : null];
      }
      case 'requeue':
        return [await tryJson(() => heart.requeueRun(a.runId, a.operator))];
      case 'forceRelease':
        return [await tryJson(() => heart.forceRelease(a.runId))];
      case 'listRuns':
        return [await tryJson(() => heart.listRuns({ status: a.status ?? null, limit: a.limit ?? 100 }))];
      case 'canonicalize':
        return [await tryJson(() => canonicalize(parseJson(a.json)))];
      case 'digest':
        return [await tryJson(() => digest(parseJson(a.json)))];
      case 'deterministicResourceId':
        return [await tryJson(() => deterministicResourceId(a.kind ?? '', a.key ?? ''))];
      case 'effectKey':
        return [await tryJson(() => effectKey(a.prefix ?? '', a.identity === undefined ? null : a.identity))];
      case 'verifyReceipt':
        return [await tryJson(() => verifyReceipt(a.receipt))];
      case 'expectFired':
        for (const [k, n] of Object.entries(a)) {
          const got = fired[k] ?? 0;
          if (got !== n) throw new Error(`fired[${k}]: expected ${n}, got ${got}`);
        }
        return [null];
      default:
        throw new Error(`unknown op ${op} (this runner cannot run it)`);
    }
  }

  function parseJson(text) {
    try {
      return JSON.parse(text);
    } catch (e) {
      const err = new Error(`invalid JSON: ${e.message}`);
      err.code = 'invalid-input';
      throw err;
    }
  }

  async function execute(a) {
    const work = a.work ?? {};
    let problem = null;
    const body = async (getFence, _signal, lease) => {
      for (const beat of work.beats ?? []) {
        memory.advance(beat);
        await lease.heartbeat();
      }
      if (work.guard) {
        const key = work.guard.effectKey ?? '';
        const fence = getFence();
        try {
          await guardIrreversible(heart, fence, ledger, key, () => {
            fire(key);
            return 'fired';
          });
        } catch (e) {
          problem = `the guard inside the work failed: ${e.message}`;
        }
      }
      return effectOutcome(work);
    };
    let v;
    try {
      v = await executeWithLease(
        heart,
        {
          runId: a.runId ?? '',
          owner: a.owner ?? '',
          ttlSeconds: a.ttlSeconds ?? 0,
          renewEveryMs: a.renewEveryMs ?? undefined,
          releaseToReady: a.releaseToReady ?? false,
          clock: () => memory.now().getTime(),
          autoHeartbeat: false,
        },
        body,
      );
    } catch (e) {
      if (e instanceof EffectThrew) v = { threw: e.message };
      else v = errJson(e);
    }
    if (problem) throw new Error(problem);
    return v;
  }

  const steps = [];
  let failure = null;
  for (const [n, step] of (sc.steps ?? []).entries()) {
    const op = step.op ?? '';
    let result;
    let saveable;
    try {
      [result, saveable] = await run(op, resolve(step.args ?? null));
    } catch (e) {
      failure = `step ${n} (${op}): ${e.message}`;
      break;
    }
    steps.push({ op, result });
    if (step.expect !== undefined) {
      try {
        matches(resolve(step.expect), result, `step ${n} (${op})`);
      } catch (e) {
        failure = `${e.message}\n  full result: ${JSON.stringify(result)}`;
        break;
      }
    }
    if (typeof step.save === 'string') saved.set(step.save, saveable === undefined ? result : saveable);
  }
  const out = {
    name: sc.name,
    steps,
    receipts: heart.receipts(),
    metrics: heart.metrics,
    runs: fake ? fake.rows('agent_runs') : memory.runs(),
    intents: fake ? fake.rows('effect_intents') : memory.intents(),
    dispatchLog: fake ? fake.rows('outbox_dispatch_log') : memory.dispatchLog(),
    instances: fake ? fake.rows('agent_instances') : memory.instances(),
    fired,
    failure,
    storeCalls: mode === 'memory' ? null : store.calls,
    memoryRequests: memory.requestCount(),
    restCalls: fake ? fake.calls.length : null,
  };
  if (!out.failure) {
    try {
      checkFinal(sc, out);
    } catch (e) {
      out.failure = e.message;
    }
  }
  return out;
}

function checkFinal(sc, r) {
  r.receipts.forEach((receipt, n) => {
    try {
      verifyReceipt(receipt);
    } catch (e) {
      throw new Error(`receipt ${n} does not verify: ${e.message}`);
    }
  });
  const expect = sc.expect;
  if (!expect) return;
  if (expect.receipts) {
    try {
      matches(expect.receipts, r.receipts, 'receipts');
    } catch (e) {
      throw new Error(`${e.message}\n  receipts: ${JSON.stringify(r.receipts)}`);
    }
  }
  if (expect.metrics) matches(expect.metrics, r.metrics, 'metrics');
  for (const w of expect.runs ?? []) {
    const got = r.runs.find((row) => row.id === w.id) ?? null;
    matches(w, got, `runs[${w.id}]`);
  }
  if (expect.intents) matches(expect.intents, r.intents, 'intents');
  if (expect.dispatchLog) matches(expect.dispatchLog, r.dispatchLog, 'dispatchLog');
  if (expect.instances) matches(expect.instances, r.instances, 'instances');
}

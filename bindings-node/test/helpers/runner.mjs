// The conformance scenario runner of heart-fleet's JavaScript API: a port of the semantics of
// core/src/conformance.rs (`replay`), driving every op through the public API of the package
// under test, and the conformance test suite over it (`conformanceSuite`). One runner for the
// Node package (napi-rs, bindings-node/test/conformance.test.mjs) and heart-fleet-wasm (Deno
// and Node, bindings-wasm/bindgen/test/conformance.test.mjs): each passes its own package in,
// so this file imports nothing of either and runs under `node --test` and `deno test` alike.
//
// Store modes: `memory` (HeartFleet over MemoryLeaseStore: the core's store, driven inside the
// native module), `js-store` (HeartFleet over a JS store object whose async `execute` forwards
// to the same memory store: every store request goes through the JS async driving loop as an
// object), `text-store` (the same through `executeJson`, the JSON-text fast path that
// PgLeaseStore uses) and one external store mode that the test plugs in (the Node package: its
// SupabaseLeaseStore over a fake PostgREST; heart-fleet-wasm: DenoKvLeaseStore over Deno KV),
// seeded with the scenario's rows, the memory store keeping the scenario's clock.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';

/** The package under test (its ES module namespace) and its native module; set by `use`. */
let api = null;
let native = null;

/** Binds the runner to a package (its ES module namespace) and its native module. */
export function use(pkg, nativeModule) {
  api = pkg;
  native = nativeModule;
}

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

/** MemoryStore::fail_after's semantics in front of any store (the external store mode). */
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
  if (e && typeof e.code === 'string' && api.ERROR_CODES.includes(e.code)) return { error: e.code, message: e.message };
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
    // Synchronous, so a host that cannot await (the jco component host) can call it too.
    out[channel] = () => {
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
 * Replays one scenario (JSON text) in `mode`: 'memory', 'js-store', 'text-store', or the name
 * of `external`. Returns the replay in the Rust runner's shape: {name, steps:[{op, result}],
 * receipts, metrics, runs, intents, dispatchLog, instances, fired, failure}, plus the store
 * calls and the opened external store (`external`).
 *
 * `external`, or null, is an external store mode: `{ name, async open(memory, sc), check? }`.
 * `open` answers `{ store, async rows() }` (and whatever else `check` wants to see): a store
 * seeded with the rows of `memory` (the scenario's MemoryLeaseStore, whose `now()` is the
 * scenario's clock), and its final rows as `{runs, intents, dispatchLog, instances}`.
 * `check(js, rust)` compares the replay with the native one in place of the full comparison
 * the other modes get (conformanceSuite).
 */
export async function replay(text, mode, external = null) {
  if (api === null) throw new Error('runner: call use(api, native) first');
  const { HeartFleet, MemoryLeaseStore, MemoryEffectLedger, DurableEffectLedger } = api;
  const sc = JSON.parse(text);
  const memory = MemoryLeaseStore.fromScenario(text);
  const { maxRetries } = JSON.parse(native.scenarioConfig(text));
  let store;
  let ext = null;
  if (external !== null && mode === external.name) {
    ext = await external.open(memory, sc);
    store = new FailingStore(ext.store);
  } else if (mode === 'memory' || mode === 'js-store' || mode === 'text-store') {
    store = mode === 'js-store' ? new AsyncJsStore(memory) : mode === 'text-store' ? new AsyncTextStore(memory) : memory;
  } else {
    throw new Error(`runner: unknown store mode ${mode}`);
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
        (ext ? store : memory).failAfter(a.request, a.after ?? 0, a.times ?? 1);
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
            await api.guardIrreversible(heart, a.fence, l, key, () => {
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
            await api.sendOnce(heart, durable, {
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
            api.reconcileOutbox(durable, { probes: probeFns(a.probes), maxAttempts: a.maxAttempts ?? 5, limit: a.limit ?? 50 }),
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
        return [await tryJson(() => api.canonicalize(parseJson(a.json)))];
      case 'digest':
        return [await tryJson(() => api.digest(parseJson(a.json)))];
      case 'deterministicResourceId':
        return [await tryJson(() => api.deterministicResourceId(a.kind ?? '', a.key ?? ''))];
      case 'effectKey':
        return [await tryJson(() => api.effectKey(a.prefix ?? '', a.identity === undefined ? null : a.identity))];
      case 'verifyReceipt':
        return [await tryJson(() => api.verifyReceipt(a.receipt))];
      case 'verifyReceipts':
        return [await tryJson(() => api.verifyReceipts(a.log, a.options ?? {}))];
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
          await api.guardIrreversible(heart, fence, ledger, key, () => {
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
      v = await api.executeWithLease(
        heart,
        {
          runId: a.runId ?? '',
          owner: a.owner ?? '',
          ttlSeconds: a.ttlSeconds ?? 0,
          renewEveryMs: a.renewEveryMs ?? undefined,
          releaseToReady: a.releaseToReady ?? false,
          // A package whose heartbeats read the store's clock takes none of its own.
          ...(api.storeClock === true ? {} : { clock: () => memory.now().getTime() }),
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
      result = withOurFields(result);
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
  const rows = ext
    ? await ext.rows()
    : { runs: memory.runs(), intents: memory.intents(), dispatchLog: memory.dispatchLog(), instances: memory.instances() };
  const out = {
    name: sc.name,
    steps,
    receipts: heart.receipts(),
    metrics: heart.metrics,
    runs: rows.runs,
    intents: rows.intents,
    dispatchLog: rows.dispatchLog,
    instances: rows.instances,
    fired,
    failure,
    storeCalls: mode === 'memory' ? null : store.calls,
    memoryRequests: memory.requestCount(),
    external: ext,
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

/**
 * A result with its non-enumerable fields made plain (`code`, `released`, `lost`, …: the
 * package hides what the reference's results lack), so the scenario's expectations and the
 * native replay see every field.
 */
function withOurFields(result) {
  if (result === null || typeof result !== 'object' || Array.isArray(result)) return result;
  const out = { ...result };
  for (const k of Object.getOwnPropertyNames(result)) if (!(k in out)) out[k] = result[k];
  return out;
}

function checkFinal(sc, r) {
  r.receipts.forEach((receipt, n) => {
    try {
      api.verifyReceipt(receipt);
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

/** Every conformance scenario of tests/conformance/: [file, text], sorted by file name. */
export function scenarios() {
  const dir = new URL('../../../tests/conformance/', import.meta.url);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()
    .map((f) => [f, readFileSync(new URL(f, dir), 'utf8')]);
}

/** Drops error messages (the binding re-throws the effect's own exception). */
export function withoutMessages(v) {
  if (Array.isArray(v)) return v.map(withoutMessages);
  if (v !== null && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === 'message' && typeof v.error === 'string') continue;
      out[k] = withoutMessages(x);
    }
    return out;
  }
  return v;
}

/** Native ⊆ binding: every key the native result has, the binding's has with the same value. */
export function contains(want, got, path) {
  if (want !== null && typeof want === 'object') {
    assert.ok(got !== null && typeof got === 'object', `${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
    if (Array.isArray(want)) assert.equal(got.length, want.length, `${path}: length`);
    for (const k of Object.keys(want)) contains(want[k], got[k] === undefined ? null : got[k], `${path}.${k}`);
    return;
  }
  assert.deepEqual(got, want, path);
}

/**
 * Scenarios the suite does not run, with the reason. Anything listed here is printed;
 * anything not listed must pass. Empty: every scenario runs in every mode.
 */
export const SKIPPED_SCENARIOS = Object.freeze({});

/**
 * The conformance tests: every scenario of tests/conformance/ in every store mode, through
 * `api` (the package under test; `native` its native module, whose `nativeReplay` is the
 * core's own replay). Each replay must pass the scenario's expectations and equal the native
 * replay: every step's result, the receipts, the counters, the final rows and how often each
 * effect fired (an external mode: what its `check` compares). `binding` names the package in
 * failure messages; `external` is the external store mode, or null; `modes`, when given, the
 * store modes to run instead of all (a host whose store calls cannot await runs 'memory');
 * `absent`, operations the package does not have (each use must be refused); `replayLacks`,
 * operations the package has but its native replay does not (a scenario using one is held to
 * its own expectations only, named so in the test's title).
 */
export function conformanceSuite({ api: pkg, native: nativeModule, binding, external = null, modes: only = null, absent = {}, replayLacks = [] }) {
  use(pkg, nativeModule);
  const files = scenarios();
  const modes = only ?? ['memory', 'js-store', 'text-store', ...(external ? [external.name] : [])];
  console.log(
    `conformance: ${files.length} scenarios × ${modes.length} store modes (${modes.join(', ')}); skip list: ` +
      (Object.keys(SKIPPED_SCENARIOS).length === 0 && Object.keys(SKIPPED_OPS).length === 0
        ? '(none)'
        : JSON.stringify({ scenarios: SKIPPED_SCENARIOS, ops: SKIPPED_OPS })) +
      (Object.keys(absent).length === 0 ? '' : `; not in ${binding}, each use refused with invalid-state: ${JSON.stringify(absent)}`),
  );

  test('the scenario folder is not empty', () => {
    assert.ok(files.length >= 60, `found only ${files.length} scenarios in tests/conformance/`);
  });

  for (const [file, text] of files) {
    const sc = JSON.parse(text);
    const name = sc.name;
    // An operation the binding does not have (`absent`): every step that uses it must be
    // refused with invalid-state (and the scenario is not replayed).
    const missing = sc.steps.filter((s) => Object.hasOwn(absent, s.op));
    if (missing.length > 0) {
      test(`${name}: ${missing[0].op} is not in ${binding}, and says so`, () => {
        for (const step of missing) {
          assert.throws(
            () => pkg[step.op](...Object.values(step.args)),
            (e) => e.code === 'invalid-state' && e.message.includes(absent[step.op]),
          );
        }
      });
      continue;
    }
    const lacked = sc.steps.find((s) => replayLacks.includes(s.op));
    for (const mode of modes) {
      const skip = SKIPPED_SCENARIOS[name];
      const title = lacked ? `${name} [${mode}] (its expectations; the native replay here has no ${lacked.op})` : `${name} [${mode}]`;
      test(title, { skip: skip ? `skipped: ${skip}` : false }, async () => {
        const js = await replay(text, mode, external);
        assert.equal(js.failure, null, `scenario ${name} (${file}) failed in ${binding} (${mode}): ${js.failure}`);
        if (lacked) return;
        const rust = JSON.parse(native.nativeReplay(text));
        assert.equal(rust.failure, null, `the native replay of ${name} failed: ${rust.failure}`);
        assert.deepEqual({ ...js.metrics }, rust.metrics, 'metrics');
        assert.deepEqual(js.fired, rust.fired, 'fired');
        if (js.external && external.check) {
          external.check(js, rust);
          return;
        }
        assert.equal(js.steps.length, rust.steps.length, 'steps replayed');
        rust.steps.forEach((s, i) => {
          assert.equal(js.steps[i].op, s.op);
          contains(withoutMessages(s.result), withoutMessages(js.steps[i].result), `step ${i} (${s.op})`);
        });
        assert.deepEqual(js.receipts.map((r) => ({ ...r })), rust.receipts, 'receipts');
        assert.deepEqual(js.runs, rust.runs, 'runs');
        assert.deepEqual(js.intents, rust.intents, 'intents');
        assert.deepEqual(js.dispatchLog, rust.dispatch_log, 'dispatch log');
        assert.deepEqual(js.instances, rust.instances, 'instances');
        if (mode !== 'memory') {
          // Every store request really went through the JS store object.
          assert.equal(js.storeCalls, js.memoryRequests, 'store requests that bypassed the JS store object');
        }
      });
    }
  }
}

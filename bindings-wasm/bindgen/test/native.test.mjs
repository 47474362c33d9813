// The package's surface and the wasm module's raw exports, in Deno and in Node alike:
//  * the package exports exactly the Node package's API (bindings-node/index.mjs) plus
//    DenoKvLeaseStore, so a module written against one runs on the other;
//  * every raw export of the wasm module (every function, constructor, static and method),
//    every argument position, tried with wrong types: each call answers with an `Error`
//    whose `.code` is in the core's registry (or succeeds where the value is legitimate),
//    never a trap (WebAssembly.RuntimeError) that would poison the instance; and the
//    instance keeps working afterwards.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { api, native, build, runRow } from './helpers/pkg.mjs';

const ERROR_CODES = api.ERROR_CODES;
const T0 = Date.parse('2026-07-30T00:00:00.000Z');

test('the package exports the Node package\'s API, plus DenoKvLeaseStore', () => {
  const indexMjs = readFileSync(new URL('../../../bindings-node/index.mjs', import.meta.url), 'utf8');
  const node = [...indexMjs.matchAll(/^export const (\w+) = cjs\.\1;$/gm)].map((m) => m[1]);
  assert.ok(node.length > 20);
  const ours = Object.keys(api).filter((k) => k !== 'default').sort();
  assert.deepEqual(ours, [...node, 'DenoKvLeaseStore'].sort());
  assert.deepEqual(Object.keys(api.default).sort(), ours);
  assert.deepEqual([...native.errorCodes()], [...ERROR_CODES]);
});

test('the package\'s declarations declare every export', () => {
  const dts = readFileSync(new URL('../pkg/heart_fleet.d.ts', import.meta.url), 'utf8');
  const declared = new Set([...dts.matchAll(/^export declare (?:function|class|const) (\w+)/gm)].map((m) => m[1]));
  assert.deepEqual(Object.keys(api).filter((k) => k !== 'default' && !declared.has(k)), []);
});

test(`the ${build} build's module has every native function the Node package's driver calls`, async () => {
  // The bundle runs bindings-node/lib against this module in place of the napi addon: a name
  // the driver calls that the module lacks would be a TypeError on that path only.
  const lib = new URL('../../../bindings-node/lib/', import.meta.url);
  const used = new Set();
  for (const file of readdirSync(lib).filter((f) => f.endsWith('.cjs') && f !== 'native.cjs')) {
    const text = readFileSync(new URL(file, lib), 'utf8');
    for (const m of text.matchAll(/\bnative\.([A-Za-z_$][\w$]*)(?!\.cjs)/g)) if (m[1] !== 'cjs') used.add(m[1]);
  }
  assert.ok(used.size > 20, [...used].join(' '));
  const glue = await import(`../build/${build}/glue/heart_fleet_wasm.js`);
  // Filled in by js/init.mjs: the receipt verifier from its own module, and in the edge build
  // the left-out functions with a coded error. The driver checks for the receipt chain itself.
  const init = readFileSync(new URL('../js/init.mjs', import.meta.url), 'utf8');
  const filled = new Set(['verifyReceiptsJson', 'NativeReceiptAppender']);
  if (build === 'pkg-edge') for (const m of init.match(/for \(const name of \[([^\]]*)\]\)/)[1].matchAll(/'(\w+)'/g)) filled.add(m[1]);
  assert.deepEqual([...used].filter((name) => !(name in glue) && !filled.has(name)).sort(), []);
});

const BAD = [
  ['a number', 123],
  ['a fraction', 1.5],
  ['null', null],
  ['undefined', undefined],
  ['NaN', NaN],
  ['Infinity', Infinity],
  ['1e300', 1e300],
  ['2**60', 2 ** 60],
  ['a BigInt', 10n],
  ['an object', {}],
  ['an array', []],
  ['an empty string', ''],
  ['junk text', '{"not":"json'],
  ['a boolean', true],
  ['a symbol', Symbol('s')],
  ['a function', () => 'x'],
];

/** A full agent_runs row, as MemoryLeaseStore.insert hands the native store. */
const row = (id) => JSON.stringify(runRow(id, '1970-01-01T00:00:00.000Z'));

const GOOD_SCENARIO = JSON.stringify({ format: 1, name: 'x', clock: '2026-07-30T00:00:00.000Z', runs: [{ id: 'r1', idempotency_key: 'k1' }], steps: [] });

/** A fresh world of raw objects: a store, a fleet on it, an op waiting for a JS store, a session. */
function world() {
  const store = new native.NativeMemoryStore(T0);
  store.insert(row('r1'));
  const fleet = new native.NativeFleet(5, false);
  fleet.attachMemoryStore(store);
  const session = native.NativeLeaseSession.create(60, null);
  const ledger = new native.NativeEffectLedger();
  const requests = new native.NativeReferenceRequests(5);
  return { store, fleet, session, ledger, requests };
}

/** [name, arity, call(world, args)] for every raw export. */
function targets() {
  const out = [];
  const skip = new Set(['initSync', 'default', 'NativeFleet', 'NativeMemoryStore', 'NativeLeaseSession', 'NativeEffectLedger', 'NativeReferenceRequests']);
  for (const [name, f] of Object.entries(native)) {
    if (skip.has(name) || typeof f !== 'function') continue;
    out.push([name, Math.max(f.length, 1), (w, args) => f(...args)]);
  }
  out.push(['new NativeFleet', 2, (w, args) => new native.NativeFleet(...args)]);
  out.push(['new NativeMemoryStore', 1, (w, args) => new native.NativeMemoryStore(...args)]);
  out.push(['NativeMemoryStore.fromScenario', 1, (w, args) => native.NativeMemoryStore.fromScenario(...args)]);
  out.push(['NativeLeaseSession.create', 2, (w, args) => native.NativeLeaseSession.create(...args)]);
  out.push(['new NativeReferenceRequests', 1, (w, args) => new native.NativeReferenceRequests(...args)]);
  const methods = [
    ['fleet', native.NativeFleet],
    ['store', native.NativeMemoryStore],
    ['session', native.NativeLeaseSession],
    ['ledger', native.NativeEffectLedger],
    ['requests', native.NativeReferenceRequests],
  ];
  for (const [obj, cls] of methods) {
    for (const m of Object.getOwnPropertyNames(cls.prototype)) {
      if (m === 'constructor' || m === 'free' || m.startsWith('__') || typeof cls.prototype[m] !== 'function') continue;
      out.push([`${obj}.${m}`, Math.max(cls.prototype[m].length, 1), (w, args) => w[obj][m](...args)]);
    }
  }
  return out;
}

/** Good values for each position, so one bad value is tried at a time. */
function goodArgs(name, arity) {
  const table = {
    nativeReplay: [GOOD_SCENARIO],
    scenarioConfig: [GOOD_SCENARIO],
    'NativeMemoryStore.fromScenario': [GOOD_SCENARIO],
    simulateRequest: ['{"op":"now"}', '{}', T0],
    sqlRender: ['{"op":"now"}', 'postgres'],
    sqlDecode: ['{"op":"now"}', 'postgres', '[[]]'],
    sqlReceiptInsert: ['postgres', '{}'],
    storeRequest: ['now', '{}'],
    'new NativeFleet': [5, false],
    'new NativeReferenceRequests': [5],
    'fleet.begin': ['acquire', '{"runId":"r1","owner":"w","ttlSeconds":60}'],
    'store.failAfter': ['no_such_request', 0, 0],
    'store.insert': [row('r9')],
    'session.onAcquired': ['{"runId":"r1","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"}', T0],
    'session.onRenewed': ['{"ok":{"outcome":"ok","value":{"runId":"r1","owner":"w","leaseExpiresAt":"2026-07-30T00:01:00.000Z"}}}', T0],
    heartbeatInterval: [60, null],
    'NativeLeaseSession.create': [60, null],
  };
  // The operation methods take a handle first (0: no operation of this fleet, answered as
  // a finished one), so the values after it are tried too.
  const byHandle = /^fleet\.(need|request|abandon|resume)/.test(name);
  return table[name] ?? Array.from({ length: arity }, (_, i) => (byHandle && i === 0 ? 0 : 'x'));
}

function isTrap(e) {
  return e instanceof WebAssembly.RuntimeError || (e && /unreachable|RuntimeError|recursive use of an object/.test(String(e.message)));
}

test('every raw export answers wrong types with a coded Error, never a trap', () => {
  let calls = 0;
  let errors = 0;
  for (const [name, arity, call] of targets()) {
    for (let pos = 0; pos < arity; pos += 1) {
      for (const [label, v] of BAD) {
        const w = world();
        const args = goodArgs(name, arity);
        args[pos] = v;
        calls += 1;
        try {
          call(w, args);
        } catch (e) {
          errors += 1;
          const where = `${name} with ${label} at argument ${pos}`;
          assert.ok(!isTrap(e), `${where}: trapped: ${e && e.message}`);
          // Class arguments are checked by wasm-bindgen's own glue (a plain Error naming the
          // class); every other failure carries a registry code.
          const glueClassCheck = name === 'fleet.attachMemoryStore' && /expected instance of/.test(String(e && e.message));
          assert.ok(
            e instanceof Error && (glueClassCheck || ERROR_CODES.includes(e.code)),
            `${where}: threw ${e && e.name}: ${e && e.message} (code ${e && e.code})`,
          );
        }
      }
    }
  }
  assert.ok(calls > 500, `only ${calls} calls`);
  assert.ok(errors > calls / 2, `only ${errors} of ${calls} calls failed`);
  // The instance is still healthy: a full acquire on a fresh fleet.
  const w = world();
  const step = JSON.parse(w.fleet.begin('acquire', '{"runId":"r1","owner":"w","ttlSeconds":60}'));
  assert.equal(step.ok.acquired, true);
});

test('garbage through the step protocol ends operations with a code, and the module survives', () => {
  const fleet = new native.NativeFleet(5, false);
  for (const args of ['', '{', 'null', '[]', '{"fence":1}', '{"runId":"r","owner":"w","ttlSeconds":1e300}']) {
    for (const kind of ['acquire', 'renew', 'release', 'verifyFence', 'guardIrreversible', 'sendOnce', 'reclaimExpired', 'nope']) {
      const r = fleet.begin(kind, args);
      if (typeof r === 'string') {
        assert.ok(JSON.parse(r).done);
      } else {
        assert.equal(JSON.parse(fleet.resumeStore(r, 'garbage')).error.code, 'store-protocol');
        assert.equal(JSON.parse(fleet.resumeStore(r, '{}')).error.code, 'store-protocol');
        assert.equal(fleet.need(r), '', 'finished, its handle freed');
      }
    }
  }
  assert.equal(fleet.pending(), 0, 'every finished operation freed its handle');
  assert.throws(() => native.NativeLeaseSession.create(0, null), (e) => e.code === 'invalid-input');
  assert.throws(() => native.canonicalizeJson('[1,'), (e) => e.code === 'invalid-input');
  assert.throws(() => native.sqlRender('{}', 'postgres'), (e) => e.code === 'store-protocol');
  assert.equal(native.canonicalizeJson('{"b":1,"a":[1,2]}'), '{"a":[1,2],"b":1}');
});

test(`PgLeaseStore in the ${build} build: renders SQL (pkg), or says it is not in the edge build (pkg-edge)`, async () => {
  const queries = [];
  const pool = {
    query: async (q) => {
      queries.push(q);
      return { rows: [['2026-07-30T00:00:00.000Z']], fields: [{ name: 'now' }] };
    },
  };
  if (build === 'pkg') {
    const store = new api.PgLeaseStore({ pool, prepare: false });
    const answer = JSON.parse(await store.execute({ op: 'now' }));
    assert.ok(queries.length > 0, 'the statement went to the pool');
    assert.equal(answer.now, '2026-07-30T00:00:00.000Z');
  } else {
    // Its deadlines are the core's PostgreSQL ones, which the edge build leaves out with the SQL.
    assert.throws(() => new api.PgLeaseStore({ pool, prepare: false }), (e) => e.code === 'invalid-state' && /edge build/.test(e.message));
    assert.equal(queries.length, 0);
  }
});

test(`verifyReceipts in the ${build} build: the verifier module (pkg), or says it is not in the edge build (pkg-edge)`, () => {
  if (build === 'pkg') {
    const report = api.verifyReceipts('', {});
    assert.deepEqual([report.receipts, report.findings], [0, []]);
    assert.throws(() => api.verifyReceipts('not json\n', {}), (e) => e.code === 'invalid-input' && /line 1/.test(e.message));
  } else {
    assert.throws(
      () => api.verifyReceipts('', {}),
      (e) => e.code === 'invalid-state' && /verifyReceipts is not in the edge build/.test(e.message),
    );
  }
});

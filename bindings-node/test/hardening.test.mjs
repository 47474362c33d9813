// What a send returns after it went out, and what a store that answers the wrong reply shows.
//
// * sendOnce checks everything it can before the send (options, fence, channel, key,
//   payload). A result that cannot be stored as JSON is evidence of a real send: it is
//   committed in a safe form ({unstorable: {type, reason}}), never reported as bad input with
//   the intent left dispatched; a toExternalRef that throws commits that form, then throws.
// * A store answering a reply of the wrong kind ends the operation with store-protocol: one
//   line naming the step and the kind, with no Rust Debug text and none of the store's rows.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { HeartFleet, MemoryLeaseStore, DurableEffectLedger, sendOnce } from '../index.mjs';
import { nested } from './helpers/nested.mjs';

const { runRow } = createRequire(import.meta.url)('../lib/rows.cjs');

const T0 = '2026-07-30T00:00:00.000Z';
const R = '00000000-0000-4000-8000-000000000001';


/** A JS store over a memory store, through JSON text both ways (as a database store parses). */
class TextStore {
  constructor(mem) {
    this.mem = mem;
  }
  async execute(request) {
    return JSON.parse(this.mem.executeJson(JSON.stringify(request)));
  }
}

async function world(js) {
  const store = new MemoryLeaseStore(T0);
  store.insert({ id: R, idempotency_key: 'k1' });
  const heart = new HeartFleet({ store: js ? new TextStore(store) : store });
  const { fence } = await heart.acquire(R, 'worker-A', 60);
  return { store, heart, fence, ledger: new DurableEffectLedger({ heart }) };
}

const circular = { id: 'm-1' };
circular.self = circular;

const UNSTORABLE = [
  ['NaN', NaN, 'number NaN'],
  ['Infinity', Infinity, 'number Infinity'],
  ['a BigInt', 42n, 'bigint'],
  ['a circular object', circular, 'object Object'],
  ['an object holding a BigInt', { id: 7n }, 'object Object'],
  ['an array nested 101 deep', nested(101), 'object Array'],
  ['an array nested 6,000 deep', nested(6000), 'object Array'],
  ['a function', () => 1, 'function'],
  ['a symbol', Symbol('s'), 'symbol'],
];

for (const js of [false, true]) {
  const over = js ? 'a JS store (JSON text both ways)' : 'the memory store';
  test(`sendOnce over ${over}: a result that cannot be stored is committed as unstorable evidence, never invalid input`, async () => {
    for (const [label, value, type] of UNSTORABLE) {
      const w = await world(js);
      const key = `k:${label}`;
      let fired = 0;
      const r = await sendOnce(w.heart, w.ledger, {
        fence: w.fence,
        channel: 'telegram',
        effectKey: key,
        payload: { text: 'hi' },
        send: async () => {
          fired += 1;
          return value;
        },
      });
      assert.equal(fired, 1, label);
      assert.equal(r.sent, true, label);
      assert.equal(r.committed, true, label);
      assert.ok(Object.is(r.result, value), `${label}: the result is the send's own`);
      assert.equal(r.externalRef.unstorable.type, type, label);
      assert.equal(typeof r.externalRef.unstorable.reason, 'string', label);
      assert.ok(!r.externalRef.unstorable.reason.includes('\n'), label);
      const intent = w.store.intents().find((i) => i.effect_key === key);
      assert.equal(intent.state, 'committed', `${label}: the intent is committed, not left dispatched`);
      assert.deepEqual(intent.external_ref, r.externalRef, label);
      assert.deepEqual(w.store.dispatchLog().filter((e) => e.effect_key === key).map((e) => e.outcome), ['claimed', 'sent'], label);
      assert.equal(w.heart.metrics.effectCommits, 1, label);
      // At most once: the same key again dedupes without sending.
      const again = await sendOnce(w.heart, w.ledger, { fence: w.fence, channel: 'telegram', effectKey: key, payload: { text: 'hi' }, send: async () => { fired += 1; } });
      assert.deepEqual([again.sent, again.reason, fired], [false, 'deduped', 1], label);
    }
  });

  test(`sendOnce over ${over}: evidence nested 100 deep is stored as it is (the documented limit)`, async () => {
    const w = await world(js);
    const r = await sendOnce(w.heart, w.ledger, { fence: w.fence, channel: 'mail', effectKey: 'deep-100', payload: 1, send: async () => nested(100) });
    assert.deepEqual(r.externalRef, nested(100));
    assert.deepEqual(w.store.intents()[0].external_ref, nested(100));
  });
}

test('sendOnce: a toExternalRef that throws after the send commits the unstorable form, then throws its own error', async () => {
  const w = await world(false);
  const boom = new Error('no message_id');
  let fired = 0;
  const opts = {
    fence: w.fence,
    channel: 'telegram',
    effectKey: 'ref-throws',
    payload: {},
    send: async () => {
      fired += 1;
      return { ok: true };
    },
    toExternalRef: () => {
      throw boom;
    },
  };
  await assert.rejects(sendOnce(w.heart, w.ledger, opts), (e) => e === boom);
  const [intent] = w.store.intents();
  assert.equal(intent.state, 'committed');
  assert.equal(intent.external_ref.unstorable.type, 'toExternalRef');
  assert.match(intent.external_ref.unstorable.reason, /toExternalRef threw Error: no message_id/);
  const again = await sendOnce(w.heart, w.ledger, opts);
  assert.deepEqual([again.sent, again.reason, fired], [false, 'deduped', 1]);
});

test('sendOnce: what can be checked is checked before any I/O (nothing claimed, nothing sent)', async () => {
  const w = await world(false);
  const before = JSON.stringify([w.store.intents(), w.store.dispatchLog(), w.heart.metrics]);
  let fired = 0;
  const send = async () => {
    fired += 1;
  };
  const bad = [
    { payload: NaN },
    { payload: { n: 1n } },
    { payload: nested(6000) },
    { payload: circular },
    { toExternalRef: 'not a function' },
    { toExternalref: (x) => x },
    { effectKey: 'key\ud800' },
    { channel: 'pigeon' },
  ];
  for (const over of bad) {
    await assert.rejects(
      sendOnce(w.heart, w.ledger, { fence: w.fence, channel: 'telegram', effectKey: 'k', payload: {}, send, ...over }),
      (e) => e.code === 'invalid-input',
      JSON.stringify(Object.keys(over)),
    );
  }
  assert.equal(fired, 0);
  assert.equal(JSON.stringify([w.store.intents(), w.store.dispatchLog(), w.heart.metrics]), before);
});

/** A store that answers every request with a reply of the wrong kind, carrying rows. */
function wrongReplyStore(kind) {
  // A well-formed row, so the answer parses and only its kind is wrong.
  const row = { ...runRow(R, T0), objective: 'ROW-CONTENT-MARKER', lease_owner: 'secret-owner' };
  return {
    execute: async () => ({ now: T0, reply: kind === 'runs' ? { kind: 'runs', runs: [row] } : { kind: 'instances', instances: [] } }),
  };
}

test('a store answering a reply of the wrong kind: store-protocol, one line, the step, no Debug text or rows', async () => {
  for (const kind of ['runs', 'instances']) {
    const heart = new HeartFleet({ store: wrongReplyStore(kind) });
    const fence = { runId: R, owner: 'w', leaseExpiresAt: '2026-07-30T00:01:00.000Z', epoch: 1 };
    const calls = {
      acquire: () => heart.acquire(R, 'w', 60),
      'verify fence': () => heart.verifyFence(fence),
      release: () => heart.release(fence, 'completed'),
      'ensure resource run': () => heart.ensureResourceRun('kind', 'key'),
      'dispatch log': () => new DurableEffectLedger({ heart }).dispatchLog(R, 'k'),
      'find stale dispatched': () => new DurableEffectLedger({ heart }).findStaleDispatched(),
    };
    for (const [step, call] of Object.entries(calls)) {
      let caught;
      try {
        await call();
      } catch (e) {
        caught = e;
      }
      assert.ok(caught, `${step}: the wrong reply was accepted`);
      assert.equal(caught.code, 'store-protocol', `${step}: ${caught.message}`);
      const m = caught.message;
      for (const internal of ['StoreAnswer {', 'Timestamp(', 'Runs {', 'Ok(', 'Some(', 'ROW-CONTENT-MARKER', 'secret-owner', '\n']) {
        assert.ok(!m.includes(internal), `${step}: the message shows ${JSON.stringify(internal)}: ${m}`);
      }
      assert.match(m, new RegExp(`kind "?${kind}"?`), `${step}: names the reply that came: ${m}`);
    }
  }
  // The message names the step it stopped at.
  await assert.rejects(new HeartFleet({ store: wrongReplyStore('runs') }).acquire(R, 'w', 60), (e) => e.message.startsWith('unexpected answer at acquire'));
});

// Canonical JSON of values JSON text cannot carry faithfully, which the core walks in place
// (core/src/canonical/host.rs through the native module's `canonicalizeValue`): each is
// compared with the reference algorithm over JS values (tests/canonical-oracle/oracle.mjs,
// `referenceCanonicalizeValue`), and what the
// walk must do beyond JSON is checked directly: holes, toJSON, boxed primitives, proxies,
// symbol keys, a value shared twice against a value inside itself, a throwing getter. The
// same file runs against heart-fleet-wasm (scripts/test-deno.sh).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { canonicalize, digest } from '../index.mjs';
import { referenceCanonicalizeValue, DIGEST_PREFIX, sha256Hex } from '../../tests/canonical-oracle/oracle.mjs';

const shared = { k: 1 };
const values = [
  ['a sparse array', [1, , 3]], // eslint-disable-line no-sparse-arrays
  ['a hole at the end', [1, 2, ,]], // eslint-disable-line no-sparse-arrays
  ['undefined and functions inside an array and an object', { a: [undefined, 1], f() {}, u: undefined }],
  ['toJSON, never honoured', { when: new Date(0), t: { toJSON: () => 'no', v: 2 } }],
  ['boxed primitives', { s: new String('ab'), n: new Number(3), b: new Boolean(false) }],
  ['a Map and a Set (no own keys)', { m: new Map([[1, 2]]), s: new Set([1]) }],
  ['symbol keys', { [Symbol('x')]: 1, y: 2 }],
  ['a proxy', new Proxy({ b: 1, a: 2 }, {})],
  ['a value shared twice', [shared, { again: shared }]],
  ['lone surrogates in keys and values', { '\ud800': '\udc00x', z: [new String('\ud83d')] }],
  ['-0 and code-unit key order', { '\ue000': -0, '😀': 1, a: [0.1, 1e21, -1e-7] }],
];

test('values JSON text cannot carry: the reference algorithm, byte for byte', () => {
  for (const [label, v] of values) {
    assert.equal(canonicalize(v), referenceCanonicalizeValue(v), label);
    assert.equal(digest(v), DIGEST_PREFIX + sha256Hex(referenceCanonicalizeValue(v)), label);
  }
});

test('the reference errors: a value inside itself is a TypeError, NaN and a symbol in an array are coded', () => {
  const looped = { a: [1] };
  looped.a.push(looped);
  assert.throws(() => canonicalize(looped), (e) => e instanceof TypeError && e.code === 'invalid-input' && /circular structure/.test(e.message));
  assert.throws(() => canonicalize({ n: [NaN] }), { code: 'invalid-input', message: 'Canonical JSON Error: Non-finite number NaN cannot be serialized.' });
  assert.throws(() => canonicalize([Symbol('s')]), { code: 'invalid-input', message: 'Canonical JSON Error: Unsupported value type symbol' });
  assert.throws(() => canonicalize([1n]), { code: 'invalid-input', message: 'Canonical JSON Error: Unsupported value type bigint' });
});

test("a getter's own exception propagates, in the reference's order", () => {
  const boom = new Error('boom');
  const v = {
    get b() {
      throw boom;
    },
    a: [1, , 2], // eslint-disable-line no-sparse-arrays
  };
  assert.throws(() => canonicalize(v), (e) => e === boom);
  // The reference reads `a` (a sorted key) first, so an error there wins.
  const w = {
    get b() {
      throw boom;
    },
    a: [NaN, , 1], // eslint-disable-line no-sparse-arrays
  };
  assert.throws(() => canonicalize(w), { code: 'invalid-input', message: /Non-finite number NaN/ });
});

// The result-shape rule (README, "Result shapes"): a result's enumerable fields are exactly
// the reference's, in its order; what heart-fleet adds is readable but non-enumerable.

import assert from 'node:assert/strict';

/** `actual` deep-equals `reference` (same keys, same order) and carries `ours` as hidden fields. */
export function assertShape(actual, reference, ours = {}, message = 'result') {
  assert.deepEqual(actual, reference, `${message}: the reference's fields`);
  assert.deepEqual(Object.keys(actual), Object.keys(reference), `${message}: the reference's key order`);
  assert.equal(JSON.stringify(actual), JSON.stringify(reference), `${message}: JSON.stringify`);
  for (const [k, v] of Object.entries(ours)) {
    assert.deepEqual(actual[k], v, `${message}: .${k}`);
    assert.equal(Object.prototype.propertyIsEnumerable.call(actual, k), false, `${message}: .${k} is not enumerable`);
  }
}

// verifyReceipts of heart-fleet-wasm's full build (its receipt verifier module) against the
// CLI: the Node package's test (bindings-node/test/helpers/receipt-log.mjs), run here in Deno
// and Node. The edge build has no verifier; native.test.mjs checks that it says so.

import { test } from 'node:test';
import { api, build } from './helpers/pkg.mjs';
import { receiptLogSuite } from '../../../bindings-node/test/helpers/receipt-log.mjs';

if (build === 'pkg') {
  receiptLogSuite({ verifyReceipts: api.verifyReceipts, binding: 'heart-fleet-wasm' });
} else {
  // Nothing to compare: native.test.mjs checks the refusal.
}

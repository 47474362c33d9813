// Every conformance scenario of tests/conformance/ replayed through the components in jco (the
// receipt-log scenarios through the verifier component, heart_fleet_receipts.wasm):
// the Node package's runner (bindings-node/test/helpers/runner.mjs) drives fleet.mjs, the
// Node package's API over the transpiled component, whose lease-store (lease-store.mjs) is
// the core's memory store seeded with the scenario's rows. Each replay must pass the
// scenario's expectations and equal the native Rust replay: every step's result, the
// receipts with their digests, the counters, the final rows and how often each effect fired.
// One store mode, 'memory': a jco import cannot await, so the runner's async JS store
// objects cannot stand behind it.

import { createRequire } from 'node:module';
import * as api from '../fleet.mjs';
import { conformanceSuite } from '../../../bindings-node/test/helpers/runner.mjs';

const native = createRequire(import.meta.url)('../../../bindings-node/lib/native.cjs');

conformanceSuite({ api, native, binding: 'the components in jco', modes: ['memory'] });

// The Node worker of `heart-fleet fleet-chaos`: bindings-node's HeartFleet over PgLeaseStore
// (node-postgres), its receipts to heart_receipts, its effects through sendOnce to the
// harness's receiver. The loop is the Rust worker's (host-examples/src/chaos/worker.rs), step
// for step; everything comes from HEART_CHAOS_* (started by the harness, not for people).
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';

const require = createRequire(import.meta.url);
const { HeartFleet, PgLeaseStore, DurableEffectLedger, sendOnce } = require('../../bindings-node/index.cjs');

function env(name) {
  const v = process.env[name];
  if (v === undefined || v === '') {
    console.error(`chaos worker: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

const runs = env('HEART_CHAOS_RUNS').split(',').filter(Boolean);
const receiver = env('HEART_CHAOS_RECEIVER');
const owner = `${env('HEART_CHAOS_NAME')}:${process.pid}`;
const ttl = Number(env('HEART_CHAOS_TTL'));
const workMs = Number(env('HEART_CHAOS_WORK_MS'));
const stopFile = env('HEART_CHAOS_STOP');
const timeoutMs = Number(env('HEART_CHAOS_TIMEOUT_MS'));
let seed = BigInt(env('HEART_CHAOS_SEED')) & 0xffffffffffffffffn;

/** SplitMix64, as the Rust worker's rng. */
function below(n) {
  seed = (seed + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
  let z = seed;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
  z ^= z >> 31n;
  return Number(z % BigInt(n));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const store = new PgLeaseStore({ connectionString: env('HEART_CHAOS_STORE'), max: 2, queryTimeoutMs: timeoutMs, connectTimeoutMs: timeoutMs });
const heart = new HeartFleet({ store, onReceipt: store.receiptSink() });
const ledger = new DurableEffectLedger({ heart });

async function heartbeat() {
  if (!(await heart.heartbeatInstance(owner))) await heart.registerInstance(owner, { pid: process.pid });
}

async function deliver(run, key, epoch) {
  const res = await fetch(`${receiver}/deliver`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ run, key, owner, epoch: epoch ?? -1 }),
    signal: AbortSignal.timeout(5000),
  });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`receiver ${res.status}: ${JSON.stringify(body)}`);
  return body;
}

/** One unit's effect; false: the lease is lost. */
async function send(fence, unit) {
  const key = `chaos:${fence.runId}:${unit}`;
  const out = await sendOnce(heart, ledger, {
    fence, channel: 'internal', effectKey: key, payload: { run: fence.runId, unit },
    send: ({ epoch }) => deliver(fence.runId, key, epoch),
  });
  return out.sent || out.reason === 'deduped';
}

async function round() {
  await heartbeat();
  const run = runs[below(runs.length)];
  const acq = await heart.acquire(run, owner, ttl);
  if (!acq.acquired) {
    await sleep(20 + below(60));
    return;
  }
  let fence = acq.fence;
  const epoch = fence.epoch ?? 0;
  for (const unit of [epoch - 1, epoch].filter((u) => u >= 1)) {
    await sleep(workMs);
    if (existsSync(stopFile)) break;
    await heartbeat();
    fence = await heart.renew(fence, ttl);
    if (!fence) return;
    if (!(await send(fence, unit))) return;
  }
  await heart.release(fence, 'ready');
}

// A harness that died cannot create the stop file: a new parent means it is gone.
const parent = process.ppid;
while (!existsSync(stopFile) && process.ppid === parent) {
  try {
    await round();
  } catch (e) {
    console.error(`${owner}: ${e && e.code ? `${e.code}: ` : ''}${e && e.message}`);
    await sleep(200);
  }
}
await store.end().catch(() => {});
process.exit(0);

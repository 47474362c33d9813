// Starts handler.ts as a real server (a subprocess on a free loopback port, its own Deno KV
// file) and checks it like a caller would: two concurrent requests for the same job run it
// exactly once (the other answers lease-held), the receipts in the responses verify, and a
// later request runs the job again (the run went back to `ready`).
//
//   deno test --unstable-kv -A handler.test.ts

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { verifyReceipt } from '../../bindings-wasm/bindgen/pkg-edge/heart_fleet.js';

async function startServer(): Promise<{ base: string; stop: () => Promise<void> }> {
  const dir = await Deno.makeTempDir();
  const child = new Deno.Command(Deno.execPath(), {
    args: ['run', '--no-check', '--unstable-kv', '--allow-net=127.0.0.1', '--allow-read', '--allow-write=' + dir, '--allow-env', new URL('./handler.ts', import.meta.url).pathname],
    env: { PORT: '0', HOST: '127.0.0.1', HEART_FLEET_KV: `${dir}/jobs.kv` },
    stdout: 'piped',
    stderr: 'inherit',
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let seen = '';
  const deadline = Date.now() + 20_000;
  while (!/listening on (http:\/\/127\.0\.0\.1:\d+)\//.test(seen)) {
    if (Date.now() > deadline) throw new Error(`the server did not start: ${seen}`);
    const { value, done } = await reader.read();
    if (done) throw new Error(`the server exited: ${seen}`);
    seen += value;
  }
  const base = /listening on (http:\/\/127\.0\.0\.1:\d+)\//.exec(seen)![1];
  return {
    base,
    stop: async () => {
      child.kill('SIGTERM');
      await child.status;
      await reader.cancel().catch(() => {});
      await Deno.remove(dir, { recursive: true });
    },
  };
}

test('two concurrent requests for one job: it runs once, the receipts verify, a later request runs it again', async () => {
  const server = await startServer();
  try {
    assert.equal(await (await fetch(`${server.base}/healthz`)).text(), 'ok');
    const post = async (key: string, holdMs: number) => {
      const res = await fetch(`${server.base}/jobs/${key}?holdMs=${holdMs}`, { method: 'POST' });
      assert.equal(res.status, 200);
      return res.json();
    };
    const [a, b] = await Promise.all([post('nightly-report', 500), post('nightly-report', 500)]);
    const ran = [a, b].filter((r) => r.ran);
    const held = [a, b].filter((r) => !r.ran);
    assert.equal(ran.length, 1, `exactly one request ran the job: ${JSON.stringify([a, b])}`);
    assert.equal(held[0].reason, 'lease-held');
    assert.equal(held[0].code, 'lease-held');
    assert.equal(a.runId, b.runId, 'both requests found the same run');
    const winner = ran[0];
    assert.equal(winner.released, true);
    assert.equal(winner.result.key, 'nightly-report');
    assert.deepEqual(winner.receipts.map((r: { event: string }) => r.event), ['acquired', 'released']);
    for (const r of winner.receipts) {
      assert.equal(verifyReceipt(r), true);
      assert.equal(r.owner, winner.owner);
      assert.equal(r.runId, winner.runId);
    }
    assert.deepEqual(held[0].receipts, [], 'the refused request left no receipt');
    // The run went back to ready: the next request runs the job again.
    const again = await post('nightly-report', 0);
    assert.equal(again.ran, true);
    assert.equal(again.runId, winner.runId);
    assert.equal(again.receipts[0].leaseExpiresAt !== winner.receipts[0].leaseExpiresAt, true);
    // Tampering with a receipt is detected.
    assert.throws(() => verifyReceipt({ ...again.receipts[0], owner: 'mallory' }), (e: { code?: string }) => e.code === 'receipt-tampered');
    // A different key is a different run.
    const other = await post('hourly-sync', 0);
    assert.equal(other.ran, true);
    assert.notEqual(other.runId, winner.runId);
    assert.equal((await fetch(`${server.base}/nope`)).status, 404);
  } finally {
    await server.stop();
  }
});

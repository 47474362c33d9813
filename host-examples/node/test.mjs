// Runs the examples as a person would, against the PostgreSQL on DATABASE_URL (SKIPPED
// without it, a failure under CI), each in a schema of its own:
//   cd host-examples/node && npm install && npm test

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);
const url = process.env.DATABASE_URL;
if (!url) {
  console.log('host example tests SKIPPED: DATABASE_URL is not set');
  if (process.env.CI) test('PostgreSQL is required under CI', () => assert.fail('DATABASE_URL is not set'));
}
const skip = url ? false : 'SKIPPED: DATABASE_URL is not set';
const schema = `heart_examples_${process.pid}`;
const dir = mkdtempSync(join(tmpdir(), 'heart-examples-'));
const env = (extra) => ({ ...process.env, HEART_SCHEMA: schema, ...extra });
const node = (script, args, extra) => run(process.execPath, [script, ...args], { cwd: import.meta.dirname, env: env(extra) });

after(async () => {
  if (!url) return;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await c.end();
});

test('two bots tick at once: every tick leased, the message sent exactly once', { skip }, async () => {
  const sentLog = join(dir, 'sent.log');
  const [a, b] = await Promise.all([
    node('bot.mjs', ['--ticks', '3', '--every-ms', '50'], { SENT_LOG: sentLog, OWNER: 'bot-a' }),
    node('bot.mjs', ['--ticks', '3', '--every-ms', '50'], { SENT_LOG: sentLog, OWNER: 'bot-b' }),
  ]);
  const out = a.stdout + b.stdout;
  assert.equal(readFileSync(sentLog, 'utf8').trim().split('\n').length, 1, out);
  const ticks = out.split('\n').filter((l) => l.startsWith('[bot] tick: ')).map((l) => JSON.parse(l.slice(12)));
  assert.equal(ticks.length, 6);
  assert.ok(ticks.every((t) => (t.ran && t.released) || t.reason === 'lease-held'), out);
  assert.equal(ticks.filter((t) => t.outcome === 'sent').length, 1, out);
  // A later run on the same day dedupes.
  const again = await node('bot.mjs', [], { SENT_LOG: sentLog });
  assert.match(again.stdout, /"outcome":"deduped"/);
  assert.equal(readFileSync(sentLog, 'utf8').trim().split('\n').length, 1);
});

test('the canary: off by default, a no-op beat, lease-held for a concurrent second', { skip }, async () => {
  const off = await node('canary.mjs', [], { ZOE_HEART_FLEET_CANARY: 'false' });
  assert.doesNotMatch(off.stdout, /beat:/);
  const [x, y] = await Promise.all([
    node('canary.mjs', [], { ZOE_HEART_FLEET_CANARY: 'true', HOLD_MS: '1500', OWNER: 'canary-x' }),
    new Promise((r) => setTimeout(r, 500)).then(() => node('canary.mjs', [], { ZOE_HEART_FLEET_CANARY: 'true', OWNER: 'canary-y' })),
  ]);
  const beats = (x.stdout + y.stdout).split('\n').filter((l) => l.includes('beat: ')).map((l) => JSON.parse(l.split('beat: ')[1]));
  assert.equal(beats.length, 2);
  assert.deepEqual(beats.map((b) => b.ran).sort(), [false, true]);
  assert.equal(beats.find((b) => !b.ran).reason, 'lease-held');
  const demo = await node('canary.mjs', [], { ZOE_HEART_FLEET_CANARY: 'true', ZOE_OUTBOX_DEMO: 'true', GROUP_ID: '77' });
  assert.match(demo.stdout, /"outbox":"sent"/);
  const demo2 = await node('canary.mjs', [], { ZOE_HEART_FLEET_CANARY: 'true', ZOE_OUTBOX_DEMO: 'true', GROUP_ID: '77' });
  assert.match(demo2.stdout, /"outbox":"deduped"/);
  assert.ok(existsSync(dir));
});

// verifyReceipts: a receipt log checked by the core gives, for every kind of tampering and
// every option, the report `heart-fleet verify-receipts --json` prints for the same file and
// key files, and the same errors. The log is written by the CLI (chained and signed with HMAC
// and Ed25519). Shared by the Node package's tests and heart-fleet-wasm's (Deno and Node).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import process from 'node:process';

const cliPath = process.env.HEART_FLEET_CLI || new URL('../../../target/release/heart-fleet', import.meta.url).pathname;

function cli(dir, args) {
  return spawnSync(cliPath, args, { cwd: dir, encoding: 'utf8' });
}

/** A temporary directory with two key pairs and a signed log of a crashing fleet. */
function setup() {
  const dir = mkdtempSync(join(tmpdir(), 'hf-node-chain-'));
  for (const [kind, out] of [['hmac', 'fleet.key'], ['ed25519', 'fleet-ed.key'], ['hmac', 'other.key']]) {
    execFileSync(cliPath, ['keygen', '--kind', kind, '--out', out], { cwd: dir });
  }
  execFileSync(cliPath, ['simulate', '--seed', '5', '--crash-rate', '0.3', '--quiet', '--receipts', 'r.jsonl',
    '--signing-key', 'fleet.key', '--signing-key', 'fleet-ed.key'], { cwd: dir });
  const key = (f) => readFileSync(join(dir, f), 'utf8');
  return { dir, log: readFileSync(join(dir, 'r.jsonl'), 'utf8'), key };
}

/**
 * The test, for a package's `verifyReceipts` (`binding` names the package in the title):
 * the Node package's, and heart-fleet-wasm's under Deno and Node.
 */
export function receiptLogSuite({ verifyReceipts, binding }) {
  test(`verifyReceipts (${binding}) gives the CLI's report for every tampering and option`, (t) => {
    if (!existsSync(cliPath)) {
      if (process.env.CI) assert.fail(`the heart-fleet CLI is not at ${cliPath} (set HEART_FLEET_CLI)`);
      t.skip(`no heart-fleet CLI at ${cliPath}`);
      return;
    }
    const { dir, log, key } = setup();
    try {
      const lines = log.split('\n').filter((l) => l !== '');
      const receipts = lines.map((l) => JSON.parse(l));
      const run = receipts[0].runId;
      const ofRun = receipts.map((r, i) => [r, i]).filter(([r]) => r.runId === run).map(([, i]) => i);
      assert.ok(ofRun.length >= 3, 'the first run has several receipts');
      const without = (i) => lines.filter((_, j) => j !== i);
      const swapped = lines.slice();
      [swapped[ofRun[1]], swapped[ofRun[2]]] = [swapped[ofRun[2]], swapped[ofRun[1]]];
      const edited = lines.slice();
      edited[ofRun[1]] = JSON.stringify({ ...receipts[ofRun[1]], owner: 'mallory' });
      const { seq, prev, link, hmac, sig, ...unchained } = receipts[0];
      const last = ofRun[ofRun.length - 1];
      const cases = [
        ['intact', lines, [], {}],
        ['intact, both keys', lines, ['--key', 'fleet.key', '--public-key', 'fleet-ed.key.pub'],
          { key: key('fleet.key'), publicKey: key('fleet-ed.key.pub') }],
        ['another fleet\'s key', lines, ['--key', 'other.key'], { key: key('other.key') }],
        ['a deleted receipt', without(ofRun[1]), [], {}],
        ['two receipts swapped', swapped, [], {}],
        ['a receipt copied in again', [...lines, lines[ofRun[1]]], [], {}],
        ['an edited owner', edited, ['--key', 'fleet.key'], { key: key('fleet.key') }],
        ['a cut-off tail', without(last), ['--final-seq', `${run}=${receipts[last].seq}`],
          { finalSeq: { [run]: receipts[last].seq } }],
        ['the log of one run', lines.filter((l) => JSON.parse(l).runId === run), ['--run', run], { run }],
        ['an unchained receipt, chains required', [...lines, JSON.stringify(unchained)], ['--require-chain'],
          { requireChain: true }],
      ];
      for (const [name, body, args, options] of cases) {
        const text = body.join('\n') + '\n';
        writeFileSync(join(dir, 't.jsonl'), text);
        const out = cli(dir, ['verify-receipts', 't.jsonl', '--json', ...args]);
        assert.ok(out.status === 0 || out.status === 1, `${name}: ${out.stderr}`);
        const expected = JSON.parse(out.stdout);
        const report = verifyReceipts(text, options);
        assert.deepEqual(report, expected, name);
        assert.equal(report.findings.length === 0, out.status === 0, name);
        // Every tampering is found (by both: they share the core's verifier, so this is what
        // catches a verifier that stopped seeing one).
        assert.equal(out.status, /^intact|^the log of one run/.test(name) ? 0 : 1, `${name}: the CLI's exit status`);
        // The same log as bytes and as an array of receipts.
        assert.deepEqual(verifyReceipts(new TextEncoder().encode(text), options), expected, `${name} (bytes)`);
        assert.deepEqual(verifyReceipts(body.map((l) => JSON.parse(l)), options), expected, `${name} (array)`);
      }
      // Something was found in every case but the intact ones and the one run's log.
      assert.deepEqual(verifyReceipts(lines.slice(0, 2).join('\n')).findings, []);

      // Errors: the CLI's exit 2 is Node's invalid-input, with the same message.
      const errors = [
        ['not JSON Lines', `${lines[0]}\nnot json\n${lines[1]}\n`, [], {}],
        ['another run than the log\'s', log, ['--run', 'no-such-run'], { run: 'no-such-run' }],
        ['an unknown schema version', log.replace('zao.heart.receipt.v1', 'zao.heart.receipt.v9'), [], {}],
      ];
      for (const [name, text, args, options] of errors) {
        writeFileSync(join(dir, 't.jsonl'), text);
        const out = cli(dir, ['verify-receipts', 't.jsonl', '--json', ...args]);
        assert.equal(out.status, 2, name);
        assert.throws(() => verifyReceipts(text, options), (e) => {
          assert.equal(e.code, 'invalid-input', name);
          assert.equal(`heart-fleet: verify-receipts t.jsonl: invalid-input: ${e.message}\n`, out.stderr, name);
          return true;
        });
      }
      // Bad options: typed errors that never quote a key.
      const secret = key('fleet.key').trim().split(':')[1];
      for (const [options, says] of [
        [{ keys: 'x' }, 'unknown field `keys`'],
        [{ key: key('fleet-ed.key.pub') }, 'key: an HMAC key is needed'],
        [{ publicKey: key('fleet.key') }, 'publicKey: an Ed25519 public key is needed'],
        [{ finalSeq: { [run]: 0 } }, 'a seq counts from 1'],
        [null, 'options is an object'],
      ]) {
        assert.throws(() => verifyReceipts(log, options), (e) => {
          assert.equal(e.code, 'invalid-input');
          assert.ok(e.message.includes(says), `${e.message} should say ${says}`);
          assert.ok(!e.message.includes(secret));
          return true;
        });
      }
      for (const bad of [5, null, { lines }]) {
        assert.throws(() => verifyReceipts(bad), (e) => e.code === 'invalid-input' && e instanceof TypeError);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

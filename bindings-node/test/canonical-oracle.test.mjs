// Canonical JSON against the JavaScript oracle (tests/canonical-oracle/oracle.mjs, the
// reference algorithm): random documents from a seed drawn per run, and the escape-follower
// regression vectors (core/tests/vectors/escape-followers.json), through every
// canonicalizing export of the package: canonicalize, digest, effectKey,
// deterministicResourceId and verifyReceipt. The same file runs against heart-fleet-wasm
// (scripts/test-deno.sh), in Deno and in Node.
//
// HEART_ORACLE_SEED=S replays a run (the seed is printed and named in every failure);
// HEART_ORACLE_JS_COUNT=N changes the number of documents (5,000 by default).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import process from 'node:process';
import { canonicalize, digest, effectKey, deterministicResourceId, verifyReceipt } from '../index.mjs';
import { records, runSeed, DIGEST_PREFIX } from '../../tests/canonical-oracle/oracle.mjs';

const seed = runSeed();
const count = Number(process.env.HEART_ORACLE_JS_COUNT || 5000);

/** Runs `check` on every item, then fails once with the first few mismatches and the seed. */
function compareAll(what, items, check) {
  const found = [];
  let total = 0;
  for (const [i, item] of items.entries()) {
    const problem = check(item);
    if (problem) {
      total += 1;
      if (found.length < 5) found.push(`document ${i}: ${problem}`);
    }
  }
  assert.equal(
    total,
    0,
    `${what}: ${total} mismatch(es) with the oracle, seed ${seed} (replay: HEART_ORACLE_SEED=${seed}):\n` + found.join('\n'),
  );
}

function differs(label, got, expected) {
  return got === expected ? null : `${label}\n  got      ${got}\n  expected ${expected}`;
}

function attempt(f) {
  try {
    return f();
  } catch (e) {
    return `threw ${e && e.message}`;
  }
}

test(`random documents agree with the oracle (${count}, seed ${seed})`, () => {
  console.log(`canonical oracle: ${count} documents, seed ${seed} (HEART_ORACLE_SEED=${seed} replays this run)`);
  const docs = [...records(seed, count)];
  // The engine's own JSON.parse of the same text, again: where it disagrees with the first
  // parse (r.value), the engine is wrong, not the canonicalizer; reported, not compared.
  const reparsed = docs.filter((r) => JSON.stringify(JSON.parse(r.text)) !== JSON.stringify(r.value)).length;
  if (reparsed > 0) console.log(`canonical oracle: this engine's JSON.parse gave another value for ${reparsed} document(s) on a second parse`);
  compareAll('canonicalize / digest / effectKey', docs, (r) => {
    const value = r.value;
    return (
      differs(`canonicalize ${r.text}`, attempt(() => canonicalize(value)), r.canonical) ||
      differs(`digest ${r.text}`, attempt(() => digest(value)), r.digest) ||
      differs(`effectKey ${r.text}`, attempt(() => effectKey('telegram', value)), 'telegram:' + r.digest.slice(DIGEST_PREFIX.length))
    );
  });
  compareAll('deterministicResourceId / verifyReceipt', docs, (r) => {
    const receipt = {
      schemaVersion: 'zao.heart.receipt.v1',
      event: r.a,
      runId: r.b,
      owner: r.a + r.b,
      leaseExpiresAt: r.a,
      effectKey: r.b,
      at: '2026-07-30T00:00:00.000Z',
      digest: r.receiptDigest,
    };
    const id = r.resourceId === null ? null : attempt(() => deterministicResourceId(r.a, r.b));
    return differs(`deterministicResourceId ${JSON.stringify([r.a, r.b])}`, id, r.resourceId) ||
      differs(`verifyReceipt ${JSON.stringify(receipt)}`, attempt(() => verifyReceipt(receipt)), true);
  });
});

test('every escape followed by every printable character matches the vectors', () => {
  const file = JSON.parse(readFileSync(new URL('../../core/tests/vectors/escape-followers.json', import.meta.url), 'utf8'));
  assert.equal(file.cases.length, 34 * 17);
  compareAll('escape followers', file.cases, ({ escape, offset, digest: expected }) => {
    const strings = [];
    for (let f = 0x20; f < 0x7f; f += 1) {
      for (let tail = 0; tail < file.tails; tail += 1) {
        strings.push(file.before.repeat(offset) + escape + String.fromCharCode(f) + file.after.repeat(tail));
      }
    }
    return (
      differs(`digest, escape ${JSON.stringify(escape)} at ${offset}`, digest(strings), expected) ||
      differs(`effectKey, escape ${JSON.stringify(escape)} at ${offset}`, effectKey('p', strings), 'p:' + expected.slice(DIGEST_PREFIX.length))
    );
  });
  // The reported case, as a bot would send it.
  assert.equal(canonicalize({ chatId: 1, text: 'hi\n there' }), '{"chatId":1,"text":"hi\\n there"}');
});

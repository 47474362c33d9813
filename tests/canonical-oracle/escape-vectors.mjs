// Writes core/tests/vectors/escape-followers.json: regression vectors for the defect where the
// canonical writer flipped bit 0x20 of the character after an escape. For every character the
// writer escapes (the 32 C0 controls, `"` and `\`) and every offset 0..16 of it inside a
// string, one document: the array of the strings
//
//   BEFORE.repeat(offset) + escape + follower + AFTER.repeat(tail)
//
// for each printable ASCII follower U+0020..U+007E (outer loop) and each tail 0..9 (inner
// loop). The expected digest is computed by the reference algorithm (oracle.mjs) in a real
// JavaScript engine. Every binding's golden tests expand the same rule and compare.
//
//   node tests/canonical-oracle/escape-vectors.mjs            # rewrite the file
//   node tests/canonical-oracle/escape-vectors.mjs --check    # exit 1 if it differs

import { readFileSync, writeFileSync } from 'node:fs';
import process from 'node:process';
import { referenceDigest } from './oracle.mjs';

export const BEFORE = 'x';
export const AFTER = 'y';
export const OFFSETS = 17;
export const TAILS = 10;

/** The document of one case, by the rule above. */
export function escapeDocument(escape, offset) {
  const strings = [];
  for (let f = 0x20; f < 0x7f; f += 1) {
    for (let tail = 0; tail < TAILS; tail += 1) {
      strings.push(BEFORE.repeat(offset) + escape + String.fromCharCode(f) + AFTER.repeat(tail));
    }
  }
  return strings;
}

export function escapeVectors() {
  const escapes = [];
  for (let c = 0; c < 0x20; c += 1) escapes.push(String.fromCharCode(c));
  escapes.push('"', '\\');
  const cases = [];
  for (const escape of escapes) {
    for (let offset = 0; offset < OFFSETS; offset += 1) {
      cases.push({ escape, offset, digest: referenceDigest(escapeDocument(escape, offset)) });
    }
  }
  return {
    about:
      'Each case is the canonical digest of the array of strings BEFORE.repeat(offset) + escape + follower + ' +
      'AFTER.repeat(tail), for follower U+0020..U+007E (outer loop) and tail 0..tails-1 (inner loop), ' +
      'computed by the reference algorithm in Node. Written by tests/canonical-oracle/escape-vectors.mjs.',
    before: BEFORE,
    after: AFTER,
    tails: TAILS,
    cases,
  };
}

const path = new URL('../../core/tests/vectors/escape-followers.json', import.meta.url);
const text = JSON.stringify(escapeVectors(), null, 1) + '\n';
if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(path, 'utf8');
  } catch {
    // missing: differs
  }
  if (current !== text) {
    process.stderr.write('core/tests/vectors/escape-followers.json differs from escape-vectors.mjs output\n');
    process.exit(1);
  }
} else {
  writeFileSync(path, text);
}

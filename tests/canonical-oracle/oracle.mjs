// The JavaScript oracle for canonical JSON: the reference package's algorithm, run by a real
// JavaScript engine, and a seeded generator of random JSON documents that stress every fast
// path of the Rust writer and parser (escapes at every position, every length 0..64, lone
// surrogates, astral and high-BMP keys, integers beyond 2^53, doubles across the whole
// exponent range, negative zero, duplicate keys, deep nesting).
//
// As a module: `referenceCanonicalize`, `referenceDigest`, `records(seed, count)` (used by
// the Node, wasm and Python differential tests). As a command:
//
//   node tests/canonical-oracle/oracle.mjs --seed S --count N
//
// prints four lines per document, for the Rust differential test:
//   1. the document as JSON text (random key order, escapes, number spellings, whitespace);
//   2. its canonical form, by the reference algorithm over JSON.parse of line 1;
//   3. its digest (`sha256:dreamnet-sorted-json:v0:` + sha256 hex of line 2);
//   4. a JSON array [a, b, receiptDigest, resourceId]: two well-formed random strings, the
//      receipt digest of {event: a, runId: b, owner: a + b, leaseExpiresAt: a, effectKey: b},
//      and deterministicResourceId(a, b) (null when a or b is empty).
// Every document is valid and finite, so each of them has a canonical form.

import { createHash } from 'node:crypto';
import process from 'node:process';

export const DIGEST_PREFIX = 'sha256:dreamnet-sorted-json:v0:';

/** The reference's canonicalize (semantics §3.1) for JSON values, as the TypeScript package writes it. */
export function referenceCanonicalize(value) {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) {
        throw new Error(`Canonical JSON Error: Non-finite number ${value} cannot be serialized.`);
      }
      return Object.is(value, -0) ? '0' : String(value);
    case 'object':
      if (Array.isArray(value)) return '[' + value.map(referenceCanonicalize).join(',') + ']';
      return (
        '{' +
        Object.keys(value)
          .sort()
          .map((k) => JSON.stringify(k) + ':' + referenceCanonicalize(value[k]))
          .join(',') +
        '}'
      );
    default:
      throw new Error(`Canonical JSON Error: Unsupported value type ${typeof value}`);
  }
}

/**
 * The reference's canonicalize (semantics §3.1) over any JS value, the JS-only cases
 * included: an `undefined` array element is `null`, a function or symbol element throws,
 * a hole renders empty (`[1,,3]`), object members that are `undefined`, functions or symbols
 * are dropped, `toJSON` is not honoured. For tests of the values JSON text cannot carry.
 */
export function referenceCanonicalizeValue(value) {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
    case 'string':
    case 'number':
      return referenceCanonicalize(value);
    case 'object':
      if (Array.isArray(value)) {
        return '[' + value.map((v) => (v === undefined ? 'null' : referenceCanonicalizeValue(v))).join(',') + ']';
      }
      return (
        '{' +
        Object.keys(value)
          .sort()
          .filter((k) => !['undefined', 'function', 'symbol'].includes(typeof value[k]))
          .map((k) => JSON.stringify(k) + ':' + referenceCanonicalizeValue(value[k]))
          .join(',') +
        '}'
      );
    default:
      throw new Error(`Canonical JSON Error: Unsupported value type ${typeof value}`);
  }
}

export const sha256Hex = (s) => createHash('sha256').update(s, 'utf8').digest('hex');

export const referenceDigest = (value) => DIGEST_PREFIX + sha256Hex(referenceCanonicalize(value));

export function referenceResourceId(kind, key) {
  if (!kind || !key) return null;
  return 'heart:resource:' + sha256Hex(referenceCanonicalize({ kind, key }));
}

/** A small seeded PRNG (mulberry32 over a 32-bit seed): the same seed gives the same documents. */
export function makeRng(seed) {
  let a = Number(BigInt.asUintN(32, BigInt(seed))) >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)], chance: (p) => next() < p };
}

const hex4 = (u, upper) => {
  const h = u.toString(16).padStart(4, '0');
  return '\\u' + (upper ? h.toUpperCase() : h);
};

const SHORT = { 0x22: '\\"', 0x5c: '\\\\', 0x08: '\\b', 0x0c: '\\f', 0x0a: '\\n', 0x0d: '\\r', 0x09: '\\t' };

/** One UTF-16 code point (or a lone surrogate) from a class chosen to hit the writer's cases. */
function randomCodePoint(rng) {
  switch (rng.int(12)) {
    case 0:
    case 1:
      return rng.int(0x20); // C0 controls: every escape
    case 2:
      return rng.pick([0x22, 0x5c, 0x2f, 0x7f]); // quote, backslash, slash, DEL
    case 3:
      return 0x80 + rng.int(0x780); // C1 controls and two-byte UTF-8
    case 4:
      return rng.pick([0x2028, 0x2029, 0xd7ff, 0xfeff, 0xfffd]) ;
    case 5:
      return 0xe000 + rng.int(0x2000); // high BMP: sorts after astral keys
    case 6:
      return 0x10000 + rng.int(0x100000); // astral
    case 7:
      return 0xd800 + rng.int(0x800); // a lone surrogate (lead or trail)
    default:
      return 0x20 + rng.int(0x5f); // printable ASCII
  }
}

/** JSON text for one code point, spelled raw or escaped at random, as JSON.parse accepts it. */
function spell(rng, cp) {
  const mustEscape = cp < 0x20 || cp === 0x22 || cp === 0x5c || (cp >= 0xd800 && cp <= 0xdfff);
  if (!mustEscape && rng.chance(0.85)) return String.fromCodePoint(cp);
  if (SHORT[cp] && rng.chance(0.7)) return SHORT[cp];
  if (cp === 0x2f && rng.chance(0.5)) return '\\/';
  if (cp >= 0x10000) {
    const v = cp - 0x10000;
    return hex4(0xd800 + (v >> 10), rng.chance(0.5)) + hex4(0xdc00 + (v & 0x3ff), rng.chance(0.5));
  }
  return hex4(cp, rng.chance(0.5));
}

function stringText(rng, { wellFormed = false, maxLen = 64 } = {}) {
  const len = rng.chance(0.5) ? rng.int(17) : rng.int(maxLen + 1);
  const escapeRate = rng.pick([0, 0.05, 0.2, 0.6]);
  let out = '"';
  let plain = rng.pick(['a', ' ', '#', 'x', 'é']);
  for (let i = 0; i < len; i += 1) {
    let cp;
    if (rng.chance(escapeRate)) cp = randomCodePoint(rng);
    else cp = rng.chance(0.9) ? plain.codePointAt(0) : randomCodePoint(rng);
    if (wellFormed && cp >= 0xd800 && cp <= 0xdfff) cp = 0x41;
    // A lead surrogate escape right before a trail one would pair up: keep lone ones lone.
    out += spell(rng, cp);
    if (rng.chance(0.05)) plain = rng.pick(['a', ' ', '#', '!', '~', '"', 'é', '😀']).replace('"', ' ');
  }
  return out + '"';
}

const INTEGER_LIKE_KEYS = ['0', '1', '01', '-1', '10', '2', '9007199254740993', '__proto__', 'constructor', ''];

function keyText(rng) {
  if (rng.chance(0.15)) return JSON.stringify(rng.pick(INTEGER_LIKE_KEYS));
  if (rng.chance(0.1)) return JSON.stringify(rng.pick(['\u{e000}', '\u{ff5a}', '\u{1f600}', '\u{10000}', '\u{d7ff}', 'é', 'B', '_']));
  return stringText(rng, { maxLen: 12 });
}

function digits(rng, n, leadingNonZero = true) {
  let s = leadingNonZero ? String(1 + rng.int(9)) : '';
  while (s.length < n) s += String(rng.int(10));
  return s;
}

/** JSON text of a finite number, in one of many spellings. */
function numberText(rng) {
  for (;;) {
    let text;
    switch (rng.int(9)) {
      case 0:
        text = String(rng.int(2001) - 1000);
        break;
      case 1:
        text = rng.pick(['-0', '-0.0', '0.0', '0e0', '-0E+5', '0', '1E0', '1e21', '1e-7', '123e-20', '5e-324', '1.7976931348623157e308']);
        break;
      case 2: // integers beyond 2^53, up to beyond u64
        text = (rng.chance(0.5) ? '-' : '') + digits(rng, 16 + rng.int(10));
        break;
      case 3: {
        // an arbitrary finite double from random bits (subnormals, huge, tiny)
        const view = new DataView(new ArrayBuffer(8));
        view.setUint32(0, rng.int(2 ** 32));
        view.setUint32(4, rng.int(2 ** 32));
        const x = view.getFloat64(0);
        if (!Number.isFinite(x)) continue;
        text = rng.chance(0.5) ? String(x) : x.toExponential(rng.int(21));
        break;
      }
      case 4: {
        // many digits with an exponent anywhere in the double range (correct rounding)
        const mantissa = digits(rng, 1 + rng.int(30));
        const frac = rng.chance(0.5) ? '.' + digits(rng, 1 + rng.int(20), false) : '';
        text = (rng.chance(0.3) ? '-' : '') + mantissa + frac + rng.pick(['e', 'E']) + rng.pick(['', '+', '-']) + rng.int(340);
        break;
      }
      case 5:
        text = (rng.next() * 10 ** (rng.int(40) - 20)).toPrecision(1 + rng.int(21));
        break;
      case 6:
        text = String(rng.next() - 0.5);
        break;
      case 7:
        text = String(2 ** 53 + rng.int(64) - 32);
        break;
      default:
        text = String(rng.int(1e6) / 1000);
    }
    if (Number.isFinite(Number(text))) return text;
  }
}

const ws = (rng) => (rng.chance(0.9) ? '' : rng.pick([' ', '\t', '  ', ' \t ']));

function valueText(rng, depth) {
  // Containers get rarer with depth, so a document stays a few hundred bytes on average.
  const roll = rng.int(depth >= 3 ? 4 : 4 + 6 / (depth + 1));
  switch (roll) {
    case 0:
      return rng.pick(['null', 'true', 'false']);
    case 1:
    case 2:
      return numberText(rng);
    case 3:
      return stringText(rng);
    case 4:
    case 5:
    case 6: {
      const n = rng.int(6);
      const members = [];
      for (let i = 0; i < n; i += 1) {
        const key = i > 0 && rng.chance(0.05) ? members[rng.int(members.length)][0] : keyText(rng);
        members.push([key, valueText(rng, depth + 1)]);
      }
      return '{' + ws(rng) + members.map(([k, v]) => k + ws(rng) + ':' + ws(rng) + v).join(',' + ws(rng)) + ws(rng) + '}';
    }
    default: {
      const n = rng.int(5);
      const items = [];
      for (let i = 0; i < n; i += 1) items.push(valueText(rng, depth + 1));
      return '[' + ws(rng) + items.join(ws(rng) + ',' + ws(rng)) + ws(rng) + ']';
    }
  }
}

/** A deep chain of arrays and objects (up to 500 levels; the Rust parser accepts 512). */
function deepText(rng) {
  const depth = 1 + rng.int(500);
  // Keys short here: the depth, not the size, is the point.
  let open = '';
  let close = '';
  for (let i = 0; i < depth; i += 1) {
    if (rng.chance(0.5)) {
      open += '[';
      close = ']' + close;
    } else {
      open += '{' + JSON.stringify(rng.pick(INTEGER_LIKE_KEYS)) + ':';
      close = '}' + close;
    }
  }
  return open + valueText(rng, 7) + close;
}

/** One random document as JSON text. */
export function documentText(rng) {
  if (rng.chance(0.02)) return deepText(rng);
  if (rng.chance(0.2)) return stringText(rng);
  return ws(rng) + valueText(rng, 0) + ws(rng);
}

/**
 * `count` records from `seed`: `{text, value, canonical, digest, a, b, receiptDigest,
 * resourceId}`, the expectations computed by the reference algorithm on `value`, which is
 * `JSON.parse(text)`. A test hands the same `value` to the code under test: Deno 2.9.6's
 * V8 was seen parsing the same text to two different values in one process (a key
 * `"\u02FD"` read as `"\\"` after many parses), and the comparison is of canonicalizers, not
 * of the engine's JSON.parse.
 */
export function* records(seed, count) {
  const rng = makeRng(seed);
  for (let i = 0; i < count; i += 1) {
    const text = documentText(rng);
    const value = JSON.parse(text);
    const canonical = referenceCanonicalize(value);
    const a = JSON.parse(stringText(rng, { wellFormed: true, maxLen: 24 }));
    const b = JSON.parse(stringText(rng, { wellFormed: true, maxLen: 24 }));
    yield {
      text,
      value,
      canonical,
      digest: DIGEST_PREFIX + sha256Hex(canonical),
      a,
      b,
      receiptDigest: referenceDigest({ event: a, runId: b, owner: a + b, leaseExpiresAt: a, effectKey: b }),
      resourceId: referenceResourceId(a, b),
    };
  }
}

/** The seed a test run uses: `$HEART_ORACLE_SEED`, else one drawn for this run. */
export function runSeed() {
  const fromEnv = process.env.HEART_ORACLE_SEED;
  if (fromEnv !== undefined && fromEnv !== '') return Number(fromEnv) >>> 0;
  return (Date.now() ^ (process.pid << 16)) >>> 0;
}

function main(argv) {
  const arg = (name, fallback) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : fallback;
  };
  const seed = Number(arg('--seed', String(runSeed())));
  const count = Number(arg('--count', '1000'));
  if (!Number.isInteger(seed) || !Number.isInteger(count) || count < 0) {
    process.stderr.write('usage: node oracle.mjs --seed S --count N\n');
    process.exit(2);
  }
  const chunks = [];
  for (const r of records(seed, count)) {
    chunks.push(r.text, '\n', r.canonical, '\n', r.digest, '\n');
    chunks.push(JSON.stringify([r.a, r.b, r.receiptDigest, r.resourceId]), '\n');
    if (chunks.length > 4096) {
      process.stdout.write(chunks.join(''));
      chunks.length = 0;
    }
  }
  process.stdout.write(chunks.join(''));
}

if (process.argv[1] && import.meta.url === new URL(process.argv[1], 'file://' + process.cwd() + '/').href) {
  main(process.argv.slice(2));
}

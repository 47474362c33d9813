'use strict';
// canonicalize, sha256Hex, digests, deterministicResourceId, effectKey and verifyReceipt.
//
// The canonical form is computed by the Rust core (heart_fleet_core::canonical) from JSON
// text. A JS value becomes that text through JSON.stringify with a replacer that enforces
// the reference's rules on the way: toJSON is not honoured, non-finite numbers, bigints and
// functions/symbols inside arrays are errors. JSON.stringify keeps lone surrogates as
// \udxxx escapes, which the core's JSON.parse-compatible parser preserves.
//
// Values JSON text cannot express (a hole in a sparse array, which the reference renders as
// `[1,,3]`), values that trip JSON.stringify itself (a toJSON that throws) and every error
// go through `slowCanonicalize`, a direct transcription of the reference algorithm, so the
// output and the error messages are the reference's in every case.
//
// A value may nest arrays and objects at most MAX_JSON_DEPTH (512, the core's limit) levels
// deep: a deeper one is an invalid-input error at any depth, found by a bounded walk before
// JSON.stringify or the reference algorithm could exhaust the stack on it.

const native = require('./native.cjs');
const { typeError, codedError, rethrowNative, isThenable, nesting, tooDeep, firstLine, messageOf, wellFormed, MAX_JSON_DEPTH } = require('./util.cjs');

const { digestPrefix: DIGEST_PREFIX } = require('./contract.cjs');

class Unsupported extends Error {}

function replacer(key, value) {
  const orig = this[key];
  switch (typeof orig) {
    case 'number':
      if (!Number.isFinite(orig)) throw new Unsupported();
      return orig;
    case 'string':
    case 'boolean':
      return orig;
    case 'bigint':
      throw new Unsupported();
    case 'function':
    case 'symbol':
      if (Array.isArray(this)) throw new Unsupported();
      return undefined;
    case 'undefined':
      // A hole in a sparse array (the reference's `[1,,3]` bug) needs the slow path.
      if (Array.isArray(this) && !(key in this)) throw new Unsupported();
      return undefined;
    default: {
      if (orig === null) return null;
      // Not `value`: JSON.stringify already applied toJSON, which the reference ignores, and
      // would unwrap boxed primitives, which the reference treats as objects.
      if (orig === value && typeof orig.toJSON !== 'function' && !isBoxed(orig)) return value;
      return Array.isArray(orig) ? orig.slice() : Object.assign({}, orig);
    }
  }
}

function isBoxed(o) {
  return o instanceof Number || o instanceof String || o instanceof Boolean || o instanceof BigInt || o instanceof Symbol;
}

function unsupported(t) {
  return codedError('invalid-input', `Canonical JSON Error: Unsupported value type ${t}`);
}

/**
 * The reference algorithm, transcribed (semantics §3.1). Used only where the fast path
 * cannot go: errors, sparse arrays, values JSON.stringify chokes on.
 */
function slowCanonicalize(value, seen = new Set()) {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'string':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) {
        throw codedError('invalid-input', `Canonical JSON Error: Non-finite number ${value} cannot be serialized.`);
      }
      return Object.is(value, -0) ? '0' : String(value);
    case 'object': {
      if (seen.has(value)) throw typeError('Canonical JSON Error: circular structure');
      seen.add(value);
      try {
        if (Array.isArray(value)) {
          // map skips holes and join renders them empty: the reference's `[1,,3]`.
          return '[' + value.map((v) => (v === undefined ? 'null' : slowCanonicalize(v, seen))).join(',') + ']';
        }
        const parts = [];
        for (const k of Object.keys(value).sort()) {
          const v = value[k];
          if (v === undefined || typeof v === 'function' || typeof v === 'symbol') continue;
          parts.push(JSON.stringify(k) + ':' + slowCanonicalize(v, seen));
        }
        return '{' + parts.join(',') + '}';
      } finally {
        seen.delete(value);
      }
    }
    default:
      throw unsupported(typeof value);
  }
}

const hasOwn = Object.prototype.hasOwnProperty;

/**
 * Whether plain JSON.stringify (no replacer, its fast native path) already gives the
 * reference's content: no non-finite number, bigint, toJSON, boxed primitive, sparse-array
 * hole, or function/symbol inside an array, anywhere.
 */
function plain(v, depth = 0) {
  if (v === null) return true;
  switch (typeof v) {
    case 'number':
      return Number.isFinite(v);
    case 'string':
    case 'boolean':
      return true;
    case 'object': {
      if (depth > 256) return false;
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i += 1) {
          if (!(i in v)) return false;
          const x = v[i];
          if (x !== undefined && !plain(x, depth + 1)) return false;
        }
        return true;
      }
      if (typeof v.toJSON === 'function' || isBoxed(v)) return false;
      for (const k in v) {
        if (!hasOwn.call(v, k)) continue;
        const x = v[k];
        const t = typeof x;
        if (t === 'object' ? x !== null && !plain(x, depth + 1) : t === 'number' ? !Number.isFinite(x) : t === 'bigint') return false;
      }
      return true;
    }
    default:
      return false;
  }
}

/**
 * JSON text with the reference's canonical content (not yet sorted), or `null` when only
 * the slow path can handle the value. A value nested deeper than the core's MAX_JSON_DEPTH
 * (512 levels of arrays and objects) is an invalid-input error here, before JSON.stringify
 * or the reference algorithm could exhaust the stack on it.
 */
function jsonText(value, what = 'Canonical JSON Error') {
  switch (typeof value) {
    case 'undefined':
    case 'function':
    case 'symbol':
    case 'bigint':
      throw unsupported(typeof value);
    default:
  }
  let fast;
  try {
    fast = plain(value);
  } catch {
    return null;
  }
  // plain() is true only for values at most 257 levels deep.
  if (!fast && nesting(value) === 'deep') throw tooDeep(what);
  try {
    return fast ? JSON.stringify(value) : JSON.stringify(value, replacer);
  } catch {
    return null;
  }
}

/** `canonicalize(value)`: the DreamNet sorted JSON text of a JS value. */
function canonicalize(value) {
  const text = jsonText(value);
  if (text === null) return slowCanonicalize(value);
  try {
    return native.canonicalizeJson(text);
  } catch (e) {
    return rethrowNative(e);
  }
}

/**
 * Lowercase hex SHA-256 of the UTF-8 bytes of a string (`sha256Hex`). A lone surrogate is
 * encoded as U+FFFD, as the reference's TextEncoder does (Python's `sha256_hex` agrees).
 */
function sha256Hex(s) {
  if (typeof s !== 'string') throw typeError(`sha256Hex: the input must be a string, got ${typeof s}`);
  return native.sha256Hex(s);
}

/** `sha256:dreamnet-sorted-json:v0:` + sha256Hex(canonicalize(value)). */
function digest(value) {
  const text = jsonText(value);
  if (text === null) return DIGEST_PREFIX + native.sha256Hex(slowCanonicalize(value));
  try {
    return native.digestJson(text);
  } catch (e) {
    return rethrowNative(e);
  }
}

/** sha256Hex(canonicalize(value)), without the prefix. */
function canonicalSha256(value) {
  const text = jsonText(value);
  if (text === null) return native.sha256Hex(slowCanonicalize(value));
  try {
    return native.canonicalSha256Json(text);
  } catch (e) {
    return rethrowNative(e);
  }
}

/** `heart:resource:` + sha256Hex(canonicalize({kind, key})): a resource run's idempotency key. */
function deterministicResourceId(kind, key) {
  if (kind === '' || key === '' || kind === undefined || key === undefined || kind === null || key === null) {
    throw codedError('invalid-input', 'deterministicResourceId: kind and key are required');
  }
  if (typeof kind !== 'string' || typeof key !== 'string') {
    throw typeError('deterministicResourceId: kind and key must be strings');
  }
  // An id: a lone surrogate has no UTF-8 form, so every runtime would hash something else.
  if (!wellFormed(kind) || !wellFormed(key)) {
    throw typeError('deterministicResourceId: kind and key must be well-formed strings (a lone surrogate is invalid UTF-16)');
  }
  try {
    return native.deterministicResourceId(kind, key);
  } catch (e) {
    return rethrowNative(e);
  }
}

/** `prefix + ":" + sha256Hex(canonicalize(identity))`: a deterministic effect key. */
function effectKey(prefix, identity) {
  if (typeof prefix !== 'string') throw typeError(`effectKey: prefix must be a string, got ${typeof prefix}`);
  if (!wellFormed(prefix)) throw typeError('effectKey: prefix must be a well-formed string (a lone surrogate is invalid UTF-16)');
  return prefix + ':' + canonicalSha256(identity);
}

/**
 * Checks a receipt's digest against its fields. Returns `true`; throws a `HeartFleetError`
 * with code `receipt-tampered` when the digest does not match, `invalid-input` when the
 * value is not a receipt.
 */
function verifyReceipt(receipt) {
  if (receipt === null || typeof receipt !== 'object' || Array.isArray(receipt)) {
    throw typeError('verifyReceipt: a receipt is an object');
  }
  let text;
  try {
    text = JSON.stringify(receipt);
  } catch (e) {
    throw typeError(`verifyReceipt: the receipt is not JSON: ${e.message}`);
  }
  try {
    native.verifyReceiptJson(text);
  } catch (e) {
    rethrowNative(e);
  }
  return true;
}

/** JSON text of a value for the core (payloads, evidence), with the canonical rules. */
function toCoreJson(value, what) {
  if (value === undefined) return 'null';
  const text = jsonText(value, what);
  if (text !== null) return text;
  // Raise the reference's error if there is one; otherwise the value is only expressible
  // by the slow path (a sparse array): the core cannot store it.
  slowCanonicalize(value);
  throw typeError(`${what} cannot be stored as JSON (a sparse array or a throwing toJSON)`);
}

/**
 * How deep the evidence of a send may nest to be stored everywhere: it travels inside store
 * requests and answers (a few levels of their own) that every store, in every runtime, parses
 * with a recursion limit of 128 levels.
 */
const MAX_EVIDENCE_DEPTH = 100;

function typeName(v) {
  if (v === null) return 'null';
  if (typeof v === 'number') return `number ${v}`;
  if (typeof v === 'object') {
    const name = v.constructor && typeof v.constructor.name === 'string' ? v.constructor.name : '';
    return name ? `object ${name}` : 'object';
  }
  return typeof v;
}

/**
 * What a send's result records as evidence when it cannot be stored as JSON (a NaN, a
 * bigint, a circular object, nesting deeper than MAX_EVIDENCE_DEPTH, a toExternalRef that
 * threw): `{"unstorable":{"type":…,"reason":…}}`, never the value itself. The send
 * happened, so the intent is committed with this instead of being reported as bad input.
 */
function unstorableEvidence(type, reason) {
  return JSON.stringify({ unstorable: { type, reason: firstLine(reason).slice(0, 200) } });
}

/**
 * The evidence of a send as JSON text the core stores: `value` with the canonical rules, or
 * the unstorable form when it has none.
 */
function evidenceJson(value) {
  if (value === undefined) return 'null';
  let bad;
  try {
    bad = nesting(value, MAX_EVIDENCE_DEPTH);
  } catch (e) {
    return unstorableEvidence(typeName(value), messageOf(e));
  }
  if (bad === 'deep') return unstorableEvidence(typeName(value), `nested deeper than ${MAX_EVIDENCE_DEPTH} levels`);
  try {
    return toCoreJson(value, 'externalRef');
  } catch (e) {
    return unstorableEvidence(typeName(value), messageOf(e));
  }
}

module.exports = {
  MAX_JSON_DEPTH,
  MAX_EVIDENCE_DEPTH,
  evidenceJson,
  unstorableEvidence,
  DIGEST_PREFIX,
  canonicalize,
  sha256Hex,
  digest,
  canonicalSha256,
  deterministicResourceId,
  effectKey,
  verifyReceipt,
  toCoreJson,
  slowCanonicalize,
  isThenable,
};

'use strict';
// canonicalize, sha256Hex, digests, deterministicResourceId, effectKey and verifyReceipt.
//
// The canonical form is computed by the Rust core (heart_fleet_core::canonical). A plain
// value (what JSON.stringify carries faithfully: no non-finite number, bigint, toJSON,
// boxed primitive, sparse-array hole, or function/symbol inside an array) goes over as
// JSON.stringify text, its fast native path; JSON.stringify keeps lone surrogates as
// \udxxx escapes, which the core's JSON.parse-compatible parser preserves. Any other value
// is walked in place by the core (`canonicalizeValue`, the core's one algorithm over the
// engine's values), so the output and the error messages are the reference's in every case.
//
// A value may nest arrays and objects at most MAX_JSON_DEPTH (512, the core's limit) levels
// deep: a deeper one is an invalid-input error at any depth, found by a bounded walk first.

const native = require('./native.cjs');
const { typeError, codedError, rethrowNative, isThenable, nesting, tooDeep, messageOf, wellFormed, MAX_JSON_DEPTH } = require('./util.cjs');

const { digestPrefix: DIGEST_PREFIX, maxEvidenceDepth: MAX_EVIDENCE_DEPTH } = require('./contract.cjs');

function isBoxed(o) {
  return o instanceof Number || o instanceof String || o instanceof Boolean || o instanceof BigInt || o instanceof Symbol;
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

/** JSON.stringify text of a plain value, or null when the core must walk the value. */
function plainText(value) {
  try {
    return plain(value) ? JSON.stringify(value) : null;
  } catch {
    return null; // a getter threw: the walk reads it again, in the reference's order
  }
}

/**
 * The core's canonical form of a value that is not plain (`{text, isJson}`), or the
 * reference's error. Deeper than MAX_JSON_DEPTH is an error before anything is read.
 */
function walked(value, what = 'Canonical JSON Error') {
  let depth = null;
  try {
    depth = nesting(value);
  } catch {
    // A getter threw: the walk reads it again, in the reference's order, and raises it there.
  }
  if (depth === 'deep') throw tooDeep(what);
  const r = native.canonicalizeValue(value);
  if (r.error != null) throw r.typeError ? typeError(r.error) : codedError('invalid-input', r.error);
  return r;
}

/** `canonicalize(value)`: the DreamNet sorted JSON text of a JS value. */
function canonicalize(value) {
  const text = plainText(value);
  if (text === null) return walked(value).text;
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
  const text = plainText(value);
  if (text === null) return DIGEST_PREFIX + native.sha256Hex(walked(value).text);
  try {
    return native.digestJson(text);
  } catch (e) {
    return rethrowNative(e);
  }
}

/** sha256Hex(canonicalize(value)), without the prefix. */
function canonicalSha256(value) {
  const text = plainText(value);
  if (text === null) return native.sha256Hex(walked(value).text);
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

/**
 * Checks a receipt log: every receipt's digest, each run's chain (gaps, reorders, duplicates,
 * forks, broken links, truncation given `finalSeq`) and, with `key` / `publicKey` (the text of
 * a key file), who signed it. `log` is JSON Lines (a string or bytes) or an array of receipts
 * (element i is line i + 1). Returns the report `heart-fleet verify-receipts --json` prints;
 * throws `invalid-input` for a log that is not JSON Lines, a receipt of an unknown schema
 * version or of another run than `run`, or bad options. The core does all of it.
 */
const utf8 = new TextEncoder();

function verifyReceipts(log, options = {}) {
  let bytes;
  if (typeof log === 'string') bytes = utf8.encode(log);
  else if (log instanceof Uint8Array) bytes = log;
  else if (Array.isArray(log)) {
    const lines = log.map((r, i) => {
      const line = r === undefined ? undefined : JSON.stringify(r);
      if (line === undefined) throw typeError(`verifyReceipts: log[${i}] is not JSON`);
      return line + '\n';
    });
    bytes = utf8.encode(lines.join(''));
  } else {
    throw typeError('verifyReceipts: the log is JSON Lines text, bytes or an array of receipts');
  }
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw typeError('verifyReceipts: options is an object');
  }
  try {
    return JSON.parse(native.verifyReceiptsJson(bytes, JSON.stringify(options)));
  } catch (e) {
    rethrowNative(e);
  }
}

/** JSON text of a value for the core (payloads, evidence), with the canonical rules. */
function toCoreJson(value, what) {
  if (value === undefined) return 'null';
  const text = plainText(value);
  if (text !== null) return text;
  const r = walked(value, what);
  if (!r.isJson) throw typeError(`${what} cannot be stored as JSON (a sparse array)`);
  return r.text;
}

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
 * threw): `{"unstorable":{"type":…,"reason":…}}`, built by the core, never the value itself.
 * The send happened, so the intent is committed with this instead of being reported as bad input.
 */
function unstorableEvidence(type, reason) {
  return native.unstorableEvidence(String(type), String(reason));
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
  verifyReceipts,
  toCoreJson,
  isThenable,
};

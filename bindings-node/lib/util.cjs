'use strict';
// Errors with stable codes, and argument checks shared by the whole package.

const contract = require('./contract.cjs');

/** Every stable error code of the core's registry, in its order. */
const ERROR_CODES = contract.errorCodes;

/** An `Error` with a stable `.code` from the core's registry. */
class HeartFleetError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = 'HeartFleetError';
    this.code = code;
  }
}

function codedError(code, message) {
  return new HeartFleetError(code, message);
}

/** A `TypeError` for an argument of the wrong type; `.code` is `invalid-input`. */
function typeError(message) {
  const e = new TypeError(message);
  e.code = 'invalid-input';
  return e;
}

/** Re-throws a native error as a coded `HeartFleetError` (the native code is kept). */
function rethrowNative(e) {
  if (e && typeof e === 'object' && typeof e.code === 'string' && ERROR_CODES.includes(e.code)) {
    throw codedError(e.code, e.message);
  }
  throw e;
}

function describe(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  const t = typeof v;
  if (t === 'number') return Number.isNaN(v) ? 'NaN' : String(v);
  if (t === 'bigint') return `a bigint (${v}n)`;
  if (t === 'string') return v === '' ? 'an empty string' : 'a string';
  return t === 'object' ? 'an object' : t;
}

/** Matches a lone surrogate (for runtimes without String.prototype.isWellFormed). */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?:^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Whether a string is well-formed UTF-16 (no lone surrogate). Ids, owners, keys and every
 * other name the core stores must be: a lone surrogate has no UTF-8 form, so a store, a
 * digest or another runtime would each see a different string.
 */
function wellFormed(s) {
  return typeof s.isWellFormed === 'function' ? s.isWellFormed() : !LONE_SURROGATE.test(s);
}

function illFormed(name) {
  return typeError(`${name} must be a well-formed string, got a string with a lone surrogate (invalid UTF-16)`);
}

/** A non-empty, well-formed string. */
function str(name, v) {
  if (typeof v !== 'string' || v === '') throw typeError(`${name} must be a non-empty string, got ${describe(v)}`);
  if (!wellFormed(v)) throw illFormed(name);
  return v;
}

/** An integer number in [min, max]. */
function int(name, v, min, max) {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw typeError(`${name} must be an integer in ${min}..=${max}, got ${describe(v)}`);
  }
  return v;
}

/** `int`, or `dflt` (undefined: left to the core's default) for undefined or null. */
function optInt(name, v, min, max, dflt) {
  if (v === undefined || v === null) return dflt;
  return int(name, v, min, max);
}

/**
 * A plain options object (undefined/null → {}). With `known`, every own enumerable key must
 * be one of them: a misspelt option is an invalid-input TypeError, never silently ignored
 * (`{maxRetry: 3}` would otherwise keep the default).
 */
function opts(name, v, known) {
  if (v === undefined || v === null) return {};
  if (typeof v !== 'object' || Array.isArray(v)) throw typeError(`${name} must be an object, got ${describe(v)}`);
  if (known) knownKeys(name, v, known);
  return v;
}

/** Throws an invalid-input TypeError naming the first key of `v` that is not in `known`. */
function knownKeys(name, v, known, noun = 'option') {
  for (const k of Object.keys(v)) {
    if (!known.includes(k)) {
      throw typeError(`${name}: unknown ${noun} ${JSON.stringify(k)} (the ${noun}s are ${known.join(', ')})`);
    }
  }
  return v;
}

/**
 * The deepest nesting of arrays and objects the core takes in a JSON value (MAX_JSON_DEPTH in
 * the core's canonical JSON: `[[…]]` 512 levels deep is accepted, 513 is not).
 */
const MAX_JSON_DEPTH = contract.maxJsonDepth;

/**
 * 'deep' when `v` nests arrays/objects more than `limit` levels, 'circular' when it contains
 * itself, else null. Walks at most `limit + 1` levels, so a value nested 10,000 deep costs no
 * more than one nested `limit + 1` deep and never exhausts the stack.
 */
function nesting(v, limit = MAX_JSON_DEPTH) {
  const path = new Set();
  const walk = (x, depth) => {
    if (x === null || typeof x !== 'object') return null;
    if (path.has(x)) return 'circular';
    if (depth > limit) return 'deep';
    path.add(x);
    try {
      const items = Array.isArray(x) ? x : Object.values(x);
      for (const y of items) {
        const bad = walk(y, depth + 1);
        if (bad) return bad;
      }
      return null;
    } finally {
      path.delete(x);
    }
  };
  return walk(v, 1);
}

/** The invalid-input error for a value nested deeper than `limit`. */
function tooDeep(what, limit = MAX_JSON_DEPTH) {
  return codedError('invalid-input', `${what}: nesting deeper than ${limit} levels (the core's limit for a JSON value)`);
}

/** The first line of a message (V8's circular-structure errors span several). */
function firstLine(text) {
  const s = String(text);
  const i = s.indexOf('\n');
  return i < 0 ? s : s.slice(0, i);
}

/**
 * JSON text of a value for a store request or an operation's arguments (JSON.stringify's
 * rules), or an invalid-input TypeError naming `what` for a value JSON cannot hold: a
 * bigint, a circular structure, or nesting deeper than MAX_JSON_DEPTH.
 */
function jsonOf(what, v) {
  const bad = nesting(v);
  if (bad === 'deep') throw tooDeep(what);
  try {
    return JSON.stringify(v);
  } catch (e) {
    throw typeError(`${what} is not JSON: ${firstLine(messageOf(e))}`);
  }
}

/** The largest count or limit the core takes (its parameters are u32). */
const U32 = 2 ** 32 - 1;

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** An instant as `toISOString()` text: a Date, ISO text, or milliseconds since the epoch. */
function isoOf(name, v) {
  if (v instanceof Date) {
    const t = v.getTime();
    if (!Number.isFinite(t)) throw typeError(`${name} is an invalid Date`);
    return v.toISOString();
  }
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || Math.abs(v) > 8.64e15) throw typeError(`${name} must be integer milliseconds, got ${describe(v)}`);
    return new Date(v).toISOString();
  }
  if (typeof v === 'string') {
    const t = Date.parse(v);
    if (v === '' || !Number.isFinite(t)) throw typeError(`${name} must be an ISO-8601 instant, got ${JSON.stringify(v)}`);
    return ISO.test(v) ? v : new Date(t).toISOString();
  }
  throw typeError(`${name} must be a Date, an ISO string or milliseconds, got ${describe(v)}`);
}

/** Milliseconds since the epoch of a Date, ISO text or number. */
function msOf(name, v) {
  return Date.parse(isoOf(name, v));
}

/** The tokens this package handed out: frozen as the core made them, so valid as they are. */
const MINTED = new WeakSet();

/** A token the core just made, frozen and remembered as one (`fence` then takes it as it is). */
function mintedFence(f) {
  if (f) MINTED.add(Object.freeze(f));
  return f;
}

/**
 * A fencing token `{runId, owner, leaseExpiresAt, epoch?}` as JSON-ready plain data.
 * Tokens minted by the TypeScript package (no epoch) are accepted. A token this package
 * minted (`mintedFence`) is returned as it is: it is frozen, so it still holds the values
 * the core gave it, and checking them again would only cost each renew, verify and release.
 */
function fence(name, v) {
  if (MINTED.has(v)) return v;
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    throw typeError(`${name} must be a fencing token {runId, owner, leaseExpiresAt}, got ${describe(v)}`);
  }
  const out = {
    runId: str(`${name}.runId`, v.runId),
    owner: str(`${name}.owner`, v.owner),
    leaseExpiresAt: isoOf(`${name}.leaseExpiresAt`, v.leaseExpiresAt),
  };
  if (v.epoch !== undefined && v.epoch !== null) out.epoch = int(`${name}.epoch`, v.epoch, 0, Number.MAX_SAFE_INTEGER);
  return out;
}

/** The message of anything thrown. */
function messageOf(e) {
  if (e instanceof Error) return e.message || String(e.name || 'Error');
  try {
    return String(e);
  } catch {
    return 'unknown error';
  }
}

/** A Promise-aware call: returns the value or a Promise of it. */
function isThenable(v) {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function';
}

/**
 * The result-shape rule: a result keeps exactly the reference's enumerable fields, so deep
 * equality with the reference's result holds; every other own property (what we add:
 * `code`, `released`, `lost`, `committed`, `externalRef`, …) stays readable but becomes
 * non-enumerable, absent from `JSON.stringify`, `Object.keys` and deep equality.
 */
function referenceShape(result, visible) {
  for (const k of Object.keys(result)) {
    if (!visible.includes(k)) Object.defineProperty(result, k, { value: result[k], enumerable: false, writable: true, configurable: true });
  }
  return result;
}

/** `fields` (the reference's) plus `extras` as non-enumerable properties (skipping undefined ones). */
function withExtras(fields, extras) {
  for (const [k, v] of Object.entries(extras)) {
    if (v !== undefined) Object.defineProperty(fields, k, { value: v, enumerable: false, writable: true, configurable: true });
  }
  return fields;
}

/**
 * A pending answer, bounded by `ms`: past it, the promise rejects (store-unavailable once it
 * reaches the core) instead of hanging the operation. `limit` is the option's value the
 * message names (default `ms`). The timer is cleared when the answer comes and never keeps
 * the process alive on its own.
 */
function bounded(pending, ms, limit = ms) {
  // One promise and one reaction, not Promise.race with a promise of the timer's and a
  // finally: cheaper on every awaited store answer.
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer within ${limit} ms (storeTimeoutMs)`)), ms);
    if (typeof timer === 'object' && typeof timer.unref === 'function') timer.unref();
    else if (typeof globalThis.Deno?.unrefTimer === 'function') globalThis.Deno.unrefTimer(timer);
    pending.then(
      (v) => {
        clearTimeout(timer);
        resolve(v);
      },
      (e) => {
        clearTimeout(timer);
        reject(e);
      },
    );
  });
}

module.exports = {
  U32,
  bounded,
  referenceShape,
  withExtras,
  ERROR_CODES,
  HeartFleetError,
  codedError,
  typeError,
  rethrowNative,
  describe,
  str,
  wellFormed,
  int,
  optInt,
  opts,
  knownKeys,
  MAX_JSON_DEPTH,
  nesting,
  tooDeep,
  firstLine,
  jsonOf,
  isoOf,
  msOf,
  fence,
  mintedFence,
  messageOf,
  isThenable,
};

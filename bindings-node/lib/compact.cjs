'use strict';
// The core's compact answers (the lease cycle on a MemoryLeaseStore without JSON): values
// separated by one character, built into objects with the layouts the core exports. The
// format, its tags and what falls back to JSON are documented in the core (bridge::compact);
// nothing about them is decided here.

const native = require('./native.cjs');

const OPEN_BRACE = 123;

/**
 * A decoder for one record layout: `(values, at)` → the object of the fields from `at`;
 * `nullValue` is the null marker. Every object is built from `{}` with every field of the
 * layout assigned in its order, so all of them share one shape (one chain of hidden-class
 * transitions, whose frozen form V8 caches). Not a copy of a template object: each copy
 * whose null fields are then overwritten leaves V8 a map it cannot reuse, and freezing such
 * an object (receipts are frozen) cost about five times as much.
 */
function recordDecoder(layout, nullValue) {
  const names = layout.map(([name]) => name);
  const kinds = layout.map(([, kind]) => kind);
  const n = names.length;
  const decode = (values, at) => {
    const out = {};
    for (let k = 0; k < n; k++) {
      const v = values[at + k];
      const kind = kinds[k];
      out[names[k]] = v === nullValue ? null : kind === 'n' ? Number(v) : kind === 'j' ? (v === '[]' ? [] : JSON.parse(v)) : v;
    }
    return out;
  };
  return { decode, size: n };
}

/**
 * The decoders, built on first use: the wasm build fills the native module only after this
 * file is loaded, so nothing here may read it at load time.
 */
let decoders = null;
function layouts() {
  if (decoders === null) {
    const l = JSON.parse(native.compactLayouts());
    decoders = {
      separator: l.separator,
      run: recordDecoder(l.run, l.null),
      token: recordDecoder(l.token, l.null),
      receipt: recordDecoder(l.receipt, l.null),
    };
  }
  return decoders;
}

/**
 * Decodes an answer: `{step}` for the JSON form (the operation's final step, parsed), else
 * `{value, receipts}` with value in the shape the JSON step's `ok` has.
 */
function decodeAnswer(text) {
  if (text.charCodeAt(0) === OPEN_BRACE) return { step: JSON.parse(text) };
  const { separator, run: RUN, token: TOKEN, receipt: RECEIPT } = layouts();
  const values = text.split(separator);
  let at = 1;
  let value;
  switch (values[0]) {
    case 'A': {
      const run = RUN.decode(values, at);
      at += RUN.size;
      const fence = TOKEN.decode(values, at);
      at += TOKEN.size;
      value = { acquired: true, run, fence };
      break;
    }
    case 'N':
      value = { outcome: 'ok', value: TOKEN.decode(values, at) };
      at += TOKEN.size;
      break;
    case 'R':
      value = { outcome: 'ok', value: RUN.decode(values, at) };
      at += RUN.size;
      break;
    case 'V':
      value = values[at++] === '1';
      break;
    default:
      throw new Error(`heart-fleet: a compact answer with tag ${JSON.stringify(values[0])}`);
  }
  const count = Number(values[at++]);
  const receipts = count === 0 ? null : new Array(count);
  for (let k = 0; k < count; k++, at += RECEIPT.size) receipts[k] = RECEIPT.decode(values, at);
  return { value, receipts };
}

/** The character between a compact text's values (the core's COMPACT_SEPARATOR). */
function separator() {
  return layouts().separator;
}

module.exports = { decodeAnswer, separator };

'use strict';
// The native module of the wasm build. The bundle maps bindings-node/lib's
// `require('./native.cjs')` (which loads the napi-rs addon) here; js/init.mjs fills this
// object with the wasm-bindgen exports, and the entry point imports it before the driver, so
// the driver finds the module filled when it loads.
module.exports = {};

'use strict';
// The native module of the wasm build. The bundle maps bindings-node/lib's
// `require('./native.cjs')` (which loads the napi-rs addon) here; the entry point fills this
// object with the wasm-bindgen exports once the module is instantiated, before any API call.
// The driver only reads its properties inside functions, so the late fill is safe.
module.exports = {};

// heart-fleet-wasm: the entry point of the bundles (pkg/ and pkg-edge/heart_fleet.js).
//
// Instantiates the wasm-bindgen module (top-level await), puts its exports where the Node
// package's driver expects its napi-rs module, and re-exports the Node package's public API
// (generated from bindings-node/index.mjs by build.mjs) plus DenoKvLeaseStore.

import './init.mjs';

export * from '../build/api.mjs';
export { default } from '../build/api.mjs';

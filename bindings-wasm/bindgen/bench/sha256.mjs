// SHA-256 in wasm: `sha256Hex` of 4,000 bytes through heart-fleet-wasm builds, side by side
// in one process (3 rounds of 20,000 calls each, after 2,000 warm-up calls). With no
// arguments it times this package's `pkg/`; give module paths to compare builds:
//
//   node bench/sha256.mjs [/path/to/heart_fleet.js ...]

import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const paths = process.argv.length > 2 ? process.argv.slice(2).map((p) => pathToFileURL(resolve(p)).href) : [new URL('../pkg/heart_fleet.js', import.meta.url).href];
const text = 'x'.repeat(4000);
const builds = [];
for (const p of paths) builds.push([p, await import(p)]);
for (let round = 0; round < 3; round += 1) {
  for (const [path, api] of builds) {
    for (let i = 0; i < 2000; i += 1) api.sha256Hex(text);
    const t = performance.now();
    for (let i = 0; i < 20000; i += 1) api.sha256Hex(text);
    console.log(`${path}: ${(((performance.now() - t) * 1000) / 20000).toFixed(2)} µs per sha256Hex of 4,000 bytes`);
  }
}

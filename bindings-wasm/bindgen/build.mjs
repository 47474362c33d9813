// Builds the package, twice: pkg/ (the full build) and pkg-edge/ (the edge build: no SQL
// rendering for PgLeaseStore, no conformance replay, no receipt-log verifier; 24 % smaller).
// pkg/ also gets the verifier as a second module, heart_fleet_receipts_bg.wasm
// (bindings-wasm/receipts-bindgen, the same three steps). Run from anywhere:
// `node bindings-wasm/bindgen/build.mjs`, or `npm run build` in this folder. For each:
//
//   1. cargo build -p heart-fleet-wasm --target wasm32-unknown-unknown --profile wasm
//      (pkg-edge: --no-default-features)
//   2. wasm-bindgen --target web (the ES module glue that Deno, bundlers and Node load)
//   3. wasm-opt -Oz (binaryen from npm) → <dir>/heart_fleet_bg.wasm
//   4. esbuild: one ES module, <dir>/heart_fleet.js, holding the Node package's JavaScript
//      driver (bindings-node/index.cjs and lib/*.cjs, unchanged) with its napi-rs module
//      replaced by the wasm-bindgen exports, plus DenoKvLeaseStore
//   5. <dir>/heart_fleet.d.ts: the Node package's declarations plus DenoKvLeaseStore
//
// Needs on PATH: cargo (with the wasm32-unknown-unknown target) and wasm-bindgen 0.2.130
// (`cargo install wasm-bindgen-cli --version 0.2.130`); npm ci installs esbuild and binaryen.
// Prints the .wasm sizes (raw and after wasm-opt).

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const nodePkg = join(root, 'bindings-node');
const build = join(here, 'build');
const bin = (name) => join(here, 'node_modules', '.bin', name);

function run(cmd, args, opts = {}) {
  console.log(`$ ${cmd} ${args.join(' ')}`);
  return execFileSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], cwd: root, ...opts });
}

const t0 = Date.now();
mkdirSync(build, { recursive: true });

/**
 * wasm-opt -Oz --converge of `input` into `output` (the profile already builds with opt-level z
 * and LTO).
 * It takes tens of seconds: skipped when its input is byte for byte the last one it optimized into
 * `output` (the input's digest is kept in `stamp`).
 */
function wasmOpt(input, output, stamp) {
  const inputHash = createHash('sha256').update(readFileSync(input)).digest('hex');
  if (existsSync(output) && existsSync(stamp) && readFileSync(stamp, 'utf8') === inputHash) {
    console.log(`wasm-opt: input unchanged, keeping ${output}`);
    return;
  }
  const features = ['bulk-memory', 'nontrapping-float-to-int', 'sign-ext', 'mutable-globals', 'multivalue', 'reference-types'];
  // --converge: the passes again until the module stops shrinking (a few hundred bytes).
  run(bin('wasm-opt'), ['-Oz', '--converge', ...features.map((f) => `--enable-${f}`), input, '-o', output]);
  writeFileSync(stamp, inputHash);
}

// 1–3 for each build: `pkg` (every feature) and `pkg-edge` (no SQL rendering, no replay).
const variants = [
  { name: 'pkg', cargo: [] },
  { name: 'pkg-edge', cargo: ['--no-default-features'] },
];
const meta = JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: root, maxBuffer: 64 << 20 }));
const raw = join(meta.target_directory, 'wasm32-unknown-unknown', 'wasm', 'heart_fleet_wasm.wasm');
const sizes = [];
for (const v of variants) {
  const out = join(here, v.name);
  const glue = join(build, v.name, 'glue');
  mkdirSync(out, { recursive: true });
  // 1. The wasm module.
  run('cargo', ['build', '-p', 'heart-fleet-wasm', '--target', 'wasm32-unknown-unknown', '--profile', 'wasm', ...v.cargo]);
  const rawSize = statSync(raw).size;
  // 2. The glue (ES module; `initSync({module})` takes the bytes, so no fetch/fs inside it).
  rmSync(glue, { recursive: true, force: true });
  run('wasm-bindgen', ['--target', 'web', '--out-dir', glue, '--out-name', 'heart_fleet_wasm', raw]);
  // 3. Smaller: -Oz.
  const bg = join(glue, 'heart_fleet_wasm_bg.wasm');
  const optimized = join(out, 'heart_fleet_bg.wasm');
  wasmOpt(bg, optimized, join(build, v.name, 'wasm-opt-input.sha256'));
  sizes.push([v.name, rawSize, statSync(bg).size, statSync(optimized).size]);
}

// The receipt-log verifier (bindings-wasm/receipts-bindgen): a module of its own, in pkg/ only
// (the edge build's budget leaves it out), loaded by js/init.mjs beside the lease module.
const receiptsRaw = join(meta.target_directory, 'wasm32-unknown-unknown', 'wasm', 'heart_fleet_receipts_wasm.wasm');
const receiptsGlue = join(build, 'receipts', 'glue');
run('cargo', ['build', '-p', 'heart-fleet-receipts-wasm', '--target', 'wasm32-unknown-unknown', '--profile', 'wasm']);
rmSync(receiptsGlue, { recursive: true, force: true });
run('wasm-bindgen', ['--target', 'web', '--out-dir', receiptsGlue, '--out-name', 'heart_fleet_receipts_wasm', receiptsRaw]);
{
  const bg = join(receiptsGlue, 'heart_fleet_receipts_wasm_bg.wasm');
  const optimized = join(here, 'pkg', 'heart_fleet_receipts_bg.wasm');
  wasmOpt(bg, optimized, join(build, 'receipts', 'wasm-opt-input.sha256'));
  rmSync(join(here, 'pkg-edge', 'heart_fleet_receipts_bg.wasm'), { force: true });
  sizes.push(['pkg (receipt verifier)', statSync(receiptsRaw).size, statSync(bg).size, statSync(optimized).size]);
}

// 4. The API module: the Node package's own export list (index.mjs), over its index.cjs.
const indexMjs = readFileSync(join(nodePkg, 'index.mjs'), 'utf8');
const names = [...indexMjs.matchAll(/^export const (\w+) = cjs\.\1;$/gm)].map((m) => m[1]);
if (names.length < 20) throw new Error(`bindings-node/index.mjs: found only ${names.length} exports`);
let api = '// Generated by build.mjs from bindings-node/index.mjs: the Node package\'s API.\n';
api += `import cjs from ${JSON.stringify(join(nodePkg, 'index.cjs'))};\n`;
api += `import { DenoKvLeaseStore } from ${JSON.stringify(join(here, 'js', 'deno-kv-store.mjs'))};\n\n`;
for (const n of names) api += `export const ${n} = cjs.${n};\n`;
api += 'export { DenoKvLeaseStore };\n';
api += 'export default Object.freeze({ ...cjs, DenoKvLeaseStore });\n';
writeFileSync(join(build, 'api.mjs'), api);

// The driver's `require('./native.cjs')` (the napi-rs loader) becomes the slot the entry
// fills with the wasm exports.
const nativeToWasm = {
  name: 'native-to-wasm',
  setup(b) {
    b.onResolve({ filter: /native\.cjs$/ }, (args) =>
      resolve(args.resolveDir, args.path) === join(nodePkg, 'lib', 'native.cjs') ? { path: join(here, 'js', 'native-slot.cjs') } : undefined,
    );
  },
};
for (const v of variants) {
  // The entry's `heart-fleet-glue` is this variant's wasm-bindgen glue.
  const glue = {
    name: 'glue',
    setup(b) {
      b.onResolve({ filter: /^heart-fleet-glue$/ }, () => ({ path: join(build, v.name, 'glue', 'heart_fleet_wasm.js') }));
      // The verifier's glue in pkg/; in pkg-edge/ a module that says it is absent.
      b.onResolve({ filter: /^heart-fleet-receipts-glue$/ }, () => ({
        path: v.name === 'pkg' ? join(receiptsGlue, 'heart_fleet_receipts_wasm.js') : join(here, 'js', 'no-receipts.mjs'),
      }));
    },
  };
  await esbuild.build({
    entryPoints: [join(here, 'js', 'entry.mjs')],
    outfile: join(here, v.name, 'heart_fleet.js'),
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    // Loaded only where they exist: `pg` on demand by PgLeaseStore({connectionString}),
    // node:fs/promises to read the .wasm in Node, node:crypto as the Node 18 fallback of
    // crypto.randomUUID.
    external: ['pg', 'node:fs/promises', 'node:crypto'],
    plugins: [nativeToWasm, glue],
    banner: { js: `// @ts-self-types="./heart_fleet.d.ts"\n// heart-fleet-wasm (${v.name}): generated by bindings-wasm/bindgen/build.mjs; do not edit.` },
    legalComments: 'none',
    logLevel: 'warning',
  });
}

// 5. Types: the Node package's declarations, plus the Deno KV store.
const dts = readFileSync(join(nodePkg, 'index.d.ts'), 'utf8') + '\n' + readFileSync(join(here, 'js', 'deno-kv-store.d.ts'), 'utf8');
for (const v of variants) {
  writeFileSync(join(here, v.name, 'heart_fleet.d.ts'), dts);
  copyFileSync(join(here, 'js', 'pkg-package.json'), join(here, v.name, 'package.json'));
}

const kb = (n) => `${(n / 1024).toFixed(1)} KiB`;
for (const [name, rawSize, bgSize, optSize] of sizes) {
  console.log(`${name}: wasm ${kb(rawSize)} raw (cargo), ${kb(bgSize)} after wasm-bindgen, ${kb(optSize)} (${optSize} bytes) after wasm-opt -Oz`);
}
console.log(`js: ${kb(statSync(join(here, 'pkg', 'heart_fleet.js')).size)} (pkg/heart_fleet.js); built in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

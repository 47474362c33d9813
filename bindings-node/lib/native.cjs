'use strict';
// Loads the napi-rs addon. `npm run build` (napi build --platform) writes
// heart-fleet.<platform>-<arch>[-<abi>].node next to package.json; a plain
// `cargo build` output copied to heart-fleet.node works too.
const { existsSync } = require('node:fs');
const { join } = require('node:path');

function abi() {
  if (process.platform !== 'linux') return '';
  const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null;
  const glibc = report && report.header && report.header.glibcVersionRuntime;
  return glibc ? '-gnu' : '-musl';
}

function load() {
  const root = join(__dirname, '..');
  const candidates = [
    `heart-fleet.${process.platform}-${process.arch}${abi()}.node`,
    'heart-fleet.node',
  ];
  const tried = [];
  for (const name of candidates) {
    const file = join(root, name);
    tried.push(file);
    if (existsSync(file)) return require(file);
  }
  const err = new Error(
    `heart-fleet: the native module is not built for ${process.platform}-${process.arch}. ` +
      `Run \`npm run build\` in the package folder. Looked for: ${tried.join(', ')}`,
  );
  err.code = 'ERR_HEART_FLEET_NATIVE_MISSING';
  throw err;
}

module.exports = load();

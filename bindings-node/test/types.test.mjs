// The TypeScript declarations: they compile under --strict, declare every runtime export,
// and describe the API as the usage file uses it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const root = fileURLToPath(new URL('..', import.meta.url));

test('index.d.ts declares every runtime export', () => {
  const dts = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  const declared = new Set([...dts.matchAll(/^export declare (?:function|class|const) (\w+)/gm)].map((m) => m[1]));
  const runtime = Object.keys(require('../index.cjs'));
  const missing = runtime.filter((n) => !declared.has(n));
  assert.deepEqual(missing, []);
  const extra = [...declared].filter((n) => !runtime.includes(n));
  assert.deepEqual(extra, []);
});

test('the declarations type-check under --strict with a usage file', () => {
  const tsc = require.resolve('typescript/bin/tsc');
  execFileSync(
    process.execPath,
    [tsc, '--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', 'test/types/usage.mts'],
    { cwd: root, stdio: 'pipe' },
  );
});

// Transpiles the heart:fleet components (target/component/heart_fleet.wasm, the lease layer, and
// heart_fleet_receipts.wasm, the receipt-log verifier, both built by
// `cargo run -p xtask -- component`) with jco into build/: core modules plus the JS that
// lifts and lowers the component's types. Sync instantiation (the imports are plain
// functions); the component imports no WASI, so no shim.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const components = [
  process.env.HEART_FLEET_COMPONENT ?? resolve(here, '../../target/component/heart_fleet.wasm'),
  process.env.HEART_FLEET_RECEIPTS_COMPONENT ?? resolve(here, '../../target/component/heart_fleet_receipts.wasm'),
];
for (const component of components) {
  if (!existsSync(component)) {
    console.error(`${component} is missing: build it with \`cargo run -p xtask -- component\``);
    process.exit(2);
  }
  execFileSync(
    join(here, 'node_modules', '.bin', 'jco'),
    ['transpile', component, '-o', join(here, 'build'), '--instantiation', 'sync', '--no-wasi-shim', '--no-component-error-wrapping', '--quiet'],
    { stdio: 'inherit' },
  );
  console.log(`jco: ${component} -> build/`);
}

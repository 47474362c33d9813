// `node --import ./test/node-hooks.mjs --test …`: Node runs the Node package's own test files
// (bindings-node/test/*.test.mjs) against heart-fleet-wasm. Their `import … from
// '../index.mjs'` (the napi-rs package) resolves to pkg/heart_fleet.js instead, and their
// `node:test` to test/node-test-shim.mjs. Deno does the same with test/import-map.json.
import { register } from 'node:module';

const url = (p) => new URL(p, import.meta.url).href;

register(
  'data:text/javascript,' +
    encodeURIComponent(`
const from = ${JSON.stringify(url('../../../bindings-node/index.mjs'))};
const to = ${JSON.stringify(url('../pkg/heart_fleet.js'))};
const tests = ${JSON.stringify(url('../../../bindings-node/test/'))};
const shim = ${JSON.stringify(url('./node-test-shim.mjs'))};
export async function resolve(specifier, context, next) {
  if (specifier === 'node:test' && context.parentURL && context.parentURL.startsWith(tests)) {
    return { url: shim, shortCircuit: true };
  }
  const r = await next(specifier, context);
  return r.url === from ? { ...r, url: to } : r;
}
`),
);

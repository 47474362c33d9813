// The benchmarked cycle, shared by bench.mjs and heart-fleet-wasm's benchmarks
// (bindings-wasm/bindgen/bench): acquire → verify → release (3 receipts), with the run
// released to `to` (`ready`: it repeats).

export async function cycle(heart, runId, to = 'ready') {
  const a = await heart.acquire(runId, 'worker-A', 60);
  if (!a.acquired) throw new Error(`cycle: not acquired: ${a.reason}`);
  if (!(await heart.verifyFence(a.fence))) throw new Error('cycle: not verified');
  if ((await heart.release(a.fence, to)) === null) throw new Error('cycle: not released');
}

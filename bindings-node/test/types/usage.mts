// Type-checked (not run) by test/types.test.mjs: the declarations describe the API as used.
import {
  HeartFleet,
  MemoryLeaseStore,
  MemoryEffectLedger,
  DurableEffectLedger,
  LivenessReclaimer,
  executeWithLease,
  guardIrreversible,
  sendOnce,
  reconcileOutbox,
  ensureResourceRun,
  canonicalize,
  sha256Hex,
  digest,
  deterministicResourceId,
  effectKey,
  verifyReceipt,
  HeartFleetError,
  LeaseLostError,
  type AcquireResult,
  type FencingToken,
  type HeartReceipt,
  type LeaseStore,
  type StoreRequest,
  type StoreAnswer,
} from 'heart-fleet';

export async function usage(): Promise<void> {
  const store = new MemoryLeaseStore('2026-07-30T00:00:00.000Z');
  store.insert({ id: 'r1', idempotency_key: 'k' });
  const receipts: HeartReceipt[] = [];
  const heart = new HeartFleet({ store, onReceipt: (r) => void receipts.push(r), maxRetries: Infinity });
  const acq: AcquireResult = await heart.acquire('r1', 'w', 60);
  if (!acq.acquired || !acq.fence) return;
  const fence: FencingToken = acq.fence;
  const renewed: FencingToken | null = await heart.renew(fence, 60);
  const outcome = await heart.tryRelease(renewed ?? fence, 'completed');
  if (outcome.outcome === 'rejected') console.log(outcome.cause.toUpperCase());
  const n: number = heart.metrics.acquireWins + (await heart.reclaimExpired({ limit: 10 })).reclaimedCount;
  const res = await executeWithLease(heart, { runId: 'r1', owner: 'w', ttlSeconds: 60 }, async (getFence, signal, lease) => {
    signal.addEventListener('abort', () => console.log((signal.reason as LeaseLostError).lost));
    await lease.heartbeat();
    const g = await guardIrreversible(heart, getFence(), new MemoryEffectLedger(), 'k', async ({ epoch }) => epoch ?? 0);
    return g.committed ? g.result + n : -1;
  });
  if (res.ran) console.log(res.result.toFixed(0), res.released, res.lost);
  else console.log(res.reason);
  const ledger = new DurableEffectLedger({ heart });
  const sent = await sendOnce(heart, ledger, {
    fence,
    channel: 'telegram',
    effectKey: effectKey('telegram', { chatId: 1 }),
    payload: { chatId: 1 },
    send: async () => ({ message_id: 1 }),
    toExternalRef: (m) => ({ message_id: m.message_id }),
  });
  if (sent.sent) console.log(sent.result.message_id);
  const summary = await reconcileOutbox(ledger, { probes: { telegram: async () => ({ status: 'unknown' as const }) } });
  console.log(summary.left, (await ledger.findStaleDispatched()).length);
  const { run, created } = await ensureResourceRun(heart, 'kind', 'key', { objective: 'x' });
  console.log(run.fencing_epoch, created);
  const live = new LivenessReclaimer({ heart, ttlMs: 90_000 });
  console.log((await live.reclaimDeadInstanceRuns({ maxReclaimsPerCycle: 5 })).deadInstanceIds);
  console.log(canonicalize({ a: 1 }), sha256Hex('x'), digest([1]), deterministicResourceId('a', 'b'), verifyReceipt(receipts[0]!));
  const js: LeaseStore = {
    async execute(req: StoreRequest): Promise<StoreAnswer> {
      return store.execute(req);
    },
  };
  const heart2 = new HeartFleet({ store: js });
  try {
    await heart2.verifyFence(fence);
  } catch (e) {
    if (e instanceof HeartFleetError) console.log(e.code);
  }
}

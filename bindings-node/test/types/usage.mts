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
  verifyReceipts,
  type LogReport,
  type Finding,
  HeartFleetError,
  LeaseLostError,
  type AcquireResult,
  type FencingToken,
  type HeartReceipt,
  type LeaseStore,
  type StoreRequest,
  type StoreAnswer,
  type ReferenceLeaseStore,
  type LivenessStore,
  type StoredRun,
  type ReclaimerSummary,
  SupabaseLeaseStore,
  type SupabaseLikeClient,
  type OutboxClient,
  type IntentRow,
  type ChannelProbe,
  type SendOnceOutcome,
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
  // The reference's seams over a supabase-js client: the positional store, the {client} ledger.
  const db = { from: (table: string) => table } as unknown;
  const canary = new HeartFleet({ store: new SupabaseLeaseStore(db as SupabaseLikeClient), onReceipt: (r) => console.log(r.event) });
  console.log(new SupabaseLeaseStore(db as SupabaseLikeClient, 'agent_runs').tables.runs);
  const outbox = new DurableEffectLedger({ client: db as OutboxClient, intentsTable: 'effect_intents', now: () => new Date() });
  const demo: SendOnceOutcome<{ message_id?: number }> = await sendOnce(canary, outbox, {
    fence,
    channel: 'telegram',
    effectKey: effectKey('telegram', { chatId: 1, text: 'demo' }),
    payload: { chatId: 1, text: 'demo' },
    send: () => Promise.resolve({ message_id: 1 }),
    toExternalRef: (r) => ({ message_id: r.message_id ?? null }),
  });
  console.log(demo.sent ? 'sent' : demo.reason);
  const claimed: boolean = await outbox.claimIntent({ runId: 'r1', effectKey: 'k', channel: 'telegram', payloadDigest: 'sha256:x' });
  const moved: boolean = await outbox.markDispatched({ runId: 'r1', effectKey: 'k', fenceOwner: fence.owner, fenceExpiresAt: fence.leaseExpiresAt });
  await outbox.markCommitted({ runId: 'r1', effectKey: 'k', externalRef: { message_id: 1 } });
  const stale: IntentRow[] = await outbox.findStaleDispatched(new Date().toISOString(), 10);
  for (const i of stale) {
    const attempts: number = await outbox.noteUnresolved(i.run_id, i.effect_key, i.attempts);
    if (attempts > 5) await outbox.abandon(i.run_id, i.effect_key, 'gave up');
    else await outbox.reopen(i.run_id, i.effect_key, 'not sent');
  }
  await outbox.logAttempt('r1', 'k', 0, 'claimed', { channel: 'telegram' });
  const probe: ChannelProbe = async () => ({ status: 'sent', externalRef: { cast_hash: '0x' } });
  const rec = await reconcileOutbox(outbox, { probes: { farcaster: probe }, maxAttempts: 5, now: () => new Date() });
  console.log(claimed, moved, rec.committed + rec.left);
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
  // The TypeScript package's seams: a LeaseStore of one's own, a LivenessStore.
  const rows = new Map<string, StoredRun>();
  const own: ReferenceLeaseStore = {
    getRun: async (id) => rows.get(id) ?? null,
    async conditionalUpdate(id, updates, { eq = {} }) {
      const r = rows.get(id);
      if (!r || Object.entries(eq).some(([k, v]) => (r as Record<string, unknown>)[k] !== v)) return null;
      const next = { ...r, ...updates } as StoredRun;
      rows.set(id, next);
      return next;
    },
    findExpiredLeases: (nowIso, limit) => [...rows.values()].filter((r) => r.lease_expires_at != null && String(r.lease_expires_at) < nowIso).slice(0, limit),
    now: () => new Date(),
  };
  const heart3 = new HeartFleet({ store: own, maxRetries: Infinity, storeTimeoutMs: 5_000, casRetries: 3 });
  const got = await heart3.acquire('r1', 'w', 60);
  console.log(got.fence?.epoch, (await store.conditionalUpdate('r1', { retries: 1 }, { eq: { status: 'ready' } }))?.retries);
  console.log((await store.findExpiredLeases(new Date().toISOString(), 10)).length);
  const liveness: LivenessStore = {
    now: () => new Date(),
    liveInstances: async () => [{ instance_id: 'i-1', status: 'alive', last_heartbeat: new Date().toISOString() }],
    markInstancesDead: async () => undefined,
    runsOwnedBy: async () => [],
    reclaimRun: async (_id, _owner, retries) => retries > 0,
  };
  const pass: ReclaimerSummary = await new LivenessReclaimer({ store: liveness, heart: heart3 }).reclaimDeadInstanceRuns();
  console.log(pass.errors.map((e) => e.id), new LivenessReclaimer({ store: liveness, storeTimeoutMs: 1000 }).heart === null);
}

export function auditLog(jsonl: string, key: string): number {
  const report: LogReport = verifyReceipts(jsonl, { key, finalSeq: { 'run-1': 3 }, requireChain: true });
  const gaps: Finding[] = report.findings.filter((f) => f.code === 'chain-gap');
  const fromArray = verifyReceipts([{ event: 'acquired' }], { run: 'run-1' });
  return gaps.length + report.runs['run-1'].receipts + fromArray.signed + (report.findings[0]?.position ?? 0);
}

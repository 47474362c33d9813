// The heart canary (reference: bot/src/zoe/heart-canary.ts), on the Rust core over
// PostgreSQL. A lease-guarded no-op on the live table, with an optional outbox demo.
//
//   ZOE_HEART_FLEET_CANARY=true DATABASE_URL=… node canary.mjs
//   (ZOE_OUTBOX_DEMO=true GROUP_ID=123 also sends the demo message at most once)
//
// Differences from the reference, on purpose: the canary run is created by the store's
// find-or-create (a UUID assignment id, visibility `team`: DESIGN fix 9), and it is released
// back to `ready` (a resource run) instead of being reset from `completed` afterwards.

import { hostname } from 'node:os';
import { HeartFleet, DurableEffectLedger, executeWithLease, sendOnce, reconcileOutbox, effectKey } from 'heart-fleet';
import { openStore } from './db.mjs';

const DEMO =
  '[outbox-demo] ZOE outbox is live - this message was delivered exactly once via the transactional outbox (doc 2145).';

export async function runHeartFleetCanary(heart, ledger, owner, deps = {}, holdMs = 0) {
  if (process.env.ZOE_HEART_FLEET_CANARY !== 'true') return { skipped: 'disabled' };
  let runId;
  try {
    runId = (await heart.ensureResourceRun('zoe.heart.canary', 'singleton', {
      objective: 'Heart fleet canary: lease-guarded no-op proving the shared lease layer on the live table',
      createdBy: 'zoe:heart-canary',
    })).run.id;
  } catch (e) {
    console.error(`[zoe/heart-canary] could not ensure canary run: ${e.message}`);
    return { skipped: 'no-run' };
  }
  const me = owner ?? `zoe:${process.env.HOSTNAME ?? hostname()}:${process.pid}`;
  let outbox;
  const out = await executeWithLease(heart, { runId, owner: me, ttlSeconds: 60, releaseToReady: true }, async (getFence) => {
    if (process.env.ZOE_OUTBOX_DEMO === 'true') outbox = await outboxDemo(heart, ledger, getFence(), deps);
    // HOLD_MS keeps the lease a while, to watch a second canary answer lease-held.
    if (holdMs > 0) await new Promise((r) => setTimeout(r, holdMs));
    return 'ok';
  });
  const m = heart.metrics;
  const summary = { ran: out.ran };
  if (!out.ran) summary.reason = out.reason;
  if (outbox) summary.outbox = outbox;
  summary.metrics = {
    acquireWins: m.acquireWins,
    acquireCollisions: m.acquireCollisions,
    renews: m.renews,
    releases: m.releases,
    fenceRejections: m.fenceRejections,
    effectCommits: m.effectCommits,
    effectDedupes: m.effectDedupes,
  };
  console.log(`[zoe/heart-canary] beat: ${JSON.stringify(summary)}`);
  return summary;
}

async function outboxDemo(heart, ledger, fence, { send, groupId }) {
  if (!send || !groupId) return 'no-send-deps';
  try {
    const r = await sendOnce(heart, ledger, {
      fence,
      channel: 'telegram',
      effectKey: effectKey('telegram', { chatId: groupId, text: DEMO }),
      payload: { chatId: groupId, text: DEMO },
      send: () => send(groupId, DEMO),
      toExternalRef: (res) => ({ message_id: res?.message_id ?? null }),
    });
    console.log(`[zoe/heart-canary] outbox demo: ${JSON.stringify(r.sent ? { sent: true } : r)}`);
    try {
      const s = await reconcileOutbox(ledger);
      if (s.scanned > 0) console.log(`[zoe/heart-canary] outbox reconcile: ${JSON.stringify(s)}`);
    } catch (e) {
      console.warn(`[zoe/heart-canary] outbox reconcile skipped: ${e.message}`);
    }
    return r.sent ? 'sent' : r.reason;
  } catch (e) {
    const hint = /effect_intents/i.test(e.message) ? ' (apply the migrations first)' : '';
    console.warn(`[zoe/heart-canary] outbox demo skipped: ${e.message}${hint}`);
    return 'error';
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { store, close } = await openStore();
  try {
    const heart = new HeartFleet({
      store,
      onReceipt: (r) => console.log(`[zoe/heart-canary] receipt ${r.event} run=${r.runId.slice(0, 8)} owner=${r.owner}`),
    });
    const ledger = new DurableEffectLedger({ heart });
    const groupId = Number(process.env.GROUP_ID ?? 0) || undefined;
    const send = groupId
      ? async (chat, text) => {
          console.log(`[zoe/heart-canary] SENT to ${chat}: ${text}`);
          return { message_id: Date.now() };
        }
      : undefined;
    await runHeartFleetCanary(heart, ledger, process.env.OWNER, { send, groupId }, Number(process.env.HOLD_MS ?? 0));
  } finally {
    await close();
  }
}

// A bot-style tick over PostgreSQL: the tick runs under executeWithLease on a resource run
// (find-or-create by deterministic key, released back to `ready` after each tick, so the
// per-resource mutex never wedges), and its announcement goes out at most once through
// sendOnce, however many workers run the tick and however often they crash and retry.
//
//   DATABASE_URL=postgres://heart:heart@127.0.0.1:5432/heart_test node bot.mjs [--ticks N] [--every-ms M]
//
// The "send" prints the message and appends it to SENT_LOG (default ./sent.log) instead of
// calling a chat API; the effect key is the business identity (chat + text + day), never a
// timestamp, so every tick of the same day dedupes.

import { appendFileSync } from 'node:fs';
import { hostname } from 'node:os';
import {
  HeartFleet,
  DurableEffectLedger,
  executeWithLease,
  sendOnce,
  reconcileOutbox,
  effectKey,
} from 'heart-fleet';
import { openStore } from './db.mjs';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const ticks = arg('--ticks', 1);
const everyMs = arg('--every-ms', 1000);
const owner = process.env.OWNER ?? `bot:${process.env.HOSTNAME ?? hostname()}:${process.pid}`;
const chatId = Number(process.env.CHAT_ID ?? 4242);
const sentLog = process.env.SENT_LOG ?? 'sent.log';

const { store, close } = await openStore();
const heart = new HeartFleet({
  store,
  onReceipt: (r) => console.log(`[bot] receipt ${r.event} run=${r.runId.slice(0, 8)} owner=${r.owner}`),
});
const ledger = new DurableEffectLedger({ heart });
const { run } = await heart.ensureResourceRun('bot.daily-digest', 'singleton', { objective: 'post the daily digest once', createdBy: 'bot' });

async function telegramSend(chat, text) {
  // Stand-in for the chat API: no network here.
  appendFileSync(sentLog, `${JSON.stringify({ chat, text, by: owner })}\n`);
  console.log(`[bot] SENT to ${chat}: ${text}`);
  return { message_id: Date.now() };
}

async function tick(n) {
  const day = new Date().toISOString().slice(0, 10);
  const text = `Daily digest for ${day}: all systems nominal.`;
  const out = await executeWithLease(heart, { runId: run.id, owner, ttlSeconds: 30, releaseToReady: true }, async (getFence, signal) => {
    const sent = await sendOnce(heart, ledger, {
      fence: getFence(),
      channel: 'telegram',
      effectKey: effectKey('telegram', { chatId, text }),
      payload: { chatId, text },
      send: () => telegramSend(chatId, text),
      toExternalRef: (m) => ({ message_id: m.message_id }),
    });
    if (signal.aborted) console.warn(`[bot] lease lost during the tick: ${signal.reason.lost}`);
    return sent.sent ? 'sent' : sent.reason;
  });
  // Sends that crashed mid-flight are settled later; Telegram cannot be asked, so they are
  // left and, past the ceiling, abandoned (never resent).
  const reconciled = await reconcileOutbox(ledger);
  const summary = { tick: n, ran: out.ran, ...(out.ran ? { outcome: out.result, released: out.released } : { reason: out.reason }) };
  if (reconciled.scanned > 0) summary.reconciled = reconciled;
  console.log(`[bot] tick: ${JSON.stringify(summary)}`);
  return summary;
}

try {
  for (let n = 1; n <= ticks; n += 1) {
    await tick(n);
    if (n < ticks) await new Promise((r) => setTimeout(r, everyMs));
  }
  const m = heart.metrics;
  console.log(`[bot] metrics: ${JSON.stringify({ acquireWins: m.acquireWins, acquireCollisions: m.acquireCollisions, releases: m.releases, effectCommits: m.effectCommits, effectDedupes: m.effectDedupes })}`);
} finally {
  await close();
}

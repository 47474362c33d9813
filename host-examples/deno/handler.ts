// An edge function (Deno.serve; the shape Deno Deploy and Supabase Edge Functions run) that
// runs one lease-guarded job per request against Deno KV and answers with the job's
// receipts.
//
//   POST /jobs/<key>[?holdMs=N]   find-or-create the job's run (a resource run keyed by
//                                 deterministicResourceId("edge-job", key)), run the job
//                                 under a fenced lease, release the run back to `ready`;
//                                 200 {ran, result?, reason?, code?, runId, owner, receipts}
//   GET  /healthz                 200 "ok"
//
// Two requests for the same key at once: one runs the job, the other answers
// {ran:false, reason:"lease-held"} at once. A request whose isolate dies mid-job leaves a
// lease that expires after `ttlSeconds`; the next request takes the run over (and the
// `reclaimed` receipt says so).
//
//   deno run --unstable-kv --allow-net --allow-read --allow-env handler.ts
//
// Environment: PORT (default 8000; 0 picks a free port), HEART_FLEET_KV (a Deno KV path;
// default: Deno's default database, which is the hosted KV on Deno Deploy).
//
// It imports the edge build of heart-fleet-wasm (pkg-edge: everything but PgLeaseStore's SQL
// rendering and the conformance replay, 24 % smaller than pkg).

import {
  DenoKvLeaseStore,
  executeWithLease,
  HeartFleet,
  type HeartReceipt,
} from '../../bindings-wasm/bindgen/pkg-edge/heart_fleet.js';

/** What the job does: here, wait `holdMs` and report when it ran. Replace with real work. */
export type Job = (ctx: { key: string; runId: string; signal: AbortSignal; holdMs: number }) => Promise<unknown>;

export const exampleJob: Job = async ({ key, holdMs, signal }) => {
  await new Promise((resolve) => setTimeout(resolve, holdMs));
  return { key, processedAt: new Date().toISOString(), leaseLost: signal.aborted };
};

export interface HandlerOptions {
  store: DenoKvLeaseStore;
  job?: Job;
  /** Lease length (default 30 s): a dead isolate's run is taken over after this. */
  ttlSeconds?: number;
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });
}

/** The request handler, over one store (one Deno KV database) shared by every request. */
export function createHandler({ store, job = exampleJob, ttlSeconds = 30 }: HandlerOptions): (req: Request) => Promise<Response> {
  return async (req) => {
    const url = new URL(req.url);
    if (req.method === 'GET' && url.pathname === '/healthz') return new Response('ok');
    const m = /^\/jobs\/([^/]{1,200})$/.exec(url.pathname);
    if (!m || req.method !== 'POST') return json({ error: 'not-found' }, 404);
    const key = decodeURIComponent(m[1]);
    const holdMs = Math.min(Math.max(Number(url.searchParams.get('holdMs') ?? 0) || 0, 0), 10_000);
    // One fleet per request: its receipts are this request's.
    const receipts: HeartReceipt[] = [];
    const heart = new HeartFleet({ store, onReceipt: (r) => void receipts.push(r) });
    const owner = `edge:${crypto.randomUUID()}`;
    try {
      const { run } = await heart.ensureResourceRun('edge-job', key, { objective: `edge job ${key}`, createdBy: 'heart-fleet:deno-example' });
      const out = await executeWithLease(
        heart,
        { runId: run.id, owner, ttlSeconds, releaseToReady: true },
        (_getFence, signal) => job({ key, runId: run.id, signal, holdMs }),
      );
      // The result's own fields, then ours (non-enumerable on the result, so named here).
      const ours = out.ran ? { released: out.released, lost: out.lost } : { code: out.code, released: out.released };
      return json({ ...out, ...ours, runId: run.id, owner, receipts });
    } catch (e) {
      const err = e as { code?: string; message?: string };
      // A store failure is store-unavailable (503), never "not run because held".
      const status = err.code === 'store-unavailable' ? 503 : 500;
      return json({ error: err.code ?? 'internal', message: err.message ?? String(e), owner, receipts }, status);
    }
  };
}

if (import.meta.main) {
  const kv = await Deno.openKv(Deno.env.get('HEART_FLEET_KV') || undefined);
  const handler = createHandler({ store: new DenoKvLeaseStore({ kv }) });
  Deno.serve(
    {
      port: Number(Deno.env.get('PORT') ?? 8000),
      hostname: Deno.env.get('HOST') ?? '127.0.0.1',
      onListen: ({ port }) => console.log(`listening on http://127.0.0.1:${port}/`),
    },
    handler,
  );
}

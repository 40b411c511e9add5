/**
 * The Cold tier and the budget endpoints, mounted on the gateway:
 * - the Cold fallback: when no Hot or Warm route answered (or the time-to-answer leaves no room),
 *   the request is queued and the client gets `202 {"status":"queued","jobId"}` in time;
 * - `GET /v1/jobs/:id`: the job's state, attempts, last error, and its result once completed;
 * - `POST /budget/webhook` and `POST /budget/resume` (operator token).
 */
import type express from 'express';
import type { ServerResponse } from 'node:http';
import { z } from 'zod';
import { BudgetWebhook, type PauseFlag } from './budget';
import type { ColdPayload, ColdQueue } from './cold-queue';
import { openAiError } from './errors';
import { sendJson } from './http-io';
import type { FlagStore } from './flags';
import type { Notifier } from './notify';
import type { ColdFallback, QueueReason } from './pipeline';
import type { RequestContext } from './request-context';
import { routeHeaders } from './route-headers';

export interface ColdTierDeps {
  queue: ColdQueue;
  pause: PauseFlag;
  flags: FlagStore;
  notifier: Notifier;
  cappedProvider: string;
  pauseAtPercent: number;
  log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
}

function coldPayload(ctx: RequestContext, reason: string, reviewRequired = false): ColdPayload {
  return {
    api: ctx.api,
    body: ctx.body,
    asChat: ctx.asChat,
    idempotencyKey: ctx.idempotencyKey,
    userId: ctx.userId,
    jobId: ctx.jobId,
    customerId: ctx.customerId,
    jobType: ctx.jobType,
    reason,
    reviewRequired,
    enqueuedAt: new Date().toISOString(),
  };
}

/** The Cold fallback: queues the request and answers 202; 503 when the queue is switched off or unreachable. */
export function coldFallback(deps: ColdTierDeps): ColdFallback {
  return {
    async queue(ctx: RequestContext, res: ServerResponse, why: QueueReason): Promise<void> {
      const headers = routeHeaders('cold', 'queue', ctx.body.model, why.attempts);
      if (!deps.flags.get().enable_cold_queue) {
        const error = openAiError(
          'no route answered and the Cold queue is switched off (enable_cold_queue)',
          'upstream_error',
          null,
          'cold_queue_disabled',
        );
        return sendJson(res, 503, error, headers);
      }
      try {
        const { jobId, created } = await deps.queue.enqueue(coldPayload(ctx, why.reason, why.reviewRequired), { delayMs: why.delayMs });
        if (created) {
          const kind = why.reviewRequired ? 'human_review' : 'enqueued';
          deps.notifier.notify({ kind, jobIds: [jobId], tenant: ctx.customerId || undefined, detail: `reason: ${why.reason}` });
        }
        sendJson(res, 202, { status: 'queued', jobId }, headers);
      } catch (error) {
        deps.log.error(`cold queue unreachable: ${(error as Error).message}`);
        sendJson(
          res,
          503,
          openAiError('no route answered and the Cold queue is unreachable', 'upstream_error', null, 'cold_queue_unavailable'),
          headers,
        );
      }
    },
  };
}

const JobId = z.string().regex(/^[A-Za-z0-9_-]{1,80}$/);

export function mountColdTier(app: express.Express, admin: express.RequestHandler, deps: ColdTierDeps): void {
  app.get('/v1/jobs/:id', async (req, res) => {
    const id = JobId.safeParse(req.params.id);
    const job = id.success ? await deps.queue.get(id.data) : null;
    if (!job) {
      res.status(404).json(openAiError(`no job ${String(req.params.id).slice(0, 80)}`, 'invalid_request_error', 'id', 'job_not_found'));
      return;
    }
    res.json(job);
  });

  app.post('/budget/webhook', admin, async (req, res) => {
    const parsed = BudgetWebhook.safeParse(req.body);
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      res
        .status(400)
        .json({ error: `${i.path.join('.') || 'body'}: ${i.message}`, expected: '{"provider": string, "percentUsed": number}' });
      return;
    }
    const { provider, percentUsed } = parsed.data;
    if (provider === deps.cappedProvider && percentUsed >= deps.pauseAtPercent) {
      const newly = await deps.pause.set();
      if (newly) {
        deps.log.warn(`budget pause: ${provider} at ${percentUsed}% (threshold ${deps.pauseAtPercent}%)`);
        const counts = await deps.queue.counts().catch(() => null);
        deps.notifier.notify({
          kind: 'paused',
          detail: `${provider} budget at ${percentUsed}% (pause at ${deps.pauseAtPercent}%).${counts ? ` Queue: ${counts.waiting} waiting, ${counts.delayed} delayed, ${counts.active} running (they finish).` : ''}`,
        });
      }
    }
    res.status(204).end();
  });

  app.post('/budget/resume', admin, async (_req, res) => {
    await deps.pause.clear();
    deps.log.warn('budget pause lifted');
    res.status(204).end();
  });
}

/** The operator endpoints behind ADMIN_TOKEN: `/health`, `/metrics` and the run-time flags. */
import type express from 'express';
import type { Logger } from 'pino';
import { z } from 'zod';
import { unmatchedKills, unmatchedKillsWarning, type Flags, type FlagStore } from './flags';
import type { RequestPath } from './request-path';
import type { Scopes } from './scopes';
import { NoAnswer, within } from './within';

/**
 * A kill list is read on every request (a model name looked up in it) and logged when a name
 * matches nothing: at most this many names, each at most a meter event's model (1,000 characters);
 * a name given twice is kept once.
 */
const MAX_KILLED = 1000;
const FlagsChange = z.strictObject({
  enable_warm_fallback: z.boolean().optional(),
  enable_cold_queue: z.boolean().optional(),
  killed_models: z
    .array(z.string().min(1).max(1000))
    .max(MAX_KILLED, { error: `expected at most ${MAX_KILLED} names` })
    .transform((names) => [...new Set(names)])
    .optional(),
});

export interface OperatorDeps {
  path: RequestPath;
  flags: FlagStore;
  scopes: Scopes;
  /** The map's `cheaper_model` (spend-cap routing), a model a killed name may match. */
  cheaperModel?: string;
  log: Logger;
  meterKind: string;
  healthExtras?: () => Promise<Record<string, unknown>>;
}

export function mountOperator(app: express.Express, admin: express.RequestHandler, o: OperatorDeps): void {
  app.get('/health', admin, async (_req, res) => {
    const flags = o.flags.get();
    res.json({
      ok: true,
      routes: o.path.failover.routes.map((r) => ({
        id: r.label,
        tier: r.tier,
        provider: r.config.provider,
        model: r.config.model,
        breaker: r.breaker.state(),
        breaker_open_seconds: r.breaker.secondsOpen(),
        killed: flags.killed_models.includes(r.config.model),
        ...r.health.snapshot(r.breaker),
      })),
      flags,
      meter: o.meterKind,
      unpriced_calls: o.path.meter.unpricedCalls(),
      ...(o.healthExtras ? await o.healthExtras() : {}),
    });
  });

  app.get('/metrics', admin, async (_req, res) => {
    res.setHeader('content-type', o.path.metrics.registry.contentType);
    res.end(await o.path.metrics.registry.metrics());
  });

  app.get('/admin/flags', admin, (_req, res) => {
    res.json(o.flags.get());
  });
  app.put('/admin/flags', admin, async (req, res) => {
    const parsed = FlagsChange.safeParse(req.body);
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      res.status(400).json({ error: `${i.path.join('.') || 'body'}: ${i.message}` });
      return;
    }
    const flags = await within(o.flags.update(parsed.data), FLAGS_STORE_WAIT_MS).catch((error: Error) => error);
    if (flags instanceof Error) return storeLate(res, o.flags.get(), flags, o.log);
    o.log.warn({ flags }, 'flags changed');
    // Names are matched exactly: one that matches nothing is kept as sent, and named in the log and the answer.
    const unmatched = unmatchedKills(flags.killed_models, { routes: o.path.routes, scopes: o.scopes, cheaperModel: o.cheaperModel });
    if (unmatched.length) o.log.warn({ unmatched_killed_models: unmatched }, unmatchedKillsWarning(unmatched));
    res.json(unmatched.length ? { ...flags, unmatched_killed_models: unmatched } : flags);
  });
}

/** How long a flag change waits for the store before answering 503 (as the budget pause does). */
const FLAGS_STORE_WAIT_MS = 2000;

/** Redis away or stalled: the change holds here (written once the store is back); refused: in force nowhere. Either way, send again. */
function storeLate(res: express.Response, flags: Flags, error: Error, log: Logger): void {
  log.warn({ flags, err: error.message }, 'flags change not taken by the store');
  const text =
    error instanceof NoAnswer
      ? `flags: changed on this instance, but ${error.message}, so other instances may not have them yet; send again`
      : `flags: not changed: the store refused them (${error.message}); send again once it takes writes`;
  res.status(503).set('retry-after', '1').json({ error: text });
}

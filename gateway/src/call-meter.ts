/**
 * One meter event per provider call (and one per request sent to the queue by spend-cap
 * routing), in the shared event record's shape. The one place the gateway builds an event.
 *
 * Numbers from providers are checked where they enter: a token count that is not a finite
 * number >= 0 counts as 0 (rounded to whole tokens otherwise), a reported cost that is not one is
 * ignored (the price list decides). A call with usage but no known price, or a complete answer
 * that reported no usage at all, carries an empty cost and `UNPRICED` in error_code (after its own code, `STREAM_INTERRUPTED|UNPRICED`), as the meter counts
 * them; the gateway counts them too (/metrics gateway_unpriced_calls_total, /health). A call whose
 * usage is an estimate (a call cut on our side, cut-estimate.ts) is marked `ESTIMATED` before that
 * (`CLIENT_CLOSED|ESTIMATED`).
 */
import { randomUUID } from 'node:crypto';
import { COST_LIMIT_USD, MAX_COUNT, type EventRecord } from '../../schema/event-record';
import { markEstimated } from '../../schema/estimated';
import { isUnpriced, markUnpriced } from '../../schema/unpriced';
import { costUsd } from './pricing';
import type { Usage } from './providers/adapter';
import type { RequestContext } from './request-context';

export interface CallFacts {
  ctx: Pick<RequestContext, 'jobId' | 'customerId'>;
  provider: string;
  model: string;
  region?: string;
  /** The route's id (`hot-1`, or the map's `id`), for the unpriced count. */
  route?: string;
  latencyMs: number;
  usage: Usage | null;
  /** The provider answered in full (and bills for it): without usage its cost is unknown, not $0. */
  answered?: boolean;
  /** '' for a success; the failure class or HTTP status otherwise. */
  errorCode: string;
  /** `usage` is an estimate, not the provider's figures: marked ESTIMATED (schema/estimated.ts). */
  estimated?: boolean;
  /** The spend-cap routing decision the call was made under (`n/a` when none applied). */
  decision?: string;
  reviewRequired?: boolean;
  /** How long the answer can wait for its event to be durable (the time-to-answer left); see MeterSink.send. */
  waitMs?: number;
}

/** Beyond the record's limits a number is no count or cost the meter (and its archive) can take. */
const count = (n: number) => (Number.isFinite(n) && n >= 0 && n <= MAX_COUNT ? Math.round(n) : 0);
const money = (usd: number | undefined) => usd !== undefined && Number.isFinite(usd) && usd >= 0 && usd < COST_LIMIT_USD;

/** Usage with counts that can be counts, and a reported cost only when it can be money. */
function checked(usage: Usage): Usage {
  const cost = usage.cost_usd;
  const input = count(usage.input_tokens);
  const output = count(usage.output_tokens);
  // Each part of the input (or output), never more than it; reads and writes of the cache apart.
  const cached = Math.min(count(usage.cached_input_tokens ?? 0), input);
  const written = Math.min(count(usage.cache_write_tokens ?? 0), input - cached);
  const inAudio = Math.min(count(usage.input_audio_tokens ?? 0), input);
  const outAudio = Math.min(count(usage.output_audio_tokens ?? 0), output);
  const web = count(usage.web_searches ?? 0);
  const file = count(usage.file_searches ?? 0);
  return {
    input_tokens: input,
    output_tokens: output,
    ...(cached ? { cached_input_tokens: cached } : {}),
    ...(written ? { cache_write_tokens: written } : {}),
    ...(inAudio ? { input_audio_tokens: inAudio } : {}),
    ...(outAudio ? { output_audio_tokens: outAudio } : {}),
    ...(web ? { web_searches: web } : {}),
    ...(file ? { file_searches: file } : {}),
    ...(money(cost) ? { cost_usd: cost } : {}),
    ...(usage.service_tier ? { service_tier: usage.service_tier } : {}),
  };
}

/** The route a call's counts go under: its id, or provider and model for a call made outside routing. */
const routeOf = (f: CallFacts): string => f.route ?? `${f.provider}:${f.model}`;

export class CallMeter {
  private readonly unpriced = new Map<string, number>();
  /** Routes already said to answer without usage. */
  private readonly silent = new Set<string>();
  constructor(
    private readonly send: (event: EventRecord, waitMs?: number) => Promise<void>,
    private readonly warn: (message: string) => void,
    /** Told of each unpriced call, by route (the metrics counter). */
    private readonly onUnpriced: (route: string) => void = () => {},
    /** Told of each call metered with an estimated usage, by route (the metrics counter). */
    private readonly onEstimated: (route: string) => void = () => {},
  ) {}

  /** Unpriced calls since start, by route (for /health). */
  unpricedCalls(): { total: number; by_route: Record<string, number> } {
    const by_route = Object.fromEntries(this.unpriced);
    return { total: [...this.unpriced.values()].reduce((a, b) => a + b, 0), by_route };
  }

  /** An event written elsewhere (the phone bridge's): counted when UNPRICED, as a call outside routing is. */
  countIfUnpriced(event: EventRecord): void {
    if (isUnpriced(event.error_code)) this.countUnpriced(`${event.provider}:${event.model}`);
  }

  private countUnpriced(route: string): void {
    this.unpriced.set(route, (this.unpriced.get(route) ?? 0) + 1);
    this.onUnpriced(route);
  }

  /** An answer that reported no usage: its cost is unknown (null), said once per route. */
  private noUsage(f: CallFacts): null {
    const route = routeOf(f);
    if (!this.silent.has(route)) {
      this.silent.add(route);
      this.warn(`route ${route} answered without reporting its usage: such calls are metered UNPRICED`);
    }
    return null;
  }

  /** Sends the call's event; resolves once it is durable (the meter sink's spool or CSV). */
  record(f: CallFacts): Promise<void> {
    const usage = f.usage ? checked(f.usage) : null;
    const priced = usage ? costUsd(f.provider, f.model, usage, this.warn) : f.answered ? this.noUsage(f) : 0;
    const cost = priced === null || money(priced) ? priced : null; // a price past the record's limit is no price
    let errorCode = f.estimated ? markEstimated(f.errorCode) : f.errorCode;
    if (f.estimated) this.onEstimated(routeOf(f));
    if (cost === null) {
      this.countUnpriced(routeOf(f));
      errorCode = markUnpriced(errorCode); // never a silent $0: the meter counts these
    }
    return this.send(
      {
        event_id: randomUUID(),
        timestamp: new Date(),
        actor_type: 'agent',
        provider: f.provider,
        model: f.model,
        region: f.region ?? 'global', // the record's word for a region we do not know
        input_tokens: usage?.input_tokens ?? 0,
        output_tokens: usage?.output_tokens ?? 0,
        latency_ms: count(f.latencyMs),
        cost_usd: cost,
        eval_score: null,
        confidence: null,
        job_id: f.ctx.jobId,
        customer_id: f.ctx.customerId,
        pii_flag: false,
        review_required: f.reviewRequired ?? false,
        reviewer_id: '',
        decision: f.decision ?? 'n/a',
        error_code: errorCode,
      },
      f.waitMs,
    );
  }
}

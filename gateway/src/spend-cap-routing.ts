/**
 * Spend-cap routing, evaluated per request from current spend. Spend comes from
 * the meter (`doGet?action=spend`, cached at most 60 s) plus what this gateway has spent since that
 * read; with no meter configured, from this gateway's own totals. While a cap is exceeded
 * (strictly greater):
 *   x-must-have-answer: false  → queued, released after 2 hours           decision `queue`
 *   else x-can-use-cheaper: true → the map's `cheaper_model`               decision `model`
 *   else                        → queued for human review, reviewer told  decision `human_review`
 * Otherwise the request routes normally (decision `default`).
 */
import type { RequestContext } from './request-context';

const SPEND_CACHE_MS = 60_000;
const QUEUE_RELEASE_MS = 2 * 3600_000;
/** Human-review jobs wait this long for a person before the worker tries the routing again. */
const HUMAN_REVIEW_HOLD_MS = 24 * 3600_000;
const DAY = 86_400_000;

export type Plan =
  | { kind: 'default' }
  | { kind: 'model'; model: string }
  | { kind: 'queue'; delayMs: number; reviewRequired: boolean; decision: 'queue' | 'human_review' };

export interface SpendView {
  today: number;
  last7d: number;
  dailyCap: number;
  burnCap: number;
}

/** This gateway's own spend per UTC day (the last 7 days are kept). */
class LocalSpend {
  private readonly byDay = new Map<number, number>();
  add(cost: number | null, at = Date.now()): void {
    if (!cost) return;
    const day = Math.floor(at / DAY);
    this.byDay.set(day, (this.byDay.get(day) ?? 0) + cost);
    for (const d of this.byDay.keys()) if (d < day - 7) this.byDay.delete(d);
  }
  totals(now = Date.now()): { today: number; last7d: number } {
    const today = Math.floor(now / DAY);
    let week = 0;
    for (const [d, c] of this.byDay) if (d > today - 7 && d <= today) week += c;
    return { today: this.byDay.get(today) ?? 0, last7d: week };
  }
}

export class SpendWatch {
  private cached: { at: number; today: number; last7d: number; dailyCap: number; burnCap: number; day: number } | null = null;
  private sinceRead = new LocalSpend();
  readonly own = new LocalSpend();
  private refreshing: Promise<void> | null = null;

  constructor(
    private readonly opts: {
      meterUrl?: string;
      meterToken?: string;
      dailyCap: number;
      burnCap: number;
      warn: (m: string) => void;
      now?: () => number;
    },
  ) {}

  /** Every priced call feeds both the local totals and the "since the meter's figure" delta. */
  record(cost: number | null): void {
    this.own.add(cost, this.now());
    this.sinceRead.add(cost, this.now());
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  private async refresh(): Promise<void> {
    const url = new URL(this.opts.meterUrl!);
    url.searchParams.set('action', 'spend');
    if (this.opts.meterToken) url.searchParams.set('token', this.opts.meterToken);
    try {
      const res = await fetch(url, { redirect: 'follow', signal: AbortSignal.timeout(5000) });
      const body = (await res.json()) as {
        ok?: boolean;
        today_cost_usd?: number;
        last_7d_cost_usd?: number;
        daily_cap_usd?: number;
        burn_7d_cap_usd?: number;
        error?: string;
      };
      if (!body.ok) throw new Error(body.error ?? `HTTP ${res.status}`);
      this.cached = {
        at: this.now(),
        day: Math.floor(this.now() / DAY),
        today: body.today_cost_usd ?? 0,
        last7d: body.last_7d_cost_usd ?? 0,
        dailyCap: body.daily_cap_usd ?? this.opts.dailyCap,
        burnCap: body.burn_7d_cap_usd ?? this.opts.burnCap,
      };
      this.sinceRead = new LocalSpend();
    } catch (error) {
      this.opts.warn(`meter spend unavailable (${(error as Error).message}); using the last figures and this gateway's own spend`);
      if (this.cached) this.cached.at = this.now(); // do not hammer a meter that is down
    }
  }

  /** The figures now; a promise only while the meter's first figure is awaited. */
  view(): SpendView | Promise<SpendView> {
    if (this.opts.meterUrl && (!this.cached || this.now() - this.cached.at > SPEND_CACHE_MS)) {
      this.refreshing ??= this.refresh().finally(() => (this.refreshing = null));
      // Only the first read waits; later refreshes happen while requests use the cached figure.
      if (!this.cached) return this.refreshing.then(() => this.figures());
    }
    return this.figures();
  }

  private figures(): SpendView {
    const own = this.sinceRead.totals(this.now());
    if (this.cached) {
      const sameDay = this.cached.day === Math.floor(this.now() / DAY);
      return {
        today: (sameDay ? this.cached.today : 0) + own.today,
        last7d: this.cached.last7d + own.last7d,
        dailyCap: this.cached.dailyCap,
        burnCap: this.cached.burnCap,
      };
    }
    const local = this.own.totals(this.now());
    return { today: local.today, last7d: local.last7d, dailyCap: this.opts.dailyCap, burnCap: this.opts.burnCap };
  }
}

export { capExceeded } from '../../schema/spend-cap';

/** The spend-cap routing table (docs/gateway.md, "Spend-cap routing"). */
export function planFor(
  ctx: Pick<RequestContext, 'mustHaveAnswer' | 'canUseCheaper'>,
  exceeded: boolean,
  cheaperModel: string | undefined,
): Plan {
  if (!exceeded) return { kind: 'default' };
  if (!ctx.mustHaveAnswer) return { kind: 'queue', delayMs: QUEUE_RELEASE_MS, reviewRequired: false, decision: 'queue' };
  if (ctx.canUseCheaper && cheaperModel) return { kind: 'model', model: cheaperModel };
  return { kind: 'queue', delayMs: HUMAN_REVIEW_HOLD_MS, reviewRequired: true, decision: 'human_review' };
}

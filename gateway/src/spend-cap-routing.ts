/**
 * Spend-cap routing, evaluated per request from current spend. Spend comes from
 * the meter (`doGet?action=spend`, asked at most once a minute; only the first read is waited for,
 * at most 1 s) plus what was spent since that read; with no
 * meter configured, from the spend per UTC day counted by the gateways themselves (spend-days.ts:
 * shared by every instance in Redis, else this process's own), plus what this instance's calls in
 * flight hold (held-spend.ts). While a cap is exceeded (strictly greater):
 *   x-must-have-answer: false  → queued, released after 2 hours           decision `queue`
 *   else x-can-use-cheaper: true → the map's `cheaper_model` (not for embeddings) decision `model`
 *   else                        → queued for human review, reviewer told  decision `human_review`
 * Otherwise the request routes normally (decision `default`).
 *
 * "Since that read" is the day counter now minus the day counter 10 s before the meter was asked
 * (the baseline). Each instance keeps its own baseline; the counter is never reset, so a fresh meter
 * figure on one instance changes nothing for another, and the fleet's calls after the baseline are
 * all counted. The 10 s cover events still on their way to the meter; an event the meter already
 * has from those seconds is counted twice until the next read: the safe side for a cap. The meter's
 * figures are of the UTC day its answer names (its clock, when it answered). Of an earlier day (read
 * just before midnight, or the meter down since), its 7-day figure still holds days that have left
 * the window: their spend as counted here comes off it; of a later day (its clock ahead, or its
 * answer past midnight), the day it has left comes on, and today's spend is the counted one.
 */
import { readSpendAnswer, utcDayNumber } from '../../schema/spend-answer';
import { capExceeded } from '../../schema/spend-cap';
import { HeldSpend } from './held-spend';
import type { RequestContext } from './request-context';
import { dayOf, MemorySpendDays, type SpendDays } from './spend-days';
import { within } from './within';

/** The meter is asked at most this often, whether its last read answered or not. */
const SPEND_CACHE_MS = 60_000;
/**
 * Only the first read of the meter is waited for, and at most this long: a meter that is down or
 * slow at start must not take every request's time-to-answer (its own timeout is 5 s). Past it,
 * requests route on the counted spend and the read goes on.
 */
const FIRST_READ_WAIT_MS = 1000;
/** How long the meter's read waits for the spend of the last seconds from a shared counter. */
const RECENT_WAIT_MS = 1000;
/** Meter events reach the meter within seconds (the spool posts every second, the web app takes a few). */
const DELIVERY_LAG_S = 10;
/** Within this many of its largest calls of the day from a cap, a request waits for a fresh read of a shared counter. */
const NEAR_CAP_CALLS = 10;
/** ...and waits at most this long (Redis slow or away: the figures at hand decide). */
const NEAR_CAP_WAIT_MS = 100;
const QUEUE_RELEASE_MS = 2 * 3600_000;
/** Human-review jobs wait this long for a person before the worker tries the routing again. */
const HUMAN_REVIEW_HOLD_MS = 24 * 3600_000;

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

interface MeterFigure {
  day: number;
  today: number;
  last7d: number;
  dailyCap: number;
  burnCap: number;
  /** The day counter just before the meter was asked: spend since the figure is the counter's growth. */
  base: { day: number; usd: number };
}

export class SpendWatch {
  private cached: MeterFigure | null = null;
  private refreshing: Promise<void> | null = null;
  /** When the meter may be asked again. */
  private readAt = 0;
  /** The first read, as requests wait for it (at most FIRST_READ_WAIT_MS); null once over. */
  private firstRead: Promise<void> | null = null;
  private firstReadOver = false;
  private loaded = false;
  private readonly days: SpendDays;
  /** This instance's largest call cost of the UTC day: how close to a cap is "near", and what a call in flight holds. */
  private largest = { day: -1, usd: 0 };
  /** This instance's calls in flight (their figures include them). */
  private readonly held = new HeldSpend();

  constructor(
    private readonly opts: {
      meterUrl?: string;
      meterToken?: string;
      dailyCap: number;
      burnCap: number;
      warn: (m: string) => void;
      now?: () => number;
      /** Where spend per day is counted (in process unless given). */
      days?: SpendDays;
    },
  ) {
    this.days = opts.days ?? new MemorySpendDays(() => this.now());
  }

  /** Every priced call adds to today's spend. */
  record(cost: number | null): void {
    this.days.add(cost);
    if (!cost || !(cost > 0)) return;
    const day = dayOf(this.now());
    if (this.largest.day !== day) this.largest = { day, usd: 0 };
    this.largest.usd = Math.max(this.largest.usd, cost);
  }

  /** Counts what is not yet counted (shutdown). */
  close(): Promise<void> {
    return this.days.close();
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  private async refresh(): Promise<void> {
    const url = new URL(this.opts.meterUrl!);
    url.searchParams.set('action', 'spend');
    if (this.opts.meterToken) url.searchParams.set('token', this.opts.meterToken);
    await this.days.refresh();
    const today = dayOf(this.now());
    // Spend of the last seconds may not be in the meter's figure yet: counted as "since" too. Not
    // known in time (Redis away or stalled: its client holds the read), the meter is asked all the
    // same: then it is the one figure of the fleet's spend.
    const recent = await within(this.days.recentSpend(DELIVERY_LAG_S), RECENT_WAIT_MS).catch(() => 0);
    const base = { day: today, usd: Math.max(0, this.days.spentBetween(today, today) - recent) };
    this.readAt = this.now() + SPEND_CACHE_MS; // answered or not: a meter that is down is not hammered
    try {
      const res = await fetch(url, { redirect: 'follow', signal: AbortSignal.timeout(5000) });
      const read = readSpendAnswer(await res.json().catch(() => null));
      if ('error' in read) throw new Error(res.ok ? read.error : `HTTP ${res.status}: ${read.error}`);
      const { figures } = read;
      this.cached = {
        // The meter's own day: its answer may come after midnight, or its clock be seconds off this one.
        day: figures.day === undefined ? today : utcDayNumber(figures.day),
        today: figures.today_cost_usd,
        last7d: figures.last_7d_cost_usd,
        dailyCap: figures.daily_cap_usd ?? this.opts.dailyCap,
        burnCap: figures.burn_7d_cap_usd ?? this.opts.burnCap,
        base,
      };
    } catch (error) {
      this.opts.warn(`meter spend unavailable (${(error as Error).message}); using the last figures and the spend counted since`);
    }
  }

  /**
   * The figures now; a promise only while the first figures (the counter's, the meter's) are
   * awaited, for at most `waitMs` (a request's share of its time-to-answer): then the figures at hand.
   */
  view(waitMs = Infinity): SpendView | Promise<SpendView> {
    const view = this.awaited();
    return view instanceof Promise && waitMs < Infinity ? within(view, waitMs).catch(() => this.figures()) : view;
  }

  private awaited(): SpendView | Promise<SpendView> {
    if (!this.loaded) return this.days.ready().then(() => ((this.loaded = true), this.awaited()));
    if (this.opts.meterUrl && this.now() >= this.readAt) {
      this.refreshing ??= this.refresh().finally(() => (this.refreshing = null));
      // Later reads happen while requests use the figures at hand.
      this.firstRead ??= within(this.refreshing, FIRST_READ_WAIT_MS)
        .catch(() => undefined)
        .finally(() => (this.firstReadOver = true));
    }
    if (this.firstRead && !this.firstReadOver) return this.firstRead.then(() => this.awaited());
    const figures = this.figures();
    return this.nearCap(figures) ? this.days.refresh(NEAR_CAP_WAIT_MS).then(() => this.figures()) : figures;
  }

  /**
   * A request about to route holds the instance's largest call of the day against the caps until it
   * ends (`release`); null when, with the calls in flight, a cap is exceeded. Near a cap the figures
   * are taken again: requests that waited together (for a fresh read, or for their limits' answers,
   * which come back together) took theirs before the others held, so near is judged with what is
   * held now on top of the view, and then each sees the others' holds.
   */
  hold(view: SpendView): number | null {
    const estimate = this.largestToday();
    const v = this.near(view, estimate, this.held.total) ? this.figures() : view;
    return capExceeded(v) ? null : this.held.hold(estimate);
  }

  readonly release = (usd: number): void => this.held.release(usd);

  private largestToday(): number {
    return this.largest.day === dayOf(this.now()) ? this.largest.usd : 0;
  }

  /** Closer to a cap than NEAR_CAP_CALLS calls of `call` USD, with `extra` USD more than `v` says. */
  private near(v: SpendView, call: number, extra = 0): boolean {
    const margin = NEAR_CAP_CALLS * call + extra;
    return v.today + margin > v.dailyCap || v.last7d + margin > v.burnCap;
  }

  /**
   * Near a cap (and not over it), a shared figure a few calls old could let the fleet overshoot:
   * the request waits for a fresh read (one Redis round trip, at most 100 ms). Elsewhere it never waits.
   */
  private nearCap(v: SpendView): boolean {
    return this.days.shared && !capExceeded(v) && this.near(v, this.largestToday());
  }

  /** The spend counted, plus what this instance's calls in flight hold. */
  private figures(): SpendView {
    const v = this.counted();
    v.today += this.held.total;
    v.last7d += this.held.total;
    return v;
  }

  private counted(): SpendView {
    const today = dayOf(this.now());
    const c = this.cached;
    // A figure whose 7-day window shares no day with this one (unread for a week) says nothing of it.
    if (c && Math.abs(c.day - today) <= 6) {
      const since = Math.max(0, this.days.spentBetween(c.base.day, today) - c.base.usd);
      return {
        today: c.day === today ? c.today + since : this.days.spentBetween(today, today),
        last7d: Math.max(0, c.last7d + this.windowShift(c.day, today)) + since,
        dailyCap: c.dailyCap,
        burnCap: c.burnCap,
      };
    }
    return {
      today: this.days.spentBetween(today, today),
      last7d: this.days.spentBetween(today - 6, today),
      dailyCap: c?.dailyCap ?? this.opts.dailyCap,
      burnCap: c?.burnCap ?? this.opts.burnCap,
    };
  }

  /**
   * What turns a 7-day figure ending on `figureDay` into one ending on `today`, as counted here (the
   * counter keeps 8 days for this): the days that have left the window since an earlier day's figure
   * come off; the days a later day's figure (the meter's clock, or its answer, already past
   * midnight) has left but this window still holds come on.
   */
  private windowShift(figureDay: number, today: number): number {
    if (figureDay === today) return 0; // the usual case: no counter read
    if (figureDay < today) return -this.days.spentBetween(figureDay - 6, today - 7);
    return this.days.spentBetween(today - 6, figureDay - 7);
  }
}

export { capExceeded };
export { spendDaysFor } from './spend-days';

/** The spend-cap routing table (docs/gateway.md, "Spend-cap routing"). */
export function planFor(
  ctx: Pick<RequestContext, 'mustHaveAnswer' | 'canUseCheaper' | 'api'>,
  exceeded: boolean,
  cheaperModel: string | undefined,
): Plan {
  if (!exceeded) return { kind: 'default' };
  if (!ctx.mustHaveAnswer) return { kind: 'queue', delayMs: QUEUE_RELEASE_MS, reviewRequired: false, decision: 'queue' };
  // Another model's vectors are useless to the caller's index: no cheaper model for embeddings.
  if (ctx.canUseCheaper && cheaperModel && ctx.api !== 'embeddings') return { kind: 'model', model: cheaperModel };
  return { kind: 'queue', delayMs: HUMAN_REVIEW_HOLD_MS, reviewRequired: true, decision: 'human_review' };
}

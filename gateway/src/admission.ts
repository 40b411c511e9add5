/**
 * Admission, decided before routing: the client key's own requests and tokens per minute
 * (key-policy.ts), the tenant's request rate, spend-cap routing from current spend (queue,
 * cheaper model, human review), and the providers whose token budget for this minute is spent
 * (skipped; every one spent → 429).
 *
 * A request refused by any limit counts against none: the limits that only read (the key's tokens,
 * the providers' budgets) are read first, and the ones that count (the key's requests, the tenant's)
 * are counted last, together or not at all (rate-limit.ts). Nothing is counted then given back.
 *
 * Only configured limits are checked (each check is a store round trip with Redis). With none
 * configured and the spend figures at hand, the decision is made without a promise: admission
 * runs on every request, and at concurrency 1 each microsecond is latency.
 */
import { keyRequests, keyTokenLimit, overKeyRequests } from './key-policy';
import { planFor, type SpendView, type SpendWatch } from './spend-cap-routing';
import type { Limiter, Limits } from './rate-limit';
import type { RequestContext } from './request-context';
import { within } from './within';
import { openAiError } from './errors';

/**
 * How long one request's limit checks may wait for the store in all (each fails open past it), and
 * at most a quarter of its time-to-answer: the rest is the routing's. Each check waiting its own
 * 250 ms, a key with --tpm and --rpm and a provider with a token budget spent 750 ms of a stalled
 * Redis, and a request with a short time-to-answer got 503 from a healthy provider.
 */
const LIMITS_WAIT_MS = 250;
/**
 * But never less than this: a client that sends a tiny time-to-answer (`x-time-to-answer-ms: 1`,
 * queued at once) must not make its limits fail open against a Redis that answers.
 */
const LIMITS_WAIT_MIN_MS = 50;

/** How long a request waits for the first spend figures: a quarter of its time-to-answer, as its limits at most. */
const spendWaitMs = (ctx: RequestContext) => ctx.timeToAnswerMs / 4;

/** The limiter for one request: its checks share one wait for the store. */
function boundedLimiter(limiter: Limiter, ctx: RequestContext): Limiter {
  const end = performance.now() + Math.min(LIMITS_WAIT_MS, Math.max(LIMITS_WAIT_MIN_MS, ctx.timeToAnswerMs / 4));
  const left = () => Math.max(0, end - performance.now());
  return {
    hitRequest: (tenant, key) => within(limiter.hitRequest(tenant, key), left()),
    providerWait: (provider) => within(limiter.providerWait(provider), left()),
    countWindow: (counter, by) => within(limiter.countWindow(counter, by), left()),
    spendTokens: (provider, tokens) => limiter.spendTokens(provider, tokens),
  };
}

/** What happens to a request before routing: refused (rate limit), queued (spend-cap routing), or routed. */
export type Admission =
  | { kind: 'reject'; status: number; retryAfterS: number; message: string; code: string }
  | { kind: 'queue'; delayMs: number; reviewRequired: boolean; decision: string }
  | {
      kind: 'route';
      model?: string;
      decision: string;
      skipProviders?: Set<string>;
      /** USD held against the spend caps while the request is under way, given back by `release` at its end. */
      held?: number;
      release?: (usd: number) => void;
    };

/** Admission decides without a promise when it needs no store round trip (see above). */
export type Admit = (ctx: RequestContext) => Admission | Promise<Admission>;

export interface AdmissionDeps {
  limiter: Limiter;
  limits: Limits | undefined;
  spend: SpendWatch;
  /** The provider kinds of the routes in force (a reload may add or remove some); the same array until it changes. */
  providers: () => string[];
  cheaperModel: string | undefined;
}

/**
 * The key's --rpm and the tenant's requests per minute, counted in one step (a request refused by
 * either counts against neither): a 429 admission, or null. A store that fails lets it through.
 */
function requestCounter(limits: Limits | undefined) {
  const tenantLimit = limits?.tenant_requests_per_minute;
  return async (ctx: RequestContext, limiter: Limiter): Promise<Rejection | null> => {
    const key = keyRequests(ctx.clientKey);
    const full = tenantLimit || key ? await limiter.hitRequest(ctx.customerId, key).catch(() => null) : null;
    if (full?.limit === 'key') return overKeyRequests(ctx.clientKey!, full.retryAfterS);
    if (!full) return null;
    return {
      kind: 'reject',
      status: 429,
      retryAfterS: full.retryAfterS,
      code: 'tenant_rate_limited',
      message: `tenant "${ctx.customerId || '-'}" is over its ${tenantLimit} requests per minute`,
    };
  };
}

/** A refused admission. */
export type Rejection = Extract<Admission, { kind: 'reject' }>;

/**
 * The request limits of an idempotent replay: it calls no provider (no token budget, no spend cap),
 * but it is a request, and each writes a meter event, so it counts against the key's --rpm and the
 * tenant's requests per minute as any other. Null at once when neither is set (no store round trip).
 */
export function replayLimit(deps: Pick<AdmissionDeps, 'limiter' | 'limits'>) {
  const tenantLimit = deps.limits?.tenant_requests_per_minute;
  const count = requestCounter(deps.limits);
  return (ctx: RequestContext): Promise<Rejection | null> | null =>
    tenantLimit || ctx.clientKey?.rpm ? count(ctx, boundedLimiter(deps.limiter, ctx)) : null;
}

/** The providers over their token budget for this minute, and when that minute ends (ms since the epoch). */
export interface BudgetsSpent {
  providers: ReadonlySet<string>;
  until: number;
}

/**
 * For a queued job's run, which no admission precedes: the providers of `providers()` (those of the
 * routes in force) over their token budget, as the fleet counted them. Read as live requests read
 * them, each at most LIMITS_WAIT_MS; one that cannot be read counts as under (fails open).
 */
export function budgetsSpent(limiter: Limiter, limits: Limits | undefined, providers: () => string[]) {
  return async (): Promise<BudgetsSpent> => {
    const over = new Set<string>();
    let waitS = 0;
    for (const p of providers()) {
      if (!limits?.provider_tokens_per_minute?.[p]) continue;
      const w = await within(limiter.providerWait(p), LIMITS_WAIT_MS).catch(() => 0);
      if (w) {
        over.add(p);
        waitS = Math.max(waitS, w);
      }
    }
    return { providers: over, until: Date.now() + waitS * 1000 };
  };
}

/** The 429 of a refused admission, in OpenAI's shape. */
export function rejection(a: Rejection) {
  return {
    status: a.status,
    error: openAiError(a.message, 'rate_limit_error', null, a.code),
    headers: { 'retry-after': String(a.retryAfterS) },
  };
}

export function admission(deps: AdmissionDeps): Admit {
  const { limits, spend } = deps;
  const tenantLimit = limits?.tenant_requests_per_minute;
  const countRequest = requestCounter(limits);
  let seen: string[] = [];
  let budgeted: string[] = [];
  /** The providers in force that have a token budget, found again only when a reload changed them. */
  const budgetedNow = () => {
    const providers = deps.providers();
    if (providers !== seen) [seen, budgeted] = [providers, providers.filter((p) => limits?.provider_tokens_per_minute?.[p])];
    return budgeted;
  };

  const decide = (ctx: RequestContext, view: SpendView, skipProviders?: Set<string>): Admission => {
    const held = spend.hold(view);
    const plan = planFor(ctx, held === null, deps.cheaperModel);
    if (plan.kind === 'queue')
      return { kind: 'queue', delayMs: plan.delayMs, reviewRequired: plan.reviewRequired, decision: plan.decision };
    return {
      kind: 'route',
      model: plan.kind === 'model' ? plan.model : undefined,
      decision: plan.kind === 'model' ? 'model' : 'default',
      skipProviders,
      held: held ?? 0,
      release: spend.release,
    };
  };

  /** The budgeted providers spent for this minute, and the least wait; read only, so a refusal here counts nothing. */
  const spentProviders = async (limiter: Limiter) => {
    const skipProviders = new Set<string>();
    let wait = Infinity;
    for (const p of budgetedNow()) {
      const w = await limiter.providerWait(p).catch(() => 0);
      if (w) {
        skipProviders.add(p);
        wait = Math.min(wait, w);
      }
    }
    return { skipProviders, wait };
  };

  const withLimits = async (ctx: RequestContext, limiter = boundedLimiter(deps.limiter, ctx)): Promise<Admission> => {
    // The providers' budgets are read before the request is counted: one refused for them takes no request of the minute.
    const { skipProviders, wait } = await spentProviders(limiter);
    if (skipProviders.size === seen.length) {
      return {
        kind: 'reject',
        status: 429,
        retryAfterS: wait,
        code: 'provider_token_budget',
        message: 'every provider is over its token budget for this minute',
      };
    }
    return (await countRequest(ctx, limiter)) ?? decide(ctx, await spend.view(spendWaitMs(ctx)), skipProviders);
  };

  const withoutKey = (ctx: RequestContext): Admission | Promise<Admission> => {
    if (tenantLimit || budgetedNow().length) return withLimits(ctx);
    const view = spend.view(spendWaitMs(ctx));
    return view instanceof Promise ? view.then((v) => decide(ctx, v)) : decide(ctx, view);
  };

  const withKeyLimits = async (ctx: RequestContext): Promise<Admission> => {
    const limiter = boundedLimiter(deps.limiter, ctx);
    return (await keyTokenLimit(limiter, ctx.clientKey!)) ?? withLimits(ctx, limiter);
  };

  return (ctx) => (ctx.clientKey?.rpm || ctx.clientKey?.tpm ? withKeyLimits(ctx) : withoutKey(ctx));
}

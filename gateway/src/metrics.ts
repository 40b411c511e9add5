/**
 * Prometheus metrics (GET /metrics): requests by route and outcome, call latency, breaker state
 * and time open per route, and the gateway's own request count by final tier.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Breaker } from './breaker';

export class GatewayMetrics {
  readonly registry = new Registry();
  readonly calls: Counter<'route' | 'outcome'>;
  readonly latency: Histogram<'route'>;
  readonly requests: Counter<'tier' | 'status'>;
  readonly unpriced: Counter<'route'>;
  readonly estimated: Counter<'route'>;

  // Children by label values, made once: looking a label set up on every call costs more than
  // the count itself on the hot path. Kept in maps by each value (strings the request already
  // holds), not by a key made of them: a made key is a new string to build and hash every call.
  private readonly callChildren = new Map<string, Map<string, { inc(): void }>>();
  private readonly latencyChildren = new Map<string, { observe(v: number): void }>();
  private readonly requestChildren = new Map<string, Map<number | string, { inc(): void }>>();
  private readonly unpricedChildren = new Map<string, { inc(): void }>();
  private readonly estimatedChildren = new Map<string, { inc(): void }>();

  /** One provider call by route and outcome, with its latency. */
  countCall(route: string, outcome: string, seconds: number): void {
    child2(this.callChildren, route, outcome, () => this.calls.labels(route, outcome)).inc();
    child(this.latencyChildren, route, () => this.latency.labels(route)).observe(seconds);
  }

  /** One chat request by the tier that answered and the HTTP status. */
  countRequest(tier: string, status: number | string): void {
    child2(this.requestChildren, tier, status, () => this.requests.labels(tier, String(status))).inc();
  }

  /** One answered call whose model has no known price (its event carries UNPRICED). */
  countUnpriced(route: string): void {
    child(this.unpricedChildren, route, () => this.unpriced.labels(route)).inc();
  }

  /** One call metered with an estimated usage (its event carries ESTIMATED). */
  countEstimated(route: string): void {
    child(this.estimatedChildren, route, () => this.estimated.labels(route)).inc();
  }

  /** `routes`: the routes in force now (a reload of the routing map replaces them). */
  constructor(routes: () => Array<{ label: string; breaker: Breaker }>) {
    collectDefaultMetrics({ register: this.registry, prefix: 'gateway_' });
    this.calls = new Counter({
      name: 'gateway_route_calls_total',
      help: 'Provider calls by route and outcome (ok, client_error, http_<status>, timeout, provider_down)',
      labelNames: ['route', 'outcome'],
      registers: [this.registry],
    });
    this.latency = new Histogram({
      name: 'gateway_route_call_seconds',
      help: 'Provider call latency by route (to the full body, or to the first whole event when streaming)',
      labelNames: ['route'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
      registers: [this.registry],
    });
    this.requests = new Counter({
      name: 'gateway_requests_total',
      help: 'Requests to chat completions, responses and embeddings by the tier that answered (none: refused before any tier) and HTTP status (or what the Cold tier did)',
      labelNames: ['tier', 'status'],
      registers: [this.registry],
    });
    this.unpriced = new Counter({
      name: 'gateway_unpriced_calls_total',
      help: 'Calls with usage but no known price, by route: their events carry an empty cost_usd and UNPRICED',
      labelNames: ['route'],
      registers: [this.registry],
    });
    this.estimated = new Counter({
      name: 'gateway_estimated_calls_total',
      help: 'Calls cut on our side before the provider reported its usage, by route: metered with an estimate, their events carry ESTIMATED',
      labelNames: ['route'],
      registers: [this.registry],
    });
    new Gauge({
      name: 'gateway_breaker_state',
      help: 'Breaker state per route: 0 closed, 1 half-open, 2 open',
      labelNames: ['route'],
      registers: [this.registry],
      collect() {
        this.reset(); // a route removed by a reload leaves no series behind
        for (const { label, breaker } of routes()) this.set({ route: label }, { closed: 0, 'half-open': 1, open: 2 }[breaker.state()]);
      },
    });
    // A counter (it only grows, `_total`), read from each breaker when scraped: reset, then its
    // total, as a route a reload replaced starts again at 0 (rate() reads that as a counter reset).
    new Counter({
      name: 'gateway_breaker_open_seconds_total',
      help: 'Total seconds each route breaker has been open since start',
      labelNames: ['route'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const { label, breaker } of routes()) this.inc({ route: label }, breaker.secondsOpen());
      },
    });
  }
}

function child<K, T>(children: Map<K, T>, key: K, make: () => T): T {
  let c = children.get(key);
  if (c === undefined) children.set(key, (c = make()));
  return c;
}

function child2<K1, K2, T>(children: Map<K1, Map<K2, T>>, a: K1, b: K2, make: () => T): T {
  let inner = children.get(a);
  if (inner === undefined) children.set(a, (inner = new Map()));
  return child(inner, b, make);
}

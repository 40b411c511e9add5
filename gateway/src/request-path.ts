/**
 * Builds the request path once: the routes (with their breakers), the metrics that report on
 * them, the call meter, the failover loop and the pipeline every endpoint shares. The HTTP layer,
 * the Cold worker and the tests all take what this returns; nothing else constructs them. A reload
 * of the routing map builds only a new route set (`routesFor`) and puts it in force in the
 * failover loop (routes-reload.ts); the metrics, meter and pipeline stay.
 */
import type { Logger } from 'pino';
import type { EventRecord } from '../../schema/event-record';
import type { Admit } from './admission';
import type { BreakerOptions } from './breaker';
import { CallMeter } from './call-meter';
import type { Clock } from './deadline';
import { Failover } from './failover';
import type { FlagStore } from './flags';
import type { KeyFor } from './keys';
import { IdempotentReplay, type ReplayDeps } from './idempotent-replay';
import { GatewayMetrics } from './metrics';
import { Pipeline, type ColdFallback } from './pipeline';
import { buildRoutes, type Route } from './route';
import type { ResponseOwnership } from './responses/ownership';
import type { RequestContext } from './request-context';
import type { RoutesMapConfig } from './routes-map';
import type { Scopes } from './scopes';

export interface RequestPathOptions {
  map: RoutesMapConfig;
  scopes: Scopes;
  keyFor: KeyFor;
  /** Where meter events go (the meter sink, teed into spend and token budgets by the wiring); resolves once durable (`waitMs`: MeterSink.send's). */
  sendEvent: (event: EventRecord, waitMs?: number) => Promise<void>;
  flags: FlagStore;
  log: Logger;
  now?: Clock;
  breaker?: Omit<BreakerOptions, 'now'>;
  /** A live request's cap on each provider call (default 30 s; tests shorten it). */
  attemptMs?: number;
  admit?: Admit;
  cold?: ColdFallback | null;
  skipRoute?: (route: Route) => boolean;
  /** The tokens an answer used (the client key's tokens per minute). */
  onTokens?: (ctx: RequestContext, tokens: number) => void;
  /**
   * Where idempotent replay keeps answers (absent: requests with an Idempotency-Key run every time),
   * the request limits a replay counts against, and the sizes for tests.
   */
  replay?: Pick<ReplayDeps, 'store' | 'limit' | 'maxBytes' | 'leaseMs'> | null;
  /** Which tenant owns each stored response (absent: any caller may continue any response). */
  ownership?: ResponseOwnership | null;
}

export interface RequestPath {
  /** The routes in force now. */
  readonly routes: Route[];
  /** The routes of another map, keeping the unchanged ones of those in force (not yet in force). */
  routesFor(map: RoutesMapConfig): Route[];
  failover: Failover;
  metrics: GatewayMetrics;
  meter: CallMeter;
  pipeline: Pipeline;
}

export function createRequestPath(o: RequestPathOptions): RequestPath {
  const breaker = { ...o.breaker, now: o.now };
  const logged = new WeakSet<Route>();
  const logChanges = (routes: Route[]) => {
    for (const r of routes)
      if (!logged.has(r)) {
        logged.add(r);
        r.breaker.onChange((state, cause) => o.log.warn({ route: r.label, breaker: state, cause }, `breaker ${state}`));
      }
    return routes;
  };
  const routes = logChanges(buildRoutes(o.map, breaker));
  const metrics = new GatewayMetrics((): Route[] => failover.routes);
  const meter = new CallMeter(
    o.sendEvent,
    (m) => o.log.warn(m),
    (route) => metrics.countUnpriced(route),
    (route) => metrics.countEstimated(route),
  );
  const failover = new Failover({ routes, keyFor: o.keyFor, meter, metrics, now: o.now, flags: o.flags, attemptMs: o.attemptMs });
  const pipeline = new Pipeline({
    failover,
    metrics,
    meter,
    scopes: o.scopes,
    flags: o.flags,
    admit: o.admit,
    cold: o.cold,
    skipRoute: o.skipRoute,
    now: o.now,
    onTokens: o.onTokens,
    replay: o.replay ? new IdempotentReplay({ ...o.replay, meter, metrics, log: o.log }) : null,
    ownership: o.ownership,
  });
  return {
    get routes() {
      return failover.routes;
    },
    routesFor: (map) => logChanges(buildRoutes(map, breaker, failover.routes)),
    failover,
    metrics,
    meter,
    pipeline,
  };
}

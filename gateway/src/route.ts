/**
 * A route: one entry of the routing map (tier, provider, model, endpoint) with its own breaker,
 * health record and provider adapter. Built once from the map; the failover loop, the metrics,
 * `/health` and the worker all read the same list.
 */
import { Breaker, type BreakerOptions } from './breaker';
import type { ProviderAdapter } from './providers/adapter';
import { adapterFor } from './providers/registry';
import type { ApiKind } from './request-context';
import { RouteHealth } from './route-health';
import type { RouteConfig, RoutesMapConfig } from './routes-map';

export type Tier = 'hot' | 'warm';

/** What a provider kind offers when its route does not say. */
function defaultApis(provider: string): ApiKind[] {
  return provider === 'openai' ? ['chat', 'responses'] : ['chat'];
}

export class Route {
  /** Unique in the map: two routes of one provider and model are still told apart. */
  readonly label: string;
  readonly breaker: Breaker;
  readonly health = new RouteHealth();
  readonly adapter: ProviderAdapter;
  readonly apis: ReadonlySet<ApiKind>;
  constructor(
    readonly tier: Tier,
    readonly config: RouteConfig,
    breakerOptions: BreakerOptions,
    position: number,
  ) {
    this.label = config.id ?? `${tier}-${position + 1}`;
    this.breaker = new Breaker(this.label, breakerOptions);
    this.adapter = adapterFor(config.provider);
    this.apis = new Set(config.apis ?? defaultApis(config.provider));
  }
}

/** Every route of the map, Hot first then Warm, in the map's order. */
export function buildRoutes(map: RoutesMapConfig, breaker: BreakerOptions = {}): Route[] {
  return [...map.hot.map((r, i) => new Route('hot', r, breaker, i)), ...map.warm.map((r, i) => new Route('warm', r, breaker, i))];
}

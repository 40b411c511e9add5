/**
 * A route: one entry of the routing map (tier, provider, model, endpoint) with its own breaker,
 * health record and provider adapter. Built from the map at start; the failover loop, the metrics,
 * `/health` and the worker all read the same list. A reload of the map builds the list again and
 * keeps the Route (breaker and health with it) of each route whose id, tier and settings are
 * unchanged.
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
  /** Its tier and settings as stable JSON: equal for the same route in two maps. */
  readonly settings: string;
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
    this.label = routeId(tier, config, position);
    this.settings = settingsOf(tier, config);
    this.breaker = new Breaker(this.label, breakerOptions);
    this.adapter = adapterFor(config.provider);
    this.apis = new Set(config.apis ?? defaultApis(config.provider));
  }
}

function routeId(tier: Tier, config: RouteConfig, position: number): string {
  return config.id ?? `${tier}-${position + 1}`;
}

function settingsOf(tier: Tier, config: RouteConfig): string {
  return JSON.stringify([tier, config], ['0', '1', ...Object.keys(config).sort()]);
}

/**
 * Every route of the map, Hot first then Warm, in the map's order. A route of `previous` with the
 * same id, tier and settings is kept as it is (its breaker state, statistics and health).
 */
export function buildRoutes(map: RoutesMapConfig, breaker: BreakerOptions = {}, previous: Route[] = []): Route[] {
  const kept = new Map(previous.map((r) => [r.label, r]));
  const make = (tier: Tier) => (config: RouteConfig, i: number) => {
    const same = kept.get(routeId(tier, config, i));
    return same && same.settings === settingsOf(tier, config) ? same : new Route(tier, config, breaker, i);
  };
  return [...map.hot.map(make('hot')), ...map.warm.map(make('warm'))];
}

/** What `derive` makes of the routes in force, made again only when a reload replaced them. */
export function lastOf<T>(routes: () => Route[], derive: (routes: Route[]) => T): () => T {
  let seen: Route[] | null = null;
  let value: T;
  return () => {
    const now = routes();
    if (now !== seen) {
      seen = now;
      value = derive(now);
    }
    return value;
  };
}

/** Whether any route serves chat completions; none, and a chat request is refused at once (app.ts). */
export function servesChat(routes: readonly Route[]): boolean {
  return routes.some((r) => r.apis.has('chat'));
}

/** The start's and a reload's warning of a map no route of which serves chat completions. */
export const NO_CHAT_ROUTE_WARNING =
  'no route of the routing map serves chat completions (every route lists other apis): POST /v1/chat/completions is refused with 404 model_not_found until a map with one is loaded';

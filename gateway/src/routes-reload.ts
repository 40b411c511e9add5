/**
 * Reloading the routing map while the gateway runs: `SIGHUP` (start.ts) or
 * `POST /admin/routes/reload`. The file is read and checked as at start; a map that fails a check
 * is refused with the file's path and the JSON path, and the map in force stays. A good map's
 * routes are put in force at once (failover.ts `use`): requests under way finish on the routes they
 * started with, a route whose id, tier and settings are unchanged keeps its breaker and health,
 * and the breakers of removed routes are shut down once no request can still be using them.
 *
 * A map must keep a route of the provider the budget pause is for (CAPPED_PROVIDER, read at start).
 * Only the routes (`hot`, `warm`, and the provider keys they are assigned) change on a reload; the
 * other sections (`cold`, `flags`, `cheaper_model`, `limits`, `shared_objects`) are read at start, and a reload that
 * changes them says they need a restart.
 */
import type express from 'express';
import type { Logger } from 'pino';
import { ConfigError } from './errors';
import type { FleetBreakers } from './fleet-breakers';
import { unmatchedKillsWarning } from './flags';
import { keyResolver, missingKeys, movedKeys } from './keys';
import { mapEnvironmentProblems } from './map-environment';
import type { RequestPath } from './request-path';
import { NO_CHAT_ROUTE_WARNING, servesChat, type Route } from './route';
import { readRoutesMap, type MapVersion, type RoutesMapConfig } from './routes-map';

/** Longer than any request may run (the longest time-to-answer is 600 s). */
const RETIRE_AFTER_MS = 11 * 60_000;
const START_ONLY = ['cold', 'flags', 'cheaper_model', 'limits', 'shared_objects'] as const;

export interface ReloadResult {
  routes_map: MapVersion;
  added: string[];
  removed: string[];
  /** Ids whose tier or settings changed: a fresh breaker. */
  changed: string[];
  /** Sections that differ from the map at start and take effect only at the next restart. */
  restart_needed: string[];
  /** The flags' killed models no route in force calls any more (as PUT /admin/flags answers them); only when some. */
  unmatched_killed_models?: string[];
}

/** A reload that cannot be done in this mode (the demo providers); 409, not a bad map. */
class ReloadUnavailable extends ConfigError {}

export interface ReloaderDeps {
  file: string;
  /** The environment the map's `${NAME}` references are resolved from (with the embedded defaults). */
  mapEnv: NodeJS.ProcessEnv;
  /** The environment provider keys come from. */
  keyEnv: NodeJS.ProcessEnv;
  production: boolean;
  /** The provider the budget pause is for (CAPPED_PROVIDER, read at start): every map must name it. */
  cappedProvider: string;
  /** The map in force at start, and its version. */
  map: RoutesMapConfig;
  version: MapVersion;
  path: RequestPath;
  fleet: FleetBreakers | null;
  /** Running on the built-in demo providers: their map is made in process, there is no file to reload. */
  demo: boolean;
  /** The flags' killed models that no call to these routes would name (flags.ts unmatchedKills). */
  unmatchedKills: (routes: readonly Route[]) => string[];
  log: Logger;
}

export class RoutesReloader {
  private current: MapVersion;
  /** The map in force: its Warm key assignment is what a reload must not move. */
  private inForce: RoutesMapConfig;
  private readonly retiring = new Set<Route>();
  /** One reload at a time: a second waits for the first. */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly deps: ReloaderDeps) {
    this.current = deps.version;
    this.inForce = deps.map;
  }

  version(): MapVersion {
    return this.current;
  }

  /** Reloads ROUTES_FILE; rejects with a ConfigError (and logs it) when the map is refused. */
  reload(): Promise<ReloadResult> {
    const next = this.queue.then(() => this.load());
    this.queue = next.catch(() => {});
    return next;
  }

  private async load(): Promise<ReloadResult> {
    const { deps } = this;
    try {
      if (deps.demo) throw new ReloadUnavailable('the built-in demo providers are running (no ROUTES_FILE): there is no map to reload');
      const { map, version } = readRoutesMap(deps.file, deps.mapEnv);
      const problems = this.problems(map);
      if (problems.length) throw new ConfigError(problems.map((p) => `${deps.file}: ${p}`).join('\n'));
      const missing = missingKeys(map, deps.keyEnv);
      if (missing.length) deps.log.warn(`provider keys not set: ${missing.join(', ')}; those routes will fail until they are`);
      const before = deps.path.routes;
      const routes = deps.path.routesFor(map);
      await deps.fleet?.watch(routes); // the fleet's state of new routes, before they take traffic
      deps.path.failover.use({ routes, keyFor: keyResolver(map, deps.keyEnv) });
      this.retire(before.filter((r) => !routes.includes(r)));
      this.current = version;
      this.inForce = map;
      const result: ReloadResult = { routes_map: version, ...changes(before, routes), restart_needed: startOnly(deps.map, map) };
      // A reload can drop the last route of a killed model: the operator is told, as at start.
      const unmatched = deps.unmatchedKills(routes);
      if (unmatched.length) result.unmatched_killed_models = unmatched;
      this.logged(result);
      if (!servesChat(routes)) deps.log.warn(NO_CHAT_ROUTE_WARNING);
      return result;
    } catch (error) {
      const message = error instanceof ConfigError ? error.message : String(error);
      deps.log.error(`routing map reload refused, version ${this.current.version} stays in force: ${message}`);
      throw error;
    }
  }

  /** The new map against the environment and the map in force, every problem at once (as the map's own checks). */
  private problems(map: RoutesMapConfig): string[] {
    const { keyEnv, production } = this.deps;
    const problems: string[] = [];
    const moved = movedKeys(this.inForce, map, keyEnv);
    if (moved.length) {
      const fix = 'keep the order of the Warm provider kinds, or pin each kind to its key with WARM_KEY_<KIND>';
      problems.push(`the Warm providers' keys would move (${moved.join('; ')}): ${fix}`);
    }
    // CAPPED_PROVIDER was read at start: a map that drops its provider needs a restart with another.
    return [...problems, ...mapEnvironmentProblems(map, { keys: keyEnv, production, capped: this.deps.cappedProvider })];
  }

  private logged(r: ReloadResult): void {
    const ids = (sign: string, list: string[]) => list.map((id) => `${sign}${id}`);
    const diff = [...ids('+', r.added), ...ids('-', r.removed), ...ids('~', r.changed)].join(' ') || 'no route changed';
    this.deps.log.info(`routing map reloaded: ${r.routes_map.file} version ${r.routes_map.version} (${diff})`);
    if (r.restart_needed.length)
      this.deps.log.warn(`routing map: ${r.restart_needed.join(', ')} changed; that takes effect at the next restart`);
    const unmatched = r.unmatched_killed_models;
    if (unmatched) this.deps.log.warn({ unmatched_killed_models: unmatched }, unmatchedKillsWarning(unmatched));
  }

  /** Removed routes' breakers are shut down once no request can still be using them. */
  private retire(routes: Route[]): void {
    for (const r of routes) {
      this.retiring.add(r);
      setTimeout(() => {
        this.retiring.delete(r);
        r.breaker.shutdown();
      }, RETIRE_AFTER_MS).unref();
    }
  }

  close(): void {
    for (const r of this.retiring) r.breaker.shutdown();
    this.retiring.clear();
  }
}

function changes(before: Route[], after: Route[]) {
  const ids = (routes: Route[]) => new Set(routes.map((r) => r.label));
  const [old, now] = [ids(before), ids(after)];
  return {
    added: [...now].filter((id) => !old.has(id)),
    removed: [...old].filter((id) => !now.has(id)),
    changed: after.filter((r) => old.has(r.label) && !before.includes(r)).map((r) => r.label),
  };
}

function startOnly(atStart: RoutesMapConfig, next: RoutesMapConfig): string[] {
  return START_ONLY.filter((k) => JSON.stringify(atStart[k]) !== JSON.stringify(next[k]));
}

/** `POST /admin/routes/reload` (ADMIN_TOKEN): 200 with what changed, 400 naming the file and JSON path. */
export function mountRoutesReload(app: express.Express, admin: express.RequestHandler, reloader: RoutesReloader): void {
  app.post('/admin/routes/reload', admin, async (_req, res) => {
    try {
      res.json(await reloader.reload());
    } catch (error) {
      const status = error instanceof ReloadUnavailable ? 409 : error instanceof ConfigError ? 400 : 500;
      const message = error instanceof ConfigError ? error.message : 'internal error';
      res.status(status).json({ error: message, routes_map: reloader.version() });
    }
  });
}

/** The start-up description: what the gateway is using, so an operator reads it in the first lines of the log. */
import { existsSync } from 'node:fs';
import type { Logger } from 'pino';
import type { GatewayEnv } from './env';
import type { RoutesMapConfig } from './routes-map';
import type { Scopes } from './scopes';
import type { Stores } from './stores';

/**
 * A Redis URL without its password, for logs: ioredis takes one from `?password=` as from the
 * userinfo. A userinfo with no colon is a user name to ioredis, but a password to redis-cli, as an
 * operator may have meant it: hidden too.
 */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    else if (u.username) u.username = '***';
    if (u.searchParams.has('password')) u.searchParams.set('password', '***');
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

export interface StartFacts {
  env: GatewayEnv;
  map: RoutesMapConfig;
  routesFile: string;
  /** The version of the map's text (routes-map.ts), as /health shows it. */
  routesVersion: string;
  scopes: Scopes;
  stores: Stores;
  cappedProvider: string;
  /** Whether this process serves HTTP: a worker alone (`npm run worker`) has no operator endpoints. */
  http: boolean;
  /**
   * The spool folder this process took: `<METER_SPOOL_DIR>.2` … when another gateway holds the
   * folder itself (meter-web-app.ts), so the log names the folder its events are really in.
   */
  spoolDir: string;
}

/** Where meter events wait for the meter: the shared Redis stream, or this process's spool folder. */
const meterWay = (f: StartFacts) =>
  f.env.QUEUE_STORE_URL ? `through the Redis stream ${f.env.REDIS_PREFIX ?? 'gateway'}:meter:events` : `spooled to ${f.spoolDir}`;

/** Why no scope is in force: a missing file is named, since a mistyped path reads as no scopes. */
const noScopes = (file: string, named: boolean) =>
  `none (${existsSync(file) ? '' : `${file} not found${named ? ', though SCOPES_FILE names it' : ''}; `}time-to-answer 30 s unless x-time-to-answer-ms)`;

/** The scopes line: a warning when SCOPES_FILE names a file that is not there (production refuses it: scopes.ts). */
function logScopes(log: Logger, env: GatewayEnv, scopes: Scopes): void {
  const names = Object.keys(scopes);
  const named = Boolean(env.raw.SCOPES_FILE);
  if (names.length) return log.info(`scopes: ${env.SCOPES_FILE} (${names.join(', ')})`);
  const line = `scopes: ${noScopes(env.SCOPES_FILE, named)}`;
  if (named && !existsSync(env.SCOPES_FILE)) log.warn(line);
  else log.info(line);
}

export function describeStart(log: Logger, f: StartFacts): void {
  const { env, map } = f;
  log.info(`routing map: ${f.routesFile} version ${f.routesVersion} (${map.hot.length} hot, ${map.warm.length} warm routes)`);
  logScopes(log, env, f.scopes);
  log.info(`meter: ${env.METER_URL ? `meter web app (${meterWay(f)})` : `local CSV ${env.METER_CSV_FILE} (METER_URL not set)`}`);
  log.info(`store: ${env.QUEUE_STORE_URL ? `Redis ${redactUrl(env.QUEUE_STORE_URL)}` : 'in-process (QUEUE_STORE_URL not set)'}`);
  if (!f.stores.redis) log.warn('queued work does not survive a restart: set QUEUE_STORE_URL to a Redis for a durable Cold queue');
  log.info(`budget pause: ${f.cappedProvider} at ${env.BUDGET_PAUSE_AT_PERCENT}%`);
  const caps = env.METER_URL
    ? "the meter's (doGet?action=spend, cached 60 s)"
    : `${f.stores.redis ? "every instance's totals in Redis" : "this gateway's own totals"} against ${env.DAILY_CAP_USD} / ${env.BURN_7D_CAP_USD} USD`;
  log.info(`spend caps for spend-cap routing: ${caps}`);
  if (f.http && !env.ADMIN_TOKEN)
    log.warn('ADMIN_TOKEN is not set: operator endpoints (/health, /metrics, /admin/*, /budget/*) answer 401');
}

/**
 * `npm start`: the gateway on $PORT (default 8080). With nothing configured it runs on
 * routes.local.json and embedded defaults, and its first log lines say what it is using.
 */
import type { Server } from 'node:http';
import { ConfigError } from './errors';
import { createGateway } from './app';
import { Redis } from 'ioredis';
import { LocalFlags, RedisFlags, type FlagStore } from './flags';
import { keyResolver } from './keys';
import { createLogger } from './log';
import { createMeterSink } from './meter-sink';
import { loadRoutesMap } from './routes-map';
import { loadScopes } from './scopes';

/**
 * Embedded defaults for the endpoints the routing maps reference, so `npm start` runs with nothing
 * configured (each provider's public OpenAI-compatible endpoint). Keys have no defaults.
 */
export const ENDPOINT_DEFAULTS: Record<string, string> = {
  HOT_BASE_URL: 'https://api.openai.com/v1',
  HOT_BASE_URL_2: 'https://api.openai.com/v1',
  WARM_A_BASE_URL: 'https://api.anthropic.com/v1',
  WARM_B_BASE_URL: 'https://api.mistral.ai/v1',
};

/** A Redis URL without its password, for logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

export async function start(processEnv: NodeJS.ProcessEnv = process.env): Promise<Server> {
  const env = { ...ENDPOINT_DEFAULTS, ...processEnv };
  const log = createLogger(env.LOG_LEVEL);
  const defaulted = Object.keys(ENDPOINT_DEFAULTS).filter((k) => !processEnv[k]);
  if (defaulted.length) log.info(`embedded endpoint defaults for ${defaulted.join(', ')}`);
  const production = env.NODE_ENV === 'production';
  const routesFile = env.ROUTES_FILE ?? (production ? 'routes.prod.json' : 'routes.local.json');
  const map = loadRoutesMap(routesFile, env);
  const scopesFile = env.SCOPES_FILE ?? 'scopes.yaml';
  const scopes = loadScopes(scopesFile);
  const meter = createMeterSink(env, log);
  let redis: Redis | null = null;
  if (env.QUEUE_STORE_URL) redis = new Redis(env.QUEUE_STORE_URL, { maxRetriesPerRequest: null, lazyConnect: false });
  else if (production) throw new ConfigError('QUEUE_STORE_URL is required with NODE_ENV=production (queued work and shared flags live in Redis)');
  const prefix = env.REDIS_PREFIX ?? 'gateway:';
  const flags: FlagStore = redis ? new RedisFlags(map.flags, redis, `${prefix}flags`) : new LocalFlags(map.flags);
  log.info(`store: ${redis ? `Redis ${redactUrl(env.QUEUE_STORE_URL!)}` : 'in-process (QUEUE_STORE_URL not set): queued work does not survive a restart'}`);
  log.info(`routing map: ${routesFile} (${map.hot.length} hot, ${map.warm.length} warm routes)`);
  log.info(`scopes: ${Object.keys(scopes).length ? `${scopesFile} (${Object.keys(scopes).join(', ')})` : 'none (time-to-answer 30 s unless x-time-to-answer-ms)'}`);
  log.info(`meter: ${env.METER_URL ? 'meter web app (spooled to .data/meter-spool)' : `local CSV ${env.METER_CSV_FILE ?? '.data/events.csv'} (METER_URL not set)`}`);
  if (!env.ADMIN_TOKEN) log.warn('ADMIN_TOKEN is not set: operator endpoints (/health, /metrics, /admin/*, /budget/*) answer 401');
  const gateway = createGateway({ map, scopes, keyFor: keyResolver(map, env), meter, flags, log, adminToken: env.ADMIN_TOKEN });
  const port = Number(env.PORT ?? 8080);
  const server = await gateway.listen(port);
  log.info(`gateway listening on :${port}`);
  const stop = async () => {
    log.info('shutting down: finishing requests, flushing meter events');
    server.close();
    await meter.close();
    flags.close();
    redis?.disconnect();
    gateway.failover.shutdown();
    process.exit(0);
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  return server;
}

if (process.argv[1] && /main\.(ts|js|mjs)$/.test(process.argv[1])) {
  start().catch((error: unknown) => {
    const message = error instanceof ConfigError ? error.message : (error as Error).stack ?? String(error);
    process.stderr.write(`gateway did not start:\n${message}\n`);
    process.exit(1);
  });
}

/**
 * Assembles the gateway from the environment: routing map, scopes, stores, meter sink, spend
 * watch, notifier, the request path (built once here), the HTTP surface, the voice concierge and
 * the Cold worker. Used by `npm start`, `npm run worker` and the Lisbon drill, so all three run
 * the same wiring.
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { CallRecord } from '../../schema/call-record';
import { admission } from './admission';
import { createGateway, type Gateway } from './app';
import { bearerGuard } from './bearer';
import type { PauseFlag } from './budget';
import type { ClientAuth } from './client-auth';
import type { ColdQueue } from './cold-queue';
import { coldFallback, mountColdTier, type ColdTierDeps } from './cold-tier';
import { SpendWatch } from './degraded';
import { startDemoProviders, type DemoProviders } from './demo-providers';
import { readEnv, type GatewayEnv } from './env';
import { ConfigError } from './errors';
import type { FlagStore } from './flags';
import { startClientAuth } from './key-guard';
import { spendKeyTokens } from './key-policy';
import { keyResolver, missingKeys } from './keys';
import { createMeterSink, CsvSink, WebAppSink, type MeterSink } from './meter-sink';
import { Notifier } from './notify';
import { createRequestPath, type RequestPath } from './request-path';
import type { Route } from './route';
import { loadRoutesMap, type RoutesMapConfig } from './routes-map';
import { loadScopes, type Scopes } from './scopes';
import { describeStart } from './startup-log';
import { createStores, type Stores } from './stores';
import { callToCsvLine, CALLS_CSV_HEADER } from '../../schema/call-record';
import { lintFile, loadConcierge, type Concierge } from './voice/config';
import { MemoryVoiceStore, mountVoice, RedisVoiceStore, VoiceService } from './voice/calls';
import { DEFAULT_RATES_FILE, readRates } from './voice/rates';
import { MemoryWorkflowStore, RedisWorkflowStore, Workflow } from './voice/workflow';
import { startBullWorker, startMemoryWorker, type ColdWorker } from './worker';
import type { MemoryColdQueue } from './cold-queue';

/**
 * Embedded defaults for the endpoints the routing maps reference, so `npm start` runs with nothing
 * configured (each provider's public OpenAI-compatible endpoint). Keys have no defaults.
 */
const ENDPOINT_DEFAULTS: Record<string, string> = {
  HOT_BASE_URL: 'https://api.openai.com/v1',
  HOT_BASE_URL_2: 'https://api.openai.com/v1',
  WARM_A_BASE_URL: 'https://api.anthropic.com/v1',
  WARM_B_BASE_URL: 'https://api.mistral.ai/v1',
};

export interface Stack {
  map: RoutesMapConfig;
  gateway: Gateway | null;
  path: RequestPath;
  queue: ColdQueue;
  pause: PauseFlag;
  flags: FlagStore;
  notifier: Notifier;
  meter: MeterSink;
  worker: ColdWorker | null;
  redis: Redis | null;
  cappedProvider: string;
  close(): Promise<void>;
}

export interface StackOptions {
  http: boolean;
  worker: boolean;
  /** Breaker and notification timings (the Lisbon drill shortens them; documented there). */
  breaker?: { openMs?: number };
  notifyWindowMs?: number;
}

/** With nothing configured (no key, no endpoint, no map) and outside production: the demo providers. */
function wantsDemo(env: GatewayEnv): boolean {
  if (env.production || env.DEMO_PROVIDERS === 'off' || env.ROUTES_FILE) return false;
  const set = (name: string) => Boolean(env.raw[name]);
  const keys = ['HOT_API_KEY', 'WARM_A_API_KEY', 'WARM_B_API_KEY', ...Object.keys(env.raw).filter((k) => k.startsWith('WARM_KEY_'))];
  return !keys.some(set) && !Object.keys(ENDPOINT_DEFAULTS).some(set);
}

/** The routing map, on the demo providers when nothing is configured; missing keys refused in production. */
async function routingMap(env: GatewayEnv, log: Logger): Promise<{ map: RoutesMapConfig; file: string; demo: DemoProviders | null }> {
  const file = env.ROUTES_FILE ?? (env.production ? 'routes.prod.json' : 'routes.local.json');
  const map = loadRoutesMap(file, { ...ENDPOINT_DEFAULTS, ...env.raw });
  if (wantsDemo(env)) {
    const demo = await startDemoProviders(map);
    log.warn('no provider key or endpoint is set: answering from the built-in demo providers (local, in process; x-route-provider demo-*)');
    log.info('demo: a message containing #fail-hot makes the Hot routes fail (the Warm tier answers); #fail-all queues it (Cold tier)');
    return { map: demo.map, file, demo };
  }
  const missing = missingKeys(map, env.raw);
  if (missing.length && env.production) throw new ConfigError(`provider keys not set: ${missing.join(', ')}`);
  if (missing.length) log.warn(`provider keys not set: ${missing.join(', ')}; those routes will fail until they are`);
  const defaulted = Object.keys(ENDPOINT_DEFAULTS).filter((k) => !env.raw[k]);
  if (defaulted.length) log.info(`embedded endpoint defaults for ${defaulted.join(', ')}`);
  return { map, file, demo: null };
}

/** The concierge file, checked before any connection opens (a refused start leaves nothing behind). */
function voiceConfig(env: GatewayEnv): { config: Concierge | null; why: string; problems: number } {
  if (!env.VOICE_TOKEN) return { config: null, why: 'VOICE_TOKEN is not set', problems: 0 };
  const file = env.CONCIERGE_FILE;
  const problems = lintFile(file);
  if (problems.length && env.production) {
    const lines = problems.map((p) => `${file}: ${p.path}: ${p.message}`).join('\n');
    throw new ConfigError(`${file} does not lint clean (npm run concierge:lint):\n${lines}`);
  }
  const config = problems.length && problems[0].path === '$' ? null : loadConcierge(file).config;
  const why = config ? '' : `${file} is not a valid configuration (${problems.length} problem(s); run npm run concierge:lint)`;
  return { config, why, problems: problems.length };
}

export async function createStack(processEnv: NodeJS.ProcessEnv, log: Logger, options: StackOptions): Promise<Stack> {
  const env = readEnv(processEnv);
  const scopes = loadScopes(env.SCOPES_FILE);
  const voice = voiceConfig(env);
  const { map, file: routesFile, demo } = await routingMap(env, log);
  const cappedProvider = env.CAPPED_PROVIDER || map.hot[0].provider;
  const stores = createStores(env, map);
  const { redis, flags, pause, queue, limiter } = stores;
  const spend = new SpendWatch({
    meterUrl: env.METER_URL,
    meterToken: env.METER_TOKEN,
    dailyCap: env.DAILY_CAP_USD,
    burnCap: env.BURN_7D_CAP_USD,
    warn: (m) => log.warn(m),
  });
  const meter = teeMeter(createMeterSink(env, log), spend, limiter);
  const notifier = new Notifier(map.cold.notify, {
    windowMs: options.notifyWindowMs ?? env.NOTIFY_WINDOW_MS,
    smtpUrl: env.SMTP_URL,
    onCall: env.ON_CALL,
    log,
  });
  describeStart(log, { env, map, routesFile, scopes, stores, cappedProvider });

  const skipWhilePaused = (r: Route) => r.config.provider === cappedProvider;
  const coldDeps: ColdTierDeps = { queue, pause, flags, notifier, cappedProvider, pauseAtPercent: env.BUDGET_PAUSE_AT_PERCENT, log };
  const providers = [...new Set([...map.hot, ...map.warm].map((r) => r.provider))];
  const path = createRequestPath({
    map,
    scopes,
    keyFor: keyResolver(map, env.raw),
    sendEvent: (e) => meter.send(e),
    flags,
    log,
    breaker: options.breaker,
    admit: admission({ limiter, limits: map.limits, spend, providers, cheaperModel: map.cheaper_model }),
    cold: coldFallback(coldDeps),
    skipRoute: (r) => pause.paused() && skipWhilePaused(r),
    onTokens: (ctx, tokens) => spendKeyTokens(limiter, ctx.clientKey, tokens),
  });
  const auth = options.http ? await startClientAuth(env, stores.keys, log) : null;
  const voiceParts = startVoice(env, voice, { redis, prefix: stores.prefix, meter, log });

  const health = async () => ({
    paused: pause.paused(),
    capped_provider: cappedProvider,
    queue: await queue.counts().catch(() => 'unreachable'),
  });
  const gateway = options.http
    ? httpGateway(env, { path, scopes, flags, log, meter, auth, coldDeps, voiceParts, voiceWhy: voice.why, health })
    : null;

  const workerDeps = { failover: path.failover, pause, flags, notifier, skipWhilePaused, log };
  const worker = !options.worker
    ? null
    : redis
      ? startBullWorker(redis, stores.prefix, workerDeps)
      : startMemoryWorker(queue as MemoryColdQueue, workerDeps);
  if (worker) log.info('worker: running in this process');

  return {
    map,
    gateway,
    path,
    queue,
    pause,
    flags,
    notifier,
    meter,
    worker,
    redis,
    cappedProvider,
    close: () => closeStack({ worker, voiceParts, auth, notifier, queue, meter, flags, pause, path, demo, redis }),
  };
}

/** Stops what the stack started, the worker first (its running jobs finish) and the store last. */
async function closeStack(p: {
  worker: ColdWorker | null;
  voiceParts: { close(): Promise<void> } | null;
  auth: ClientAuth | null;
  notifier: Notifier;
  queue: ColdQueue;
  meter: MeterSink;
  flags: FlagStore;
  pause: PauseFlag;
  path: RequestPath;
  demo: DemoProviders | null;
  redis: Redis | null;
}): Promise<void> {
  await p.worker?.close();
  await p.voiceParts?.close();
  await p.auth?.close();
  await p.notifier.flush();
  await p.queue.close();
  await p.meter.close();
  p.flags.close();
  p.pause.close();
  p.path.failover.shutdown();
  await p.demo?.close();
  p.redis?.disconnect();
}

/** Every meter event also feeds the spend figures (spend-cap routing) and the provider token budgets. */
function teeMeter(sink: MeterSink, spend: SpendWatch, limiter: Stores['limiter']): MeterSink {
  return {
    kind: sink.kind,
    send(event) {
      sink.send(event);
      spend.record(event.cost_usd);
      limiter.spendTokens(event.provider, event.input_tokens + event.output_tokens);
    },
    flush: () => sink.flush(),
    close: () => sink.close(),
  };
}

interface HttpParts {
  path: RequestPath;
  scopes: Scopes;
  flags: FlagStore;
  log: Logger;
  meter: MeterSink;
  auth: ClientAuth | null;
  coldDeps: ColdTierDeps;
  voiceParts: ReturnType<typeof buildVoice> | null;
  voiceWhy: string;
  health: () => Promise<Record<string, unknown>>;
}

/** The HTTP surface: the request path's endpoints, the operator endpoints, the Cold tier's and the voice endpoints. */
function httpGateway(env: GatewayEnv, p: HttpParts): Gateway {
  return createGateway({
    path: p.path,
    scopes: p.scopes,
    flags: p.flags,
    log: p.log,
    meterKind: p.meter.kind,
    adminToken: env.ADMIN_TOKEN,
    auth: p.auth,
    healthExtras: p.health,
    extend: (app, { admin }) => {
      mountColdTier(app, admin, p.coldDeps);
      mountVoice(app, bearerGuard(env.VOICE_TOKEN), p.voiceParts?.service ?? null, p.voiceWhy);
    },
  });
}

interface VoiceShared {
  redis: Redis | null;
  prefix: string | undefined;
  meter: MeterSink;
  log: Logger;
}

/** The voice concierge when configured (else its endpoints answer 503 with the reason). */
function startVoice(env: GatewayEnv, voice: ReturnType<typeof voiceConfig>, shared: VoiceShared) {
  if (!voice.config) {
    if (env.VOICE_TOKEN) shared.log.warn(`voice endpoints answer 503: ${voice.why}`);
    return null;
  }
  if (voice.problems)
    shared.log.warn(`${env.CONCIERGE_FILE}: ${voice.problems} lint problem(s); fine for a trial, refused with NODE_ENV=production`);
  shared.log.info(`voice concierge: ${env.CONCIERGE_FILE}`);
  return buildVoice(env, voice.config, shared);
}

/** The voice concierge's parts: call records' sink, the function-call workflow and the call service. */
function buildVoice(env: GatewayEnv, config: Concierge, shared: VoiceShared) {
  const { redis, prefix, meter, log } = shared;
  const logs = { warn: (m: string) => log.warn(m), error: (m: string) => log.error(m) };
  // Call records go where events go: the meter web app (`{"calls":[...]}`, spooled), or a local CSV.
  const callSink: MeterSink<CallRecord> = env.METER_URL
    ? new WebAppSink<CallRecord>(
        { url: env.METER_URL, token: env.METER_TOKEN, key: 'calls', spoolDir: `${env.METER_SPOOL_DIR}-calls`, log },
        (r) => r,
      )
    : new CsvSink<CallRecord>(env.CALLS_CSV_FILE, CALLS_CSV_HEADER, callToCsvLine, (m) => log.error(m));
  const workflow = new Workflow({
    config,
    store: redis ? new RedisWorkflowStore(redis, prefix ?? 'gateway') : new MemoryWorkflowStore(),
    log: logs,
  });
  workflow.startDeadLetterRetry();
  const ratesFile = env.TELEPHONY_RATES_FILE ?? DEFAULT_RATES_FILE;
  const service = new VoiceService({
    config,
    store: redis ? new RedisVoiceStore(redis, prefix ?? 'gateway') : new MemoryVoiceStore(),
    log: logs,
    workflow,
    afterCall: { calls: callSink, events: meter, rates: () => readRates(ratesFile), voiceProvider: env.VOICE_PROVIDER },
  });
  return {
    service,
    async close() {
      workflow.stop();
      await callSink.close();
    },
  };
}

/**
 * Assembles the gateway's parts from the environment: routing map, scopes, meter sink, store
 * (Redis or in-process), flags, pause flag, Cold queue, notifier, worker. Used by `npm start`,
 * `npm run worker` and the Lisbon drill, so all three run the same wiring.
 */
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { createGateway, type Gateway } from './app';
import { MemoryPause, pauseThreshold, RedisPause, type PauseFlag } from './budget';
import { BullColdQueue, MemoryColdQueue, type ColdQueue } from './cold-queue';
import { answerQueued, coldDegrade, mountColdTier, type ColdTierDeps } from './cold-tier';
import { SpendWatch } from './degraded';
import { admission } from './admission';
import { MemoryLimiter, RedisLimiter, type Limiter } from './rate-limit';
import { bearerGuard } from './app';
import { lintFile, loadConcierge } from './voice/config';
import { MemoryVoiceStore, mountVoice, RedisVoiceStore, VoiceService } from './voice/calls';
import { callToCsvLine, CALLS_CSV_HEADER, type CallRecord } from '../../schema/call-record';
import { CsvSink, WebAppSink } from './meter-sink';
import { DEFAULT_RATES_FILE, readRates } from './voice/rates';
import { MemoryWorkflowStore, RedisWorkflowStore, Workflow } from './voice/workflow';
import { phoneBridgeFromEnv, type PhoneBridge } from './voice/phone/bridge';
import { ConfigError } from './errors';
import { Failover, type Route } from './failover';
import { LocalFlags, RedisFlags, type FlagStore } from './flags';
import { keyResolver } from './keys';
import { createMeterSink, type MeterSink } from './meter-sink';
import { Notifier } from './notify';
import { loadRoutesMap, type RoutesMapConfig } from './routes-map';
import { loadScopes } from './scopes';
import { startBullWorker, startMemoryWorker, type ColdWorker } from './worker';

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

/** A Redis URL without its password, for logs. */
function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

export interface Stack {
  map: RoutesMapConfig;
  gateway: Gateway | null;
  failover: Failover;
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

export async function createStack(processEnv: NodeJS.ProcessEnv, log: Logger, options: StackOptions): Promise<Stack> {
  const env = { ...ENDPOINT_DEFAULTS, ...processEnv };
  const production = env.NODE_ENV === 'production';
  const defaulted = Object.keys(ENDPOINT_DEFAULTS).filter((k) => !processEnv[k]);
  if (defaulted.length) log.info(`embedded endpoint defaults for ${defaulted.join(', ')}`);
  const routesFile = env.ROUTES_FILE ?? (production ? 'routes.prod.json' : 'routes.local.json');
  const map = loadRoutesMap(routesFile, env);
  const scopesFile = env.SCOPES_FILE ?? 'scopes.yaml';
  const scopes = loadScopes(scopesFile);
  const pauseAtPercent = pauseThreshold(env);
  const cappedProvider = env.CAPPED_PROVIDER || map.hot[0].provider;

  // The voice concierge: loaded when VOICE_TOKEN is set; in production only a file that lints clean
  // (checked before any connection is opened, so a refused start leaves nothing behind).
  let voiceConfig: import('./voice/config').Concierge | null = null;
  let voiceWhy = 'VOICE_TOKEN is not set';
  let voiceProblems = 0;
  const conciergeFile = env.CONCIERGE_FILE ?? 'concierge.json';
  if (env.VOICE_TOKEN) {
    const problems = lintFile(conciergeFile);
    if (problems.length && production) {
      throw new ConfigError(
        `${conciergeFile} does not lint clean (npm run concierge:lint):\n${problems.map((p) => `${conciergeFile}: ${p.path}: ${p.message}`).join('\n')}`,
      );
    }
    voiceProblems = problems.length;
    voiceConfig = problems.length && problems[0].path === '$' ? null : loadConcierge(conciergeFile).config;
    if (!voiceConfig)
      voiceWhy = `${conciergeFile} is not a valid configuration (${problems.length} problem(s); run npm run concierge:lint)`;
  }

  let redis: Redis | null = null;
  if (env.QUEUE_STORE_URL) redis = new Redis(env.QUEUE_STORE_URL, { maxRetriesPerRequest: null });
  else if (production) throw new ConfigError('QUEUE_STORE_URL is required with NODE_ENV=production (queued work must survive a restart)');
  const prefix = env.REDIS_PREFIX || undefined;
  const flags: FlagStore = redis ? new RedisFlags(map.flags, redis, `${prefix ?? 'gateway'}:flags`) : new LocalFlags(map.flags);
  const pause: PauseFlag = redis ? new RedisPause(redis) : new MemoryPause();
  const queue: ColdQueue = redis ? new BullColdQueue(redis, prefix) : new MemoryColdQueue();
  const sink = createMeterSink(env, log);
  const limiter: Limiter = redis ? new RedisLimiter(redis, prefix ?? 'gateway', map.limits ?? {}) : new MemoryLimiter(map.limits ?? {});
  const spend = new SpendWatch({
    meterUrl: env.METER_URL,
    meterToken: env.METER_TOKEN,
    dailyCap: Number(env.DAILY_CAP_USD ?? 50),
    burnCap: Number(env.BURN_7D_CAP_USD ?? 200),
    warn: (m) => log.warn(m),
  });
  // Every meter event also feeds the spend figures (degraded routing) and the provider token budgets.
  const meter: MeterSink = {
    kind: sink.kind,
    send(event) {
      sink.send(event);
      spend.record(event.cost_usd);
      limiter.spendTokens(event.provider, event.input_tokens + event.output_tokens);
    },
    flush: () => sink.flush(),
    close: () => sink.close(),
  };
  const notifier = new Notifier(map.cold.notify, {
    windowMs: options.notifyWindowMs ?? Number(env.NOTIFY_WINDOW_MS ?? 60_000),
    smtpUrl: env.SMTP_URL,
    onCall: env.ON_CALL,
    log,
  });

  log.info(`routing map: ${routesFile} (${map.hot.length} hot, ${map.warm.length} warm routes)`);
  log.info(
    `scopes: ${Object.keys(scopes).length ? `${scopesFile} (${Object.keys(scopes).join(', ')})` : 'none (time-to-answer 30 s unless x-time-to-answer-ms)'}`,
  );
  log.info(
    `meter: ${env.METER_URL ? 'meter web app (spooled to .data/meter-spool)' : `local CSV ${env.METER_CSV_FILE ?? '.data/events.csv'} (METER_URL not set)`}`,
  );
  log.info(`store: ${redis ? `Redis ${redactUrl(env.QUEUE_STORE_URL!)}` : 'in-process (QUEUE_STORE_URL not set)'}`);
  if (!redis) log.warn('queued work does not survive a restart: set QUEUE_STORE_URL to a Redis for a durable Cold queue');
  log.info(`budget pause: ${cappedProvider} at ${pauseAtPercent}%`);
  log.info(
    `spend caps for degraded routing: ${env.METER_URL ? "the meter's (doGet?action=spend, cached 60 s)" : `this gateway's own totals against ${env.DAILY_CAP_USD ?? 50} / ${env.BURN_7D_CAP_USD ?? 200} USD`}`,
  );

  const skipWhilePaused = (r: Route) => r.config.provider === cappedProvider;
  const keyFor = keyResolver(map, env);
  const coldDeps: ColdTierDeps = {
    queue,
    pause,
    flags,
    notifier,
    cappedProvider,
    pauseAtPercent,
    log: { info: (m) => log.info(m), warn: (m) => log.warn(m), error: (m) => log.error(m) },
  };
  let gateway: Gateway | null = null;
  let failover: Failover;
  let voice: VoiceService | null = null;
  let callSink: MeterSink<CallRecord> | null = null;
  let workflow: Workflow | null = null;
  if (voiceConfig) {
    // Call records go where events go: the meter web app (`{"calls":[...]}`, spooled), or a local CSV.
    callSink = env.METER_URL
      ? new WebAppSink<CallRecord>(
          {
            url: env.METER_URL,
            token: env.METER_TOKEN,
            key: 'calls',
            spoolDir: `${env.METER_SPOOL_DIR ?? '.data/meter-spool'}-calls`,
            log,
          },
          (r) => r,
        )
      : new CsvSink<CallRecord>(env.CALLS_CSV_FILE ?? '.data/calls.csv', CALLS_CSV_HEADER, callToCsvLine, (m) => log.error(m));
    workflow = new Workflow({
      config: voiceConfig,
      store: redis ? new RedisWorkflowStore(redis, prefix ?? 'gateway') : new MemoryWorkflowStore(),
      log: { warn: (m) => log.warn(m), error: (m) => log.error(m) },
    });
    workflow.startDeadLetterRetry();
    const ratesFile = env.TELEPHONY_RATES_FILE ?? DEFAULT_RATES_FILE;
    voice = new VoiceService({
      config: voiceConfig,
      store: redis ? new RedisVoiceStore(redis, prefix ?? 'gateway') : new MemoryVoiceStore(),
      log: { warn: (m) => log.warn(m), error: (m) => log.error(m) },
      workflow,
      afterCall: { calls: callSink, events: meter, rates: () => readRates(ratesFile), voiceProvider: env.VOICE_PROVIDER ?? 'openai' },
    });
    if (voiceProblems) log.warn(`${conciergeFile}: ${voiceProblems} lint problem(s); fine for a trial, refused with NODE_ENV=production`);
    log.info(`voice concierge: ${conciergeFile}`);
  } else if (env.VOICE_TOKEN) log.warn(`voice endpoints answer 503: ${voiceWhy}`);
  const logs = { info: (m: string) => log.info(m), warn: (m: string) => log.warn(m), error: (m: string) => log.error(m) };
  const phone: PhoneBridge | null =
    voice && workflow ? phoneBridgeFromEnv(env, { config: voiceConfig!, voice, workflow, meter, log: logs }) : null;
  const admit = admission({
    limiter,
    limits: map.limits,
    spend,
    providers: [...new Set([...map.hot, ...map.warm].map((r) => r.provider))],
    cheaperModel: map.cheaper_model,
  });
  if (options.http) {
    if (!env.ADMIN_TOKEN) log.warn('ADMIN_TOKEN is not set: operator endpoints (/health, /metrics, /admin/*, /budget/*) answer 401');
    gateway = createGateway({
      map,
      scopes,
      keyFor,
      meter,
      flags,
      log,
      adminToken: env.ADMIN_TOKEN,
      breaker: options.breaker,
      degrade: coldDegrade(coldDeps),
      admit,
      enqueue: (ctx, res, admission) =>
        answerQueued(coldDeps, ctx, res, admission.decision, 0, { delayMs: admission.delayMs, reviewRequired: admission.reviewRequired }),
      skipRoute: (r) => pause.paused() && skipWhilePaused(r),
      healthExtras: async () => ({
        paused: pause.paused(),
        capped_provider: cappedProvider,
        queue: await queue.counts().catch(() => 'unreachable'),
      }),
      extend: (app, { admin }) => {
        mountColdTier(app, admin, coldDeps);
        mountVoice(app, bearerGuard(env.VOICE_TOKEN), voice, voiceWhy);
        phone?.mount(app);
      },
      upgrade: phone ? (req, socket, head) => phone.upgrade(req, socket, head) : undefined,
    });
    failover = gateway.failover;
  } else {
    failover = new Failover({ map, keyFor, meter: (e) => meter.send(e), warn: (m) => log.warn(m), breaker: options.breaker });
  }

  let worker: ColdWorker | null = null;
  if (options.worker) {
    const deps = {
      failover,
      pause,
      flags,
      notifier,
      skipWhilePaused,
      log: { info: (m: string) => log.info(m), warn: (m: string) => log.warn(m) },
    };
    worker = redis ? startBullWorker(redis, prefix, deps) : startMemoryWorker(queue as MemoryColdQueue, deps);
    log.info('worker: running in this process');
  }

  return {
    map,
    gateway,
    failover,
    queue,
    pause,
    flags,
    notifier,
    meter,
    worker,
    redis,
    cappedProvider,
    async close() {
      await phone?.close();
      await worker?.close();
      workflow?.stop();
      await callSink?.close();
      await notifier.flush();
      await queue.close();
      await meter.close();
      flags.close();
      pause.close();
      failover.shutdown();
      redis?.disconnect();
    },
  };
}

/**
 * Assembles the gateway from the environment: routing map, scopes, stores, meter sink, spend
 * watch, notifier, the request path (built once here), the HTTP surface, the voice concierge and
 * the Cold worker. Used by `npm start`, `npm run worker` and the Lisbon drill, so all three run
 * the same wiring.
 */
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { admission, budgetsSpent, replayLimit } from './admission';
import { createGateway, type Gateway } from './app';
import { bearerGuard } from './bearer';
import type { PauseFlag } from './budget';
import type { CallMeter } from './call-meter';
import type { ClientAuth } from './client-auth';
import type { ColdQueue } from './cold-queue';
import { coldFallback, mountColdTier, type ColdTierDeps } from './cold-tier';
import { SpendWatch, spendDaysFor } from './spend-cap-routing';
import { startDemoProviders, type DemoProviders } from './demo-providers';
import { readEnv, type GatewayEnv } from './env';
import { ConfigError } from './errors';
import { unmatchedKills, unmatchedKillsWarning, type FlagStore } from './flags';
import { FleetBreakers } from './fleet-breakers';
import { startClientAuth } from './key-guard';
import { spendKeyTokens, type TokensKey } from './key-policy';
import { keyResolver, missingKeys } from './keys';
import { createMeterSink, type MeterSink } from './meter-sink';
import { noticeWindowsFor, Notifier } from './notify';
import { createRequestPath, type RequestPath } from './request-path';
import { lastOf, NO_CHAT_ROUTE_WARNING, servesChat, type Route } from './route';
import { mapEnvironmentProblems } from './map-environment';
import { readRoutesMap, type MapVersion, type RoutesMapConfig } from './routes-map';
import { mountRoutesReload, RoutesReloader } from './routes-reload';
import { loadScopes, type Scopes } from './scopes';
import { describeStart } from './startup-log';
import { createStores, reportRedisState, type Stores } from './stores';
import { configureUpstream } from './upstream';
import { createVoice, loadVoice, voiceOptions, type LoadedVoice, type Voice } from './voice';
import { phoneBridgeFromEnv, phoneBridgeOff, type PhoneBridge } from './voice/phone/bridge';
import { startWorker, type ColdWorker } from './worker';
import { ResponseOwnership } from './responses/ownership';
import type { MemoryColdQueue } from './cold-queue-memory';
import type { BullColdQueue } from './cold-queue-redis';
import { within } from './within';

/** How long /health waits for the queue's counts before showing it unreachable. */
const HEALTH_QUEUE_WAIT_MS = 1000;
/** How long a start waits for the shared flags and pause: a Redis away must not keep an instance from serving. */
const START_READ_MS = 2000;

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
  /** The map at start (a reload changes the routes in force: `path.routes`). */
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
  /** Reloads the routing map (SIGHUP, POST /admin/routes/reload). */
  routes: RoutesReloader;
  /**
   * Resolves once no request is in the pipeline (each one's calls metered), or after `ms`; true when
   * none is. A stop waits for it before `close`: a request whose connection was cut meters its call after.
   */
  idle(ms: number): Promise<boolean>;
  /** The end of a stop's grace: the streams still relayed are cut, each ending with its error event; how many. */
  cutStreams(): number;
  close(): Promise<void>;
}

export interface StackOptions {
  http: boolean;
  worker: boolean;
  /** Breaker and notification timings (the Lisbon drill shortens them; documented there). */
  breaker?: { openMs?: number };
  notifyWindowMs?: number;
  /** Cold timings: a job's backoff, how long it may be deferred, how often a deferred job looks again, a running job's lock (tests, the drill). */
  cold?: { backoffMs?: number; maxDeferMs?: number; recheckMs?: number; lockMs?: number; jobTimeMs?: number };
  /** How long a reader of GET /v1/jobs/:id may take nothing before it is cut (default 30 s; tests shorten it). */
  jobStallMs?: number;
  /** A live request's cap on each provider call (default 30 s; tests shorten it). */
  attemptMs?: number;
  /** The pause flag's key, when not `pause_ai_tasks`: the drill's own, so a shared Redis's real flag is never set or cleared. */
  pauseKey?: string;
}

/** With nothing configured (no key, no endpoint, no map) and outside production: the demo providers. */
function wantsDemo(env: GatewayEnv): boolean {
  if (env.production || env.DEMO_PROVIDERS === 'off' || env.ROUTES_FILE) return false;
  const set = (name: string) => Boolean(env.raw[name]);
  const keys = ['HOT_API_KEY', 'WARM_A_API_KEY', 'WARM_B_API_KEY', ...Object.keys(env.raw).filter((k) => k.startsWith('WARM_KEY_'))];
  return !keys.some(set) && !Object.keys(ENDPOINT_DEFAULTS).some(set);
}

/** The routing map, on the demo providers when nothing is configured; missing keys warned of outside production. */
async function routingMap(
  env: GatewayEnv,
  log: Logger,
): Promise<{ map: RoutesMapConfig; file: string; version: MapVersion; demo: DemoProviders | null }> {
  const file = env.ROUTES_FILE ?? (env.production ? 'routes.prod.json' : 'routes.local.json');
  const { map, version, refs } = readRoutesMap(file, mapEnv(env));
  if (wantsDemo(env)) {
    const demo = await startDemoProviders(map);
    log.warn('no provider key or endpoint is set: answering from the built-in demo providers (local, in process; x-route-provider demo-*)');
    log.info('demo: a message containing #fail-hot makes the Hot routes fail (the Warm tier answers); #fail-all queues it (Cold tier)');
    return { map: demo.map, file, version, demo };
  }
  // In production a missing key refuses the start (checkAgainstEnv); elsewhere it is a warning.
  const missing = env.production ? [] : missingKeys(map, env.raw);
  if (missing.length) log.warn(`provider keys not set: ${missing.join(', ')}; those routes will fail until they are`);
  // Only the defaults the map took: a map of literal URLs (or its own ${NAME}s) took none.
  const defaulted = refs.filter((name) => Object.hasOwn(ENDPOINT_DEFAULTS, name) && !env.raw[name]);
  if (defaulted.length) log.info(`embedded endpoint defaults for ${defaulted.join(', ')}`);
  return { map, file, version, demo: null };
}

/**
 * The map against the environment, every problem in one start: the keys production lacks, and a
 * CAPPED_PROVIDER the map does not name (a typo left the budget pause matching nothing).
 */
function checkAgainstEnv(env: GatewayEnv, map: RoutesMapConfig, capped: string): void {
  const problems = mapEnvironmentProblems(map, { keys: env.raw, production: env.production, capped });
  if (problems.length) throw new ConfigError(problems.join('\n'));
}

/** What the map's `${NAME}` references are resolved from. */
const mapEnv = (env: GatewayEnv) => ({ ...ENDPOINT_DEFAULTS, ...env.raw });

export async function createStack(processEnv: NodeJS.ProcessEnv, log: Logger, options: StackOptions): Promise<Stack> {
  const env = readEnv(processEnv);
  configureUpstream({ connections: env.UPSTREAM_CONNECTIONS ?? null, http2: env.UPSTREAM_HTTP2 === 'on' });
  // Before any connection is opened, so a refused start leaves nothing behind.
  const voiceLoaded = loadVoice(voiceOptions(env), env.production);
  const scopes = loadScopes(env.SCOPES_FILE, env.production && Boolean(env.raw.SCOPES_FILE));
  const { map, file: routesFile, version, demo } = await routingMap(env, log);
  const cappedProvider = env.CAPPED_PROVIDER || map.hot[0].provider;
  checkAgainstEnv(env, map, cappedProvider);
  const stores = await openStores(env, map, options, log);
  const { redis, flags, pause, queue } = stores;
  const { spend, notifier, meter } = meterAndNotices(env, map, stores, options, log);
  const core: StackCore = { env, map, scopes, stores, cappedProvider, log };
  logStart(core, { file: routesFile, version }, meter, options.http);

  const { path, coldDeps, skipWhilePaused, ownership } = requestPathFor(core, spend, meter, notifier, options);
  const { fleet, reloader } = await startRoutes(core, path, { file: routesFile, version, demo });
  const { auth, voice, phone, gateway } = await startServing(core, { voiceLoaded, path, meter, coldDeps, reloader }, options);
  const worker = coldWorker(core, { path, notifier, skipWhilePaused, ownership }, options);

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
    routes: reloader,
    idle: (ms) => path.pipeline.idle(ms),
    cutStreams: () => path.pipeline.cutStreams(),
    close: () => closeStack({ worker, voice, phone, auth, notifier, queue, meter, flags, pause, path, demo, redis, fleet, reloader, log }),
  };
}

/** What every part of the stack is built from: the environment, the map at start, the scopes and the stores. */
interface StackCore {
  env: GatewayEnv;
  map: RoutesMapConfig;
  scopes: Scopes;
  stores: Stores;
  cappedProvider: string;
  log: Logger;
}

/** The stores, with the shared flags read before the first request. */
async function openStores(env: GatewayEnv, map: RoutesMapConfig, options: StackOptions, log: Logger): Promise<Stores> {
  const stores = createStores(env, map, { backoffMs: options.cold?.backoffMs }, options.pauseKey, (m) => log.warn(m));
  if (stores.redis) reportRedisState(stores.redis, log);
  const { flags, pause } = stores;
  // The shared flags (a kill-switch, say) are in force from the first request, not a second later;
  // a Redis away at start is not waited for (the poll reads them once it answers), so an instance
  // restarted during an outage still serves.
  await within(Promise.all([flags.refresh(), pause.refresh().catch(() => false)]), START_READ_MS).catch((error: Error) =>
    log.warn(`flags and budget pause not read at start (${error.message}): the map's flags, not paused, until Redis answers`),
  );
  return stores;
}

/** The spend watch, the notifier and the meter sink (every event also feeding the spend figures). */
function meterAndNotices(env: GatewayEnv, map: RoutesMapConfig, stores: Stores, options: StackOptions, log: Logger) {
  const { redis, limiter } = stores;
  const spend = new SpendWatch({
    meterUrl: env.METER_URL,
    meterToken: env.METER_TOKEN,
    dailyCap: env.DAILY_CAP_USD,
    burnCap: env.BURN_7D_CAP_USD,
    warn: (m) => log.warn(m),
    days: spendDaysFor(redis, stores.prefix ?? 'gateway', (m) => log.warn(m)),
  });
  const notifier = new Notifier(map.cold.notify, {
    windowMs: options.notifyWindowMs ?? env.NOTIFY_WINDOW_MS,
    smtpUrl: env.SMTP_URL,
    smtpFrom: env.SMTP_FROM,
    onCall: env.ON_CALL,
    log,
    windows: noticeWindowsFor(redis, stores.prefix ?? 'gateway'),
  });
  const backlog = (detail: string) => notifier.notify({ kind: 'meter_backlog', detail });
  const meter = teeMeter(createMeterSink(env, log, backlog, redis), spend, limiter);
  return { spend, notifier, meter };
}

/** The start log: what this process runs with, and the spool folder its meter took. */
function logStart(core: StackCore, loaded: { file: string; version: MapVersion }, meter: MeterSink, http: boolean): void {
  const { env, map, scopes, stores, cappedProvider, log } = core;
  const spoolDir = meter.status().spool_dir; // the folder this process took: another gateway may hold METER_SPOOL_DIR
  describeStart(log, {
    env,
    map,
    routesFile: loaded.file,
    routesVersion: loaded.version.version,
    scopes,
    stores,
    cappedProvider,
    http,
    spoolDir: typeof spoolDir === 'string' ? spoolDir : env.METER_SPOOL_DIR,
  });
}

/** The request path (built once), with the Cold tier's parts and the response ownership it uses. */
function requestPathFor(core: StackCore, spend: SpendWatch, meter: MeterSink, notifier: Notifier, options: StackOptions) {
  const { env, map, scopes, stores, cappedProvider, log } = core;
  const { flags, pause, queue, limiter } = stores;
  const skipWhilePaused = (r: Route) => r.config.provider === cappedProvider;
  // The providers of the routes in force, not of the map at start: a reload may add or drop one.
  const providers = lastOf(
    () => path.routes,
    (routes) => [...new Set(routes.map((r) => r.config.provider))],
  );
  const pauseAtPercent = env.BUDGET_PAUSE_AT_PERCENT;
  const stallMs = options.jobStallMs;
  const coldDeps: ColdTierDeps = { queue, pause, flags, notifier, cappedProvider, providers, pauseAtPercent, log, stallMs };
  // Only a client key proves a tenant: without keys nothing is checked, so nothing is recorded either.
  const ownership =
    env.GATEWAY_AUTH === 'keys'
      ? new ResponseOwnership(
          stores.owners,
          (m) => log.warn(m),
          () => path.routes,
        )
      : null;
  const path: RequestPath = createRequestPath({
    map,
    scopes,
    keyFor: keyResolver(map, env.raw),
    sendEvent: (e, waitMs) => meter.send(e, waitMs),
    flags,
    log,
    breaker: options.breaker,
    attemptMs: options.attemptMs,
    admit: admission({ limiter, limits: map.limits, spend, providers, cheaperModel: map.cheaper_model }),
    cold: coldFallback(coldDeps),
    skipRoute: (r) => pause.paused() && skipWhilePaused(r),
    onTokens: (ctx, tokens) => spendKeyTokens(limiter, ctx.clientKey, tokens),
    replay: { store: stores.replay, limit: replayLimit({ limiter, limits: map.limits }) },
    ownership,
  });
  return { path, coldDeps, skipWhilePaused, ownership };
}

/** The fleet's breakers (read before traffic) and the routing map's reloader; a killed name matching nothing is warned of. */
async function startRoutes(
  core: StackCore,
  path: RequestPath,
  loaded: { file: string; version: MapVersion; demo: DemoProviders | null },
): Promise<{ fleet: FleetBreakers | null; reloader: RoutesReloader }> {
  const { env, map, scopes, stores, cappedProvider, log } = core;
  const { redis, flags } = stores;
  // The breakers act as one with the other instances on this Redis; their state is read before traffic.
  const fleet = redis ? new FleetBreakers(redis, stores.prefix ?? 'gateway', log) : null;
  await fleet?.start(path.routes);
  // The flags at start (the map's, or those kept in Redis): a killed name that matches nothing is named.
  // A reload checks its routes the same way (routes-reload.ts).
  const killedUnmatched = (routes: readonly Route[]) =>
    unmatchedKills(flags.get().killed_models, { routes, scopes, cheaperModel: map.cheaper_model });
  const unmatched = killedUnmatched(path.routes);
  if (unmatched.length) log.warn({ unmatched_killed_models: unmatched }, unmatchedKillsWarning(unmatched));
  if (!servesChat(path.routes)) log.warn(NO_CHAT_ROUTE_WARNING);
  const reloader = new RoutesReloader({
    file: loaded.file,
    mapEnv: mapEnv(env),
    keyEnv: env.raw,
    production: env.production,
    cappedProvider,
    map,
    version: loaded.version,
    path,
    fleet,
    demo: loaded.demo !== null,
    unmatchedKills: killedUnmatched,
    log,
  });
  return { fleet, reloader };
}

/** The client keys, the voice concierge, the phone bridge and the HTTP surface (the last three only when serving HTTP). */
async function startServing(
  core: StackCore,
  p: { voiceLoaded: LoadedVoice; path: RequestPath; meter: MeterSink; coldDeps: ColdTierDeps; reloader: RoutesReloader },
  options: StackOptions,
) {
  const { env, map, scopes, stores, cappedProvider, log } = core;
  const { redis, flags, pause, queue } = stores;
  const { voiceLoaded, path, meter, coldDeps, reloader } = p;
  const auth = options.http ? await startClientAuth(env, stores.keys, log) : null;
  const voiceEvents = countedMeter(meter, path.meter);
  const voice = createVoice(voiceLoaded, { redis, prefix: stores.prefix ?? 'gateway', meter: voiceEvents, log });
  // Only a process that serves HTTP takes calls: a worker's log said the phone bridge was on, or off and why.
  const phone = options.http ? phoneBridge(env, voiceLoaded, voice, voiceEvents, log) : null;

  const health = async () => ({
    routes_map: reloader.version(),
    meter_sink: meter.status(),
    paused: pause.paused(),
    capped_provider: cappedProvider,
    // Bounded: a stalled Redis (connected, not answering) must not take the operator's view with it.
    queue: await within(queue.counts(), HEALTH_QUEUE_WAIT_MS, 'the Cold queue').catch(() => 'unreachable'),
  });
  const gateway = options.http
    ? httpGateway(env, {
        path,
        scopes,
        cheaperModel: map.cheaper_model,
        sharedObjects: new Set(map.shared_objects),
        flags,
        log,
        meter,
        auth,
        coldDeps,
        voice,
        phone,
        health,
        reloader,
      })
    : null;
  return { auth, voice, phone, gateway };
}

/** The Cold worker, when this process runs one. */
function coldWorker(
  core: StackCore,
  p: { path: RequestPath; notifier: Notifier; skipWhilePaused: (r: Route) => boolean; ownership: ResponseOwnership | null },
  options: StackOptions,
): ColdWorker | null {
  const { env, stores, log } = core;
  const { pause, flags, queue } = stores;
  const { path, notifier, skipWhilePaused } = p;
  // Also without client keys here: a job queued by a gateway with them is run as that gateway would (worker.ts).
  const ownership =
    p.ownership ??
    new ResponseOwnership(
      stores.owners,
      (m) => log.warn(m),
      () => path.routes,
    );
  const workerDeps = {
    failover: path.failover,
    pause,
    flags,
    notifier,
    skipWhilePaused,
    log,
    ownership,
    ownsResponses: env.GATEWAY_AUTH === 'keys',
    onTokens: (key: TokensKey | undefined, tokens: number) => spendKeyTokens(stores.limiter, key, tokens),
    meter: path.meter,
    // Jobs skip the providers over their token budget as live requests do (the routes in force: a reload may change them).
    budgetsSpent: core.map.limits?.provider_tokens_per_minute
      ? budgetsSpent(stores.limiter, core.map.limits, () => [...new Set(path.routes.map((r) => r.config.provider))])
      : undefined,
    ...options.cold,
  };
  const worker = options.worker ? startWorker(queue as BullColdQueue | MemoryColdQueue, workerDeps) : null;
  if (worker) log.info('worker: running in this process');
  return worker;
}

/** Stops what the stack started, the worker first (its running jobs finish) and the store last. */
async function closeStack(p: {
  worker: ColdWorker | null;
  voice: Voice;
  phone: PhoneBridge | null;
  auth: ClientAuth | null;
  notifier: Notifier;
  queue: ColdQueue;
  meter: MeterSink;
  flags: FlagStore;
  pause: PauseFlag;
  path: RequestPath;
  demo: DemoProviders | null;
  redis: Redis | null;
  fleet: FleetBreakers | null;
  reloader: RoutesReloader;
  log: Logger;
}): Promise<void> {
  await p.worker?.close();
  await p.phone?.close();
  await p.voice.close();
  await p.auth?.close();
  // Side by side: each waits up to 2 s on a Redis that stalls, and in a row they took the stop past
  // Kubernetes' 30 s (the grace, the worker's 2 s, then 2 s each). Events a disk that stopped taking
  // writes kept in memory go with the process: said, and the rest still closed (it ended in an
  // unhandled rejection's stack trace, exit 1).
  const meterClosed = p.meter
    .close()
    .catch((error: Error) => p.log.error(`meter: events kept in memory not written at stop, lost: ${error.message}`));
  await Promise.all([p.notifier.close(), p.queue.close(), meterClosed]);
  p.flags.close();
  p.pause.close();
  await p.fleet?.close();
  p.reloader.close();
  p.path.failover.shutdown();
  await p.demo?.close();
  p.redis?.disconnect();
}

/** The variables only the phone bridge reads: one set means the operator wants calls answered. */
const PHONE_VARIABLES = ['PUBLIC_URL', 'TWILIO_ACCOUNT_SID', 'TWILIO_AUTH_TOKEN'];

/** The phone bridge (Twilio ⇄ the realtime model) when the concierge is configured. */
function phoneBridge(env: GatewayEnv, loaded: LoadedVoice, voice: Voice, meter: MeterSink, log: Logger): PhoneBridge | null {
  const logs = { info: (m: string) => log.info(m), warn: (m: string) => log.warn(m), error: (m: string) => log.error(m) };
  if (!voice.service || !voice.workflow || !loaded.config) {
    // Set up for phone calls but the concierge is off: said, and Twilio answered 503, not a bare 404.
    const meant = PHONE_VARIABLES.some((name) => env.raw[name]);
    if (!meant) return null;
    // Anyone may call /twilio/*, unsigned: an unusable file is named in the log only, not its path.
    const answered = loaded.options.token
      ? 'the concierge file is not a valid configuration (the voice concierge is off; the start log names the file)'
      : `${loaded.why} (the voice concierge is off)`;
    return phoneBridgeOff([`${loaded.why} (the voice concierge is off)`], logs, [answered]);
  }
  return phoneBridgeFromEnv(env.raw, { config: loaded.config, voice: voice.service, workflow: voice.workflow, meter, log: logs });
}

/** Every meter event also feeds the spend figures (spend-cap routing) and the provider token budgets. */
function teeMeter(sink: MeterSink, spend: SpendWatch, limiter: Stores['limiter']): MeterSink {
  return {
    kind: sink.kind,
    send(event, waitMs) {
      spend.record(event.cost_usd);
      limiter.spendTokens(event.provider, event.input_tokens + event.output_tokens);
      return sink.send(event, waitMs);
    },
    flush: () => sink.flush(),
    close: () => Promise.all([sink.close(), spend.close()]).then(() => undefined), // spend not yet counted in Redis is sent, beside the sink's last delivery
    status: () => sink.status(),
  };
}

/** The sink for events written outside the call meter (voice): its unpriced figures count them too. */
function countedMeter(sink: MeterSink, calls: CallMeter): MeterSink {
  return {
    kind: sink.kind,
    send(event, waitMs) {
      calls.countIfUnpriced(event);
      return sink.send(event, waitMs);
    },
    flush: () => sink.flush(),
    close: () => sink.close(),
    status: () => sink.status(),
  };
}

interface HttpParts {
  path: RequestPath;
  scopes: Scopes;
  cheaperModel: string | undefined;
  sharedObjects: ReadonlySet<string>;
  flags: FlagStore;
  log: Logger;
  meter: MeterSink;
  auth: ClientAuth | null;
  coldDeps: ColdTierDeps;
  voice: Voice;
  phone: PhoneBridge | null;
  health: () => Promise<Record<string, unknown>>;
  reloader: RoutesReloader;
}

/** The HTTP surface: the request path's endpoints, the operator endpoints, the Cold tier's and the voice endpoints. */
function httpGateway(env: GatewayEnv, p: HttpParts): Gateway {
  return createGateway({
    path: p.path,
    scopes: p.scopes,
    cheaperModel: p.cheaperModel,
    sharedObjects: p.sharedObjects,
    flags: p.flags,
    log: p.log,
    meterKind: p.meter.kind,
    adminToken: env.ADMIN_TOKEN,
    auth: p.auth,
    healthExtras: p.health,
    extend: (app, { admin }) => {
      mountColdTier(app, admin, p.coldDeps);
      mountRoutesReload(app, admin, p.reloader);
      p.voice.mount(app, bearerGuard(env.VOICE_TOKEN));
      p.phone?.mount(app);
    },
    upgrade: p.phone ? (req, socket, head) => p.phone!.upgrade(req, socket, head) : undefined,
  });
}

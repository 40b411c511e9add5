/**
 * The voice concierge's wiring, in two steps:
 *   loadVoice    reads and lints concierge.json when VOICE_TOKEN is set; in production a file that
 *                does not lint clean refuses the start. Called before the gateway opens any
 *                connection, so a refused start leaves nothing behind.
 *   createVoice  the stores (Redis when the gateway has one, else in process), the call-record
 *                sink, the workflow and the call service; `mount` adds the endpoints (503 with the
 *                reason when the configuration is unusable), `close` stops them.
 */
import type express from 'express';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { callRecordProblem, callToCsvLine, CALLS_CSV_HEADER, type CallRecord } from '../../../schema/call-record';
import type { GatewayEnv } from '../env';
import { ConfigError } from '../errors';
import { CsvSink, type MeterSink } from '../meter-sink';
import { WebAppSink } from '../meter-web-app';
import { MemoryVoiceStore, RedisVoiceStore } from './call-store';
import { callReducer, VoiceService } from './calls';
import { lintFile, loadConcierge, type Concierge } from './config';
import { mountVoice } from './endpoints';
import { DEFAULT_RATES_FILE, readRates } from './rates';
import { unpricedTextWarning } from './spend-guard';
import { shadowedTriggers } from './intents';
import { Workflow, type WorkflowAnswer } from './workflow';
import { MemoryWorkflowStore, RedisWorkflowStore } from './workflow-store';

/** What the voice concierge reads from the environment. */
export interface VoiceOptions {
  /** VOICE_TOKEN: unset, nothing is loaded and the endpoints answer 401 to everyone. */
  token: string | undefined;
  conciergeFile: string;
  /** Call records go where meter events go: the meter web app (spooled), else a local CSV. */
  meterUrl: string | undefined;
  meterToken: string | undefined;
  callsSpoolDir: string;
  callsCsvFile: string;
  ratesFile: string;
  /** The provider named in the meter events of call audio. */
  voiceProvider: string;
}

export function voiceOptions(env: GatewayEnv): VoiceOptions {
  return {
    token: env.VOICE_TOKEN,
    conciergeFile: env.CONCIERGE_FILE,
    meterUrl: env.METER_URL,
    meterToken: env.METER_TOKEN,
    callsSpoolDir: `${env.METER_SPOOL_DIR}-calls`,
    callsCsvFile: env.CALLS_CSV_FILE,
    ratesFile: env.TELEPHONY_RATES_FILE ?? DEFAULT_RATES_FILE,
    voiceProvider: env.VOICE_PROVIDER,
  };
}

/** The configuration as read at start: usable, or null with the reason the endpoints give. */
export interface LoadedVoice {
  options: VoiceOptions;
  config: Concierge | null;
  why: string;
  /** Lint problems of a usable file (allowed outside production). */
  problems: number;
}

export function loadVoice(options: VoiceOptions, production: boolean): LoadedVoice {
  const file = options.conciergeFile;
  if (!options.token) return { options, config: null, why: 'VOICE_TOKEN is not set', problems: 0 };
  const problems = lintFile(file);
  if (problems.length && production) {
    throw new ConfigError(
      `${file} does not lint clean (npm run concierge:lint):\n${problems.map((p) => `${file}: ${p.path}: ${p.message}`).join('\n')}`,
    );
  }
  // A file that is not JSON at all is one problem at `$`: nothing to load.
  const config = problems.length && problems[0].path === '$' ? null : loadConcierge(file).config;
  const why = config ? '' : `${file} is not a valid configuration (${problems.length} problem(s); run npm run concierge:lint)`;
  return { options, config, why, problems: problems.length };
}

/** What the voice concierge shares with the rest of the gateway. */
export interface VoiceShared {
  redis: Redis | null;
  prefix: string;
  /** The gateway's meter sink: each call's audio and telephony cost go there as events. */
  meter: MeterSink;
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
}

export interface Voice {
  /** Null when the concierge is not configured (no VOICE_TOKEN, or an unusable file). */
  readonly service: VoiceService | null;
  readonly workflow: Workflow | null;
  /** Mounts /v1/voice/* and /v1/workflow/* behind `guard` (the VOICE_TOKEN bearer check). */
  mount(app: express.Express, guard: express.RequestHandler): void;
  close(): Promise<void>;
}

export function createVoice(loaded: LoadedVoice, shared: VoiceShared): Voice {
  const { options, config } = loaded;
  const { redis, prefix, log } = shared;
  if (!config) {
    if (options.token) log.warn(`voice endpoints answer 503: ${loaded.why}`);
    return {
      service: null,
      workflow: null,
      mount: (app, guard) => mountVoice(app, guard, null, loaded.why),
      close: async () => undefined,
    };
  }
  const say = { warn: (m: string) => log.warn(m), error: (m: string) => log.error(m) };
  const calls: MeterSink<CallRecord> = options.meterUrl
    ? new WebAppSink<CallRecord>(
        { url: options.meterUrl, token: options.meterToken, key: 'calls', spoolDir: options.callsSpoolDir, check: callRecordProblem, log },
        (r) => r,
      )
    : new CsvSink<CallRecord>(options.callsCsvFile, CALLS_CSV_HEADER, callToCsvLine, (m) => log.error(m));
  const workflow = new Workflow({
    config,
    store: redis ? new RedisWorkflowStore<WorkflowAnswer>(redis, prefix) : new MemoryWorkflowStore<WorkflowAnswer>(),
    log: say,
  });
  workflow.startDeadLetterRetry();
  const service = new VoiceService({
    config,
    store: redis ? new RedisVoiceStore(redis, prefix, callReducer(config)) : new MemoryVoiceStore(callReducer(config)),
    log: say,
    workflow,
    afterCall: {
      calls,
      events: shared.meter,
      rates: () => readRates(options.ratesFile),
      voiceProvider: options.voiceProvider,
    },
  });
  if (loaded.problems)
    log.warn(`${options.conciergeFile}: ${loaded.problems} lint problem(s); fine for a trial, refused with NODE_ENV=production`);
  const unpricedText = unpricedTextWarning(config.spend_guard);
  if (unpricedText) log.warn(`${options.conciergeFile}: ${unpricedText}`);
  for (const shadowed of shadowedTriggers(config.intents)) log.warn(`${options.conciergeFile}: ${shadowed}`);
  log.info(`voice concierge: ${options.conciergeFile}`);
  return {
    service,
    workflow,
    mount: (app, guard) => mountVoice(app, guard, service, ''),
    async close() {
      await workflow.stop();
      await calls.close();
    },
  };
}

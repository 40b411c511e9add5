/**
 * Client key tests: whole gateway stacks (GATEWAY_AUTH=keys) on the real Redis (db 9, a prefix of
 * their own, removed afterwards) in front of fake providers, keys made with the CLI's own code, and
 * the official `openai` client.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { keysCli } from '../../gateway/src/keys-cli';
import { FakeProvider } from './fake-provider';
import { captureLogger, listenStack } from './harness';
import { TEST_REDIS_URL } from '../redis-db';

export const REDIS_URL = TEST_REDIS_URL;

export interface KeysWorld {
  redis: Redis;
  prefix: string;
  hot: FakeProvider;
  warm: FakeProvider;
  env: NodeJS.ProcessEnv;
  dir: string;
  /** A gateway stack on loopback with this world's environment (plus `extra`); stopped by `end`. */
  up(extra?: NodeJS.ProcessEnv): Promise<Awaited<ReturnType<typeof listenStack>> & { logs: string[] }>;
  /** `npm run keys -- create <tenant> …` in process: the key (the output's last line) and its id. */
  makeKey(tenant: string, ...options: string[]): Promise<{ key: string; id: string; output: string[] }>;
  end(): Promise<void>;
}

export async function keysWorld(name: string): Promise<KeysWorld> {
  const redis = new Redis(REDIS_URL);
  const prefix = `test-${name}-${process.pid}-${Date.now()}`;
  const [hot, warm] = await Promise.all([new FakeProvider().start(), new FakeProvider().start()]);
  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  const routes = join(dir, 'routes.json');
  writeFileSync(
    routes,
    JSON.stringify({
      hot: [{ provider: 'openai', model: 'gpt-4o-mini', baseUrl: hot.url }],
      warm: [{ provider: 'anthropic', model: 'claude-3-5-haiku-latest', baseUrl: warm.url }],
      cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    }),
  );
  const env: NodeJS.ProcessEnv = {
    ROUTES_FILE: routes,
    QUEUE_STORE_URL: REDIS_URL,
    REDIS_PREFIX: prefix,
    GATEWAY_AUTH: 'keys',
    METER_CSV_FILE: join(dir, 'events.csv'),
    SCOPES_FILE: join(dir, 'none.yaml'),
    HOT_API_KEY: 'provider-hot-key',
    WARM_A_API_KEY: 'provider-warm-key',
  };
  const stops: Array<() => Promise<void>> = [];
  return {
    redis,
    prefix,
    hot,
    warm,
    env,
    dir,
    async up(extra = {}) {
      const logs: string[] = [];
      const h = await listenStack({ ...env, ...extra }, { http: true, worker: false }, captureLogger(logs));
      stops.push(h.stop);
      return { ...h, logs };
    },
    async makeKey(tenant, ...options) {
      const output: string[] = [];
      const code = await keysCli(
        ['create', tenant, ...options],
        env,
        (l) => output.push(l),
        (l) => output.push(l),
      );
      if (code !== 0) throw new Error(`keys create exited ${code}: ${output.join('\n')}`);
      return { key: output.at(-1)!, id: /(key_[0-9a-f]{8})/.exec(output[0])![1], output };
    },
    async end() {
      for (const stop of stops.splice(0)) await stop();
      await Promise.all([hot.stop(), warm.stop()]);
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
    },
  };
}

export const client = (url: string, apiKey: string) => new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });

export const ask = (url: string, apiKey: string, headers: Record<string, string> = {}, model = 'gpt-4o-mini') =>
  client(url, apiKey)
    .chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }, { headers })
    .withResponse();

/** What the SDK threw, as a user sees it: status, code, the error's message and the Retry-After header. */
export async function refusal(p: Promise<unknown>): Promise<{ status: number; code: string; message: string; retryAfter: string | null }> {
  try {
    await p;
  } catch (error) {
    if (error instanceof OpenAI.APIError)
      return {
        status: error.status!,
        code: String(error.code),
        message: (error.error as { message?: string } | undefined)?.message ?? error.message, // a timeout has no body
        retryAfter: error.headers?.get('retry-after') ?? null,
      };
    throw error;
  }
  throw new Error('the request was not refused');
}

/** Waits for a condition (polled every 25 ms), never a fixed sleep. */
export async function until<T>(check: () => Promise<T | false | null | undefined>, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`condition not met in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

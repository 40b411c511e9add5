/** Starts a gateway on loopback against fake providers, with its meter events in a temp CSV. */
import { mkdtempSync, readFileSync, existsSync, writeFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { createGateway, type Gateway } from '../../gateway/src/app';
import { LocalFlags, type FlagStore } from '../../gateway/src/flags';
import { CsvSink, type MeterSink } from '../../gateway/src/meter-sink';
import { createRequestPath, type RequestPathOptions } from '../../gateway/src/request-path';
import type { RoutesMapConfig } from '../../gateway/src/routes-map';
import { createStack, type StackOptions } from '../../gateway/src/stack';

export interface TestGateway {
  gateway: Gateway;
  server: Server;
  url: string;
  meter: MeterSink;
  csv: string;
  logs: string[];
  clock: { ms: number };
  close(): Promise<void>;
  events(): Array<Record<string, string>>;
}

export const ADMIN = 'admin-test-token';

export function mapOf(hot: string[], warm: string[] = [], extra: Partial<RoutesMapConfig> = {}): RoutesMapConfig {
  return {
    hot: hot.map((baseUrl) => ({ provider: 'openai', model: 'gpt-4o-mini', baseUrl })),
    warm: warm.map((baseUrl, i) => ({
      provider: i === 0 ? 'anthropic' : 'mistral',
      model: i === 0 ? 'claude-3-5-haiku-latest' : 'mistral-small-latest',
      baseUrl,
    })),
    cold: { mode: 'graceful_degrade', queue: 'ai-tasks', notify: [] },
    flags: { enable_warm_fallback: true, enable_cold_queue: true, killed_models: [] },
    ...extra,
  };
}

/** A routing map file of one Hot route (openai, gpt-4o-mini) at `baseUrl`, no Warm, and the Cold tier. */
export function writeOneRouteMap(file: string, baseUrl: string): void {
  const { hot, warm, cold } = mapOf([baseUrl]);
  writeFileSync(file, JSON.stringify({ hot, warm, cold }));
}

export function captureLogger(logs: string[]) {
  return pino(
    { level: 'debug', base: undefined },
    new Writable({
      write(chunk, _enc, cb) {
        logs.push(String(chunk));
        cb();
      },
    }),
  );
}

export type TestGatewayOptions = Partial<Omit<RequestPathOptions, 'sendEvent'>> & { flags?: FlagStore; meter?: MeterSink };

export async function startGateway(map: RoutesMapConfig, options: TestGatewayOptions = {}): Promise<TestGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'gw-test-'));
  const csv = join(dir, 'events.csv');
  const meter = options.meter ?? new CsvSink(csv);
  const logs: string[] = [];
  const clock = { ms: Date.now() };
  const useClock = options.now === undefined && options.breaker !== undefined;
  const log = captureLogger(logs);
  const flags = options.flags ?? new LocalFlags(map.flags);
  const path = createRequestPath({
    scopes: {},
    keyFor: (tier, provider) => `key-${tier}-${provider}`,
    log,
    ...options,
    map,
    flags,
    sendEvent: (e) => meter.send(e),
    ...(useClock ? { now: () => clock.ms } : {}),
  });
  const gateway = createGateway({ path, scopes: options.scopes ?? {}, flags, log, meterKind: meter.kind, adminToken: ADMIN });
  const server = await gateway.listen(0, '127.0.0.1');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    gateway,
    server,
    url,
    meter,
    csv,
    logs,
    clock,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await meter.close();
      gateway.path.failover.shutdown();
    },
    events() {
      if (!existsSync(csv)) return [];
      const [header, ...lines] = readFileSync(csv, 'utf8').trim().split('\n');
      const cols = header.split(',');
      return lines.map((l) => Object.fromEntries(l.split(',').map((v, i) => [cols[i], v])));
    },
  };
}

export async function chat(
  url: string,
  body: unknown = { model: 'any', messages: [{ role: 'user', content: 'hi' }] },
  headers: Record<string, string> = {},
) {
  const started = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: () => JSON.parse(text), ms: performance.now() - started };
}

/** The whole gateway stack (`createStack`) listening on a loopback port, with one stop for all. */
export async function listenStack(
  env: NodeJS.ProcessEnv,
  options: StackOptions = { http: true, worker: false },
  logger = captureLogger([]),
) {
  const stack = await createStack(env, logger, options);
  const server = await stack.gateway!.listen(0, '127.0.0.1');
  return {
    stack,
    server,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await stack.close();
    },
  };
}

/** A job as the Cold queue takes it: a one-message chat request of customer acme, under `idempotencyKey`. */
export const testJob = (idempotencyKey: string, content = 'q') => ({
  body: { model: 'x', messages: [{ role: 'user', content }] },
  idempotencyKey,
  userId: '',
  jobId: '',
  customerId: 'acme',
  jobType: '',
  reason: 'test',
  reviewRequired: false,
  enqueuedAt: new Date().toISOString(),
});

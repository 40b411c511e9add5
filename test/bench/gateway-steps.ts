// Part of npm run bench:gateway: the gateway's own steps on the chat hot path, each alone in a loop
// (no I/O, the bench's request and answer), in CPU µs per request: what the steps every request needs cost
// of the gateway's own CPU per request that the throughput table prints (gateway minus reference).
import { Breaker } from '../../gateway/src/breaker';
import { CallMeter } from '../../gateway/src/call-meter';
import { parseChatRequest } from '../../gateway/src/chat-request';
import { GatewayMetrics } from '../../gateway/src/metrics';
import { openAiCompatible } from '../../gateway/src/providers/openai-compatible';
import { routeHeaders } from '../../gateway/src/route-headers';
import type { RouteConfig } from '../../gateway/src/routes-map';
import { eventToCsvLine } from '../../schema/event-record';
import STUB_ANSWER from './stub-answer.json';

const RAW = JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'ping' }] });
/** The answer of the bench's stub provider. */
const ANSWER = Buffer.from(JSON.stringify(STUB_ANSWER));
const HEADERS = {
  host: '127.0.0.1:8080',
  'content-type': 'application/json',
  'content-length': String(RAW.length),
  connection: 'keep-alive',
};
const ROUTE = { provider: 'openai', model: 'gpt-4o-mini', baseUrl: 'http://127.0.0.1:1/v1', region: 'global' } as RouteConfig;

/** CPU µs per call of `step`, after a warm-up. */
async function cpuPerCall(step: () => unknown, n = 100_000): Promise<number> {
  for (let i = 0; i < n / 5; i++) await step();
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) await step();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / n;
}

export async function hotPathSteps(): Promise<string[]> {
  let line = '';
  const meter = new CallMeter(
    async (e) => void (line = eventToCsvLine(e)),
    () => {},
  );
  const metrics = new GatewayMetrics(() => []);
  const breaker = new Breaker('bench');
  const parsed = parseChatRequest(JSON.parse(RAW), HEADERS, {});
  if (!parsed.ok) throw new Error(parsed.message);
  const { context } = parsed;
  const answered = async () => ({ kind: 'ok' });
  const steps: Array<[string, () => unknown]> = [
    ['the body read as JSON', () => JSON.parse(RAW)],
    ['the body and headers checked, the idempotency key derived', () => parseChatRequest(JSON.parse(RAW), HEADERS, {})],
    ["the provider's request made", () => openAiCompatible.request(ROUTE, 'chat', context.body, 'key', context.idempotencyKey)],
    ["the answer's usage read", () => openAiCompatible.usage(ANSWER, 'chat')],
    [
      'the meter event and its CSV line',
      () =>
        meter.record({
          ctx: context,
          provider: 'openai',
          model: ROUTE.model,
          latencyMs: 1,
          usage: { input_tokens: 10, output_tokens: 1 },
          errorCode: '',
        }),
    ],
    ['the metrics (call, latency, request)', () => (metrics.countCall('hot-1', 'ok', 0.001), metrics.countRequest('hot', 200))],
    ['the route headers', () => routeHeaders('hot', 'openai', ROUTE.model, 1)],
    [
      'the breaker around the call (opossum)',
      () =>
        breaker.run(
          breaker.tryAcquire()!,
          answered,
          () => false,
          () => false,
        ),
    ],
  ];
  const lines: string[] = [];
  let total = 0;
  for (const [name, step] of steps) {
    const us = await cpuPerCall(step);
    total += us;
    lines.push(`${us.toFixed(2).padStart(6)} µs  ${name}`);
  }
  breaker.shutdown();
  void line;
  lines.push(`${total.toFixed(2).padStart(6)} µs  in all`);
  return lines;
}

/**
 * Built-in demo providers for the first minute: with no provider key and no endpoint configured
 * (and never in production), `npm start` points its routes at these local, in-process
 * OpenAI-compatible servers instead of calling real providers with empty keys. Each route gets its
 * own path, and its provider is named `demo-<kind>` so `x-route-provider` says where the answer
 * came from. A message containing `#fail-hot` makes the Hot routes fail (watch the Warm tier
 * answer); `#fail-all` makes every route fail (watch the Cold tier queue it).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RoutesMapConfig } from './routes-map';

interface DemoRequest {
  stream?: boolean;
  messages?: Array<{ role?: string; content?: unknown }>;
  /** An embeddings request's text(s). */
  input?: unknown;
}

/** Dimensions of a demo vector (text-embedding-3-small's are 1,536; a demo needs no more than a few). */
const DEMO_DIMENSIONS = 8;

/** A demo embedding: the same text always gives the same unit vector, as a real model's does. */
function demoVector(text: string): number[] {
  const v = Array.from({ length: DEMO_DIMENSIONS }, (_, i) =>
    Math.sin(i + 1 + [...text].reduce((h, c) => (h * 31 + c.codePointAt(0)!) % 9973, 7)),
  );
  const norm = Math.hypot(...v);
  return v.map((x) => x / norm);
}

/** The inputs of an embeddings request: a lone array of token ids is one input, as OpenAI reads it. */
const inputsOf = (input: unknown): unknown[] => (Array.isArray(input) && typeof input[0] !== 'number' ? input : [input]);

function embed(res: ServerResponse, name: string, body: DemoRequest): void {
  const texts = inputsOf(body.input).map((t) => (typeof t === 'string' ? t : JSON.stringify(t ?? '')));
  const tokens = texts.reduce((n, t) => n + Math.ceil(t.length / 4), 0);
  const data = texts.map((t, index) => ({ object: 'embedding', index, embedding: demoVector(t) }));
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ object: 'list', data, model: name, usage: { prompt_tokens: tokens, total_tokens: tokens } }));
}

/** What a demo request says, for `#fail-hot` and `#fail-all`: the last user message, or an embeddings input. */
function saidIn(body: DemoRequest): string {
  return body.messages ? lastUserText(body) : JSON.stringify(body.input ?? '');
}

function lastUserText(body: DemoRequest): string {
  const last = [...(body.messages ?? [])].reverse().find((m) => m.role === 'user');
  return typeof last?.content === 'string' ? last.content : '';
}

function answer(res: ServerResponse, name: string, body: DemoRequest): void {
  const text = `Demo answer from ${name}: you said "${lastUserText(body).slice(0, 200)}". Set provider keys to use real models.`;
  const usage = { prompt_tokens: 12, completion_tokens: 20, total_tokens: 32 };
  const base = { id: `demo-${Date.now()}`, created: Math.floor(Date.now() / 1000), model: name };
  if (!body.stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        ...base,
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
        usage,
      }),
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const chunk = (delta: object, finish: string | null) => ({
    ...base,
    object: 'chat.completion.chunk',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  for (const word of text.split(/(?<= )/)) res.write(`data: ${JSON.stringify(chunk({ content: word }, null))}\n\n`);
  res.write(`data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`);
  res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [], usage })}\n\n`);
  res.end('data: [DONE]\n\n');
}

function handle(req: IncomingMessage, res: ServerResponse, tierOf: Map<string, 'hot' | 'warm'>): void {
  let raw = '';
  req.on('data', (d: Buffer) => (raw += d));
  req.on('end', () => {
    const name = /^\/([^/]+)\//.exec(req.url ?? '')?.[1] ?? '';
    const tier = tierOf.get(name);
    let body: DemoRequest = {};
    try {
      body = JSON.parse(raw) as DemoRequest;
    } catch {
      /* answered below as any other request */
    }
    const said = saidIn(body);
    if (!tier || said.includes('#fail-all') || (tier === 'hot' && said.includes('#fail-hot'))) {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: `demo ${name || 'provider'} is failing on purpose`, type: 'server_error' } }));
      return;
    }
    if (req.url?.endsWith('/embeddings')) embed(res, name, body);
    else answer(res, name, body);
  });
}

export interface DemoProviders {
  /** The map with every route pointed at a demo provider. */
  map: RoutesMapConfig;
  close(): Promise<void>;
}

export async function startDemoProviders(map: RoutesMapConfig): Promise<DemoProviders> {
  const tierOf = new Map<string, 'hot' | 'warm'>();
  const server = createServer((req, res) => handle(req, res, tierOf));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const point = (tier: 'hot' | 'warm') => (r: RoutesMapConfig['hot'][number], i: number) => {
    const name = `${tier}-${i + 1}-demo-${r.provider}`;
    tierOf.set(name, tier);
    return { ...r, provider: `demo-${r.provider}`, baseUrl: `${origin}/${name}/v1` };
  };
  return {
    map: { ...map, hot: map.hot.map(point('hot')), warm: map.warm.map(point('warm')) },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

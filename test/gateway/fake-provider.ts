/**
 * A provider as a real HTTP server on loopback, OpenAI-compatible, whose behaviour a test sets per
 * request: answer, stream, fail with a status (and Retry-After), hang, or cut a stream after N
 * chunks. It records every request (headers and body) it receives.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Behaviour =
  | {
      kind: 'ok';
      content?: string;
      usage?: { prompt_tokens: number; completion_tokens: number } | null;
      delayMs?: number;
      /** Answers with this function call instead of text. */
      toolCall?: { name: string; arguments: string };
    }
  | { kind: 'status'; status: number; retryAfter?: string; body?: unknown }
  | { kind: 'hang' }
  /** The connection is dropped as soon as the request arrives (a blocked or unreachable host). */
  | { kind: 'drop' }
  /**
   * An event stream written as these exact pieces, a pause after each (so they arrive apart); `reset`: the connection then dropped, not ended.
   * `repeat`: then `piece` written `times` times, or without end (until the caller hangs up), as fast as it is read.
   * `type`: another content-type (`application/json`: a whole answer); `headers`: more response headers; `status`: other than 200.
   * `hold`: after the pieces, nothing more until the caller hangs up (a model still generating).
   */
  | {
      kind: 'raw-stream';
      pieces: Buffer[];
      gapMs?: number;
      reset?: boolean;
      repeat?: { piece: Buffer; times?: number };
      type?: string;
      headers?: Record<string, string>;
      status?: number;
      hold?: boolean;
    }
  | {
      kind: 'stream';
      chunks?: number;
      cutAfter?: number;
      delayMs?: number;
      noUsage?: boolean;
      /** The line ending between fields and events (the SSE format allows LF, CRLF and CR). */
      eol?: '\n' | '\r\n' | '\r';
      /** Each event's JSON pretty-printed over several `data:` lines. */
      multiLine?: boolean;
      /** The text of each chunk instead of `part<i>`. */
      contents?: string[];
      /** Pads each chunk's text to about this many bytes (a fast, heavy stream). */
      chunkBytes?: number;
    };

export interface Received {
  /** The provider path called: `/v1/chat/completions`, `/v1/responses`, `/v1/embeddings`. */
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, any>;
}

export class FakeProvider {
  readonly received: Received[] = [];
  /** Requests whose caller hung up before the answer was complete. */
  cancelled = 0;
  /** Times a stream had to wait because its reader (the gateway) stopped reading. */
  stalls = 0;
  private server!: Server;
  private queue: Behaviour[] = [];
  private readonly matched: Array<{
    matches: (body: Record<string, any>, path: string) => boolean;
    behaviour: Behaviour | ((body: Record<string, any>, path: string) => Behaviour);
  }> = [];
  fallback: Behaviour = { kind: 'ok' };
  private sockets = new Set<import('node:net').Socket>();
  url = '';

  /** The next requests get these behaviours, in order; then `fallback`. */
  next(...behaviours: Behaviour[]): this {
    this.queue.push(...behaviours);
    return this;
  }
  always(behaviour: Behaviour): this {
    this.queue = [];
    this.fallback = behaviour;
    return this;
  }
  /** Requests whose body `matches` get `behaviour`, whatever `next` and `always` say (a request that always fails). */
  when(
    matches: (body: Record<string, any>, path: string) => boolean,
    behaviour: Behaviour | ((body: Record<string, any>, path: string) => Behaviour),
  ): this {
    this.matched.push({ matches, behaviour });
    return this;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Writes `piece` `times` times as fast as the reader takes it; false if the reader hung up first. */
  private async repeat(res: ServerResponse, piece: Buffer, times: number): Promise<boolean> {
    for (let i = 0; i < times; i++) {
      if (res.destroyed) return false;
      if (!res.write(piece)) {
        this.stalls++;
        await new Promise<void>((r) => {
          const go = () => (res.off('drain', go), res.off('close', go), r());
          res.on('drain', go).on('close', go);
        });
      }
    }
    return !res.destroyed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    res.on('close', () => {
      if (!res.writableFinished) this.cancelled++;
    });
    let text = '';
    for await (const chunk of req) text += chunk;
    const body = text ? JSON.parse(text) : {};
    const path = (req.url ?? '').replace(/\?.*/, '');
    this.received.push({ path, headers: req.headers, body });
    res.setHeader('x-request-id', `req_${this.received.length}`); // as OpenAI names each answer
    const match = this.matched.find((m) => m.matches(body, path))?.behaviour;
    const b = (typeof match === 'function' ? match(body, path) : match) ?? this.queue.shift() ?? this.fallback;
    const model = body.model ?? 'unknown';
    if (b.kind === 'ok' || b.kind === 'stream') {
      if (path.endsWith('/embeddings')) return answerEmbeddings(res, body);
      if (path.endsWith('/responses')) return answerResponses(res, body, body.stream === true, this.received.length);
    }
    switch (b.kind) {
      case 'hang':
        return; // never answers; the socket stays open until the client gives up
      case 'drop':
        req.socket.destroy();
        return;
      case 'raw-stream':
        res.writeHead(b.status ?? 200, { 'content-type': b.type ?? 'text/event-stream', ...b.headers });
        for (const piece of b.pieces) {
          res.write(piece);
          await new Promise((r) => setTimeout(r, b.gapMs ?? 5));
        }
        if (b.repeat && !(await this.repeat(res, b.repeat.piece, b.repeat.times ?? Infinity))) return;
        if (b.hold) {
          if (!res.destroyed) await new Promise((r) => res.once('close', r));
          return;
        }
        if (b.reset) res.socket?.destroy();
        else res.end();
        return;
      case 'status':
        res.writeHead(b.status, { 'content-type': 'application/json', ...(b.retryAfter ? { 'retry-after': b.retryAfter } : {}) });
        res.end(JSON.stringify(b.body ?? { error: { message: `fake ${b.status}`, type: 'fake', code: null, param: null } }));
        return;
      case 'ok': {
        if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs));
        const usage = b.usage === undefined ? { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 } : b.usage;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'chatcmpl-fake',
            object: 'chat.completion',
            created: 1,
            model,
            choices: [
              b.toolCall
                ? {
                    index: 0,
                    message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: b.toolCall }] },
                    finish_reason: 'tool_calls',
                  }
                : { index: 0, message: { role: 'assistant', content: b.content ?? `hello from ${model}` }, finish_reason: 'stop' },
            ],
            ...(usage ? { usage } : {}),
            ...tierOf(body),
          }),
        );
        return;
      }
      case 'stream': {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const n = b.contents?.length ?? b.chunks ?? 3;
        const eol = b.eol ?? '\n';
        const event = (value: unknown) => {
          const json = b.multiLine ? JSON.stringify(value, null, 1) : JSON.stringify(value);
          return `${json
            .split('\n')
            .map((line) => `data: ${line}`)
            .join(eol)}${eol}${eol}`;
        };
        const chunk = (delta: object, finish: string | null = null) =>
          event({
            id: 'chatcmpl-fake',
            object: 'chat.completion.chunk',
            created: 1,
            model,
            choices: [{ index: 0, delta, finish_reason: finish }],
            ...tierOf(body),
          });
        const pad = b.chunkBytes ? 'x'.repeat(b.chunkBytes) : '';
        const text = (i: number) => b.contents?.[i] ?? (i === 0 ? `part0${pad}` : ` part${i}${pad}`);
        for (let i = 0; i < n; i++) {
          if (b.cutAfter !== undefined && i === b.cutAfter) {
            res.socket?.destroy(); // the provider dies mid-stream
            return;
          }
          const written = res.write(
            chunk(i === 0 ? { role: 'assistant', content: text(0) } : { content: text(i) }, i === n - 1 ? 'stop' : null),
          );
          if (!written) {
            this.stalls++;
            await new Promise<void>((r) => {
              const go = () => (res.off('drain', go), res.off('close', go), r());
              res.on('drain', go).on('close', go);
            });
            if (res.destroyed) return;
          }
          if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs));
        }
        if (!b.noUsage && body.stream_options?.include_usage) {
          const usage = { prompt_tokens: 20, completion_tokens: n, total_tokens: 20 + n };
          res.write(
            event({ id: 'chatcmpl-fake', object: 'chat.completion.chunk', created: 1, model, choices: [], usage, ...tierOf(body) }),
          );
        }
        res.end(`data: [DONE]${eol}${eol}`);
        return;
      }
    }
  }
}

/** A loopback port with nothing listening: connections are refused. */
export async function refusedUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return `http://127.0.0.1:${port}/v1`;
}

/** The first tool call id of a chat request that Mistral refuses (not 9 letters and digits), if any. */
function idMistralRefuses(body: Record<string, any>): string | undefined {
  const ids = (body.messages ?? []).flatMap((m: any) => [
    ...(m.role === 'tool' ? [m.tool_call_id] : []),
    ...(m.role === 'assistant' ? (m.tool_calls ?? []).map((c: any) => c.id) : []),
  ]);
  return ids.find((id: unknown) => typeof id !== 'string' || !/^[a-zA-Z0-9]{9}$/.test(id));
}

/** The fields of Mistral's chat request, as its API documents them: it refuses any other (a 422). */
const MISTRAL_BODY = [
  'model',
  'messages',
  'temperature',
  'top_p',
  'max_tokens',
  'stream',
  'stop',
  'random_seed',
  'metadata',
  'response_format',
  'tools',
  'tool_choice',
  'presence_penalty',
  'frequency_penalty',
  'n',
  'prediction',
  'parallel_tool_calls',
  'reasoning_effort',
  'prompt_mode',
  'guardrails',
  'prompt_cache_key',
  'safe_prompt',
];
/** The fields of each message Mistral takes, by role (it has no other role). */
const MISTRAL_MESSAGE: Record<string, readonly string[]> = {
  system: ['role', 'content'],
  user: ['role', 'content'],
  assistant: ['role', 'content', 'tool_calls', 'prefix'],
  tool: ['role', 'content', 'tool_call_id', 'name'],
};

/** The fields of Mistral's embeddings request. */
const MISTRAL_EMBEDDINGS = ['model', 'input', 'metadata', 'output_dimension', 'output_dtype', 'encoding_format'];

/** Mistral's refusal of a request it does not take (a tool call id not 9 letters and digits, a field it does not know), if any. */
function mistralRefusal(body: Record<string, any>, path: string): Behaviour | undefined {
  const id = path.endsWith('/embeddings') ? undefined : idMistralRefuses(body);
  if (id !== undefined) {
    const message = `Tool call id was ${String(id)} but must be a-z, A-Z, 0-9, with a length of 9.`;
    return { kind: 'status', status: 400, body: { object: 'error', message, type: 'invalid_function_call', param: null, code: '3280' } };
  }
  // Mistral's schema forbids fields it does not have, at every level (its 422, one entry per field).
  const unknown: Array<{ type: string; loc: Array<string | number>; msg: string; input: unknown }> = [];
  const extra = (object: Record<string, any>, allowed: readonly string[], loc: Array<string | number>) => {
    for (const field of Object.keys(object))
      if (!allowed.includes(field))
        unknown.push({ type: 'extra_forbidden', loc: [...loc, field], msg: 'Extra inputs are not permitted', input: object[field] });
  };
  extra(body, path.endsWith('/embeddings') ? MISTRAL_EMBEDDINGS : MISTRAL_BODY, ['body']);
  (body.messages ?? []).forEach((m: any, i: number) => {
    const allowed = MISTRAL_MESSAGE[m.role];
    if (allowed) extra(m, allowed, ['body', 'messages', i, m.role]);
    else
      unknown.push({
        type: 'union_tag_invalid',
        loc: ['body', 'messages', i],
        msg: `Input tag '${String(m.role)}' found using <lambda>() does not match any of the expected tags: 'assistant', 'system', 'tool', 'user'`,
        input: m,
      });
  });
  (body.tools ?? []).forEach((t: any, i: number) => {
    extra(t, ['type', 'function'], ['body', 'tools', i, 'function']);
    extra(t.function ?? {}, ['name', 'description', 'parameters', 'strict'], ['body', 'tools', i, 'function', 'function']);
    if (!('parameters' in (t.function ?? {})))
      unknown.push({
        type: 'missing',
        loc: ['body', 'tools', i, 'function', 'function', 'parameters'],
        msg: 'Field required',
        input: t.function,
      });
  });
  if (unknown.length > 0) {
    return {
      kind: 'status',
      status: 422,
      body: { object: 'error', message: { detail: unknown }, type: 'invalid_request_error', param: null, code: null },
    };
  }
  return undefined;
}

/** Makes `provider` take only what Mistral's chat and embeddings APIs take, refusing the rest with Mistral's own answer. */
export function asMistral(provider: FakeProvider): FakeProvider {
  return provider.when(
    (body, path) => mistralRefusal(body, path) !== undefined,
    (body, path) => mistralRefusal(body, path)!,
  );
}

/** The tier the request asked for, said in the answer as OpenAI says which served it (after the usage in chat's). */
const tierOf = (body: Record<string, any>) => (typeof body.service_tier === 'string' ? { service_tier: body.service_tier } : {});

/** OpenAI's embeddings answer: one 3-dimensional vector per input, usage counted per input. */
function answerEmbeddings(res: ServerResponse, body: Record<string, any>): void {
  const inputs: unknown[] = Array.isArray(body.input) ? body.input : [body.input];
  const data = inputs.map((_, index) => ({ object: 'embedding', index, embedding: [0.1, 0.2, index] }));
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify({
      object: 'list',
      data,
      model: body.model,
      usage: { prompt_tokens: 7 * inputs.length, total_tokens: 7 * inputs.length },
    }),
  );
}

/** The Responses API, natively: a whole response, or its event stream; `n` numbers its ids (as a provider's, unique). */
function answerResponses(res: ServerResponse, body: Record<string, any>, stream: boolean, n: number): void {
  const text = `native responses from ${body.model}`;
  const message = {
    id: `msg_native${n}`,
    type: 'message',
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text, annotations: [] }],
  };
  const response = {
    id: `resp_native${n}`,
    object: 'response',
    store: body.store !== false,
    created_at: 1,
    status: 'completed',
    model: body.model,
    output: [message],
    ...tierOf(body),
    usage: {
      input_tokens: 30,
      output_tokens: 6,
      total_tokens: 36,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens_details: { reasoning_tokens: 0 },
    },
    error: null,
    incomplete_details: null,
    instructions: null,
    metadata: {},
    parallel_tool_calls: true,
    temperature: null,
    tool_choice: 'auto',
    tools: [],
    top_p: null,
  };
  if (!stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(response));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let seq = 0;
  const send = (type: string, fields: object) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...fields })}\n\n`);
  send('response.created', { response: { ...response, status: 'in_progress', output: [], usage: null } });
  send('response.output_item.added', { output_index: 0, item: { ...message, status: 'in_progress', content: [] } });
  send('response.content_part.added', {
    item_id: message.id,
    output_index: 0,
    content_index: 0,
    part: { type: 'output_text', text: '', annotations: [] },
  });
  send('response.output_text.delta', { item_id: message.id, output_index: 0, content_index: 0, delta: text, logprobs: [] });
  send('response.output_text.done', { item_id: message.id, output_index: 0, content_index: 0, text, logprobs: [] });
  send('response.content_part.done', { item_id: message.id, output_index: 0, content_index: 0, part: message.content[0] });
  send('response.output_item.done', { output_index: 0, item: message });
  send('response.completed', { response });
  res.end();
}

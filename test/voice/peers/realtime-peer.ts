// A local realtime model server that follows the Realtime API's GA event sequence over a real
// WebSocket: it refuses a missing key or an `OpenAI-Beta` header, answers `session.created`,
// checks and applies `session.update` (GA shape only), runs a server VAD on the µ-law it is sent
// (speech_started / speech_stopped with the session's silence duration, committed, item created,
// then the transcription with log-probabilities and its usage, or its failure, maybe after the answer), creates responses (audio and transcript deltas,
// transcript, function calls, `response.done` with usage and each answer's transcript; a response
// stops at `max_output_tokens`, the response's or the session's, and ends `incomplete`), cancels a
// response the caller talks over, keeps the conversation's items (refusing, as the API does, a
// function_call_output whose function_call is not among them), and records every client event for
// the tests to check. What the "model" says is the test's `brain`; events it `lose`s never arrive.
import { EventEmitter } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { RealtimeClientEvent, RealtimeSessionCreateRequest } from 'openai/resources/realtime/realtime';
import { WebSocketServer, type WebSocket } from 'ws';
import { energy, FRAME_BYTES } from './mulaw';

export const API_KEY = 'test-openai-key';

/** What the model does for one response. */
export interface Reply {
  audio?: Buffer;
  transcript?: string;
  call?: { name: string; args: Record<string, unknown> };
  /** Time before the first delta (a slow model). */
  delayMs?: number;
  /** As the model reports it; `null`: a response.done that reports none. */
  usage?: Record<string, unknown> | null;
}

export interface BrainContext {
  conn: RtConn;
  /** Why the response exists: VAD at the end of the caller's turn, or the client's response.create. */
  trigger: 'turn' | 'create';
  instructions?: string;
  /** The caller's transcript that ended the turn (for `turn`). */
  heard?: string;
  /** The client's `response.metadata` (for `create`), echoed in the response's events. */
  metadata?: Record<string, string> | null;
  /** The client's `response.max_output_tokens` (for `create`): it overrides the session's. */
  maxOutputTokens?: number | 'inf';
  /** Created with `conversation: 'none'` (for `create`): out of band. */
  outOfBand?: boolean;
}

export interface Heard {
  text: string;
  /** Per-token log-probability of the transcription. */
  logprob: number;
  /** The transcription fails with this error (`conversation.item.input_audio_transcription.failed`). */
  failed?: { type: string; code: string; message: string };
  /** The transcription comes once the answer to the turn is done (it runs beside the answer, as the API's may). */
  late?: boolean;
  /** Its `usage` as the API reports it (default: the session's transcription model's own kind, below). */
  usage?: Record<string, unknown>;
  /** The completed event comes this many times more (a server that repeats an event). */
  repeated?: number;
}

const VOICED = 200; // mean |sample| above this is speech

export class RtConn extends EventEmitter {
  readonly id: number;
  session: RealtimeSessionCreateRequest | null = null;
  /** Caller audio received, decoded from base64 and concatenated. */
  inbound: Buffer[] = [];
  inboundBytes = 0;
  events: RealtimeClientEvent[] = [];
  /** The server events sent to the bridge, in order (not those lost or still held by a lag). */
  served: Array<Record<string, unknown>> = [];
  /** The conversation's items, as this session holds them (client-created and its own function calls). */
  items: Array<{ type?: string; call_id?: string } & Record<string, unknown>> = [];
  /** The ids of the assistant audio items this session generated: the only ones it can truncate. */
  private readonly audioItems = new Set<string>();
  private speaking = false;
  private speechStart = 0;
  private silentBytes = 0;
  private carry = Buffer.alloc(0);
  private active: { id: string; cancelled: boolean; outOfBand: boolean } | null = null;
  private seq = 0;
  /** Server events held on the way to the bridge, in order (a slow network), while lagging. */
  private lagging: Array<Record<string, unknown>> | null = null;

  constructor(
    readonly ws: WebSocket,
    readonly peer: RealtimePeer,
    id: number,
  ) {
    super();
    this.id = id;
    ws.on('message', (data) => this.onClient(JSON.parse(String(data)) as RealtimeClientEvent));
    this.send({ type: 'session.created', session: { type: 'realtime', model: 'gpt-realtime-mini', output_modalities: ['audio'] } });
  }

  send(e: Record<string, unknown>): void {
    if (this.lagging) return void this.lagging.push(e);
    if (this.ws.readyState !== 1 || this.peer.lose(e)) return;
    this.ws.send(JSON.stringify({ event_id: `evt_${++this.seq}`, ...e }));
    this.served.push(e);
    this.emit('server', e);
  }

  /** From now on the server's events reach the bridge late (still in order): the server goes on meanwhile. */
  lag(): void {
    this.lagging ??= [];
  }

  /** The events held by `lag` arrive, in order, and the rest as they come. */
  catchUp(): void {
    const held = this.lagging ?? [];
    this.lagging = null;
    for (const e of held) this.send(e);
  }

  /** The server goes away mid-call, as a dropped connection does. */
  drop(): void {
    this.ws.terminate();
  }

  private onClient(e: RealtimeClientEvent): void {
    this.events.push(e);
    this.emit('client', e);
    this.peer.emit('client', { conn: this, event: e });
    switch (e.type) {
      case 'session.update': {
        const held = this.peer.holdUpdates;
        if (held) return void held.then(() => this.update(e.session as RealtimeSessionCreateRequest));
        return this.update(e.session as RealtimeSessionCreateRequest);
      }
      case 'input_audio_buffer.append':
        return this.audio(Buffer.from(e.audio, 'base64'));
      case 'response.create':
        return void this.respond({
          trigger: 'create',
          instructions: e.response?.instructions,
          metadata: e.response?.metadata ?? null,
          maxOutputTokens: e.response?.max_output_tokens,
          outOfBand: e.response?.conversation === 'none',
        });
      case 'response.cancel':
        // Like the API: the response named, else the one in progress in the default conversation
        // (an out-of-band response, `conversation: 'none'`, is cancelled only by its id).
        if (this.active && (e.response_id ? e.response_id === this.active.id : !this.active.outOfBand)) this.active.cancelled = true;
        else
          this.send({
            type: 'error',
            error: { type: 'invalid_request_error', code: 'response_cancel_not_active', message: 'no active response' },
          });
        return;
      case 'conversation.item.create':
        return this.addItem(e.item as { type?: string; call_id?: string });
      case 'conversation.item.truncate':
        // Like the API: an item this conversation does not hold is an error.
        if (!this.audioItems.has(e.item_id))
          return this.send({
            type: 'error',
            error: { type: 'invalid_request_error', code: 'invalid_value', param: 'item_id', message: `no item ${e.item_id}` },
          });
        return this.send({ type: 'conversation.item.truncated', item_id: e.item_id, content_index: 0, audio_end_ms: e.audio_end_ms });
    }
  }

  /** Like the API: an output is refused unless the conversation holds the function call it answers. */
  private addItem(item: { type?: string; call_id?: string }): void {
    const known = this.items.some((i) => i.type === 'function_call' && i.call_id === item.call_id);
    if (item.type === 'function_call_output' && !known) {
      return this.send({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'invalid_value', message: `no function call with call_id ${item.call_id}` },
      });
    }
    this.items.push(item);
    this.send({ type: 'conversation.item.added', item: { id: `item_c${++this.seq}`, ...item } });
  }

  /** Like the API: the fields present are updated, the others kept. */
  private update(patch: RealtimeSessionCreateRequest): void {
    const was = this.session;
    const s = {
      ...was,
      ...patch,
      audio: {
        input: { ...was?.audio?.input, ...patch.audio?.input },
        output: { ...was?.audio?.output, ...patch.audio?.output },
      },
    } as RealtimeSessionCreateRequest;
    const input = s.audio?.input?.format as { type?: string } | undefined;
    const output = s.audio?.output?.format as { type?: string } | undefined;
    if (s.type !== 'realtime' || input?.type !== 'audio/pcmu' || output?.type !== 'audio/pcmu') {
      return this.send({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'invalid_value', message: 'expected the GA session shape' },
      });
    }
    if (!validLimit(s.max_output_tokens)) return this.send(badLimit(s.max_output_tokens));
    this.session = s;
    this.send({ type: 'session.updated', session: s });
  }

  /** Server VAD over 20 ms chunks; positions in ms of the session's audio. */
  private audio(bytes: Buffer): void {
    this.inbound.push(bytes);
    let buf = Buffer.concat([this.carry, bytes]);
    while (buf.length >= FRAME_BYTES) {
      this.vad(buf.subarray(0, FRAME_BYTES));
      buf = buf.subarray(FRAME_BYTES);
    }
    this.carry = buf;
  }

  private vad(frame: Buffer): void {
    this.inboundBytes += frame.length;
    const at = this.inboundBytes / 8;
    const td = this.session?.audio?.input?.turn_detection as {
      silence_duration_ms?: number;
      interrupt_response?: boolean;
      create_response?: boolean;
    } | null;
    if (!td) return;
    if (energy(frame) > VOICED) {
      this.silentBytes = 0;
      if (this.speaking) return;
      this.speaking = true;
      this.speechStart = at - 20;
      this.send({ type: 'input_audio_buffer.speech_started', audio_start_ms: this.speechStart, item_id: `item_u${this.seq}` });
      if (this.active && td.interrupt_response !== false) this.active.cancelled = true;
      return;
    }
    if (!this.speaking) return;
    this.silentBytes += frame.length;
    if (this.silentBytes / 8 < (td.silence_duration_ms ?? 500)) return;
    this.speaking = false;
    // Ids unique across sessions, as the API's are.
    const item = `item_u${this.id}_${++this.seq}`;
    const spokenMs = at - this.speechStart;
    // audio_end_ms includes the silence that ended the turn, as the API documents.
    this.send({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: at, item_id: item });
    this.send({ type: 'input_audio_buffer.committed', item_id: item, previous_item_id: null });
    this.send({ type: 'conversation.item.added', item: { id: item, type: 'message', role: 'user', content: [{ type: 'input_audio' }] } });
    const heard = this.peer.hear(this);
    if (!heard.late) this.transcribed(item, heard, spokenMs);
    // Like the API: with create_response false the turn is committed and transcribed, not answered.
    const answer = td.create_response !== false ? this.respond({ trigger: 'turn', heard: heard.text }) : Promise.resolve();
    if (heard.late) void answer.then(() => this.transcribed(item, heard, spokenMs));
  }

  /** The turn's transcription: its words with their log-probabilities and what it used, or its failure. */
  private transcribed(item: string, heard: Heard, spokenMs: number): void {
    const base = { item_id: item, content_index: 0 };
    if (heard.failed) return this.send({ type: 'conversation.item.input_audio_transcription.failed', ...base, error: heard.failed });
    const logprobs = heard.text.split(/\s+/).map((token) => ({ token, logprob: heard.logprob, bytes: [...Buffer.from(token)] }));
    const usage = heard.usage ?? this.transcriptionUsage(spokenMs, logprobs.length);
    const completed = { type: 'conversation.item.input_audio_transcription.completed', ...base, transcript: heard.text, logprobs, usage };
    for (let i = 0; i <= (heard.repeated ?? 0); i++) this.send(completed);
  }

  /**
   * Like the API: whisper-1 reports the audio's duration; the gpt-4o transcribe models report
   * tokens (the audio's, about 10 a second, and the prompt's text; the words as output).
   */
  private transcriptionUsage(spokenMs: number, words: number): Record<string, unknown> {
    const model = (this.session?.audio?.input?.transcription as { model?: string } | undefined)?.model;
    if (model === 'whisper-1') return { type: 'duration', seconds: spokenMs / 1000 };
    const audio = Math.max(1, Math.round(spokenMs / 100));
    const text = 12;
    return {
      type: 'tokens',
      input_tokens: audio + text,
      input_token_details: { text_tokens: text, audio_tokens: audio },
      output_tokens: words,
      total_tokens: audio + text + words,
    };
  }

  private async respond(ctx: Omit<BrainContext, 'conn'>): Promise<void> {
    // A response, even a cancelled one, holds the conversation until its response.done, as the API's does.
    if (this.active) {
      return this.send({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'busy' },
      });
    }
    if (!validLimit(ctx.maxOutputTokens)) return this.send(badLimit(ctx.maxOutputTokens));
    const said = this.peer.brain({ conn: this, ...ctx });
    if (!said) return;
    const limit = ctx.maxOutputTokens ?? this.session?.max_output_tokens ?? 'inf';
    const { reply, cut } = outputLimited(said, limit);
    const id = `resp_${++this.seq}`;
    const me = { id, cancelled: false, outOfBand: ctx.outOfBand === true };
    this.active = me;
    const metadata = ctx.metadata ?? null;
    this.send({ type: 'response.created', response: { id, object: 'realtime.response', status: 'in_progress', output: [], metadata } });
    if (reply.delayMs) await new Promise((r) => setTimeout(r, reply.delayMs));
    const output = reply.call ? [this.functionCall(id, reply.call)] : [await this.speak(id, me, reply)];
    const outMs = (reply.audio?.length ?? 0) / 8;
    const measured = {
      total_tokens: 0,
      input_tokens: Math.round(this.inboundBytes / 8 / 100) + 50,
      output_tokens: Math.round(outMs / 50) + 10,
      input_token_details: { audio_tokens: Math.round(this.inboundBytes / 8 / 100), text_tokens: 50, cached_tokens: 0 },
      output_token_details: { audio_tokens: Math.round(outMs / 50), text_tokens: 10 },
    };
    const usage = reply.usage === undefined ? measured : reply.usage;
    if (this.active === me) this.active = null;
    const status = me.cancelled ? 'cancelled' : cut ? 'incomplete' : 'completed';
    const details = cut && !me.cancelled ? { status_details: { type: 'incomplete', reason: 'max_output_tokens' } } : {};
    this.send({ type: 'response.done', response: { id, object: 'realtime.response', status, ...details, output, usage, metadata } });
  }

  private functionCall(responseId: string, call: { name: string; args: Record<string, unknown> }) {
    const item = {
      id: `item_f${++this.seq}`,
      type: 'function_call',
      call_id: `call_${this.seq}`,
      name: call.name,
      arguments: JSON.stringify(call.args),
    };
    this.items.push(item);
    this.send({ type: 'response.output_item.added', response_id: responseId, output_index: 0, item: { ...item, arguments: '' } });
    this.send({
      type: 'response.function_call_arguments.delta',
      response_id: responseId,
      item_id: item.id,
      output_index: 0,
      call_id: item.call_id,
      delta: item.arguments,
    });
    this.send({
      type: 'response.function_call_arguments.done',
      response_id: responseId,
      item_id: item.id,
      output_index: 0,
      call_id: item.call_id,
      name: item.name,
      arguments: item.arguments,
    });
    this.send({ type: 'response.output_item.done', response_id: responseId, output_index: 0, item });
    return item;
  }

  private async speak(responseId: string, me: { cancelled: boolean }, reply: Reply) {
    const item = { id: `item_a${++this.seq}`, type: 'message', role: 'assistant', status: 'in_progress' };
    this.audioItems.add(item.id);
    const base = { response_id: responseId, item_id: item.id, output_index: 0, content_index: 0 };
    this.send({ type: 'response.output_item.added', response_id: responseId, output_index: 0, item });
    this.send({ type: 'response.content_part.added', ...base, part: { type: 'audio', transcript: '' } });
    const audio = reply.audio ?? Buffer.alloc(0);
    const chunk = this.peer.chunkBytes;
    const text = reply.transcript ?? '';
    const chunks = Math.ceil(audio.length / chunk);
    let said = 0;
    for (let i = 0; i < audio.length && !me.cancelled; i += chunk) {
      this.send({ type: 'response.output_audio.delta', ...base, delta: audio.subarray(i, i + chunk).toString('base64') });
      // The transcript streams beside the audio, as the API's does: its share of the text per chunk.
      const upTo = Math.floor((text.length * (i / chunk + 1)) / chunks);
      if (upTo > said) this.send({ type: 'response.output_audio_transcript.delta', ...base, delta: text.slice(said, upTo) });
      said = Math.max(said, upTo);
      if (this.peer.paceMs) await new Promise((r) => setTimeout(r, this.peer.paceMs));
      else await new Promise((r) => setImmediate(r));
    }
    if (!me.cancelled) said = text.length;
    this.send({ type: 'response.output_audio.done', ...base });
    if (reply.transcript) this.send({ type: 'response.output_audio_transcript.done', ...base, transcript: reply.transcript });
    const content = [{ type: 'output_audio', transcript: text.slice(0, said) }];
    this.send({
      type: 'response.output_item.done',
      response_id: responseId,
      output_index: 0,
      item: { ...item, status: 'completed', content },
    });
    return { ...item, status: me.cancelled ? 'incomplete' : 'completed', content };
  }
}

/**
 * Like the API: a response stops at `max_output_tokens` (the response's, else the session's; an
 * integer from 1 to 4096, or "inf"), here counted as its audio tokens, one per 50 ms (8 bytes a ms
 * of µ-law): the audio past it is never generated, its transcript cut alike, and the response
 * ends `incomplete`. A usage the test states is reported as stated.
 */
const validLimit = (v: unknown) => v === undefined || v === 'inf' || (Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 4096);

const badLimit = (v: unknown) => ({
  type: 'error',
  error: {
    type: 'invalid_request_error',
    code: 'invalid_value',
    message: `max_output_tokens: expected 1..4096 or "inf", got ${String(v)}`,
  },
});

function outputLimited(reply: Reply, limit: number | 'inf'): { reply: Reply; cut: boolean } {
  const audio = reply.audio;
  if (limit === 'inf' || !audio || audio.length <= limit * 50 * 8) return { reply, cut: false };
  const kept = limit * 50 * 8;
  const transcript = reply.transcript?.slice(0, Math.floor((reply.transcript.length * kept) / audio.length));
  return { reply: { ...reply, audio: audio.subarray(0, kept), transcript }, cut: true };
}

export class RealtimePeer extends EventEmitter {
  readonly conns: RtConn[] = [];
  /** Handshakes seen (refused ones included). */
  attempts = 0;
  /** Refuse new connections (HTTP 503), e.g. once the first one dropped. */
  refuse = false;
  /** Bytes per audio delta, and a pause between deltas (0: as fast as the socket takes them). */
  chunkBytes = 800;
  paceMs = 0;
  /** While set, `session.update` is applied (and acknowledged) only once it resolves: a slow session start. */
  holdUpdates: Promise<void> | null = null;
  brain: (ctx: BrainContext) => Reply | null = () => null;
  /** Server events that never reach the bridge (lost on the way); not reported as sent either. */
  lose: (e: Record<string, unknown>) => boolean = () => false;
  /** What the transcription hears for each caller turn, in order (then "yes, hello", clearly: a caller who agrees to the consent line). */
  heardQueue: Heard[] = [];
  private server!: Server;
  private wss!: WebSocketServer;
  url = '';

  hear(_conn: RtConn): Heard {
    return this.heardQueue.shift() ?? { text: 'yes, hello', logprob: -0.05 };
  }

  async start(): Promise<this> {
    this.server = createServer((_req, res) => res.writeHead(426).end());
    this.wss = new WebSocketServer({ noServer: true });
    this.server.on('upgrade', (req, socket, head) => {
      this.attempts++;
      const url = new URL(req.url ?? '/', 'http://x');
      const refuse = (status: number, why: string) => socket.end(`HTTP/1.1 ${status} ${why}\r\nContent-Length: 0\r\n\r\n`);
      if (req.headers.authorization !== `Bearer ${API_KEY}`) return refuse(401, 'Unauthorized');
      if (req.headers['openai-beta']) return refuse(400, 'Beta Not Accepted');
      if (url.pathname !== '/v1/realtime' || !url.searchParams.get('model')) return refuse(400, 'Bad Request');
      if (this.refuse) return refuse(503, 'Service Unavailable');
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        const conn = new RtConn(ws, this, this.conns.length + 1);
        this.conns.push(conn);
        this.emit('connection', conn);
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `ws://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1/realtime`;
    return this;
  }

  async stop(): Promise<void> {
    for (const c of this.wss.clients) c.terminate();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

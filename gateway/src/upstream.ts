/**
 * Outbound HTTP to providers with undici: one keep-alive pool per origin (an Agent), a
 * per-attempt timeout that cancels the call (see cancel.ts), and the body either read whole or
 * handed over as a stream once its first event has arrived (failover is only possible before it).
 */
import { constants as h2, type ClientHttp2Session, type Settings } from 'node:http2';
import type { TLSSocket } from 'node:tls';
import { Agent, buildConnector, Client, Pool, type Dispatcher } from 'undici';
import { BodyQueue } from './body-queue';
import { Cancel, type CancelSignal } from './cancel';
import { GeneratedText } from './cut-estimate';
import { parseJson } from './json-object';
import type { OutboundRequest } from './providers/adapter';
import { firstEventData } from './sse';

/**
 * The connection pools to providers. No cap on connections per origin by default: long streams
 * hold their connection for their whole length, and a cap makes later streams wait for earlier
 * ones (1,000 streams of 2 s behind 256 connections waited seconds for their first token).
 * `UPSTREAM_CONNECTIONS` sets a cap; `UPSTREAM_HTTP2=on` lets undici speak HTTP/2 to providers
 * that offer it over TLS (many streams on few connections).
 *
 * undici sends a request on a busy connection only when the connection's `pipelining` allows more
 * than one at a time and the request is marked idempotent, for HTTP/2 streams as for HTTP/1.1
 * pipelining. With HTTP/2 on, every call is marked so (each carries an Idempotency-Key), and each
 * connection allows H2_STREAMS (the usual server limit; fewer once the provider has said it allows
 * fewer, see followSession) until its protocol is known: one that negotiated HTTP/1.1 is set back
 * to one request at a time, so a provider that does not speak HTTP/2 never gets a request
 * pipelined behind another's stream.
 */
const H2_STREAMS = 100;
const CONNECT_TIMEOUT_MS = 10_000;
/**
 * A stream whose provider sends nothing for this long is cut (by its BodyQueue: the time between
 * body chunks, not counted while our reader holds the connection back; undici's `bodyTimeout`
 * counts it over HTTP/2). A whole answer, and a stream before its first event, are bounded by the
 * attempt's timer, however long a Cold job's time-to-answer makes it.
 */
const STREAM_IDLE_MS = 60_000;
let streamIdleMs = STREAM_IDLE_MS;
function pool(connections: number | null, http2: boolean): Agent {
  return new Agent({
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 120_000,
    connections,
    connect: { timeout: CONNECT_TIMEOUT_MS },
    ...(http2 && { factory: negotiatingPool }),
  });
}

/** What an origin's HTTP/2 connections have in common: its pool, and the streams it allows on each (its last SETTINGS). */
interface Origin {
  pool: Pool;
  streams: number;
}

/** An origin's connections, which share one connector (and its cache of TLS sessions to resume). */
function negotiatingPool(origin: string | URL, options: object): Pool {
  const connect = buildConnector({ timeout: CONNECT_TIMEOUT_MS, allowH2: true });
  const known: Origin = {
    pool: new Pool(origin, { ...options, factory: (url, opts) => negotiatingClient(url, opts, connect, known) }),
    streams: H2_STREAMS,
  };
  return known.pool;
}

/** A connection that offers HTTP/2 and, once it knows what the provider chose, multiplexes only over HTTP/2. */
function negotiatingClient(origin: URL, options: object, connect: buildConnector.connector, known: Origin): Client {
  const client: Client = new Client(origin, {
    ...options,
    allowH2: true,
    pipelining: known.streams,
    connect: (opts, callback) =>
      connect(opts, (...args) => {
        const socket = args[1];
        if (socket) client.pipelining = (socket as TLSSocket).alpnProtocol === 'h2' ? known.streams : 1;
        callback(...args);
      }),
  });
  client.on('connect', () => followSession(client, known));
  return client;
}

/** The key of a field undici keeps on its object under a symbol of its own, found by the symbol's description. */
function undiciKey(of: object, description: string): symbol | undefined {
  return Object.getOwnPropertySymbols(of).find((s) => s.description === description);
}

/**
 * What undici 7 does not do for an HTTP/2 connection, done when it is up:
 *
 * - The provider's SETTINGS_MAX_CONCURRENT_STREAMS, when under H2_STREAMS, is the connection's
 *   number of requests at a time: undici would send up to H2_STREAMS streams on it, and node:http2
 *   hold those past the provider's limit until a stream ends, so a call waited behind another's
 *   whole stream (longer than the attempt's timer, for long answers). At the limit, the pool opens
 *   another connection instead; the origin's connections opened later start at that limit (a
 *   burst on a new one would otherwise be sent before its SETTINGS, and refused past the limit).
 * - A provider closes a connection gracefully (a deploy, a load balancer rotating its connections)
 *   with GOAWAY NO_ERROR: no new streams on it, and the streams open on it finish. undici handles
 *   every GOAWAY as a failed connection and destroys its socket, cutting every stream on it (each a
 *   `stream_interrupted` scored against the route: a few of them open its breaker). Here, a graceful
 *   GOAWAY only makes the connection take no more requests (the pool sends them on another
 *   connection), and leaves the pool, closed once its last stream has ended. A
 *   GOAWAY with an error code is still undici's to handle: the provider has failed those streams.
 */
function followSession(client: Client, known: Origin): void {
  const fields = client as unknown as Record<symbol, unknown>;
  const pool = known.pool as unknown as Record<symbol, unknown>;
  const [sessionKey, contextKey, passKey, clientsKey, connectionKey] = [
    undiciKey(client, 'http2Session'),
    undiciKey(client, 'http context'),
    undiciKey(known.pool, 'needDrain'),
    undiciKey(known.pool, 'clients'),
    undiciKey(Object.getPrototypeOf(known.pool) as object, 'get dispatcher'),
  ];
  const session = sessionKey && (fields[sessionKey] as ClientHttp2Session | null);
  const context = contextKey && (fields[contextKey] as { busy(request: unknown): boolean } | null);
  if (!session || !context || !passKey || !clientsKey || !connectionKey) return; // HTTP/1.1 (or an undici that keeps these otherwise)
  session.on('remoteSettings', ({ maxConcurrentStreams: most }: Settings) => {
    if (most === undefined) return;
    known.streams = Math.min(H2_STREAMS, most);
    client.pipelining = known.streams;
  });
  const undiciHandlers = session.listeners('goaway') as Array<(...args: unknown[]) => void>;
  session.removeAllListeners('goaway');
  session.on('goaway', (code: number, ...rest: unknown[]) => {
    if (code !== h2.NGHTTP2_NO_ERROR) return void undiciHandlers.forEach((handler) => handler.call(session, code, ...rest));
    context.busy = () => true; // no new stream on it (undici's own check before each)
    fields[passKey] = true; // the pool passes it by for another connection
    // and leaves it now, to close once its streams have ended: kept, passed by for good, every such
    // connection stayed in the pool, and once as many as UPSTREAM_CONNECTIONS, calls waited for a
    // connection until their time-to-answer ran out (a 504).
    const clients = pool[clientsKey] as Client[];
    const at = clients.indexOf(client);
    if (at !== -1) clients.splice(at, 1);
    client.close(() => {}); // a GOAWAY again (as servers send a second, naming their last stream) finds it closing
    // Calls waiting for a connection (every one at its streams, as many as UPSTREAM_CONNECTIONS) are
    // handed one only when a call comes or a connection drains, which this one never does: the pool
    // opens one for them now, else they waited for the next call, or to their time-to-answer (a 504).
    if (pool[passKey] === true) (pool[connectionKey] as () => unknown).call(known.pool);
  });
}

let agent = pool(null, false);
let multiplexed = false;

/**
 * A whole answer is collected in memory: past this many bytes it is refused as a failure of the
 * route (`ANSWER_TOO_LARGE`) and its connection cut, rather than read on until the process runs out
 * of memory (a provider whose answer never ends). Far above any chat answer, and above the largest
 * answer OpenAI gives: 2,048 embeddings of 3,072 dimensions as JSON floats, about 140 MB (base64,
 * the OpenAI SDKs' default, is a quarter of that).
 */
const MAX_ANSWER_BYTES = 256 * 1024 * 1024;
let answerLimit = MAX_ANSWER_BYTES;

/** The limit on a whole answer, which an answer kept whole from a stream (a Responses translation) is held to as well. */
export function maxAnswerBytes(): number {
  return answerLimit;
}

/** `idleMs` and `maxAnswerBytes` replace STREAM_IDLE_MS and MAX_ANSWER_BYTES (for tests). */
export function configureUpstream(options: { connections: number | null; http2: boolean; idleMs?: number; maxAnswerBytes?: number }): void {
  const old = agent;
  agent = pool(options.connections, options.http2);
  streamIdleMs = options.idleMs ?? STREAM_IDLE_MS;
  answerLimit = options.maxAnswerBytes ?? MAX_ANSWER_BYTES;
  multiplexed = options.http2;
  void old.close();
}

// Each route's URL parsed once: undici's top-level request() parses the URL string on every call.
const targets = new Map<string, { origin: string; path: string }>();
function target(url: string): { origin: string; path: string } {
  let t = targets.get(url);
  if (!t) {
    const u = new URL(url);
    t = { origin: u.origin, path: `${u.pathname}${u.search}` };
    targets.set(url, t);
  }
  return t;
}

export interface UpstreamAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** Whole body (non-streamed). */
  body?: Buffer;
  /** Streamed: the first event whole (with what came after it in its last piece), and an iterator over the rest. */
  first?: Buffer;
  rest?: AsyncIterator<Buffer>;
  latencyMs: number;
}

export class UpstreamError extends Error {
  constructor(
    message: string,
    /** CLIENT_CLOSED: our client went away and the call was cancelled (not the provider's fault). */
    readonly code: 'TIMEOUT' | 'PROVIDER_DOWN' | 'CLIENT_CLOSED' | 'ANSWER_TOO_LARGE',
    /**
     * CLIENT_CLOSED or TIMEOUT (the attempt's timer): the provider had the request when it was
     * cancelled (written to its connection, and not answered with an error status), so it bills the
     * prompt all the same.
     */
    readonly received = false,
    /** A stream cancelled while its first event was held, part come: the text in that part (cut-estimate.ts). */
    readonly generated?: GeneratedText,
  ) {
    super(message);
  }
}

/**
 * Why dispatch gave up on a call it was told to cancel; `received`: the provider had the request
 * then (written to its connection) and had not answered it with an error status.
 */
class Cancelled extends Error {
  constructor(
    readonly received: boolean,
    readonly generated?: GeneratedText,
  ) {
    super('cancelled');
  }
}

function classify(error: unknown, timedOut: boolean): UpstreamError {
  const e = error as { code?: string; name?: string; message?: string };
  if (timedOut || e?.name === 'TimeoutError' || e?.code === 'UND_ERR_HEADERS_TIMEOUT' || e?.code === 'UND_ERR_BODY_TIMEOUT') {
    const cancelled = error instanceof Cancelled ? error : null;
    return new UpstreamError('timed out', 'TIMEOUT', cancelled?.received === true, cancelled?.generated);
  }
  return new UpstreamError(e?.code ?? e?.message ?? 'network error', 'PROVIDER_DOWN');
}

/** An event stream, or a stream that does not say what it is; anything else is read whole. */
function eventStream(type: string | string[] | undefined): boolean {
  return type === undefined || (typeof type === 'string' && /^\s*text\/event-stream\s*(;|$)/i.test(type));
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
/** A byte-order mark (UTF-8), which a stream may begin with: not part of its first line. */
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * Where a stream's answer begins: the first line that is not a comment (`: keep-alive`, OpenRouter's
 * `: OPENROUTER PROCESSING`) or blank. Providers send comments while they wait for their model, so
 * a stream that has sent only those has not answered yet: the attempt's timer still runs, and a
 * provider that fails then is failed over like one that sent nothing (the client has seen nothing,
 * since comments are never relayed). A byte-order mark at the stream's start is read past, as the
 * client's decoder reads past it. `at` gives the index in a chunk, or -1 when it is all comment.
 */
class Preamble {
  private lineStart = true;
  /** Bytes read of a byte-order mark at the stream's start; BOM.length once past it (or there was none). */
  private bom = 0;
  at(chunk: Buffer): number {
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i];
      if (this.bom < BOM.length) {
        if (b === BOM[this.bom]) {
          this.bom++;
          continue; // dropped: the stream's text starts after it
        }
        this.bom = BOM.length;
      }
      if (b === LF || b === CR) {
        this.lineStart = true;
      } else if (this.lineStart && b === COLON) {
        this.lineStart = false; // the rest of the line is the comment
      } else if (this.lineStart) return i;
    }
    return -1;
  }
}

type Answered = Pick<UpstreamAnswer, 'status' | 'headers' | 'latencyMs'> & ({ body: Buffer } | { first: Buffer; rest: BodyQueue });

const LF_LF = Buffer.from('\n\n');
const CRLF_CRLF = Buffer.from('\r\n\r\n');
/**
 * A first event larger than this is handed on before its end: failover reads an error only from a
 * whole first event, and such errors are small.
 */
const FIRST_EVENT_HELD = 1024 * 1024;

/** Where a scan for an event's end left off: inside a line, after a line's end, after a CR (a LF next is part of its line end). */
const IN_LINE = 0;
const LINE_ENDED = 1;
const AFTER_CR = 2;
/** A blank line was found: the event's end. */
const EVENT_END = -1;

/**
 * Scans the next piece of a first event for a blank line, its end (lines end in LF, CRLF or CR),
 * from where the last piece left off (IN_LINE at a line's start): EVENT_END, or where this one
 * leaves off. Each piece is scanned once, however many the event comes in.
 */
function eventEnd(piece: Buffer, state: number): number {
  if (piece.indexOf(LF_LF) !== -1 || piece.indexOf(CRLF_CRLF) !== -1) return EVENT_END; // how providers end events
  for (let i = 0; i < piece.length; i++) {
    const b = piece[i];
    if (b === LF) {
      if (state === LINE_ENDED) return EVENT_END;
      state = LINE_ENDED; // after a CR: the same line end
    } else if (b === CR) {
      if (state !== IN_LINE) return EVENT_END;
      state = AFTER_CR;
    } else state = IN_LINE;
  }
  return state;
}

/**
 * `data`, the field name of the lines that make a block an event: a block without one (`retry: 3000`,
 * an `id:` or `event:` line alone) is none.
 */
const DATA = Buffer.from('data');

/** Whether a piece begins with a `data` line (`data:`, or `data` alone): its first blank line ends the first event. */
function startsWithData(piece: Buffer): boolean {
  const after = piece[DATA.length];
  return (
    piece[0] === DATA[0] &&
    piece[1] === DATA[1] &&
    piece[2] === DATA[2] &&
    piece[3] === DATA[3] &&
    (after === COLON || after === LF || after === CR)
  );
}

/** Blocks.scan's answer when a piece ends between blocks (after a blank line) and none had a data line. */
const BETWEEN = -2;

/**
 * The scan, line by line over its pieces, of a stream that does not begin with a `data` line: for the
 * blank line that ends its first block with one (a block's lines are fields by their names, so `data`
 * in a value, a comment or another name is none). Made only for such a stream; each piece is scanned once.
 */
class Blocks {
  private lineStart = true;
  private afterCR = false; // a LF next is part of its line end
  private name = 0; // bytes of `data` the line begins with; -1 when it begins otherwise
  private lines = false; // the block has a line so far
  private data = false; // the block has a data line
  /** EVENT_END at the blank line after a data line; BETWEEN when the piece ends between blocks; else IN_LINE. */
  scan(piece: Buffer): number {
    for (let i = 0; i < piece.length; i++) {
      const b = piece[i];
      if (b === LF || b === CR) {
        const crlf = b === LF && this.afterCR;
        this.afterCR = b === CR;
        if (crlf) continue;
        if (!this.lineStart) {
          if (this.name === DATA.length) this.data = true; // `data` alone
          this.lines = true;
          this.lineStart = true;
        } else if (this.data) return EVENT_END;
        else this.lines = false; // a blank line: the block ended, without an event
        continue;
      }
      this.afterCR = false;
      if (this.lineStart) {
        this.lineStart = false;
        this.name = 0;
      }
      if (this.name === DATA.length) {
        if (b === COLON) this.data = true;
        this.name = -1;
      } else if (this.name >= 0) this.name = b === DATA[this.name] ? this.name + 1 : -1;
    }
    return this.lineStart && !this.lines ? BETWEEN : IN_LINE;
  }
}

/** Whether an event the stream ended in, without its blank line, reads whole: its data `[DONE]` or JSON. */
function readsWhole(event: Buffer): boolean {
  const data = firstEventData(event);
  return data === '[DONE]' || (data !== null && parseJson(data) !== null);
}

/** The text generated in a first event's pieces, held when its call was cancelled: the provider bills it. */
function generatedIn(held: Buffer[]): GeneratedText {
  const text = new GeneratedText();
  for (const piece of held) text.scan(piece);
  return text;
}

/**
 * One call straight on undici's dispatcher. A whole answer is collected as it comes; a streamed 2xx
 * answer that is an event stream resolves with its first event, whole, and a BodyQueue for the rest (any
 * other answer is read whole: failover.ts decides what a whole answer to a stream is). `agent.request` would wrap each call in an async resource and a Readable stream: about
 * 8 % of the gateway's instructions per request on the hot path, and more per stream and chunk.
 */
function dispatch(options: Dispatcher.DispatchOptions, cancel: CancelSignal, stream: boolean, idleMs: number): Promise<Answered> {
  const call = new Call(cancel, stream, idleMs);
  agent.dispatch(options, call);
  return call.answered;
}

/**
 * How many times a call is sent again after HTTP/2 streams refused it (RST_STREAM REFUSED_STREAM):
 * the provider took none of it (RFC 9113 8.7), so each is sent again at once, not scored against the
 * route nor metered. Streams are refused when a connection's first requests go out before the
 * provider's SETTINGS have said how many it allows (a burst on a new connection), and when a
 * provider's GOAWAY crosses requests already on their way: a burst then failed over, and opened the
 * route's breaker, with the provider well. A provider refusing every stream fails as before.
 */
const REFUSED_AGAIN = 3;

function refused(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | null;
  return e?.code === 'ERR_HTTP2_STREAM_ERROR' && typeof e.message === 'string' && e.message.endsWith('NGHTTP2_REFUSED_STREAM');
}

/**
 * A stream refused before any answer to it came (no response headers): only then did the provider
 * take none of the call. One refused after its headers (a server breaking the rule, a proxy passing
 * on its upstream's reset) was answered, and maybe billed: a failed attempt, as any stream cut.
 */
class Refused extends Error {
  constructor(readonly error: Error) {
    super('refused');
  }
}

/** A call its first stream refused, sent again. */
async function sendAgain(options: Dispatcher.DispatchOptions, cancel: CancelSignal, stream: boolean, idleMs: number): Promise<Answered> {
  for (let again = 1; ; again++) {
    if (cancel.aborted) throw new Cancelled(false); // as a call cancelled before it was sent
    try {
      return await dispatch(options, cancel, stream, idleMs);
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      if (again >= REFUSED_AGAIN) throw error.error;
    }
  }
}

/**
 * A call's handler. An object rather than closures over the call: undici and the cancel signal keep
 * it for a stream's whole length, and it holds neither the request nor its body (which the closures'
 * scope did: one more copy of the prompt per open stream).
 */
class Call implements Dispatcher.DispatchHandler {
  readonly answered: Promise<Answered>;
  private resolve!: (answer: Answered) => void;
  private reject!: (error: Error) => void;
  private status = 0;
  private headers: Answered['headers'] = {};
  private streamed = false; // a 2xx answer to a streamed request
  private rest: BodyQueue | null = null; // once its first event came whole
  private preamble: Preamble | null = null; // made only if a stream begins with a comment
  private held: Buffer[] | null = null; // a first event not yet whole, as it came
  private heldBytes = 0;
  private heldScan = IN_LINE; // where eventEnd left off in it
  private heldData = false; // it began with a `data` line (most streams): its first blank line ends it
  private blocks: Blocks | null = null; // made only if a stream begins otherwise
  private readonly chunks: Buffer[] = [];
  private size = 0; // of a whole answer so far
  /** Set once undici has let the request go on (onRequestStart): from then on a cancel aborts it. */
  private controller: Dispatcher.DispatchController | null = null;

  constructor(
    private readonly cancel: CancelSignal,
    private readonly stream: boolean,
    private readonly idleMs: number,
  ) {
    this.answered = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    cancel.once('abort', this.onCancel);
  }

  // Until undici starts the request (connecting, or queued for a connection) there is nothing to
  // abort, and dispatch takes no signal: settle now; onRequestStart aborts it before it is sent.
  // Once onRequestStart has let it go on, the provider has it: undici writes the request, its
  // body one buffer, in the same step, right after onRequestStart returns (client-h1's and
  // client-h2's writeBuffer). undici's handler API has no later 'request sent' hook: onRequestSent
  // reaches only old-style handlers (its UnwrapHandler does not pass it on to this one).
  private readonly onCancel = (): void => {
    const received = this.status === 0 || (this.status >= 200 && this.status < 300);
    if (this.controller) this.controller.abort(new Cancelled(received, this.held ? generatedIn(this.held) : undefined));
    else this.reject(new Cancelled(false));
  };

  private done(): void {
    this.cancel.removeListener('abort', this.onCancel);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    if (this.cancel.aborted) return controller.abort(new Cancelled(false)); // never sent
    this.controller = controller;
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Answered['headers']): void {
    this.status = statusCode;
    this.headers = headers;
    this.streamed = this.stream && statusCode >= 200 && statusCode < 300 && eventStream(headers['content-type']);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.streamed) return this.collect(controller, chunk);
    if (this.rest) return this.rest.push(chunk);
    if (this.held) return this.hold(controller, chunk); // the rest of a first event
    // Most streams begin with `data:`; one that begins with comments has not answered yet, nor has
    // one that has sent only its byte-order mark (read past, as the client's SSE decoder reads past it).
    let at = 0;
    if (chunk[0] === COLON || chunk[0] === LF || chunk[0] === CR || chunk[0] === BOM[0] || this.preamble)
      at = (this.preamble ??= new Preamble()).at(chunk);
    if (at === -1) return; // dropped: comments are never relayed
    this.hold(controller, at === 0 ? chunk : chunk.subarray(at));
  }

  /**
   * The stream is handed on once its first event is whole, so that failover can read an error in it
   * (a provider may send that event in pieces); the client could not read half an event anyway.
   */
  private hold(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    // Blocks without a `data` line (`retry: 3000`, an `id:` or `event:` line alone) make no event: the
    // answer has not begun, as after comments. Dropped when a piece ends with them (nothing of them
    // reaches the client), so a provider sending them as keep-alives has them neither kept nor taken
    // for its answer; else held with the event after them, until that event's end.
    if (this.held === null) this.heldData = startsWithData(chunk);
    const scan = this.heldData ? eventEnd(chunk, this.heldScan) : (this.blocks ??= new Blocks()).scan(chunk);
    if (scan === BETWEEN) {
      this.held = null;
      this.heldBytes = 0;
      return;
    }
    if (this.held) this.held.push(chunk);
    if (scan !== EVENT_END && this.heldBytes + chunk.length < FIRST_EVENT_HELD) {
      this.held ??= [chunk];
      this.heldBytes += chunk.length;
      this.heldScan = scan;
      return;
    }
    const first = this.held ? Buffer.concat(this.held) : chunk; // copied once, when whole
    this.held = null;
    this.handOn(controller, first);
  }

  private handOn(controller: Dispatcher.DispatchController, first: Buffer): void {
    this.rest = new BodyQueue(controller, this.idleMs);
    this.resolve({ status: this.status, headers: this.headers, first, rest: this.rest, latencyMs: 0 });
  }

  onResponseEnd(controller: Dispatcher.DispatchController): void {
    this.done();
    if (this.held) {
      // Ended inside its first event: relayed when that event reads whole (a server that ends its last
      // event without the blank line); cut short, it is a failed call, failed over, where the client
      // got half an event it could not read.
      const first = Buffer.concat(this.held);
      this.held = null;
      if (!readsWhole(first)) return this.reject(new UpstreamError('stream ended inside its first event', 'PROVIDER_DOWN'));
      this.handOn(controller, first);
    }
    if (this.rest) this.rest.end();
    else if (this.streamed) this.reject(new UpstreamError('stream ended before its first event', 'PROVIDER_DOWN'));
    else {
      const body = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
      this.resolve({ status: this.status, headers: this.headers, body, latencyMs: 0 });
    }
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.done();
    if (this.rest) this.rest.fail(error);
    else this.reject(this.status === 0 && refused(error) ? new Refused(error) : error);
  }

  /** A whole answer's chunk: past the limit the answer is refused once and its connection cut. */
  private collect(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.size > answerLimit) return; // refused already
    this.size += chunk.length;
    if (this.size <= answerLimit) return void this.chunks.push(chunk);
    this.chunks.length = 0;
    const tooLarge = new UpstreamError(`answer larger than ${answerLimit} bytes`, 'ANSWER_TOO_LARGE');
    this.reject(tooLarge);
    controller.abort(tooLarge);
  }
}

/**
 * One attempt. Network errors and timeouts throw UpstreamError; any HTTP answer is returned.
 * A streamed 2xx answer resolves once its first event has arrived whole (comments before it are dropped).
 */
export async function callUpstream(
  out: OutboundRequest,
  opts: { timeoutMs: number; signal?: CancelSignal; stream: boolean },
): Promise<UpstreamAnswer> {
  const started = performance.now();
  // One canceller per attempt: fired by its timer or by the client going away. (A plain timer
  // that is cleared costs ~1 µs; AbortSignal.timeout + AbortSignal.any cost ~20 µs and keep a
  // 30 s timer alive per request.)
  const controller = new Cancel();
  let timedOut = false;
  const timer = setTimeout(
    () => {
      timedOut = true;
      controller.abort();
    },
    Math.max(1, opts.timeoutMs),
  );
  const onClientGone = () => controller.abort();
  opts.signal?.once('abort', onClientGone);
  let streaming = false;
  try {
    const { origin, path } = target(out.url);
    // bodyTimeout 0: none; the attempt's timer bounds a whole answer and a stream's first event, the BodyQueue the rest.
    const options = {
      origin,
      path,
      method: 'POST' as const,
      headers: out.headers,
      body: out.body,
      idempotent: multiplexed,
      bodyTimeout: 0,
    };
    let answer: Answered;
    try {
      answer = await dispatch(options, controller, opts.stream, streamIdleMs);
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      answer = await sendAgain(options, controller, opts.stream, streamIdleMs);
    }
    streaming = 'rest' in answer; // the client going away still cancels the rest of the stream
    // Set in place, not spread into a copy: a spread made an object of a new shape on every call,
    // and every later read of it missed V8's caches (about 5 % of the hot path's instructions).
    answer.latencyMs = performance.now() - started;
    return answer;
  } catch (error) {
    if (error instanceof UpstreamError) throw error;
    if (opts.signal?.aborted && !timedOut) {
      const cancelled = error instanceof Cancelled ? error : null;
      throw new UpstreamError('the client went away', 'CLIENT_CLOSED', cancelled?.received === true, cancelled?.generated);
    }
    throw classify(error, timedOut);
  } finally {
    clearTimeout(timer);
    if (!streaming) opts.signal?.removeListener('abort', onClientGone);
  }
}

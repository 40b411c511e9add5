/**
 * One WebSocket to the realtime model (GA interface: `Authorization: Bearer` and no `OpenAI-Beta`
 * header). It opens within a deadline or fails; afterwards it hands each server event to `onEvent`
 * and reports one failure (closed without our asking, a socket error or an event over 16 MiB, a
 * fault while handling an event) to `onFailure`. Errors never
 * carry the key: a refused handshake is described by its HTTP status only.
 */
import type { RealtimeClientEvent } from 'openai/resources/realtime/realtime';
import WebSocket from 'ws';
import { isObject } from '../../json-object';

/** What the bridge sends the API: one of its client events, or an event written out (the bridge's own responses). */
export type ClientEvent = RealtimeClientEvent | ({ type: string } & Record<string, unknown>);

/**
 * The largest server event taken. The largest the API sends are a few MiB at most (a response.done
 * with a long transcript and function arguments, a session.created echoing long instructions; audio
 * comes in small deltas): 16 MiB leaves them room many times over, where ws's own 100 MiB default
 * would take one enormous event whole into memory, on every call at once. A larger event is refused
 * (1009) and this socket fails as any other does.
 */
const MAX_EVENT_BYTES = 16 * 1024 * 1024;

/**
 * How long the server may go without answering a ping (nor sending anything), or without sending
 * anything of a response in progress (its events come faster than its audio plays), before its
 * socket is taken as gone: a network that holds every packet, or a server that hangs, closes
 * nothing, and the caller would wait in silence for as long as the call lasts. Checked as often.
 */
const SILENT_FOR_MS = 5_000;

/** How the socket is watched: every `silentForMs`, and what the server owes, if anything (`owed`: "the response in progress"). */
export interface Watch {
  silentForMs?: number;
  owed?: () => string | null;
}

export interface RealtimeServerMessage {
  type: string;
  [field: string]: unknown;
}

export class RealtimeLink {
  private closedByUs = false;
  private failed = false;
  private readonly watchdog: NodeJS.Timeout;
  /** Something came from the server (an event, a pong) since the last ping. */
  private heard = true;
  /** An event came from the server since the last check. */
  private evented = true;
  /** The server owed something at the last check: silence since then is a whole interval of it. */
  private owing = false;
  private checkedAt = performance.now();
  onEvent: (event: RealtimeServerMessage) => void = () => undefined;
  onFailure: (why: string) => void = () => undefined;

  private constructor(
    private readonly ws: WebSocket,
    private readonly watch: Required<Watch>,
  ) {
    this.watchdog = setInterval(() => this.check(), watch.silentForMs).unref();
    ws.on('pong', () => (this.heard = true));
    ws.once('close', () => clearInterval(this.watchdog));
    ws.on('message', (data, isBinary) => {
      this.heard = this.evented = true;
      if (isBinary) return;
      let event: RealtimeServerMessage;
      try {
        event = JSON.parse(data.toString()) as RealtimeServerMessage;
      } catch {
        return this.fail('the realtime server sent a message that is not JSON');
      }
      if (!event || typeof event.type !== 'string') return;
      // A listener that throws would reach ws as an uncaught exception (the process, and every
      // call on it, gone): a fault while handling an event is this socket's failure instead.
      try {
        this.onEvent(event);
      } catch (error) {
        this.fail(`handling a realtime ${event.type.slice(0, 60)} event failed (${(error as Error).message})`);
      }
    });
    ws.on('close', (code) => this.fail(`the realtime socket closed (code ${code})`));
    ws.on('error', (error) => this.fail(`the realtime socket failed (${error.message})`));
  }

  /** Opens the socket; rejects when it is refused or not open within `timeoutMs`. */
  static connect(url: string, apiKey: string, timeoutMs: number, watch: Watch = {}): Promise<RealtimeLink> {
    const watching = { silentForMs: watch.silentForMs ?? SILENT_FOR_MS, owed: watch.owed ?? (() => null) };
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, {
        headers: { authorization: `Bearer ${apiKey}` },
        handshakeTimeout: timeoutMs,
        perMessageDeflate: false,
        maxPayload: MAX_EVENT_BYTES,
      });
      const timer = setTimeout(() => {
        ws.terminate();
        reject(new Error(`the realtime server did not open within ${timeoutMs} ms`));
      }, timeoutMs);
      ws.once('unexpected-response', (_req, res) => {
        clearTimeout(timer);
        ws.terminate();
        res.resume();
        reject(new Error(`the realtime server refused the connection (HTTP ${res.statusCode})${refusalHint(res.statusCode)}`));
      });
      ws.once('error', (error) => {
        clearTimeout(timer);
        reject(new Error(`the realtime server could not be reached (${error.message})`));
      });
      ws.once('open', () => {
        clearTimeout(timer);
        resolve(new RealtimeLink(ws, watching));
      });
    });
  }

  get open(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  send(event: ClientEvent): void {
    if (this.open) this.ws.send(JSON.stringify(event));
  }

  /** A message already serialised (the audio hot path builds it without JSON.stringify). */
  sendRaw(text: string): void {
    if (this.open) this.ws.send(text);
  }

  close(): void {
    this.closedByUs = true;
    clearInterval(this.watchdog);
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(1000);
  }

  /** Pings the server, or fails the socket when the last ping, or what the server owes, went unanswered. */
  private check(): void {
    const { silentForMs } = this.watch;
    // A check that comes late found this process busy, not the server silent: what it sent may be unread.
    const late = performance.now() - this.checkedAt > silentForMs * 1.5;
    this.checkedAt = performance.now();
    if (late || !this.silent()) return this.ping();
    // After the I/O already waiting is read: a pong held up by a busy process is not a silent server.
    setImmediate(() => {
      if (!this.heard) this.fail(`the realtime server stopped answering (nothing from it, not even a pong, for ${silentForMs} ms)`);
      else if (this.silent()) this.fail(`the realtime server sent nothing for ${silentForMs} ms of ${this.watch.owed()}`);
      else this.ping();
    });
  }

  /** Nothing answered the last ping, or nothing came since the last check while the server owed something. */
  private silent(): boolean {
    return !this.heard || (!this.evented && this.owing && this.watch.owed() !== null);
  }

  private ping(): void {
    this.heard = this.evented = false;
    this.owing = this.watch.owed() !== null;
    if (this.open) this.ws.ping();
  }

  private fail(why: string): void {
    if (this.closedByUs || this.failed) return;
    this.failed = true;
    this.ws.terminate();
    this.onFailure(why);
  }
}

/** A server `error` event in one short line (type, code, param, message), whatever its shape. */
export function describeError(e: RealtimeServerMessage): string {
  const err = isObject(e.error) ? e.error : {};
  const parts = [err.type, err.code, err.param, err.message].filter((v): v is string => typeof v === 'string' && v !== '');
  return parts.map((v) => v.slice(0, 200)).join(': ') || 'no details';
}

/**
 * What an operator can do about a refused handshake: 401 and 403 are the key (wrong, revoked, or
 * without access to the model), said so, since every call fails the same way until it is fixed.
 * The body is not quoted: OpenAI's 401 message repeats part of the key.
 */
function refusalHint(status: number | undefined): string {
  if (status === 401) return ': OPENAI_API_KEY was not accepted (a wrong or revoked key)';
  if (status === 403) return ': OPENAI_API_KEY has no access to the realtime model (meta.model) in its project';
  return '';
}

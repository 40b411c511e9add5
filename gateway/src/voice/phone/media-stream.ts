/**
 * `wss://…/twilio/media`: Twilio Media Streams. The handshake must carry a valid
 * `X-Twilio-Signature` (else `403`, no socket); then `connected`, and `start` within 10 s, whose
 * CallSid must come with the ticket our webhook gave that call (else the socket is closed with
 * 1008 and nothing starts: no realtime connection, no cost). One stream per call: a ticket
 * already used on this instance opens nothing (a replayed handshake and `start`), nor does one
 * whose call already ended on any instance (the call store says so), and every ticket expires
 * (twilio-auth.ts), so no instance takes one for long. A live stream that falls silent
 * without closing (no message for 10 s where Twilio sends a frame every 20 ms: the network between
 * us broke) ends its call as `stream_lost`, or it would hold its realtime session, and its record,
 * until the process ends; so does one whose socket breaks without Twilio's `stop` (see `closed`).
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import { z } from 'zod';
import type { CallSession } from './call-session';
import type { TwilioMessage } from './call-types';
import { TICKET_VALID_FOR_MS, type TwilioAuth } from './twilio-auth';
import { isObject } from '../../json-object';
import { ExpiringMap } from '../expiring-map';
import { RepeatLog } from '../../repeat-log';

const Start = z.object({
  event: z.literal('start'),
  start: z.object({
    streamSid: z.string().regex(/^[A-Za-z0-9]{1,64}$/),
    callSid: z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/),
    customParameters: z.record(z.string(), z.string()).default({}),
    mediaFormat: z.object({ encoding: z.literal('audio/x-mulaw'), sampleRate: z.literal(8000), channels: z.literal(1) }).optional(),
  }),
});
export type StreamStart = z.infer<typeof Start>['start'];

const START_WITHIN_MS = 10_000;
const SILENT_FOR_MS = 10_000;
/** A close frame that says the stream ended normally (1005: one that says no more). */
const CLEAN_CLOSES = new Set([1000, 1001, 1005]);

/** One media stream: its call once `start` came, whether a malformed message was logged, when it last spoke. */
interface Stream {
  session: CallSession | null;
  /** What came while its `start` was checked against the call store, in order. */
  held: Array<string | null> | null;
  warned: boolean;
  heardAt: number;
  watchdog: NodeJS.Timeout | null;
}

export class MediaStreams {
  private readonly wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, maxPayload: 256 * 1024 });
  readonly live = new Map<string, CallSession>();
  /** Calls that had their stream here, for as long as their ticket could still be accepted. */
  private readonly streamed = new ExpiringMap<true>();
  /** Refused handshakes: anyone can knock, so not a line each (repeat-log.ts). */
  private readonly refusals = new RepeatLog();

  constructor(
    private readonly deps: {
      auth: TwilioAuth;
      create: (start: StreamStart, ws: WebSocket) => CallSession;
      /** Whether the call already ended (its record written), here or on another instance. */
      ended: (callSid: string) => Promise<boolean>;
      log: { warn: (m: string) => void; error: (m: string) => void };
      /** How long a live stream may send nothing before its call is ended (10 s; tests shorten it). */
      silentForMs?: number;
    },
  ) {}

  /** Takes `/twilio/media` upgrades (true), leaves any other path to others (false). */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean {
    if ((req.url ?? '').split('?')[0] !== '/twilio/media') return false;
    if (!this.deps.auth.handshake(req)) {
      const signature = req.headers['x-twilio-signature'];
      const why = this.deps.auth.refusal(signature, this.deps.auth.mediaUrl);
      const more = this.refusals.due(signature ? 'mismatch' : 'unsigned');
      if (more !== null) this.deps.log.warn(`twilio media: refused a stream handshake (${req.socket.remoteAddress}): ${why}${more}`);
      socket.end(
        'HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: 26\r\n\r\ninvalid Twilio signature\r\n',
      );
      // Closed once sent: ended only, a half-open connection node's reader has let go (no timeout
      // left) stayed open as long as its client kept its side so.
      socket.once('finish', () => socket.destroy());
      return true;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws));
    return true;
  }

  private accept(ws: WebSocket): void {
    const stream: Stream = { session: null, held: null, warned: false, heardAt: performance.now(), watchdog: null };
    const timer = setTimeout(() => ws.close(1008, 'no start message'), START_WITHIN_MS);
    ws.on('message', (data, isBinary) => {
      stream.heardAt = performance.now();
      this.handle(ws, stream, timer, isBinary ? null : data.toString());
    });
    ws.on('close', (code) => {
      clearTimeout(timer);
      if (stream.watchdog) clearTimeout(stream.watchdog);
      if (stream.session) this.closed(stream.session, code);
    });
    ws.on('error', () => ws.terminate());
  }

  /**
   * A listener that throws would reach ws as an uncaught exception (the process, and every call
   * on it, gone) and leave this socket unread: end this one call instead.
   */
  private handle(ws: WebSocket, stream: Stream, timer: NodeJS.Timeout, text: string | null): void {
    try {
      this.message(ws, stream, timer, text);
    } catch (error) {
      this.deps.log.error(`twilio media: call ${stream.session?.callSid ?? '(not started)'}: ${(error as Error).message}; ending it`);
      if (stream.session) void stream.session.finish('bridge_error');
      else ws.close(1011, 'internal error');
    }
  }

  private message(ws: WebSocket, stream: Stream, timer: NodeJS.Timeout, text: string | null): void {
    if (stream.held) return void stream.held.push(text);
    let m: unknown;
    try {
      m = JSON.parse(text ?? '');
    } catch {
      // Before `start` nothing is lost by closing; on a live call it is ignored as below.
      if (!stream.session) return ws.close(1003, 'expected JSON text messages');
    }
    if (!stream.session) {
      if (isObject(m) && m.event === 'connected') return;
      clearTimeout(timer);
      return void this.begin(m, ws, stream, timer).catch((error: Error) => {
        this.deps.log.error(`twilio media: a stream's start failed: ${error.message}; closing it`);
        ws.close(1011, 'internal error');
      });
    }
    // Twilio only sends JSON objects as text; anything else (not JSON, binary, null, an array, a
    // number) is ignored so that one bad message does not cut the caller off, and logged once per
    // stream (closing would also have ended the call).
    if (isObject(m)) return stream.session.onTwilio(m as TwilioMessage);
    if (!stream.warned) this.deps.log.warn(`twilio media: call ${stream.session.callSid}: ignored a message that is not a JSON object`);
    stream.warned = true;
  }

  /**
   * Twilio sends `stop` before it ends a stream (the caller hung up, the call was redirected or
   * completed), and that already ended the call. A socket gone without it and without a clean close
   * (reset, no close frame, 1011, a frame we refused with 1009) is the network between us: Twilio
   * goes on to the fallback after `<Connect>` and the caller to a person, so the call did not end
   * by their hang-up and is recorded as `stream_lost`, as a stream that falls silent is.
   */
  private closed(session: CallSession, code: number): void {
    if (CLEAN_CLOSES.has(code)) return void session.finish('caller_hangup');
    if (!session.over)
      this.deps.log.warn(`twilio media: call ${session.callSid}: the stream closed without a stop (code ${code}); ending the call`);
    void session.finish('stream_lost');
  }

  /** Ends the call of a stream that stopped sending without closing (its end closes the socket, ws destroys it if unanswered). */
  private watch(stream: Stream, session: CallSession): void {
    const silentForMs = this.deps.silentForMs ?? SILENT_FOR_MS;
    const check = () => {
      const quiet = performance.now() - stream.heardAt;
      if (quiet < silentForMs) return void (stream.watchdog = setTimeout(check, silentForMs - quiet).unref());
      this.deps.log.warn(`twilio media: call ${session.callSid}: nothing from Twilio for ${Math.round(quiet)} ms; ending the call`);
      void session.finish('stream_lost');
    };
    stream.watchdog = setTimeout(check, silentForMs).unref();
  }

  /** A stream whose `start` is taken: its call begins once the store says the call has not ended. */
  private async begin(m: unknown, ws: WebSocket, stream: Stream, timer: NodeJS.Timeout): Promise<void> {
    const start = this.taken(m, ws);
    if (!start) return;
    stream.held = [];
    const ended = await this.deps.ended(start.callSid).catch((error: Error) => {
      // A store that does not answer must not cut off a caller the ticket admits.
      this.deps.log.warn(`twilio media: call ${start.callSid}: could not check whether it ended (${error.message}); taking it`);
      return false;
    });
    const held = stream.held;
    stream.held = null;
    if (ended) {
      this.deps.log.warn(`twilio media: refused a stream for call ${start.callSid}: the call already ended`);
      return ws.close(1008, 'this call already ended');
    }
    if (ws.readyState !== WebSocket.OPEN) return; // gone meanwhile: its status callback records it
    stream.session = this.deps.create(start, ws);
    this.live.set(start.callSid, stream.session);
    this.watch(stream, stream.session);
    for (const text of held) this.handle(ws, stream, timer, text);
  }

  /** A valid start, with this call's ticket, for a call that had no stream here (else closed). */
  private taken(m: unknown, ws: WebSocket): StreamStart | null {
    const parsed = Start.safeParse(m);
    if (!parsed.success) {
      ws.close(1008, 'expected a start message with audio/x-mulaw 8000 Hz mono');
      return null;
    }
    const start = parsed.data.start;
    if (!this.deps.auth.ticketMatches(start.callSid, start.customParameters.ticket)) {
      this.deps.log.warn(`twilio media: refused a stream for call ${start.callSid}: not a call this gateway answered`);
      ws.close(1008, 'not a call this gateway answered');
      return null;
    }
    if (this.live.has(start.callSid) || this.streamed.get(start.callSid)) {
      this.deps.log.warn(`twilio media: refused a second stream for call ${start.callSid}`);
      ws.close(1008, 'this call already had its stream');
      return null;
    }
    this.streamed.set(start.callSid, true, TICKET_VALID_FOR_MS / 1000);
    return start;
  }

  /** Ends every live call (shutdown) and stops accepting streams. */
  async close(): Promise<void> {
    await Promise.all([...this.live.values()].map((s) => s.finish('shutdown')));
    for (const ws of this.wss.clients) ws.terminate();
    await new Promise<void>((r) => this.wss.close(() => r()));
  }
}

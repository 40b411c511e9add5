// A local Twilio: places a call through the signed voice webhook, opens the Media Stream the TwiML
// names (signed handshake, connected/start, then a 20 ms µ-law frame every 20 ms like a phone line:
// the caller's audio when it speaks, silence otherwise), plays the gateway's audio in real time
// and echoes each mark once the audio before it has played; `clear` drops what is buffered. Its
// REST API side takes call updates (redirect with TwiML, Status=completed) with basic auth and,
// like Twilio, then ends the call's stream with `stop`; and text messages (Messages.json), kept.
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getExpectedTwilioSignature } from 'twilio/lib/webhooks/webhooks.js';
import WebSocket from 'ws';
import { FRAME_BYTES, silence } from './mulaw';

export interface TwilioPeerOptions {
  gateway: string; // http://127.0.0.1:port
  publicUrl: string; // what PUBLIC_URL says (signatures are computed over it)
  authToken: string;
  accountSid: string;
}

export interface Answer {
  status: number;
  twiml: string;
  stream: { url: string; parameters: Record<string, string> } | null;
}

const SILENCE = silence(20);

export class MediaCall extends EventEmitter {
  readonly streamSid = `MZ${Math.random().toString(16).slice(2).padEnd(32, '0')}`;
  /** Outbound audio the gateway sent (concatenated, since the stream opened). */
  received: Buffer[] = [];
  receivedBytes = 0;
  playedBytes = 0;
  private playedAt = performance.now();
  /** Every caller byte sent, in order. */
  sent: Buffer[] = [];
  clears: Array<{ playedBytes: number; at: number }> = [];
  marksEchoed: string[] = [];
  /** How far into `received` the last echoed mark's audio ends: what the gateway has been told was heard. */
  echoedBytes = 0;
  closed = false;
  /** Marks are played past and never echoed (a stream that loses them): the gateway is never told what was heard. */
  dropMarks = false;
  private stalled = false;
  private queue: Buffer[] = [];
  private pendingMarks: Array<{ name: string; at: number }> = [];
  private timer: NodeJS.Timeout | null = null;
  private ticks = 0;
  private t0 = 0;

  constructor(
    readonly callSid: string,
    readonly ws: WebSocket,
  ) {
    super();
    ws.on('message', (data) => this.onMessage(JSON.parse(String(data))));
    ws.on('close', (code, reason) => {
      this.closed = true;
      if (this.timer) clearTimeout(this.timer);
      this.emit('closed', { code, reason: String(reason) });
    });
  }

  /** Starts the line: one frame every 20 ms from now on. */
  run(): void {
    this.t0 = performance.now();
    const tick = () => {
      if (this.closed || this.stalled) return;
      this.frame();
      this.ticks++;
      this.timer = setTimeout(tick, Math.max(0, this.t0 + this.ticks * 20 - performance.now()));
    };
    tick();
  }

  /** The stream stalls: nothing more is sent (the network between Twilio and the gateway broke), the socket stays open. */
  stall(): void {
    if (this.timer) clearTimeout(this.timer);
    this.stalled = true;
  }

  /** The caller speaks these µ-law bytes (queued after anything still being said). */
  say(bytes: Buffer): void {
    for (let i = 0; i < bytes.length; i += FRAME_BYTES) this.queue.push(bytes.subarray(i, i + FRAME_BYTES));
  }

  /** Resolves once everything queued has been sent. */
  async spoken(): Promise<void> {
    while (this.queue.length && !this.closed) await new Promise((r) => this.once('frame', r));
  }

  /** The caller presses a key on the phone's keypad: Twilio sends a `dtmf` message. */
  press(digit: string): void {
    this.send({ event: 'dtmf', streamSid: this.streamSid, sequenceNumber: '0', dtmf: { track: 'inbound_track', digit } });
  }

  /** The caller hangs up: Twilio sends `stop` and closes. */
  hangUp(): void {
    this.send({ event: 'stop', sequenceNumber: '0', streamSid: this.streamSid, stop: { accountSid: 'AC', callSid: this.callSid } });
    this.ws.close(1000);
  }

  /** The network between Twilio and the gateway breaks: the socket is reset mid-call, no `stop`, no close frame. */
  reset(): void {
    (this.ws as unknown as { _socket: { resetAndDestroy(): void } })._socket.resetAndDestroy();
  }

  send(m: unknown): void {
    if (this.ws.readyState === WebSocket.OPEN && !this.stalled) this.ws.send(JSON.stringify(m));
  }

  private frame(): void {
    const chunk = this.queue.shift() ?? SILENCE;
    this.sent.push(chunk);
    this.send({
      event: 'media',
      streamSid: this.streamSid,
      media: { track: 'inbound', chunk: String(this.ticks + 1), timestamp: String(this.ticks * 20), payload: chunk.toString('base64') },
    });
    this.play();
    this.echoMarks();
    this.emit('frame');
  }

  /** Playback runs on the wall clock, as a phone line does (8 bytes a ms while audio is queued). */
  private play(): void {
    const now = performance.now();
    this.playedBytes = Math.min(this.receivedBytes, this.playedBytes + (now - this.playedAt) * 8);
    this.playedAt = now;
  }

  private echoMarks(): void {
    while (this.pendingMarks.length && this.pendingMarks[0].at <= this.playedBytes) {
      const { name, at } = this.pendingMarks.shift()!;
      if (this.dropMarks) continue;
      this.marksEchoed.push(name);
      this.echoedBytes = at;
      this.send({ event: 'mark', sequenceNumber: '0', streamSid: this.streamSid, mark: { name } });
    }
  }

  private onMessage(m: { event: string; streamSid?: string; media?: { payload: string }; mark?: { name: string } }): void {
    if (m.streamSid !== this.streamSid) this.emit('error', new Error(`message for stream ${m.streamSid}`));
    this.play(); // audio arriving after a silence starts playing now, not in the past
    if (m.event === 'media') {
      const b = Buffer.from(m.media!.payload, 'base64');
      this.received.push(b);
      this.receivedBytes += b.length;
      this.emit('media', b);
    } else if (m.event === 'mark') {
      this.pendingMarks.push({ name: m.mark!.name, at: this.receivedBytes });
      this.echoMarks();
    } else if (m.event === 'clear') {
      this.clears.push({ playedBytes: this.playedBytes, at: performance.now() });
      this.receivedBytes = this.playedBytes;
      // Cleared audio never plays; Twilio returns the marks that were waiting on it.
      this.pendingMarks.forEach((p) => (p.at = this.playedBytes));
      this.echoMarks();
      this.emit('clear', this.clears.at(-1));
    }
  }
}

/** An attribute of the first `<verb>` in a TwiML document, unescaped (null when absent). */
export function twimlAttr(twiml: string, verb: string, attr: string): string | null {
  const tag = new RegExp(`<${verb}\\b[^>]*>`).exec(twiml)?.[0];
  const value = tag ? new RegExp(`\\s${attr}="([^"]*)"`).exec(tag)?.[1] : undefined;
  return value === undefined
    ? null
    : value
        .replace(/&quot;/g, '"')
        .replace(/&lt;/g, '<')
        .replace(/&gt;/g, '>')
        .replace(/&amp;/g, '&');
}

export class TwilioPeer {
  readonly updates: Array<{ callSid: string; form: Record<string, string>; at: number }> = [];
  /** Text messages sent through the Messages API (To, From, Body). */
  readonly texts: Array<Record<string, string>> = [];
  /** The Messages API's answer (e.g. 400 or 500 to see a text fail). */
  textStatus = 201;
  readonly events = new EventEmitter();
  readonly calls = new Map<string, MediaCall>();
  /** The REST API's answer to the next updates (e.g. 500 to see retries, 404 for a gone call). */
  apiStatus = 200;
  /** While set, call updates are answered only once it resolves (Twilio slow to answer). */
  hold: Promise<void> | null = null;
  private server!: Server;
  apiUrl = '';

  constructor(readonly opts: TwilioPeerOptions) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.api(req, res));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.apiUrl = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    for (const c of this.calls.values()) if (!c.closed) c.ws.terminate();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  /** Twilio's inbound-call webhook, signed as Twilio signs it (or with `signature` to forge one). */
  async placeCall(form: Record<string, string>, signature?: string): Promise<Answer> {
    const url = `${this.opts.publicUrl}/twilio/voice`;
    const res = await fetch(`${this.opts.gateway}/twilio/voice`, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        'x-twilio-signature': signature ?? getExpectedTwilioSignature(this.opts.authToken, url, form),
      },
      body: new URLSearchParams(form).toString(),
    });
    const twiml = await res.text();
    const streamUrl = /<Stream url="([^"]+)"/.exec(twiml)?.[1];
    const parameters = Object.fromEntries([...twiml.matchAll(/<Parameter name="([^"]+)" value="([^"]*)"\/>/g)].map((m) => [m[1], m[2]]));
    return { status: res.status, twiml, stream: streamUrl ? { url: streamUrl, parameters } : null };
  }

  /**
   * Twilio calling one of the URLs the gateway named in its TwiML (an absolute URL under
   * PUBLIC_URL, query included), signed over that URL as Twilio signs it.
   */
  async callback(url: string, form: Record<string, string>, signature?: string): Promise<{ status: number; body: string }> {
    const u = new URL(url);
    const res = await fetch(`${this.opts.gateway}${u.pathname}${u.search}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        'x-twilio-signature': signature ?? getExpectedTwilioSignature(this.opts.authToken, url, form),
      },
      body: new URLSearchParams(form).toString(),
    });
    return { status: res.status, body: await res.text() };
  }

  /** Opens the media stream the answer named, on the gateway's loopback port, signed over its wss:// URL. */
  async openStream(callSid: string, answer: Answer, opts: { signature?: string; ticket?: string } = {}): Promise<MediaCall> {
    const url = answer.stream!.url;
    const ws = new WebSocket(`${this.opts.gateway.replace(/^http/, 'ws')}${new URL(url).pathname}`, {
      headers: { 'x-twilio-signature': opts.signature ?? getExpectedTwilioSignature(this.opts.authToken, url, {}) },
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('unexpected-response', (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
      ws.once('error', reject);
    });
    const call = new MediaCall(callSid, ws);
    this.calls.set(callSid, call);
    call.send({ event: 'connected', protocol: 'Call', version: '1.0.0' });
    call.send({
      event: 'start',
      sequenceNumber: '1',
      streamSid: call.streamSid,
      start: {
        accountSid: this.opts.accountSid,
        streamSid: call.streamSid,
        callSid,
        tracks: ['inbound'],
        customParameters: { ...answer.stream!.parameters, ...(opts.ticket !== undefined ? { ticket: opts.ticket } : {}) },
        mediaFormat: { encoding: 'audio/x-mulaw', sampleRate: 8000, channels: 1 },
      },
    });
    call.run();
    return call;
  }

  /** A call answered and its stream open, in one step. */
  async call(callSid: string, from = '+351910000001'): Promise<MediaCall> {
    const answer = await this.placeCall({
      CallSid: callSid,
      AccountSid: this.opts.accountSid,
      From: from,
      To: '+351210000000',
      CallStatus: 'ringing',
      FromCountry: 'PT',
    });
    if (!answer.stream) throw new Error(`the call was not answered with a stream: ${answer.twiml}`);
    return this.openStream(callSid, answer);
  }

  private async api(req: IncomingMessage, res: import('node:http').ServerResponse): Promise<void> {
    let text = '';
    for await (const c of req) text += c;
    const m = /^\/2010-04-01\/Accounts\/([^/]+)\/Calls\/([^/]+)\.json$/.exec(req.url ?? '');
    const expected = `Basic ${Buffer.from(`${this.opts.accountSid}:${this.opts.authToken}`).toString('base64')}`;
    if (req.url === `/2010-04-01/Accounts/${this.opts.accountSid}/Messages.json` && req.method === 'POST') {
      if (req.headers.authorization !== expected) return void res.writeHead(401).end('{"message":"Authenticate"}');
      const message = Object.fromEntries(new URLSearchParams(text));
      this.texts.push(message);
      this.events.emit('text', message);
      if (this.textStatus >= 300)
        return void res.writeHead(this.textStatus, { 'content-type': 'application/json' }).end('{"message":"refused"}');
      return void res
        .writeHead(201, { 'content-type': 'application/json' })
        .end(JSON.stringify({ sid: `SM${this.texts.length}`, status: 'queued' }));
    }
    if (!m || req.method !== 'POST') return void res.writeHead(404).end();
    if (req.headers.authorization !== expected)
      return void res.writeHead(401, { 'content-type': 'application/json' }).end('{"message":"Authenticate"}');
    const form = Object.fromEntries(new URLSearchParams(text));
    const update = { callSid: m[2], form, at: performance.now() };
    this.updates.push(update);
    this.events.emit('update', update);
    if (this.hold) await this.hold;
    if (this.apiStatus !== 200)
      return void res.writeHead(this.apiStatus, { 'content-type': 'application/json' }).end('{"message":"unavailable"}');
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sid: m[2], status: form.Status ?? 'in-progress' }));
    // Redirected or completed: the <Connect><Stream> is over, as Twilio ends it.
    const call = this.calls.get(m[2]);
    if (call && !call.closed) call.hangUp();
  }
}

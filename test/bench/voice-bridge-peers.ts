// The bridge bench's peers, lean so that they measure the bridge and not themselves: a realtime
// server that answers session.update, takes appends and sends one 20 ms µ-law delta per call every
// 20 ms; Twilio media-stream clients that send one 20 ms frame every 20 ms and echo marks. Each
// frame carries its sequence number, call index and send time in its first bytes (the bridge
// passes bytes through unchanged). The two sides run in worker threads of one process, whose
// `performance.now()` share one origin, so the receiver reads the delay off the frame itself.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { voiced } from '../voice/peers/mulaw';

const VOICE = voiced(1000, 140);
const HEAD = Buffer.alloc(12);
/** The rest of each frame (148 bytes of µ-law voice), encoded once. */
const TAILS = Array.from({ length: 50 }, (_, i) => VOICE.subarray(i * 160 + 12, i * 160 + 160).toString('base64'));
const micros = () => Math.round(performance.now() * 1000) >>> 0;

/** Where the value of `"key":"` starts in a message (the peers read only what they need). */
function valueAt(text: string, key: string): number {
  const i = text.indexOf(key);
  return i < 0 ? -1 : i + key.length;
}

/** One direction's frames as seen by one side: how many it sent, or received and how late. */
export class Direction {
  readonly samples: number[] = [];
  sent = 0;
  received = 0;
  recording = false;
  /**
   * A 160-byte frame for call `call`, number `seq`, stamped now (µs). Its first 12 bytes (seq,
   * call, time) are 16 base64 characters on their own (12 is a multiple of 3): only they are
   * encoded per frame.
   */
  frame(call: number, seq: number): string {
    HEAD.writeUInt32BE(seq, 0);
    HEAD.writeUInt16BE(call, 4);
    HEAD.writeUInt32BE(micros(), 6);
    this.sent++;
    return HEAD.toString('base64') + TAILS[seq % TAILS.length];
  }
  /** A frame arrived: its base64 payload starts at `at` in the message text; returns its call. */
  arrived(text: string, at: number): number {
    const head = Buffer.from(text.slice(at, at + 16), 'base64');
    const ms = ((micros() - head.readUInt32BE(6)) >>> 0) / 1000;
    this.received++;
    if (this.recording) this.samples.push(ms);
    return head.readUInt16BE(4);
  }
}

/** Calls `fn` every 20 ms from `phaseMs` on, correcting drift, until `stop()`. */
function every20(phaseMs: number, fn: (n: number) => void): { stop(): void } {
  let n = 0;
  let stopped = false;
  const t0 = performance.now() + phaseMs;
  const tick = () => {
    if (stopped) return;
    fn(n++);
    setTimeout(tick, Math.max(0, t0 + n * 20 - performance.now()));
  };
  setTimeout(tick, phaseMs);
  return { stop: () => (stopped = true) };
}

export class BenchRealtime {
  private server!: Server;
  private readonly tickers: Array<{ stop(): void }> = [];
  url = '';
  constructor(
    private readonly inbound: Direction,
    private readonly outbound: Direction,
    private readonly calls: number,
  ) {}

  async start(): Promise<void> {
    const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });
    this.server = createServer((_q, res) => res.writeHead(426).end());
    this.server.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => this.session(ws)));
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `ws://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1/realtime`;
  }

  private session(ws: WebSocket): void {
    let call = -1;
    ws.send(JSON.stringify({ type: 'session.created', session: { type: 'realtime' } }));
    ws.on('message', (data) => {
      const text = data.toString();
      const at = valueAt(text, '"audio":"');
      if (at >= 0) {
        const from = this.inbound.arrived(text, at);
        if (call < 0) {
          call = from;
          const ticker = every20((call * 20) / this.calls, (n) => {
            if (ws.readyState !== WebSocket.OPEN) return ticker.stop();
            const delta = this.outbound.frame(call, n);
            ws.send(
              `{"type":"response.output_audio.delta","response_id":"resp_${call}","item_id":"item_${call}","output_index":0,"content_index":0,"delta":"${delta}"}`,
            );
          });
          this.tickers.push(ticker);
        }
        return;
      }
      const e = JSON.parse(text);
      if (e.type === 'session.update') ws.send(JSON.stringify({ type: 'session.updated', session: e.session }));
    });
  }

  stopSending(): void {
    this.tickers.splice(0).forEach((t) => t.stop());
  }

  close(): Promise<void> {
    this.stopSending();
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/** One caller's media stream: frames out every 20 ms, the bridge's media timed, marks echoed. */
export class BenchCall {
  private ticker: { stop(): void } | null = null;
  private readonly streamSid: string;
  constructor(
    private readonly ws: WebSocket,
    private readonly index: number,
    private readonly callSid: string,
    private readonly inbound: Direction,
    private readonly outbound: Direction,
    parameters: Record<string, string>,
  ) {
    this.streamSid = `MZ${String(index).padStart(32, '0')}`;
    ws.on('message', (data) => {
      const text = data.toString();
      const at = valueAt(text, '"payload":"');
      if (at >= 0) return void this.outbound.arrived(text, at);
      const mark = valueAt(text, '"name":"');
      if (mark >= 0)
        ws.send(`{"event":"mark","streamSid":"${this.streamSid}","mark":{"name":"${text.slice(mark, text.indexOf('"', mark))}"}}`);
    });
    ws.send(JSON.stringify({ event: 'connected', protocol: 'Call', version: '1.0.0' }));
    ws.send(
      JSON.stringify({
        event: 'start',
        streamSid: this.streamSid,
        start: {
          streamSid: this.streamSid,
          callSid,
          tracks: ['inbound'],
          customParameters: parameters,
          mediaFormat: { encoding: 'audio/x-mulaw', sampleRate: 8000, channels: 1 },
        },
      }),
    );
  }

  run(calls: number): void {
    this.ticker = every20((this.index * 20) / calls, (n) => {
      if (this.ws.readyState !== WebSocket.OPEN) return this.ticker?.stop();
      const payload = this.inbound.frame(this.index, n);
      this.ws.send(
        `{"event":"media","streamSid":"${this.streamSid}","media":{"track":"inbound","timestamp":"${n * 20}","payload":"${payload}"}}`,
      );
    });
  }

  stopSending(): void {
    this.ticker?.stop();
  }

  hangUp(): void {
    this.stopSending();
    if (this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ event: 'stop', streamSid: this.streamSid, stop: { callSid: this.callSid } }));
      this.ws.close(1000);
    }
  }
}

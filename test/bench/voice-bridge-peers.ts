// The bridge bench's peers, lean so that they measure the bridge and not themselves: a realtime
// server that answers session.update, takes appends and sends one 20 ms µ-law delta per call every
// 20 ms; Twilio media-stream clients that send one 20 ms frame every 20 ms and echo marks. Each
// frame carries its sequence number and call index in its first bytes (the bridge passes bytes
// through unchanged), so the receiving side looks up when it was sent: one clock, one process.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { voiced } from '../voice/peers/mulaw';

const RING = 4096;
const VOICE = voiced(1000, 140);

/** Send times and arrival latencies of one direction. */
export class Direction {
  readonly sentAt: Float64Array[] = [];
  readonly samples: number[] = [];
  readonly slow: Array<[number, number]> = [];
  sent = 0;
  received = 0;
  recording = false;
  constructor(calls: number) {
    for (let i = 0; i < calls; i++) this.sentAt.push(new Float64Array(RING));
  }
  /** A 160-byte frame for call `call`, number `seq`, stamped now. */
  frame(call: number, seq: number): string {
    const b = Buffer.from(VOICE.subarray((seq % 50) * 160, (seq % 50) * 160 + 160));
    b.writeUInt32BE(seq, 0);
    b.writeUInt16BE(call, 4);
    this.sentAt[call][seq % RING] = performance.now();
    this.sent++;
    return b.toString('base64');
  }
  arrived(b64: string): number {
    const b = Buffer.from(b64, 'base64');
    const call = b.readUInt16BE(4);
    const ms = performance.now() - this.sentAt[call][b.readUInt32BE(0) % RING];
    this.received++;
    if (this.recording) this.samples.push(ms);
    if (this.recording && ms > 20) this.slow.push([Math.round(performance.now()), Math.round(ms)]);
    return call;
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
      const e = JSON.parse(data.toString());
      if (e.type === 'input_audio_buffer.append') {
        const from = this.inbound.arrived(e.audio);
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
      } else if (e.type === 'session.update') ws.send(JSON.stringify({ type: 'session.updated', session: e.session }));
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
      const m = JSON.parse(data.toString());
      if (m.event === 'media') this.outbound.arrived(m.media.payload);
      else if (m.event === 'mark') ws.send(`{"event":"mark","streamSid":"${this.streamSid}","mark":{"name":"${m.mark.name}"}}`);
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

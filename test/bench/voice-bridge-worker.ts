// One side of the bridge bench in its own thread: `realtime` (the local realtime server) or
// `twilio` (N calls: signed webhook, signed handshake, 20 ms frames, marks echoed). The main
// thread drives both with messages: open, record, stop, hangup, stats.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parentPort, workerData } from 'node:worker_threads';
import { getExpectedTwilioSignature } from 'twilio/lib/webhooks/webhooks.js';
import WebSocket from 'ws';
import { BenchCall, BenchRealtime, Direction } from './voice-bridge-peers';

export interface WorkerStats {
  /** Frames this side sent (its outgoing direction). */
  sent: number;
  /** Frames this side received, and their delays in ms while recording. */
  received: number;
  samples: number[];
  lagP99Ms: number;
}

const { role, calls: CALLS } = workerData as { role: 'realtime' | 'twilio'; calls: number };
const out = new Direction();
const inn = new Direction();
const lag = monitorEventLoopDelay({ resolution: 5 });
let rt: BenchRealtime | null = null;
let calls: BenchCall[] = [];

async function openCalls(o: { port: number; signed: boolean; token: string; publicUrl: string }): Promise<void> {
  const mediaUrl = `${o.publicUrl.replace(/^http/, 'ws')}/twilio/media`;
  for (let i = 0; i < CALLS; i++) {
    const callSid = `CA${String(i).padStart(32, '0')}`;
    let parameters: Record<string, string> = {};
    if (o.signed) {
      const form = { CallSid: callSid, From: '+351910000000', To: '+351210000000', CallStatus: 'ringing' };
      const res = await fetch(`http://127.0.0.1:${o.port}/twilio/voice`, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          'x-twilio-signature': getExpectedTwilioSignature(o.token, `${o.publicUrl}/twilio/voice`, form),
        },
        body: new URLSearchParams(form).toString(),
      });
      const twiml = await res.text();
      parameters = Object.fromEntries([...twiml.matchAll(/<Parameter name="([^"]+)" value="([^"]*)"\/>/g)].map((m) => [m[1], m[2]]));
      if (!parameters.ticket) throw new Error(`call ${i} not answered with a stream: ${twiml}`);
    }
    const ws = new WebSocket(`ws://127.0.0.1:${o.port}/twilio/media`, {
      perMessageDeflate: false,
      headers: { 'x-twilio-signature': getExpectedTwilioSignature(o.token, mediaUrl, {}) },
    });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    calls.push(new BenchCall(ws, i, callSid, out, inn, parameters));
  }
  calls.forEach((c) => c.run(CALLS));
}

function stats(): WorkerStats {
  return { sent: out.sent, received: inn.received, samples: inn.samples, lagP99Ms: lag.percentile(99) / 1e6 };
}

parentPort!.on('message', async (m: { type: string; [k: string]: unknown }) => {
  switch (m.type) {
    case 'open':
      await openCalls(m as never);
      return parentPort!.postMessage({ type: 'running' });
    case 'record':
      inn.recording = true;
      lag.reset();
      return lag.enable();
    case 'stop':
      inn.recording = false;
      lag.disable();
      rt?.stopSending();
      return calls.forEach((c) => c.stopSending());
    case 'hangup':
      calls.forEach((c) => c.hangUp());
      calls = [];
      return parentPort!.postMessage({ type: 'hungup' });
    case 'stats':
      return parentPort!.postMessage({ type: 'stats', stats: stats() });
    case 'close':
      await rt?.close();
      return parentPort!.postMessage({ type: 'closed' });
  }
});

if (role === 'realtime') {
  rt = new BenchRealtime(inn, out, CALLS);
  await rt.start();
  parentPort!.postMessage({ type: 'url', url: rt.url });
} else parentPort!.postMessage({ type: 'ready' });

// The phone bridge on a loopback server, around the real VoiceService (state and guard in Redis)
// and Workflow, between a local Twilio (media stream + REST API) and a local realtime server,
// with the workflow's webhook targets and the observability webhook as loopback servers too.
// Call records and meter events are kept in memory (the sinks' interface), so tests wait on them.
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Redis } from 'ioredis';
import type { CallRecord } from '../../../schema/call-record';
import type { EventRecord } from '../../../schema/event-record';
import { RedisVoiceStore } from '../../../gateway/src/voice/call-store';
import { callReducer, VoiceService } from '../../../gateway/src/voice/calls';
import type { Concierge } from '../../../gateway/src/voice/config';
import { createPhoneBridge, type PhoneBridge } from '../../../gateway/src/voice/phone/bridge';
import type { CallSummary } from '../../../gateway/src/voice/phone/call-types';
import { phoneSettings } from '../../../gateway/src/voice/phone/settings';
import { Workflow, type WorkflowAnswer } from '../../../gateway/src/voice/workflow';
import { RedisWorkflowStore } from '../../../gateway/src/voice/workflow-store';
import { filled } from '../filled';
import { API_KEY, RealtimePeer } from './realtime-peer';
import { TwilioPeer } from './twilio-peer';
import { until } from './wait';

export const AUTH_TOKEN = 'twilio-test-auth-token';
export const ACCOUNT_SID = 'AC00000000000000000000000000000001';
export const PUBLIC_URL = 'https://voice.example.test';
const REDIS_URL = 'redis://127.0.0.1:6379/9';

/** A loopback HTTP server that records what it is sent and answers with `handle`. */
export class Target {
  server!: Server;
  url = '';
  seen: Array<{ path: string; headers: IncomingMessage['headers']; body: any }> = [];
  readonly events = new EventEmitter();
  handle: (req: IncomingMessage, res: ServerResponse, body: any) => void = (_q, res) =>
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true,"booking_id":"evt-1"}');
  async start() {
    this.server = createServer(async (req, res) => {
      let text = '';
      for await (const c of req) text += c;
      const body = text ? JSON.parse(text) : null;
      this.seen.push({ path: req.url!, headers: req.headers, body });
      this.handle(req, res, body);
      this.events.emit('request', this.seen.at(-1));
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }
  stop() {
    this.server.closeAllConnections();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

export interface BridgeStack {
  config: Concierge;
  twilio: TwilioPeer;
  realtime: RealtimePeer;
  hooks: Target;
  observe: Target;
  bridge: PhoneBridge;
  voice: VoiceService;
  records: CallRecord[];
  meterEvents: EventRecord[];
  ended: CallSummary[];
  events: EventEmitter;
  logs: string[];
  /** The call's summary once its record is written. */
  endOf(callSid: string): Promise<CallSummary>;
  close(): Promise<void>;
}

export async function bridgeStack(
  change: (c: Concierge) => void = () => undefined,
  opts: { consentWaitMs?: number; statusGraceMs?: number } = {},
): Promise<BridgeStack> {
  const [realtime, hooks, observe] = await Promise.all([new RealtimePeer().start(), new Target().start(), new Target().start()]);
  const config = filled();
  config.meta.business_hours_local = 'Mon-Sun 00:00-24:00';
  for (const f of config.functions) if (f.webhook) f.webhook = `${hooks.url}/${f.name}`;
  config.workflow.dlq_url = `${hooks.url}/dlq`;
  config.spend_guard.log_to = `${observe.url}/log`;
  change(config);
  const prefix = `test-bridge-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  const redis = new Redis(REDIS_URL);
  const logs: string[] = [];
  const log = {
    info: (m: string) => logs.push(`info ${m}`),
    warn: (m: string) => logs.push(`warn ${m}`),
    error: (m: string) => logs.push(`error ${m}`),
  };
  const events = new EventEmitter();
  const records: CallRecord[] = [];
  const meterEvents: EventRecord[] = [];
  const ended: CallSummary[] = [];
  const workflow = new Workflow({
    config,
    store: new RedisWorkflowStore<WorkflowAnswer>(redis, prefix),
    log,
    retry: { attempts: 3, firstMs: 20, maxMs: 20 },
  });
  const voice = new VoiceService({
    config,
    store: new RedisVoiceStore(redis, prefix, callReducer(config)),
    log,
    workflow,
    afterCall: {
      calls: { send: (r) => (records.push(r), events.emit('record', r)) },
      events: { send: (e) => meterEvents.push(e) },
      rates: () => ({}),
      voiceProvider: 'openai',
    },
  });
  const app = express();
  const server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const gateway = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const twilio = await new TwilioPeer({ gateway, publicUrl: PUBLIC_URL, authToken: AUTH_TOKEN, accountSid: ACCOUNT_SID }).start();
  const env = {
    PUBLIC_URL,
    OPENAI_API_KEY: API_KEY,
    OPENAI_REALTIME_URL: realtime.url,
    TWILIO_ACCOUNT_SID: ACCOUNT_SID,
    TWILIO_AUTH_TOKEN: AUTH_TOKEN,
    TWILIO_API_URL: twilio.apiUrl,
  };
  const { settings, problems } = phoneSettings(env, config.meta.model);
  if (!settings) throw new Error(problems.join('; '));
  const bridge = createPhoneBridge({
    config,
    settings,
    voice,
    workflow,
    meter: { send: (e) => meterEvents.push(e) },
    log,
    tenant: 'acme-dental',
    ...opts,
    onCallEnded: (s) => (ended.push(s), events.emit('ended', s)),
  });
  bridge.mount(app);
  server.on('upgrade', (req, socket, head) => bridge.upgrade(req, socket, head) || socket.destroy());
  return {
    config,
    twilio,
    realtime,
    hooks,
    observe,
    bridge,
    voice,
    records,
    meterEvents,
    ended,
    events,
    logs,
    endOf: (callSid) =>
      ended.find((s) => s.call_id === callSid)
        ? Promise.resolve(ended.find((s) => s.call_id === callSid)!)
        : until<CallSummary>(events, 'ended', (s) => s.call_id === callSid, `the end of call ${callSid}`),
    async close() {
      await bridge.close();
      await twilio.stop();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await Promise.all([realtime.stop(), hooks.stop(), observe.stop()]);
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
    },
  };
}

// The phone bridge on a loopback server, around the real VoiceService (state and guard in Redis)
// and Workflow, between a local Twilio (media stream + REST API) and a local realtime server,
// with the workflow's webhook targets and the observability webhook as loopback servers too.
// Call records and meter events are kept in memory (the sinks' interface), so tests wait on them;
// each answer the workflow gives the bridge is an `answered` event.
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import type { CallRecord } from '../../../schema/call-record';
import type { EventRecord } from '../../../schema/event-record';
import { RedisVoiceStore } from '../../../gateway/src/voice/call-store';
import { callReducer, VoiceService } from '../../../gateway/src/voice/calls';
import type { Concierge } from '../../../gateway/src/voice/config';
import type { PhoneBridge } from '../../../gateway/src/voice/phone/bridge';
import type { CallSummary } from '../../../gateway/src/voice/phone/call-types';
import { Workflow, type WorkflowAnswer } from '../../../gateway/src/voice/workflow';
import { RedisWorkflowStore } from '../../../gateway/src/voice/workflow-store';
import type { RatesFile } from '../../../gateway/src/voice/rates';
import { filled } from '../filled';
import { hostBridge, logInto, type BridgeHost } from './bridge-host';
import { RealtimePeer } from './realtime-peer';
import { TwilioPeer } from './twilio-peer';
import { TEST_REDIS_URL } from '../../redis-db';

export { ACCOUNT_SID, AUTH_TOKEN, PUBLIC_URL } from './bridge-host';
const REDIS_URL = TEST_REDIS_URL;

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
  /** Another gateway instance on the same Redis, realtime server and sinks (its own local Twilio). */
  twin(): Promise<BridgeHost>;
  close(): Promise<void>;
}

export async function bridgeStack(
  change: (c: Concierge) => void = () => undefined,
  options: {
    consentWaitMs?: number;
    statusGraceMs?: number;
    streamSilentForMs?: number;
    realtimeSilentForMs?: number;
    keypadPauseMs?: number;
    closingLimitMs?: number;
    /** Telephony rates (none by default: no telephony event). */
    rates?: RatesFile;
    /** The voice service's clock (the wall clock by default), as the launch drill sets its own. */
    now?: () => Date;
  } = {},
): Promise<BridgeStack> {
  const { rates = {}, now, ...opts } = options;
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
  const log = logInto(logs);
  const events = new EventEmitter();
  const records: CallRecord[] = [];
  const meterEvents: EventRecord[] = [];
  const meterSink = { send: (e: EventRecord) => meterEvents.push(e) };
  /** One gateway instance: its own workflow, voice service and bridge, on the stack's Redis prefix. */
  const instance = async () => {
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
      now,
      afterCall: {
        calls: { send: (r) => (records.push(r), events.emit('record', r)) },
        events: meterSink,
        rates: () => rates,
        voiceProvider: 'openai',
      },
    });
    const reporting: Pick<Workflow, 'called'> = {
      called: (req) => workflow.called(req).finally(() => events.emit('answered', req)),
    };
    const host = await hostBridge(
      { config, voice, workflow: reporting, meter: meterSink, log, tenant: 'acme-dental', ...opts },
      realtime,
      events,
    );
    return { host, voice };
  };
  const { host, voice } = await instance();
  const twins: BridgeHost[] = [];
  const { bridge, twilio, ended } = host;
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
    // On whichever instance had the call's stream.
    endOf: (callSid) => twins.find((t) => t.ended.some((e) => e.call_id === callSid))?.endOf(callSid) ?? host.endOf(callSid),
    async twin() {
      const twin = (await instance()).host;
      twins.push(twin);
      return twin;
    },
    async close() {
      await Promise.all([host, ...twins].map((h) => h.close()));
      await Promise.all([realtime.stop(), hooks.stop(), observe.stop()]);
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
      redis.disconnect();
    },
  };
}

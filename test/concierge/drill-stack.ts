// What the concierge drill's calls run on: the phone bridge on a loopback server around the real
// VoiceService and Workflow, with the operator's configuration retargeted at local peers (a
// Twilio that places calls with µ-law speech, a realtime server, the back office behind the
// workflow's webhooks, stand-ins for the dead-letter and observability URLs). Nothing leaves the
// machine. State goes to Redis when QUEUE_STORE_URL is set (a key prefix of its own, removed
// afterwards), else it stays in process. The clock the call logic reads is the drill's: real time
// moved to an open hour for answered calls and to a closed one for the after-hours call.
import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import type { CallRecord } from '../../schema/call-record';
import { MemoryVoiceStore, RedisVoiceStore } from '../../gateway/src/voice/call-store';
import { callReducer, VoiceService } from '../../gateway/src/voice/calls';
import type { Concierge } from '../../gateway/src/voice/config';
import type { PhoneBridge } from '../../gateway/src/voice/phone/bridge';
import type { CallSummary } from '../../gateway/src/voice/phone/call-types';
import { readRates } from '../../gateway/src/voice/rates';
import { Workflow, type WorkflowAnswer } from '../../gateway/src/voice/workflow';
import { MemoryWorkflowStore, RedisWorkflowStore } from '../../gateway/src/voice/workflow-store';
import { Target } from '../voice/peers/bridge-stack';
import { hostBridge, logInto } from '../voice/peers/bridge-host';
import { RealtimePeer } from '../voice/peers/realtime-peer';
import { TwilioPeer } from '../voice/peers/twilio-peer';
import { BackOfficePeer } from './back-office-peer';

export const AUTH_TOKEN = 'drill-twilio-auth-token';
export const ACCOUNT_SID = 'AC0000000000000000000000000000d111';
export const PUBLIC_URL = 'https://concierge-drill.example.test';

/** The call logic's clock: the real clock, shifted so that "now" falls where a step needs it. */
export class DrillClock {
  private offset = 0;
  now = (): number => Date.now() + this.offset;
  /** From now on, the clock reads `at` (and runs on from there). */
  moveTo(at: number): void {
    this.offset = at - Date.now();
  }
}

export interface DrillStack {
  config: Concierge;
  clock: DrillClock;
  twilio: TwilioPeer;
  realtime: RealtimePeer;
  backOffice: BackOfficePeer;
  observe: Target;
  dlq: Target;
  voice: VoiceService;
  bridge: PhoneBridge;
  /** Where call state is kept, for the report: `Redis (prefix …)` or `in process`. */
  store: string;
  /** http://127.0.0.1:port of the gateway side. */
  gateway: string;
  records: CallRecord[];
  ended: CallSummary[];
  logs: string[];
  endOf(callSid: string, limitMs?: number): Promise<CallSummary>;
  close(): Promise<void>;
}

/** The configuration with every outside target replaced by a local peer. */
function retargeted(config: Concierge, backOffice: BackOfficePeer, observe: Target, dlq: Target): Concierge {
  const c = structuredClone(config);
  for (const f of c.functions) if (f.webhook) f.webhook = backOffice.webhook(f.name);
  c.workflow.dlq_url = `${dlq.url}/dlq`;
  c.spend_guard.log_to = `${observe.url}/log`;
  return c;
}

export async function drillStack(operatorConfig: Concierge, ratesFile: string): Promise<DrillStack> {
  const clock = new DrillClock();
  const [realtime, observe, dlq, backOffice] = await Promise.all([
    new RealtimePeer().start(),
    new Target().start(),
    new Target().start(),
    new BackOfficePeer(clock.now).start(),
  ]);
  const config = retargeted(operatorConfig, backOffice, observe, dlq);
  const redisUrl = process.env.QUEUE_STORE_URL;
  const redis = redisUrl ? new Redis(redisUrl) : null;
  const prefix = `concierge-drill-${process.pid}`;
  const logs: string[] = [];
  const log = logInto(logs);
  const events = new EventEmitter();
  const records: CallRecord[] = [];
  const workflow = new Workflow({
    config,
    store: redis ? new RedisWorkflowStore<WorkflowAnswer>(redis, prefix) : new MemoryWorkflowStore<WorkflowAnswer>(),
    log,
    retry: { attempts: 3, firstMs: 50, maxMs: 100 },
  });
  const voice = new VoiceService({
    config,
    store: redis ? new RedisVoiceStore(redis, prefix, callReducer(config)) : new MemoryVoiceStore(callReducer(config)),
    log,
    workflow,
    now: () => new Date(clock.now()),
    afterCall: {
      calls: { send: (r) => void records.push(r) },
      events: { send: () => undefined },
      rates: () => readRates(ratesFile),
      voiceProvider: 'openai',
    },
  });
  const identity = { publicUrl: PUBLIC_URL, authToken: AUTH_TOKEN, accountSid: ACCOUNT_SID };
  const host = await hostBridge({ config, voice, workflow, meter: { send: () => undefined }, log }, realtime, events, identity);
  const { bridge, twilio, gateway, ended } = host;
  return {
    config,
    clock,
    twilio,
    realtime,
    backOffice,
    observe,
    dlq,
    voice,
    bridge,
    store: redis ? `Redis (prefix ${prefix})` : 'in process',
    gateway,
    records,
    ended,
    logs,
    endOf: (callSid, limitMs = 20_000) => host.endOf(callSid, limitMs),
    async close() {
      await host.close();
      workflow.stop();
      await Promise.all([realtime.stop(), observe.stop(), dlq.stop(), backOffice.stop()]);
      if (redis) {
        const keys = await redis.keys(`${prefix}:*`);
        if (keys.length) await redis.del(...keys);
        redis.disconnect();
      }
    },
  };
}

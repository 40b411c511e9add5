/**
 * The phone bridge on a loopback HTTP server, with a local Twilio pointed at it: what the bridge
 * tests' stack and the concierge drill share. The caller makes the realtime peer, the voice service
 * and the workflow; `events` gets an `ended` event per call summary.
 */
import type { EventEmitter } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { createPhoneBridge, type PhoneBridge, type PhoneBridgeDeps } from '../../../gateway/src/voice/phone/bridge';
import type { CallSummary } from '../../../gateway/src/voice/phone/call-types';
import { phoneSettings } from '../../../gateway/src/voice/phone/settings';
import { API_KEY, type RealtimePeer } from './realtime-peer';
import { TwilioPeer } from './twilio-peer';
import { until } from './wait';

/** A log for the bridge's parts that keeps its lines, `level message`, for a test to read. */
export function logInto(lines: string[]) {
  return {
    info: (m: string) => void lines.push(`info ${m}`),
    warn: (m: string) => void lines.push(`warn ${m}`),
    error: (m: string) => void lines.push(`error ${m}`),
  };
}

export const AUTH_TOKEN = 'twilio-test-auth-token';
export const ACCOUNT_SID = 'AC00000000000000000000000000000001';
export const PUBLIC_URL = 'https://voice.example.test';

export interface BridgeHost {
  bridge: PhoneBridge;
  twilio: TwilioPeer;
  /** The gateway's loopback origin. */
  gateway: string;
  ended: CallSummary[];
  /** The call's summary once its record is written. */
  endOf(callSid: string, limitMs?: number): Promise<CallSummary>;
  /** The bridge, the Twilio peer and the server (the caller stops what it made). */
  close(): Promise<void>;
}

type Given = Omit<PhoneBridgeDeps, 'settings' | 'onCallEnded'>;
/** The Twilio account the bridge and the Twilio peer agree on, and the public origin signatures use. */
export interface TwilioIdentity {
  publicUrl: string;
  authToken: string;
  accountSid: string;
}
const TEST_IDENTITY: TwilioIdentity = { publicUrl: PUBLIC_URL, authToken: AUTH_TOKEN, accountSid: ACCOUNT_SID };

export async function hostBridge(
  deps: Given,
  realtime: RealtimePeer,
  events: EventEmitter,
  id: TwilioIdentity = TEST_IDENTITY,
): Promise<BridgeHost> {
  const app = express();
  const server = createServer(app);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const gateway = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const twilio = await new TwilioPeer({ gateway, ...id }).start();
  const env = {
    PUBLIC_URL: id.publicUrl,
    OPENAI_API_KEY: API_KEY,
    OPENAI_REALTIME_URL: realtime.url,
    TWILIO_ACCOUNT_SID: id.accountSid,
    TWILIO_AUTH_TOKEN: id.authToken,
    TWILIO_API_URL: twilio.apiUrl,
  };
  const { settings, problems } = phoneSettings(env, deps.config.meta.model);
  if (!settings) throw new Error(problems.join('; '));
  const ended: CallSummary[] = [];
  const bridge = createPhoneBridge({ ...deps, settings, onCallEnded: (s) => (ended.push(s), events.emit('ended', s)) });
  bridge.mount(app);
  server.on('upgrade', (req, socket, head) => bridge.upgrade(req, socket, head) || socket.destroy());
  return {
    bridge,
    twilio,
    gateway,
    ended,
    endOf: (callSid, limitMs) => {
      const done = ended.find((s) => s.call_id === callSid);
      return done
        ? Promise.resolve(done)
        : until<CallSummary>(events, 'ended', (s) => s.call_id === callSid, `the end of call ${callSid}`, limitMs);
    },
    async close() {
      await bridge.close();
      await twilio.stop();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** What a call session needs, what Twilio sends it, and what it reports when the call is over. */
import type { CallRecord, EndedReason } from '../../../../schema/call-record';
import type { EventRecord } from '../../../../schema/event-record';
import type { VoiceService } from '../calls';
import type { Concierge } from '../config';
import type { Workflow } from '../workflow';
import type { SaidLine } from './realtime-session';
import type { PhoneSettings } from './settings';
import type { CallControl } from './twilio-calls';
import type { CallbackUrls } from './callback-urls';
import type { PricingRecord } from './pricing';
import type { Lines } from './twiml';
import type { Voicemail } from './voicemail';

/**
 * Why a phone call ended: the shared record's reasons, and those of the call's edges (the consent
 * line declined or never answered, voicemail's triggers, the monthly pause, Twilio's statuses, a
 * fault of the bridge while handling a stream message, a stream that fell silent without closing).
 */
export type EndReason =
  | EndedReason
  | 'opted_out'
  | 'no_consent'
  | 'after_hours'
  | 'no_answer'
  | 'monthly_cap'
  | 'busy'
  | 'failed'
  | 'canceled'
  | 'bridge_error'
  | 'stream_lost';

export interface CallSummary {
  call_id: string;
  ended_reason: EndReason | string;
  /** The call record written through the end-of-call path (null if that failed: logged; undefined: left to voicemail). */
  record: CallRecord | null | undefined;
  transcript: SaidLine[];
  estUsd_at_disconnect: number | null;
  /** Why the realtime side was given up, when it was. */
  realtime_failure: string | null;
  /** The pricing deflection: the link texted (or why not) and the callback offer with its window. */
  pricing?: PricingRecord | null;
}

export interface SessionDeps {
  config: Concierge;
  settings: PhoneSettings;
  voice: Pick<VoiceService, 'events' | 'end' | 'toVoicemail' | 'now'>;
  urls: CallbackUrls;
  voicemail: Pick<Voicemail, 'twiml' | 'fn'>;
  workflow: Pick<Workflow, 'called'>;
  meter: { send(event: EventRecord): void };
  calls: CallControl;
  lines: Lines;
  provider: string;
  tenant: string;
  log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
  onEnded: (summary: CallSummary) => void;
  /** How long the caller has to answer the consent line (8 s; tests shorten it). */
  consentWaitMs?: number;
  /** How long after a key the caller's keypad entry is taken as ended (2 s; tests shorten it). */
  keypadPauseMs?: number;
  /** How long a closing line may play from its first audio before the call ends anyway (10 s; tests shorten it). */
  closingLimitMs?: number;
  /** How long the realtime server may answer nothing (a ping, a response under way) before its session is lost (5 s; tests shorten it). */
  realtimeSilentForMs?: number;
}

export interface TwilioMessage {
  event?: unknown;
  media?: { payload?: unknown; track?: unknown };
  mark?: { name?: unknown };
  dtmf?: { track?: unknown; digit?: unknown };
}

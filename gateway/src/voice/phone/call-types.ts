/** What a call session needs, what Twilio sends it, and what it reports when the call is over. */
import type { CallRecord, EndedReason } from '../../../../schema/call-record';
import type { EventRecord } from '../../../../schema/event-record';
import type { VoiceService } from '../calls';
import type { Concierge } from '../config';
import type { Workflow } from '../workflow';
import type { SaidLine } from './realtime-session';
import type { PhoneSettings } from './settings';
import type { CallControl } from './twilio-calls';
import type { Lines } from './twiml';

export interface CallSummary {
  call_id: string;
  ended_reason: EndedReason;
  /** The call record written through the end-of-call path (null if that failed: logged). */
  record: CallRecord | null;
  transcript: SaidLine[];
  estUsd_at_disconnect: number | null;
  /** Why the realtime side was given up, when it was. */
  realtime_failure: string | null;
}

export interface SessionDeps {
  config: Concierge;
  settings: PhoneSettings;
  voice: Pick<VoiceService, 'events' | 'end'>;
  workflow: Pick<Workflow, 'called'>;
  meter: { send(event: EventRecord): void };
  calls: CallControl;
  lines: Lines;
  provider: string;
  tenant: string;
  log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
  onEnded: (summary: CallSummary) => void;
}

export interface TwilioMessage {
  event?: unknown;
  media?: { payload?: unknown; track?: unknown };
  mark?: { name?: unknown };
}

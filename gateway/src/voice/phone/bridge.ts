/**
 * The phone bridge: Twilio ⇄ the gateway ⇄ the realtime model, as one object the server wires in
 * two places: `mount(app)` for the webhooks and `upgrade(req, socket, head)` for the media stream
 * (true when it took the upgrade). `close()` ends live calls (their callers fall through to the
 * transfer fallback) and writes their records.
 *
 * It depends on the voice concierge's public surface only: VoiceService (start, events, end) and
 * Workflow (called), so calls made by phone share state, guard, idempotency and records with the
 * /v1/voice/* endpoints.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type express from 'express';
import type { EventRecord } from '../../../../schema/event-record';
import type { VoiceService } from '../calls';
import type { Concierge } from '../config';
import type { Workflow } from '../workflow';
import { CallEnds } from './call-ends';
import { CallSession } from './call-session';
import { CallStatus } from './call-status';
import { CALLBACK_PATHS, CallbackUrls } from './callback-urls';
import type { CallSummary, EndReason } from './call-types';
import { MediaStreams } from './media-stream';
import { phoneSettings, type PhoneSettings } from './settings';
import { TwilioAuth } from './twilio-auth';
import { TwilioCalls, type CallControl } from './twilio-calls';
import { mountTwilioWebhooks } from './twilio-webhook';
import { DEFAULT_LINES, type Lines } from './twiml';
import { Voicemail } from './voicemail';

export interface PhoneBridge {
  mount(app: express.Express): void;
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
  close(): Promise<void>;
  /** Calls in progress on this instance. */
  readonly liveCalls: number;
}

type Log = { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };

export interface PhoneBridgeDeps {
  config: Concierge;
  settings: PhoneSettings;
  voice: Pick<VoiceService, 'start' | 'events' | 'end' | 'get' | 'toVoicemail' | 'now'>;
  workflow: Pick<Workflow, 'called'>;
  /** The meter sink chat calls use: one event per realtime response. */
  meter: { send(event: EventRecord): void };
  log: Log;
  /** Provider and tenant of the meter events (VOICE_PROVIDER, VOICE_TENANT). */
  provider?: string;
  tenant?: string;
  /** Call control; Twilio's REST API by default. */
  calls?: CallControl;
  lines?: Partial<Lines>;
  /** How long a status callback waits for an answered call's stream to write its record (60 s). */
  statusGraceMs?: number;
  /** How long a caller has to answer the consent line (8 s). */
  consentWaitMs?: number;
  /** How long after a key the caller's keypad entry is taken as ended (2 s). */
  keypadPauseMs?: number;
  /** How long a closing line may play from its first audio before the call ends anyway (10 s). */
  closingLimitMs?: number;
  /** How long a live media stream may send nothing before its call is ended (10 s). */
  streamSilentForMs?: number;
  /** How long the realtime server may answer nothing (a ping, a response under way) before its session is lost (5 s). */
  realtimeSilentForMs?: number;
  /** After each call's record is written (tests, drills, transcripts review). */
  onCallEnded?: (summary: CallSummary) => void;
}

export function createPhoneBridge(deps: PhoneBridgeDeps): PhoneBridge {
  const { config, settings, log } = deps;
  const lines: Lines = { ...DEFAULT_LINES, ...deps.lines };
  const dial = config.functions.find((f) => f.dial)?.dial ?? null;
  if (!dial) log.warn('phone bridge: no function has a dial target: escalations end the call with a line instead of a transfer');
  if (!config.guardrails.vad_enabled) log.warn('phone bridge: guardrails.vad_enabled is false: the model will not take turns by itself');
  const auth = new TwilioAuth(settings.twilioAuthToken, settings.publicUrl, settings.mediaUrl);
  const calls =
    deps.calls ??
    new TwilioCalls({ apiUrl: settings.twilioApiUrl, accountSid: settings.twilioAccountSid, authToken: settings.twilioAuthToken });
  const urls = new CallbackUrls(settings.publicUrl);
  const ends = new CallEnds({ voice: deps.voice, onCallEnded: deps.onCallEnded, log, tenant: deps.tenant ?? '' });
  const voicemail = new Voicemail({ config, urls, lines, workflow: deps.workflow, ends, log });
  const streams: MediaStreams = new MediaStreams({
    auth,
    log,
    silentForMs: deps.streamSilentForMs,
    ended: async (callSid) => Boolean((await deps.voice.get(callSid))?.ended_at),
    create: (start, ws) =>
      new CallSession(
        start.callSid,
        start.streamSid,
        { from: start.customParameters.from ?? null, to: start.customParameters.to ?? null },
        ws,
        {
          config,
          settings,
          voice: deps.voice,
          workflow: deps.workflow,
          meter: deps.meter,
          calls,
          lines,
          urls,
          voicemail,
          provider: deps.provider ?? 'openai',
          tenant: deps.tenant ?? '',
          log,
          ...(deps.consentWaitMs ? { consentWaitMs: deps.consentWaitMs } : {}),
          ...(deps.keypadPauseMs ? { keypadPauseMs: deps.keypadPauseMs } : {}),
          ...(deps.closingLimitMs ? { closingLimitMs: deps.closingLimitMs } : {}),
          ...(deps.realtimeSilentForMs ? { realtimeSilentForMs: deps.realtimeSilentForMs } : {}),
          onEnded: (summary) => {
            streams.live.delete(summary.call_id);
            // A call handed to voicemail has its record written by the voicemail flow (or the status callback).
            if (summary.record !== undefined) ends.report(summary);
            else status.handedToVoicemail(summary.call_id, summary.ended_reason as EndReason);
          },
        },
      ),
  });
  const status = new CallStatus({ voice: deps.voice, streams, ends, log, graceMs: deps.statusGraceMs });
  return {
    mount: (app) =>
      mountTwilioWebhooks(app, { auth, voice: deps.voice, status, voicemail, urls, mediaUrl: settings.mediaUrl, dial, lines, log }),
    upgrade: (req, socket, head) => streams.upgrade(req, socket, head),
    // Live calls first: a session ending here may still write the record a status callback waits for.
    close: () => streams.close().then(() => status.close()),
    get liveCalls() {
      return streams.live.size;
    },
  };
}

/**
 * The bridge from the environment (PUBLIC_URL, OPENAI_API_KEY, OPENAI_REALTIME_URL,
 * TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN, TWILIO_API_URL, VOICE_PROVIDER, VOICE_TENANT). With a
 * variable missing it still mounts the webhooks, answering 503 with what is missing (never a
 * value), so a misconfigured number fails loudly rather than with Twilio's generic error.
 */
export function phoneBridgeFromEnv(env: NodeJS.ProcessEnv, deps: Omit<PhoneBridgeDeps, 'settings'>): PhoneBridge {
  const { settings, problems } = phoneSettings(env, deps.config.meta.model);
  if (settings) {
    deps.log.info(`phone bridge: Twilio webhooks at ${settings.publicUrl}/twilio/voice, media at ${settings.mediaUrl}`);
    // Twilio's webhooks may be http, its media streams may not: said at start, not found call by call.
    if (settings.mediaUrl.startsWith('ws:'))
      deps.log.warn(
        'phone bridge: PUBLIC_URL is http://, so the media stream is ws://, which Twilio refuses (error 31922, wss:// only): ' +
          'every call would go to the fallback transfer; set PUBLIC_URL to the https origin Twilio reaches',
      );
    return createPhoneBridge({ ...deps, settings, provider: deps.provider ?? env.VOICE_PROVIDER, tenant: deps.tenant ?? env.VOICE_TENANT });
  }
  return phoneBridgeOff(problems, deps.log);
}

/**
 * The bridge turned off for `problems`: said once in the start log, and its webhooks answer `503`
 * with the same words, so a number already pointed here fails loudly rather than with a 404.
 * `answered`: what the webhooks say instead, when the log's words name what an unsigned caller
 * must not learn (a file's path).
 */
export function phoneBridgeOff(problems: string[], log: Pick<Log, 'warn'>, answered = problems): PhoneBridge {
  log.warn(`phone bridge off: ${problems.join('; ')}`);
  const off = (_req: express.Request, res: express.Response) =>
    res
      .status(503)
      .type('text/plain')
      .send(`phone bridge off: ${answered.join('; ')}`);
  return {
    mount: (app) => {
      app.post('/twilio/voice', off);
      app.post('/twilio/status', off);
      for (const path of Object.values(CALLBACK_PATHS)) app.post(path, off);
    },
    upgrade: () => false,
    close: async () => undefined,
    liveCalls: 0,
  };
}

/**
 * Twilio's webhooks (form-encoded, `X-Twilio-Signature` checked against PUBLIC_URL + path + query:
 * invalid or missing → `403` and nothing started):
 *   POST /twilio/voice   an inbound call. The call logic of /v1/voice/calls decides (business
 *                        hours, monthly pause): answer → `<Connect><Stream>` to /twilio/media with
 *                        the call's ticket and numbers, then the transfer fallback; after hours or
 *                        the monthly pause → voicemail (voicemail.ts). If the call logic fails
 *                        (store down), the caller goes to a person.
 *   POST /twilio/status  the call's status callback (call-status.ts).
 *   POST /twilio/voicemail/recorded, /twilio/voicemail/recording, /twilio/dial   the callbacks the
 *                        gateway names in its TwiML (callback-urls.ts).
 */
import express from 'express';
import { RepeatLog } from '../../repeat-log';
import type { VoiceService } from '../calls';
import type { CallStatus } from './call-status';
import { CALLBACK_PATHS, callbackQuery, isPhone, type CallbackUrls } from './callback-urls';
import type { TwilioAuth } from './twilio-auth';
import { answerTwiml, hangUpTwiml, transferTwiml, type Lines } from './twiml';
import type { Voicemail } from './voicemail';

const CALL_ID = /^[A-Za-z0-9._:-]{1,128}$/;
/** How a `<Dial>` ended that means a person took the call. */
const CONNECTED = new Set(['completed', 'answered']);

export interface WebhookDeps {
  auth: TwilioAuth;
  voice: Pick<VoiceService, 'start'>;
  status: CallStatus;
  voicemail: Voicemail;
  urls: CallbackUrls;
  mediaUrl: string;
  dial: string | null;
  lines: Lines;
  log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
}

function signed(auth: TwilioAuth, log: WebhookDeps['log']): express.RequestHandler {
  // Anyone can knock: not a line each (repeat-log.ts).
  const refusals = new RepeatLog();
  return (req, res, next) => {
    const signature = req.get('x-twilio-signature');
    if (auth.webhook(signature, req.originalUrl, (req.body ?? {}) as Record<string, unknown>)) return next();
    // By the route's own path: Express matches /TWILIO/Voice/ too, and that is the caller's text.
    const route = (req.route as { path?: string } | undefined)?.path ?? '';
    const more = refusals.due(`${route} ${signature ? 'mismatch' : 'unsigned'}`);
    if (more !== null)
      log.warn(`twilio webhook ${req.path}: refused (${req.ip}): ${auth.refusal(signature, `${auth.publicUrl}${req.path}`)}${more}`);
    res.status(403).type('text/plain').send('invalid Twilio signature');
  };
}

const twiml = (res: express.Response, xml: string) => res.status(200).type('text/xml').send(xml);

/** The form's CallSid, or a 400 that names it. */
function callSidOf(req: express.Request, res: express.Response): string | null {
  const sid = (req.body as Record<string, unknown>).CallSid;
  if (typeof sid === 'string' && CALL_ID.test(sid)) return sid;
  res.status(400).type('text/plain').send('CallSid: expected a Twilio call SID');
  return null;
}

type Handler = (req: express.Request, res: express.Response) => void | Promise<void>;

export function mountTwilioWebhooks(app: express.Express, deps: WebhookDeps): void {
  const form = express.urlencoded({ extended: false, limit: '64kb' });
  const check = signed(deps.auth, deps.log);
  app.post('/twilio/voice', form, check, inboundCall(deps));
  app.post('/twilio/status', form, check, statusCallback(deps));
  app.post(CALLBACK_PATHS.dial, form, check, dialEnded(deps));
  app.post(CALLBACK_PATHS.recorded, form, check, voicemailRecorded(deps));
  app.post(CALLBACK_PATHS.recording, form, check, voicemailRecording(deps));
}

/** An inbound call: the call logic decides between the media stream and voicemail; a person when it fails. */
function inboundCall(deps: WebhookDeps): Handler {
  const { lines, log, urls, voicemail } = deps;
  return async (req, res) => {
    const p = req.body as Record<string, unknown>;
    const callSid = callSidOf(req, res);
    if (!callSid) return;
    const from = typeof p.From === 'string' && p.From ? p.From : 'unknown';
    const caller = isPhone(from) ? from : null;
    const country = typeof p.FromCountry === 'string' && /^[A-Z]{2}$/.test(p.FromCountry) ? p.FromCountry : undefined;
    const dial = { number: deps.dial, action: urls.dial(caller) };
    let out: Awaited<ReturnType<WebhookDeps['voice']['start']>>;
    try {
      out = await deps.voice.start({ call_id: callSid, from, ...(country ? { country } : {}) });
    } catch (error) {
      log.error(`call ${callSid}: the call logic failed (${(error as Error).message}); transferring the caller`);
      return void twiml(res, transferTwiml(lines.transfer, dial, lines.unavailable));
    }
    if (out.status === 503) {
      log.info(`call ${callSid}: not bridged: new calls are paused (monthly_cap); voicemail offered`);
      return void twiml(res, voicemail.twiml('monthly_cap', caller));
    }
    if ('action' in out.body && out.body.action === 'voicemail') {
      const reason = out.body.reason === 'no_answer' || out.body.reason === 'network_issue' ? out.body.reason : 'after_hours';
      log.info(`call ${callSid}: voicemail (${reason})`);
      return void twiml(res, voicemail.twiml(reason, caller));
    }
    const parameters = streamParameters(deps, callSid, caller, p.To);
    log.info(`call ${callSid}: answered; media stream requested`);
    twiml(
      res,
      answerTwiml({ mediaUrl: deps.mediaUrl, parameters, fallback: { line: lines.transfer, dial, unavailable: lines.unavailable } }),
    );
  };
}

/** What the media stream is given: the call's ticket and its numbers. */
function streamParameters(deps: WebhookDeps, callSid: string, caller: string | null, to: unknown): Record<string, string> {
  const parameters: Record<string, string> = { ticket: deps.auth.ticket(callSid) };
  if (caller) parameters.from = caller;
  if (isPhone(to)) parameters.to = to;
  return parameters;
}

function statusCallback(deps: WebhookDeps): Handler {
  return async (req, res) => {
    const p = req.body as Record<string, unknown>;
    const callSid = callSidOf(req, res);
    if (!callSid) return;
    await deps.status.update(callSid, typeof p.CallStatus === 'string' ? p.CallStatus : '');
    res.status(204).end();
  };
}

/** A transfer's `<Dial>` ended: hang up when a person took it, else voicemail. */
function dialEnded(deps: WebhookDeps): Handler {
  const { log, voicemail } = deps;
  return (req, res) => {
    const callSid = callSidOf(req, res);
    if (!callSid) return;
    const status = String((req.body as Record<string, unknown>).DialCallStatus ?? '');
    if (CONNECTED.has(status)) return void twiml(res, hangUpTwiml());
    log.info(`call ${callSid}: the transfer ended ${status || 'without a status'}; voicemail`);
    twiml(res, voicemail.twiml('no_answer', callbackQuery(req.query).from));
  };
}

function voicemailRecorded(deps: WebhookDeps): Handler {
  const { voicemail } = deps;
  return async (req, res) => {
    const callSid = callSidOf(req, res);
    if (!callSid) return;
    const { reason } = callbackQuery(req.query);
    twiml(res, await voicemail.recorded(callSid, reason ?? 'after_hours', req.body as Record<string, unknown>));
  };
}

function voicemailRecording(deps: WebhookDeps): Handler {
  const { voicemail } = deps;
  return async (req, res) => {
    const callSid = callSidOf(req, res);
    if (!callSid) return;
    const { reason, from } = callbackQuery(req.query);
    await voicemail.recording(callSid, reason ?? 'after_hours', from, req.body as Record<string, unknown>);
    res.status(204).end();
  };
}

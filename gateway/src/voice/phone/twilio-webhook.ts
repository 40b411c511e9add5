/**
 * Twilio's webhooks (form-encoded, `X-Twilio-Signature` checked against PUBLIC_URL: invalid or
 * missing → `403` and nothing started):
 *   POST /twilio/voice   an inbound call. The call logic of /v1/voice/calls decides (business
 *                        hours, monthly pause): answer → `<Connect><Stream>` to /twilio/media with
 *                        the call's ticket and number, then the transfer fallback; voicemail or
 *                        monthly pause → a short `<Say>` and `<Hangup>` (their full flows come
 *                        later). If the call logic fails (store down), the caller goes to a person.
 *   POST /twilio/status  the call's status callback: a terminal status ends a live session here.
 */
import express from 'express';
import type { VoiceService } from '../calls';
import type { MediaStreams } from './media-stream';
import type { TwilioAuth } from './twilio-auth';
import { answerTwiml, sayAndHangUp, transferTwiml, type Lines } from './twiml';

const CALL_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const PHONE = /^\+?[0-9]{3,16}$/;
const TERMINAL = new Set(['completed', 'busy', 'failed', 'no-answer', 'canceled']);

export interface WebhookDeps {
  auth: TwilioAuth;
  voice: Pick<VoiceService, 'start'>;
  streams: MediaStreams;
  mediaUrl: string;
  dial: string | null;
  lines: Lines;
  log: { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };
}

function signed(auth: TwilioAuth, log: WebhookDeps['log']): express.RequestHandler {
  return (req, res, next) => {
    if (auth.webhook(req.get('x-twilio-signature'), req.originalUrl, (req.body ?? {}) as Record<string, unknown>)) return next();
    log.warn(`twilio webhook ${req.path}: refused a request without a valid X-Twilio-Signature (${req.ip})`);
    res.status(403).type('text/plain').send('invalid Twilio signature');
  };
}

const twiml = (res: express.Response, xml: string) => res.status(200).type('text/xml').send(xml);

export function mountTwilioWebhooks(app: express.Express, deps: WebhookDeps): void {
  const form = express.urlencoded({ extended: false, limit: '64kb' });
  const check = signed(deps.auth, deps.log);
  const { lines, log } = deps;

  app.post('/twilio/voice', form, check, async (req, res) => {
    const p = req.body as Record<string, unknown>;
    const callSid = typeof p.CallSid === 'string' ? p.CallSid : '';
    if (!CALL_ID.test(callSid)) return void res.status(400).type('text/plain').send('CallSid: expected a Twilio call SID');
    const from = typeof p.From === 'string' && p.From ? p.From : 'unknown';
    const country = typeof p.FromCountry === 'string' && /^[A-Z]{2}$/.test(p.FromCountry) ? p.FromCountry : undefined;
    let out: Awaited<ReturnType<WebhookDeps['voice']['start']>>;
    try {
      out = await deps.voice.start({ call_id: callSid, from, ...(country ? { country } : {}) });
    } catch (error) {
      log.error(`call ${callSid}: the call logic failed (${(error as Error).message}); transferring the caller`);
      return void twiml(res, transferTwiml(lines.transfer, deps.dial, lines.unavailable));
    }
    if (out.status === 503) {
      log.info(`call ${callSid}: not answered: new calls are paused (monthly_cap)`);
      return void twiml(res, sayAndHangUp(lines.monthlyPause));
    }
    if ('action' in out.body && out.body.action === 'voicemail') {
      log.info(`call ${callSid}: voicemail (${out.body.reason ?? 'after_hours'})`);
      return void twiml(res, sayAndHangUp(lines.voicemail));
    }
    const parameters: Record<string, string> = { ticket: deps.auth.ticket(callSid) };
    if (PHONE.test(from)) parameters.from = from;
    log.info(`call ${callSid}: answered; media stream requested`);
    twiml(
      res,
      answerTwiml({
        mediaUrl: deps.mediaUrl,
        parameters,
        fallback: { line: lines.transfer, dial: deps.dial, unavailable: lines.unavailable },
      }),
    );
  });

  app.post('/twilio/status', form, check, (req, res) => {
    const p = req.body as Record<string, unknown>;
    const session = typeof p.CallSid === 'string' ? deps.streams.live.get(p.CallSid) : undefined;
    if (session && typeof p.CallStatus === 'string' && TERMINAL.has(p.CallStatus)) void session.finish('caller_hangup');
    res.status(204).end();
  });
}

/**
 * The voice server's endpoints (`Authorization: Bearer $VOICE_TOKEN`):
 *   POST /v1/voice/calls                      answer or voicemail, with the consent line
 *   POST /v1/voice/calls/:call_id/events      spend guard over an event or a batch of events
 *   POST /v1/voice/calls/:call_id/end         the call record
 *   POST /v1/voice/billing/monthly-rollup     monthly spend; at or over the cap new calls pause
 *   POST /v1/workflow/function-called         the function-call workflow
 * Without a usable configuration every one answers 503 with the reason.
 */
import type express from 'express';
import type { z } from 'zod';
import { EndCall, FunctionCalled, Rollup, StartCall } from './bodies';
import type { VoiceService } from './calls';
import { WorkflowError } from './workflow';

type Handler = (req: express.Request, res: express.Response) => Promise<void>;

export function mountVoice(app: express.Express, guard: express.RequestHandler, voice: VoiceService | null, why: string): void {
  const unavailable = (_req: express.Request, res: express.Response) =>
    res.status(503).json({ error: `voice endpoints unavailable: ${why}` });
  app.post('/v1/voice/calls', guard, voice ? startCall(voice) : unavailable);
  app.post('/v1/voice/calls/:call_id/events', guard, voice ? callEvents(voice) : unavailable);
  app.post('/v1/voice/calls/:call_id/end', guard, voice ? endCall(voice) : unavailable);
  app.post('/v1/workflow/function-called', guard, voice?.workflow ? functionCalled(voice) : unavailable);
  app.post('/v1/voice/billing/monthly-rollup', guard, voice ? monthlyRollup(voice) : unavailable);
}

/** 400 naming the first field the body got wrong. */
function bad(res: express.Response, error: z.ZodError): void {
  const i = error.issues[0];
  res.status(400).json({ error: `${i.path.join('.') || 'body'}: ${i.message}` });
}

function startCall(voice: VoiceService): Handler {
  return async (req, res) => {
    const parsed = StartCall.safeParse(req.body);
    if (!parsed.success) return bad(res, parsed.error);
    const out = await voice.start(parsed.data);
    res.status(out.status).json(out.body);
  };
}

function callEvents(voice: VoiceService): Handler {
  return async (req, res) => {
    const events = Array.isArray(req.body) ? req.body : [req.body];
    // A voice server that sends a batch again (its answer lost to a timeout) with the same key has it counted once.
    const key = req.get('idempotency-key');
    const out = await voice.events(String(req.params.call_id), events, undefined, key || undefined);
    res.status(out.status).json(out.body);
  };
}

function endCall(voice: VoiceService): Handler {
  return async (req, res) => {
    const parsed = EndCall.safeParse(req.body);
    if (!parsed.success) return bad(res, parsed.error);
    const out = await voice.end(String(req.params.call_id), parsed.data);
    res.status(out.status).json(out.body);
  };
}

/** The workflow's answer, or its refusal as the status and error it names. */
function functionCalled(voice: VoiceService): Handler {
  return async (req, res) => {
    const parsed = FunctionCalled.safeParse(req.body);
    if (!parsed.success) return bad(res, parsed.error);
    try {
      res.json(await voice.workflow!.called(parsed.data));
    } catch (error) {
      if (!(error instanceof WorkflowError)) throw error;
      if (error.retryAfterS !== undefined) res.set('retry-after', String(error.retryAfterS));
      res.status(error.status).json({ ok: false, error: error.message, ...(error.code ? { code: error.code } : {}) });
    }
  };
}

function monthlyRollup(voice: VoiceService): Handler {
  return async (req, res) => {
    const parsed = Rollup.safeParse(req.body);
    if (!parsed.success) return bad(res, parsed.error);
    await voice.rollup(parsed.data.monthly_usd);
    res.status(204).end();
  };
}

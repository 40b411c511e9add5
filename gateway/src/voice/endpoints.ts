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

export function mountVoice(app: express.Express, guard: express.RequestHandler, voice: VoiceService | null, why: string): void {
  const unavailable = (_req: express.Request, res: express.Response) =>
    res.status(503).json({ error: `voice endpoints unavailable: ${why}` });
  const bad = (res: express.Response, error: z.ZodError) => {
    const i = error.issues[0];
    res.status(400).json({ error: `${i.path.join('.') || 'body'}: ${i.message}` });
  };
  app.post(
    '/v1/voice/calls',
    guard,
    voice
      ? async (req, res) => {
          const parsed = StartCall.safeParse(req.body);
          if (!parsed.success) return bad(res, parsed.error);
          const out = await voice.start(parsed.data);
          res.status(out.status).json(out.body);
        }
      : unavailable,
  );
  app.post(
    '/v1/voice/calls/:call_id/events',
    guard,
    voice
      ? async (req, res) => {
          const events = Array.isArray(req.body) ? req.body : [req.body];
          const out = await voice.events(String(req.params.call_id), events);
          res.status(out.status).json(out.body);
        }
      : unavailable,
  );
  app.post(
    '/v1/voice/calls/:call_id/end',
    guard,
    voice
      ? async (req, res) => {
          const parsed = EndCall.safeParse(req.body);
          if (!parsed.success) return bad(res, parsed.error);
          const out = await voice.end(String(req.params.call_id), parsed.data);
          res.status(out.status).json(out.body);
        }
      : unavailable,
  );
  app.post(
    '/v1/workflow/function-called',
    guard,
    voice?.workflow
      ? async (req, res) => {
          const parsed = FunctionCalled.safeParse(req.body);
          if (!parsed.success) return bad(res, parsed.error);
          try {
            res.json(await voice.workflow!.called(parsed.data));
          } catch (error) {
            if (!(error instanceof WorkflowError)) throw error;
            if (error.retryAfterS !== undefined) res.set('retry-after', String(error.retryAfterS));
            res.status(error.status).json({ ok: false, error: error.message, ...(error.code ? { code: error.code } : {}) });
          }
        }
      : unavailable,
  );
  app.post(
    '/v1/voice/billing/monthly-rollup',
    guard,
    voice
      ? async (req, res) => {
          const parsed = Rollup.safeParse(req.body);
          if (!parsed.success) return bad(res, parsed.error);
          await voice.rollup(parsed.data.monthly_usd);
          res.status(204).end();
        }
      : unavailable,
  );
}

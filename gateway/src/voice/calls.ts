/**
 * The voice server's endpoints (`Authorization: Bearer $VOICE_TOKEN`):
 *   POST /v1/voice/calls                      answer or voicemail, with the consent line
 *   POST /v1/voice/calls/:call_id/events      spend guard over an event or a batch of events
 *   POST /v1/voice/billing/monthly-rollup     monthly spend; at or over the cap new calls pause
 * Call state lives in Redis (a day, or an hour after the call ends), so any gateway instance can
 * take the next event of a call; updates are compare-and-set on a version, so two instances never
 * lose each other's events. The monthly pause is a Redis flag every instance honours.
 */
import type express from 'express';
import type { Redis } from 'ioredis';
import { z } from 'zod';
import { isOpen, parseBusinessHours, type Window } from './business-hours';
import type { Concierge } from './config';
import { applyEvent, guardConfig, newCall, VoiceEventError, type CallState, type GuardConfig, type VoiceEvent } from './spend-guard';
import { afterCall, buildCallRecord, EndCall, type CallEndDeps, type EndCallBody } from './call-end';
import { Workflow, WorkflowError } from './workflow';

const CALL_TTL_S = 24 * 3600;
const ENDED_TTL_S = 3600;

export interface StoredCall {
  /** The call record, once the call ended (ending again answers it). */
  record?: import('../../../schema/call-record').CallRecord;
  call_id: string;
  from: string;
  country: string | null;
  started_at: string;
  ended_at: string | null;
  action: 'answer' | 'voicemail';
  state: CallState;
  version: number;
}

interface VoiceStore {
  create(call: StoredCall): Promise<StoredCall>;
  get(id: string): Promise<StoredCall | null>;
  /** Applies `change` atomically (retried on a concurrent update). */
  update(id: string, change: (call: StoredCall) => StoredCall): Promise<StoredCall | null>;
  monthlyPaused(): Promise<boolean>;
  setMonthlyPaused(paused: boolean): Promise<void>;
}

export class MemoryVoiceStore implements VoiceStore {
  private readonly calls = new Map<string, StoredCall>();
  private paused = false;
  async create(call: StoredCall) {
    const existing = this.calls.get(call.call_id);
    if (existing) return existing;
    this.calls.set(call.call_id, call);
    return call;
  }
  async get(id: string) {
    const c = this.calls.get(id);
    return c ? structuredClone(c) : null;
  }
  async update(id: string, change: (call: StoredCall) => StoredCall) {
    const c = this.calls.get(id);
    if (!c) return null;
    const next = change(structuredClone(c));
    this.calls.set(id, { ...next, version: c.version + 1 });
    return this.calls.get(id)!;
  }
  async monthlyPaused() {
    return this.paused;
  }
  async setMonthlyPaused(paused: boolean) {
    this.paused = paused;
  }
}

/** SET the call only if its stored version is still the one read. */
const CAS = `local cur = redis.call('GET', KEYS[1])
if not cur then return -1 end
if cjson.decode(cur).version ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1`;

export class RedisVoiceStore implements VoiceStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}
  private key(id: string) {
    return `${this.prefix}:voice:call:${id}`;
  }
  async create(call: StoredCall) {
    const ok = await this.redis.set(this.key(call.call_id), JSON.stringify(call), 'EX', CALL_TTL_S, 'NX');
    return ok ? call : ((await this.get(call.call_id)) ?? call);
  }
  async get(id: string) {
    const text = await this.redis.get(this.key(id));
    return text ? (JSON.parse(text) as StoredCall) : null;
  }
  async update(id: string, change: (call: StoredCall) => StoredCall) {
    for (let attempt = 0; attempt < 20; attempt++) {
      const current = await this.get(id);
      if (!current) return null;
      const next = { ...change(structuredClone(current)), version: current.version + 1 };
      const ttl = next.ended_at ? ENDED_TTL_S : CALL_TTL_S;
      const done = (await this.redis.eval(CAS, 1, this.key(id), String(current.version), JSON.stringify(next), String(ttl))) as number;
      if (done === 1) return next;
      if (done === -1) return null;
    }
    throw new Error(`call ${id}: too many concurrent updates`);
  }
  async monthlyPaused() {
    return (await this.redis.get(`${this.prefix}:voice:monthly_paused`)) === '1';
  }
  async setMonthlyPaused(paused: boolean) {
    if (paused) await this.redis.set(`${this.prefix}:voice:monthly_paused`, '1');
    else await this.redis.del(`${this.prefix}:voice:monthly_paused`);
  }
}

const StartCall = z.strictObject({
  call_id: z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'an id of 1 to 128 characters of A-Z a-z 0-9 . _ : -'),
  from: z.string().min(1),
  country: z
    .string()
    .regex(/^[A-Z]{2}$/, 'an ISO 3166 alpha-2 code such as PT')
    .optional(),
  at: z.iso.datetime({ offset: true }).optional(),
  /** The telephony layer's reason to skip the conversation: no_answer or network_issue → voicemail. */
  trigger: z.enum(['no_answer', 'network_issue']).optional(),
});
const Rollup = z.strictObject({ monthly_usd: z.number().finite().min(0) });
const FunctionCalled = z.strictObject({
  function: z.string().min(1),
  args: z.record(z.string(), z.unknown()).default({}),
  call_id: z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'an id of 1 to 128 characters of A-Z a-z 0-9 . _ : -'),
});

export interface VoiceDeps {
  config: Concierge;
  store: VoiceStore;
  log: { warn: (m: string) => void; error: (m: string) => void };
  now?: () => Date;
  /** What follows a finished call (record, summary, meter events). */
  afterCall?: Omit<CallEndDeps, 'config' | 'log'>;
  workflow?: Workflow;
}

/** The public part of the guard's state in answers. */
function publicState(s: CallState) {
  return { inputMs: s.inputMs, outputMs: s.outputMs, turns: s.turns, estUsd: Number(s.estUsd.toFixed(6)), ttfbBreaches: s.ttfbBreaches };
}

export class VoiceService {
  readonly guard: GuardConfig;
  get workflow(): Workflow | undefined {
    return this.deps.workflow;
  }
  private readonly hours: Window[];
  constructor(private readonly deps: VoiceDeps) {
    this.guard = guardConfig(deps.config);
    const parsed = parseBusinessHours(deps.config.meta.business_hours_local);
    if (!parsed.ok) throw new Error(`meta.business_hours_local: ${parsed.error}`);
    this.hours = parsed.windows;
  }

  async start(input: z.infer<typeof StartCall>) {
    if (await this.deps.store.monthlyPaused())
      return { status: 503, body: { reason: 'monthly_cap', message: 'new calls are paused: the monthly voice spend cap is reached' } };
    const c = this.deps.config;
    const at = input.at ? new Date(input.at) : (this.deps.now?.() ?? new Date());
    const open = isOpen(this.hours, at, c.meta.timezone);
    const voicemailReason = input.trigger ?? (!open && c.guardrails.after_hours_to_voicemail ? 'after_hours' : null);
    const call = await this.deps.store.create({
      call_id: input.call_id,
      from: input.from,
      country: input.country ?? null,
      started_at: at.toISOString(),
      ended_at: null,
      action: voicemailReason ? 'voicemail' : 'answer',
      state: { ...newCall(), intent: voicemailReason ? 'voicemail' : 'unknown' },
      version: 0,
    });
    const voicemail = c.intents.find((i) => i.id === 'voicemail');
    return {
      status: 200,
      body: {
        action: call.action,
        ...(call.action === 'voicemail'
          ? {
              reason: voicemailReason ?? 'after_hours',
              function: voicemail?.on_match.call ?? 'route_to_voicemail',
              privacy_notice: voicemail?.on_match.privacy_notice ?? true,
            }
          : {}),
        consent_line: c.consent.opening_line,
        consent: { retry_if_no_ack: c.consent.retry_if_no_ack, max_retries: c.consent.max_retries },
        language: c.meta.primary_language,
        model: c.meta.model,
      },
    };
  }

  /** Applies a batch all-or-nothing: a bad event refuses the batch, naming it. */
  async events(id: string, events: unknown[]) {
    let problem: string | null = null;
    let rollup: number | null = null;
    const call = await this.deps.store.update(id, (current) => {
      problem = null;
      // The batch is applied to a copy: a bad event anywhere leaves the stored state untouched.
      const state = structuredClone(current.state);
      events.forEach((raw, i) => {
        if (problem) return;
        const e = raw as VoiceEvent | { type: 'billing.monthly_rollup'; monthly_usd: number };
        if (!e || typeof e !== 'object') problem = `events[${i}]: expected an event object`;
        else if (e.type === 'billing.monthly_rollup') {
          if (typeof e.monthly_usd !== 'number' || e.monthly_usd < 0) problem = `events[${i}].monthly_usd: expected a number >= 0`;
          else rollup = e.monthly_usd;
        } else {
          try {
            applyEvent(state, e, this.guard);
          } catch (error) {
            if (!(error instanceof VoiceEventError)) throw error;
            problem = `events[${i}].${error.message}`;
          }
        }
      });
      return problem ? current : { ...current, state };
    });
    if (!call) return { status: 404, body: { error: `no call ${id} (start it with POST /v1/voice/calls)` } };
    if (problem) return { status: 400, body: { error: problem } };
    if (rollup !== null) await this.rollup(rollup);
    const s = call.state;
    return {
      status: 200,
      body: {
        action: s.action,
        ...(s.reason ? { reason: s.reason } : {}),
        state: publicState(s),
        intent: s.intent,
        ...(s.estUsd_at_disconnect !== null ? { estUsd_at_disconnect: s.estUsd_at_disconnect } : {}),
      },
    };
  }

  async end(id: string, body: EndCallBody) {
    let fresh = false;
    const now = this.deps.now?.() ?? new Date();
    const call = await this.deps.store.update(id, (current) => {
      if (current.record) return current;
      fresh = true;
      return { ...current, ended_at: now.toISOString(), record: buildCallRecord(current, body, this.deps.config, now) };
    });
    if (!call) return { status: 404, body: { error: `no call ${id} (start it with POST /v1/voice/calls)` } };
    if (fresh && this.deps.afterCall)
      afterCall(call.record!, call, { ...this.deps.afterCall, config: this.deps.config, log: this.deps.log }, body.responses_metered);
    return { status: 200, body: call.record };
  }

  async rollup(monthlyUsd: number): Promise<void> {
    const paused = monthlyUsd >= this.deps.config.spend_guard.monthly_usd_cap;
    if (paused !== (await this.deps.store.monthlyPaused()))
      this.deps.log.warn(paused ? `voice: monthly spend ${monthlyUsd} USD reached the cap; new calls paused` : 'voice: new calls resumed');
    await this.deps.store.setMonthlyPaused(paused);
  }
}

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
            res.status(error.status).json({ ok: false, error: error.message });
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

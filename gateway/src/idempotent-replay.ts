/**
 * Idempotent replay on the live tier (Stripe's semantics), for requests that sent an
 * `Idempotency-Key`: within 24 hours a repeat of the key (within its tenant) with the same
 * endpoint and body gets the first answer again, from any instance and without a provider call,
 * marked `Idempotent-Replayed: true`; the key with another body is a 422; a repeat while the first
 * runs is a 409. What is kept: answers below 500 (2xx, the provider's 4xx, a Cold 202 with its
 * job id), not a 5xx, a 429 or a broken stream (the key is given up, a repeat runs anew); an answer
 * over the cap is noted as answered but not kept (a repeat gets 409, never a second run).
 *
 * Without the header nothing here runs (no hash, no store call): the default idempotency key is a
 * hash of the messages, and two identical prompts are often meant to run twice.
 */
import { hash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { canonicalJson } from './canonical-json';
import { AnswerTape } from './answer-tape';
import type { CallMeter } from './call-meter';
import type { Deadline } from './deadline';
import { openAiError } from './errors';
import { refuse } from './refusal';
import { sendBody } from './http-io';
import type { GatewayMetrics } from './metrics';
import type { RequestContext } from './request-context';
import { within } from './within';
import { rejection, type Rejection } from './admission';
import { isAnswer, type Lease, type ReplayStore, type StoredAnswer } from './replay-store';
import { RepeatLog } from './repeat-log';

/** A request's place in the replay store: its tenant's key and its fingerprint. */
export interface ReplayRequest {
  key: string;
  fingerprint: string;
}

/**
 * Whether the pipeline's answer ended as it should (a stream the provider cut did not); `refused`:
 * refused before routing (a response the tenant does not own), not kept, as no refusal before routing is.
 */
export type Served = 'complete' | 'broken' | 'refused';

const REPLAY_TTL_MS = 24 * 60 * 60 * 1000;
/** Bodies (whole or streamed) larger than this are not kept. */
const REPLAY_MAX_BYTES = 1024 * 1024;
/** A running request holds its key this long, renewed every third of it: a dead instance's key is free within it. */
const REPLAY_LEASE_MS = 30_000;
/** A store that does not answer in this time is passed by (the request runs without replay). */
const STORE_TIMEOUT_MS = 1000;

/** The request's replay identity, or null when the client sent no Idempotency-Key. */
export function replayRequestOf(given: string | string[] | undefined, path: string, body: unknown, tenant: string): ReplayRequest | null {
  const key = Array.isArray(given) ? given[0] : given;
  if (!key) return null;
  return {
    key: hash('sha256', JSON.stringify([tenant, key]), 'hex'),
    fingerprint: hash('sha256', `${path.split('?')[0]}\n${canonicalJson(body)}`, 'hex'),
  };
}

export interface ReplayDeps {
  store: ReplayStore;
  meter: CallMeter;
  metrics: GatewayMetrics;
  log: Logger;
  maxBytes?: number;
  leaseMs?: number;
  ttlMs?: number;
  /** The request limits a replay counts against (admission.ts replayLimit): a refusal, or null. */
  limit?: (ctx: RequestContext) => Promise<Rejection | null> | null;
}

/** `headers` tell OpenAI's clients (which retry a 409 by themselves) when to try again, or not to. */
const refusal = (status: number, code: string, message: string, headers: Record<string, string> = {}) => ({
  status,
  error: openAiError(message, 'invalid_request_error', null, code),
  headers,
});

const REUSED = refusal(
  422,
  'idempotency_key_reused',
  'Idempotency-Key: this key was used in the last 24 hours with another request (another body or endpoint); send a new key for a new request',
);
const IN_FLIGHT = refusal(
  409,
  'idempotency_key_in_flight',
  'Idempotency-Key: the first request with this key is still running; retry once it has answered',
  { 'retry-after': '1' },
);

export class IdempotentReplay {
  private readonly maxBytes: number;
  private readonly leaseMs: number;
  private readonly ttlMs: number;
  /** A store that is away fails every request that carries a key (a backend may send one with each): not a line each. */
  private readonly repeats = new RepeatLog();

  constructor(private readonly deps: ReplayDeps) {
    this.maxBytes = deps.maxBytes ?? REPLAY_MAX_BYTES;
    this.leaseMs = deps.leaseMs ?? REPLAY_LEASE_MS;
    this.ttlMs = deps.ttlMs ?? REPLAY_TTL_MS;
  }

  /** Answers a repeat from the store, refuses a conflict, or runs `serve` and keeps its answer. */
  async guard(
    req: ReplayRequest,
    ctx: RequestContext,
    res: ServerResponse,
    deadline: Deadline,
    serve: () => Promise<Served>,
  ): Promise<void> {
    // A quarter of the time-to-answer at most: the rest is the routing's, should the store not answer.
    const claim = await this.claim(req, Math.min(STORE_TIMEOUT_MS, ctx.timeToAnswerMs / 4));
    if (claim === null) {
      await serve();
      return;
    }
    switch (claim.kind) {
      case 'answered':
        return this.replay(ctx, res, claim.answer);
      case 'other_body':
        return refuse(this.deps.metrics, res, REUSED.status, REUSED.error);
      case 'running':
        return refuse(this.deps.metrics, res, IN_FLIGHT.status, IN_FLIGHT.error, { ...IN_FLIGHT.headers });
      case 'not_kept': {
        const { status, bytes } = claim.notKept;
        const message = `Idempotency-Key: the first request with this key was answered (${status}, ${bytes} bytes), but answers over ${this.maxBytes} bytes are not kept for replay; send a new key to run it again`;
        const error = openAiError(message, 'invalid_request_error', null, 'idempotency_answer_not_kept');
        return refuse(this.deps.metrics, res, 409, error, { 'x-should-retry': 'false' });
      }
    }
    await this.run(claim.lease, res, deadline, serve);
  }

  /** The store's answer, or null when it failed or was too slow: the request then runs unguarded. */
  private async claim(req: ReplayRequest, waitMs: number) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<null>((resolve) => (timer = setTimeout(resolve, waitMs, null)));
    const claiming = this.deps.store.claim(req.key, req.fingerprint, this.leaseMs);
    try {
      const claim = await Promise.race([claiming, late]);
      if (claim === null) {
        // Redis's client holds the claim until Redis is back, and then takes the key for a request
        // that ran without it: given up at once, else repeats got 409 for a lease nobody held.
        void claiming.then((c) => (c.kind === 'claimed' ? this.deps.store.release(c.lease) : undefined)).catch(() => {});
        throw new Error(`no answer in ${Math.round(waitMs)} ms`);
      }
      return claim;
    } catch (error) {
      const more = this.repeats.due('claim');
      if (more !== null)
        this.deps.log.warn({ err: (error as Error).message }, `idempotent replay: store unavailable, request runs without replay${more}`);
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The first request: served with its answer recorded, then kept (or the key given up) before its end is sent. */
  private async run(lease: Lease, res: ServerResponse, deadline: Deadline, serve: () => Promise<Served>): Promise<void> {
    const tape = new AnswerTape(res, this.maxBytes);
    const renewal = setInterval(() => void this.deps.store.renew(lease, this.leaseMs).catch(() => {}), this.leaseMs / 3);
    renewal.unref();
    let served: Served = 'broken';
    try {
      served = await serve();
      // Kept once all of it has gone out (it was kept at its first piece), not at all if the client left first.
      if (served === 'complete' && !(await tape.ended())) served = 'broken';
    } finally {
      clearInterval(renewal);
      // Bounded (STORE_TIMEOUT_MS), as the claim's wait is: with Redis away its client holds the
      // command until Redis is back, and the answer's end waits for it. Unsettled, the key stays
      // held until its lease ends; the keep still lands if Redis answers within it.
      await within(this.settle(lease, tape, served), this.settleWaitMs(tape, deadline), 'the replay store').catch((error: Error) => {
        const more = this.repeats.due('keep');
        if (more !== null) this.deps.log.warn({ err: error.message }, `idempotent replay: answer not stored${more}`);
      });
      tape.release();
    }
  }

  /** A whole answer waits for its keep no longer than its time-to-answer leaves; a stream's end (past it by nature) STORE_TIMEOUT_MS. */
  private settleWaitMs(tape: AnswerTape, deadline: Deadline): number {
    if ((tape.headers['content-type'] ?? '').startsWith('text/event-stream')) return STORE_TIMEOUT_MS;
    return Math.min(STORE_TIMEOUT_MS, deadline.storeWaitMs());
  }

  /** Keeps what a repeat should get again; gives the key up after a failure, so a repeat runs anew. */
  private async settle(lease: Lease, tape: AnswerTape, served: Served): Promise<void> {
    const { store } = this.deps;
    const status = tape.status;
    if (served !== 'complete' || status === 0 || status >= 500 || status === 429) return store.release(lease);
    const body = tape.body();
    const result = body
      ? { status, headers: tape.headers, body, stream: (tape.headers['content-type'] ?? '').startsWith('text/event-stream') }
      : { status, bytes: tape.size() };
    await store.keep(lease, result, this.ttlMs);
    if (!isAnswer(result)) this.deps.log.info({ status, bytes: result.bytes }, 'idempotent replay: answer too large to keep');
  }

  /** The stored answer, metered as a replay (no tokens, no cost) once its event is durable. */
  private async replay(ctx: RequestContext, res: ServerResponse, answer: StoredAnswer): Promise<void> {
    const over = await this.deps.limit?.(ctx);
    if (over) {
      const refused = rejection(over);
      return refuse(this.deps.metrics, res, refused.status, refused.error, refused.headers);
    }
    await this.deps.meter.record({
      ctx,
      provider: answer.headers['x-route-provider'] ?? 'replay',
      model: answer.headers['x-route-model'] ?? ctx.body.model,
      latencyMs: 0,
      usage: null,
      errorCode: '',
      decision: 'idempotent_replay',
    });
    this.deps.metrics.countRequest('replay', answer.status);
    const headers: Record<string, string> = { ...answer.headers, 'idempotent-replayed': 'true' };
    if (!answer.stream) return sendBody(res, answer.status, answer.body, headers['content-type'] ?? 'application/json', headers);
    if (res.destroyed) return;
    headers['cache-control'] = 'no-cache';
    res.writeHead(answer.status, headers);
    res.end(answer.body);
  }
}

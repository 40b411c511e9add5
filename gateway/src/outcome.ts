/**
 * What routing produced for one request. An answer settles itself once its body has been relayed
 * (`settle`): a stream is scored then (breaker and health: routing left it unscored at its first
 * byte), and the call's meter event is written with the usage the answer carried. Whole answers
 * and failed calls were scored by the routing loop as they happened.
 */
import type { Ticket } from './breaker';
import type { CallMeter } from './call-meter';
import type { GatewayMetrics } from './metrics';
import type { Usage } from './providers/adapter';
import type { ApiKind, RequestContext } from './request-context';
import type { Route } from './route';
import type { UpstreamAnswer } from './upstream';

export interface Settlement {
  ok: boolean;
  usage: Usage | null;
  /** '' for a success; `STREAM_INTERRUPTED` (the provider's fault) or `CLIENT_CLOSED` (not). */
  code?: string;
  /** Time spent relaying after the first byte, added to the call's latency. */
  relayMs?: number;
  /** `usage` is an estimate (a stream cut on our side before the provider reported its usage). */
  estimated?: boolean;
  /** A whole answer's time-to-answer left: how long its release may wait for the event to be durable. */
  waitMs?: number;
}

/** What an answer needs to settle itself, and which provider API answered. */
export interface AnswerOf {
  ctx: RequestContext;
  /** The provider API that answered (`chat` for a translated Responses request). */
  api: ApiKind;
  meter: CallMeter;
  decision: string;
  /** Where a stream's call is counted once it has ended (a whole answer's was counted by routing). */
  metrics?: Pick<GatewayMetrics, 'countCall'>;
  /** Told of the call's meter event once it is sent (`durable`: on disk), as a Cold job's call mark is removed (cold-call-marks.ts). */
  onMetered?: (durable: Promise<void>) => void;
}

export class Answer {
  readonly kind = 'answer';
  private settled = false;
  /** Resolves once the call's meter event is durable: the answer is released after it. */
  durable: Promise<void> = Promise.resolve();
  constructor(
    readonly route: Route,
    /** The model called (spend-cap routing or a scope fallback may ask for another). */
    readonly model: string,
    readonly attempts: number,
    readonly upstream: UpstreamAnswer,
    private readonly ticket: Ticket,
    readonly of: AnswerOf,
  ) {}

  /** Records the call's end: a stream's score (breaker and health), and the meter event. Once. */
  settle(s: Settlement): void {
    if (this.settled) return;
    this.settled = true;
    const code = s.code ?? '';
    if (this.upstream.rest) {
      // Our own client hanging up says nothing about the route: the ticket is released unscored.
      const success = s.ok ? true : code === 'CLIENT_CLOSED' ? null : false;
      this.route.breaker.end(this.ticket, success);
      if (success !== null) this.route.health.record(success);
      // By how it ended (ok, stream_interrupted, client_closed, ...), with the latency to its first byte.
      this.of.metrics?.countCall(
        this.route.label,
        s.ok ? 'ok' : code.toLowerCase() || 'stream_interrupted',
        this.upstream.latencyMs / 1000,
      );
    }
    const { provider, region } = this.route.config;
    this.durable = this.of.meter.record({
      ctx: this.of.ctx,
      provider,
      model: this.model,
      region,
      route: this.route.label,
      latencyMs: this.upstream.latencyMs + (s.relayMs ?? 0),
      usage: s.usage,
      // A failed or cut-off call is flagged by its code already; a complete one without usage is not.
      answered: s.ok,
      errorCode: code,
      estimated: s.estimated,
      decision: this.of.decision,
      waitMs: s.waitMs,
    });
    this.of.onMetered?.(this.durable);
  }
}

/** The provider refused the request as malformed: passed back (relay.ts), no other route tried. */
export interface ClientError {
  kind: 'client_error';
  route: Route;
  model: string;
  attempts: number;
  upstream: UpstreamAnswer;
  ctx: RequestContext;
  /** The provider API that refused it (`chat` for a translated Responses request). */
  api: ApiKind;
}

/**
 * What a client is told when every route was switched off (`Exhausted.switchedOff`): no outage of
 * the providers to look for, where "no route answered" said there was.
 */
export const NONE_CALLED =
  'no route could be called (each is switched off: the budget pause, a killed model, warm fallback off, or its token budget)';

/** No route answered: every one failed or was skipped, or the time-to-answer ran out. */
export interface Exhausted {
  kind: 'exhausted';
  attempts: number;
  /** `client_closed`: our client went away; nobody waits for an answer, so nothing is queued for it. */
  reason: 'all_failed' | 'time_to_answer' | 'client_closed';
  lastError: string | null;
  /** No route was called, nor skipped for an open breaker: every one is switched off (NONE_CALLED). */
  switchedOff?: boolean;
  /** `client_closed` after the provider received the call: the estimate of its usage it was metered with. */
  estimate?: Usage;
}

export type Outcome = Answer | ClientError | Exhausted;

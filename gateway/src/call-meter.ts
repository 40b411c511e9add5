/**
 * One meter event per provider call (and one per request sent to the queue by spend-cap
 * routing), in the shared event record's shape. The one place the gateway builds an event.
 */
import { randomUUID } from 'node:crypto';
import type { EventRecord } from '../../schema/event-record';
import { costUsd } from './pricing';
import type { Usage } from './providers/adapter';
import type { RequestContext } from './request-context';

export interface CallFacts {
  ctx: Pick<RequestContext, 'jobId' | 'customerId'>;
  provider: string;
  model: string;
  region?: string;
  latencyMs: number;
  usage: Usage | null;
  /** '' for a success; the failure class or HTTP status otherwise. */
  errorCode: string;
  /** The spend-cap routing decision the call was made under (`n/a` when none applied). */
  decision?: string;
  reviewRequired?: boolean;
}

export class CallMeter {
  constructor(
    private readonly send: (event: EventRecord) => Promise<void>,
    private readonly warn: (message: string) => void,
  ) {}

  /** Sends the call's event; resolves once it is durable (the meter sink's spool or CSV). */
  record(f: CallFacts): Promise<void> {
    const cost = f.usage ? costUsd(f.provider, f.model, f.usage, this.warn) : 0;
    return this.send({
      event_id: randomUUID(),
      timestamp: new Date(),
      actor_type: 'agent',
      provider: f.provider,
      model: f.model,
      region: f.region ?? 'global', // the record's word for a region we do not know
      input_tokens: f.usage?.input_tokens ?? 0,
      output_tokens: f.usage?.output_tokens ?? 0,
      latency_ms: Math.round(f.latencyMs),
      cost_usd: cost,
      eval_score: null,
      confidence: null,
      job_id: f.ctx.jobId,
      customer_id: f.ctx.customerId,
      pii_flag: false,
      review_required: f.reviewRequired ?? false,
      reviewer_id: '',
      decision: f.decision ?? 'n/a',
      error_code: f.errorCode,
    });
  }
}

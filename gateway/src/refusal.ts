/**
 * A request refused before any tier answered it (a bad key, a refused body, an Idempotency-Key
 * conflict, a Responses follow-up no provider may serve): counted in gateway_requests_total as tier
 * `none` with its status, or a client hammering with a bad key or a deploy that broke request
 * bodies would not show in /metrics. One whose client is gone already counts as the pipeline counts
 * a client that left.
 */
import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { sendJson } from './http-io';
import type { GatewayMetrics } from './metrics';

export function refuse(
  metrics: Pick<GatewayMetrics, 'countRequest'>,
  res: ServerResponse,
  status: number,
  error: unknown,
  headers?: OutgoingHttpHeaders,
): void {
  metrics.countRequest('none', res.destroyed ? 'client_closed' : status);
  sendJson(res, status, error, headers);
}

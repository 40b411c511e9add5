/** The response headers every routed answer carries: which tier, provider and model answered, after how many calls. */
import type { OutgoingHttpHeaders } from 'node:http';

export function routeHeaders(tier: string, provider: string, model: string, attempts: number): OutgoingHttpHeaders {
  return { 'x-route-tier': tier, 'x-route-provider': provider, 'x-route-model': model, 'x-route-attempts': String(attempts) };
}

// The concierge template, and the template with every placeholder filled as an operator would.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConciergeConfig, type Concierge } from '../../gateway/src/voice/config';

const root = join(import.meta.dirname, '..', '..');
export const template = () => JSON.parse(readFileSync(join(root, 'concierge.json'), 'utf8'));

/** The template with every placeholder filled as an operator would. */
export function filled(): Concierge {
  const c = template();
  Object.assign(c.meta, {
    model: 'gpt-realtime-mini',
    timezone: 'Europe/Lisbon',
    business_hours_local: 'Mon-Fri 08:00-18:00; Sat 09:00-13:00',
    primary_language: 'pt-PT',
    alt_languages: ['en-GB'],
  });
  c.consent.opening_line = 'Olá! This call is answered by an AI assistant and may be recorded. Is that OK?';
  Object.assign(c.spend_guard, {
    monthly_usd_cap: 300,
    log_to: 'https://observe.example.com/calls',
    audio_in_per_million: 10,
    audio_out_per_million: 20,
    text_in_per_million: 0.6,
    text_out_per_million: 2.4,
  });
  const urls: Record<string, string> = {
    book_slot: 'https://hooks.example.com/book',
    reschedule_slot: 'https://hooks.example.com/reschedule',
    create_lead: 'https://hooks.example.com/lead',
    route_to_voicemail: 'https://hooks.example.com/voicemail',
  };
  for (const f of c.functions) {
    if (f.webhook) f.webhook = urls[f.name];
    if (f.static_url) f.static_url = 'https://example.com/prices';
    if (f.dial) f.dial = '+351211234567';
  }
  c.intents[2].on_match.qualify_rules = { service_in: ['plumbing', 'heating'], geo_whitelist: ['Lisboa', '1000-001'] };
  c.intents[3].on_match.link = 'https://example.com/prices';
  c.workflow.dlq_url = 'https://hooks.example.com/dlq';
  return ConciergeConfig.parse(c);
}

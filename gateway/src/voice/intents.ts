/**
 * Intent matching by the configured triggers: case-insensitive, whole words and phrases ("book"
 * matches "I'd like to book a table" but not "booking"... nor "notebook"). The first intent, in
 * configuration order, with a trigger in the caller's words wins; none → `unknown`.
 */
import type { IntentId } from './config';

const normalise = (text: string) =>
  ` ${text
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_' ]+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim()} `;

export function matchIntent(text: string, intents: Array<{ id: IntentId; triggers: string[] }>): IntentId | 'unknown' {
  const words = normalise(text);
  for (const intent of intents) {
    if (intent.triggers.some((t) => words.includes(normalise(t)))) return intent.id;
  }
  return 'unknown';
}

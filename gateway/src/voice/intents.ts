/**
 * Intent matching by the configured triggers: case-insensitive, whole words and phrases ("book"
 * matches "I'd like to book a table" but not "booking"... nor "notebook"). The first intent, in
 * configuration order, with a trigger in the caller's words wins; none → `unknown`.
 */
import type { IntentId } from './config';

/**
 * Words as they are compared: lower case, a typographic apostrophe as a plain one, any other
 * punctuation and runs of spaces as one space. The configured phrase goes through it too, so a
 * trigger or marker typed with punctuation ("no, no, no", "this is ridiculous!") still matches.
 */
export const normalise = (text: string) =>
  ` ${text
    .toLowerCase()
    .replace(/[\u2018\u2019]/g, "'")
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

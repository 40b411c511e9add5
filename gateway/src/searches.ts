/**
 * The built-in searches a Responses answer made (its `web_search_call` and `file_search_call`
 * output items): the provider bills each one apart from the tokens (OpenAI: $10 per thousand web
 * searches, $2.50 per thousand file searches), so the meter prices them too (pricing.ts).
 */
import { isObject } from './json-object';

export interface Searches {
  web_searches?: number;
  file_searches?: number;
}

const WEB = Buffer.from('"web_search_call"');
const FILE = Buffer.from('"file_search_call"');

/** How often `needle` occurs; a quoted type name cannot occur inside a string (its quotes would be escaped). */
function occurrences(body: Buffer, needle: Buffer): number {
  let n = 0;
  for (let i = body.indexOf(needle); i !== -1; i = body.indexOf(needle, i + needle.length)) n++;
  return n;
}

const counted = (web: number, file: number): Searches => ({
  ...(web ? { web_searches: web } : {}),
  ...(file ? { file_searches: file } : {}),
});

/** The searches of a whole response, read from its bytes (no parse). */
export function searchesIn(body: Buffer): Searches {
  return counted(occurrences(body, WEB), occurrences(body, FILE));
}

/** The searches of a parsed response (a stream's final event). */
export function searchesOf(response: unknown): Searches {
  const output = isObject(response) && Array.isArray(response.output) ? response.output : [];
  const of = (type: string) => output.filter((item) => isObject(item) && item.type === type).length;
  return counted(of('web_search_call'), of('file_search_call'));
}

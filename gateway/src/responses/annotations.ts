/**
 * A chat message's `annotations` (or a stream delta's) as the Responses API gives them on the
 * output text: each `url_citation` (OpenAI's search-preview models, OpenRouter's web plugin) with
 * its url, title and the span of the text it cites. Kinds the Responses API has no place for are left out.
 */
import type { ResponseOutputText } from 'openai/resources/responses/responses';
import { isObject } from '../json-object';

type URLCitation = ResponseOutputText.URLCitation;

function citationOf(entry: unknown): URLCitation | null {
  if (!isObject(entry) || entry.type !== 'url_citation' || !isObject(entry.url_citation)) return null;
  const { url, title, start_index: start, end_index: end } = entry.url_citation;
  if (typeof url !== 'string' || typeof start !== 'number' || typeof end !== 'number') return null;
  return { type: 'url_citation', url, title: typeof title === 'string' ? title : '', start_index: start, end_index: end };
}

/** The URL citations among chat annotations (an empty list when there are none). */
export function annotationsOf(annotations: unknown): URLCitation[] {
  return Array.isArray(annotations) ? annotations.flatMap((entry: unknown) => citationOf(entry) ?? []) : [];
}

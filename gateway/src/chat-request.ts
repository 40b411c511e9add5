/**
 * The chat-completions request: OpenAI's body (checked, other fields passed through untouched)
 * and the routing context from our headers.
 */
import { z } from 'zod';
import { MAX_TEXT_LENGTH } from '../../schema/event-record';
import { readRoutingHeaders, type Headers, type RequestContext } from './request-context';
import type { Scopes } from './scopes';

const Message = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: z.union([z.string(), z.array(z.unknown()), z.null()]).optional(),
});

const ChatBody = z.looseObject({
  // The model goes into the meter event too: no longer than the event record allows.
  model: z.string().min(1).max(MAX_TEXT_LENGTH),
  messages: z.array(Message).min(1),
  stream: z.boolean().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
});
export type ChatBodyT = z.infer<typeof ChatBody>;

export type ChatContext = RequestContext<ChatBodyT>;

export type ParseResult = { ok: true; context: ChatContext } | { ok: false; message: string; param: string | null };

export function parseChatRequest(body: unknown, headers: Headers, scopes: Scopes): ParseResult {
  const parsed = ChatBody.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = issue.path.length ? issue.path.map(String).join('.') : null;
    return { ok: false, message: `${param ?? 'body'}: ${issue.message}`, param };
  }
  const routing = readRoutingHeaders(headers, scopes, parsed.data.messages);
  if (!routing.ok) return { ok: false, message: routing.message, param: null };
  return { ok: true, context: { api: 'chat', body: parsed.data, stream: parsed.data.stream === true, ...routing.value } };
}

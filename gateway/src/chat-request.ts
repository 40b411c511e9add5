/**
 * The chat-completions request: OpenAI's body (checked, other fields passed through untouched)
 * and the routing context from our headers.
 */
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import type { Parsed } from './endpoint';
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
type ChatBodyT = z.infer<typeof ChatBody>;

type ChatContext = RequestContext<ChatBodyT>;

export function parseChatRequest(body: unknown, headers: Headers, scopes: Scopes, clientKey?: ClientKey): Parsed {
  const parsed = ChatBody.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = issue.path.length ? issue.path.map(String).join('.') : null;
    return { ok: false, message: `${param ?? 'body'}: ${issue.message}`, param };
  }
  const routing = readRoutingHeaders(headers, scopes, parsed.data.messages, clientKey);
  if (!routing.ok) return { ok: false, message: routing.message, param: null };
  const context: ChatContext = { api: 'chat', body: parsed.data, stream: parsed.data.stream === true, ...routing.value };
  return { ok: true, context };
}

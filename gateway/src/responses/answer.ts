/**
 * A whole chat completion as a Response object: the assistant's text (and its URL citations) as a `message` item, each
 * tool call as a `function_call` item (its `call_id` is the chat tool call's id, so the client's
 * `function_call_output` finds its way back through request.ts), the status (`incomplete` when the
 * provider stopped at the token limit or its content filter), and the usage.
 */
import type { ResponseFunctionToolCall, ResponseOutputItem, ResponseOutputMessage } from 'openai/resources/responses/responses';
import { answeringModel, incompleteReason, requestedModel, responseObject, responseUsage } from './envelope';
import { annotationsOf } from './annotations';
import { fallbackCallId, itemId, type ResponseIds } from './ids';
import { logprobsOf } from './logprobs';
import { isObject, jsonText } from '../json-object';

type Json = Record<string, unknown>;

/**
 * Chat message content (or a stream's delta of it) as text: a string, or (some providers, such as
 * Mistral's reasoning models) a list of parts, whose text parts are the answer (`thinking` is not).
 */
export function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part) => (isObject(part) && part.type === 'text' && typeof part.text === 'string' ? part.text : '')).join('');
}

/** `called`: the model the gateway asked the provider for (the route's). */
export function chatToResponse(
  chat: unknown,
  request: Record<string, unknown>,
  ids: ResponseIds,
  called = requestedModel(request),
): Record<string, unknown> {
  const body = isObject(chat) ? chat : {};
  const model = answeringModel(body.model, called);
  const choice = Array.isArray(body.choices) ? body.choices.find((c) => isObject(c) && (c.index ?? 0) === 0) : undefined;
  const usage = responseUsage(body.usage);
  if (!isObject(choice) || !isObject(choice.message)) {
    const error = { code: 'server_error' as const, message: 'The provider answered without a message.' };
    return responseObject(request, ids, { model, status: 'failed', output: [], usage, error });
  }
  const message = choice.message;
  const reason = incompleteReason(choice.finish_reason);
  const status = reason ? 'incomplete' : 'completed';
  const output: ResponseOutputItem[] = [];

  const text = textOf(message.content);
  const refusal = typeof message.refusal === 'string' && message.refusal ? message.refusal : null;
  const calls = (Array.isArray(message.tool_calls) ? message.tool_calls : []).filter(
    (c): c is Json => isObject(c) && (c.type ?? 'function') === 'function' && isObject(c.function),
  );
  // Only the last item was cut (a length limit or the filter stops the answer where it is): the ones
  // before it finished, as a stream's items close when the next begins (stream.ts).
  const hasMessage = Boolean(text || refusal || !calls.length);
  const last = (hasMessage ? 1 : 0) + calls.length - 1;
  const statusAt = (index: number) => (index === last ? status : 'completed');
  // A message item when there is something to say, or nothing else to give (an empty answer is an empty message).
  if (hasMessage) {
    const content: ResponseOutputMessage['content'] = [];
    if (text || !refusal) {
      content.push({ type: 'output_text', text, annotations: annotationsOf(message.annotations), logprobs: logprobsOf(choice.logprobs) });
    }
    if (refusal) content.push({ type: 'refusal', refusal });
    output.push({ id: itemId(ids.responseId, 'msg', output.length), type: 'message', status: statusAt(0), content, role: 'assistant' });
  }
  for (const call of calls) {
    const fn = call.function as Json;
    const given = typeof fn.arguments === 'string' ? fn.arguments : jsonText(fn.arguments ?? {});
    const callStatus = statusAt(output.length);
    const item: ResponseFunctionToolCall = {
      id: itemId(ids.responseId, 'fc', output.length),
      type: 'function_call',
      status: callStatus,
      // A finished call without arguments (some providers' call of a function without parameters) has none: `{}`.
      arguments: given || (callStatus === 'completed' ? '{}' : ''),
      call_id: typeof call.id === 'string' && call.id ? call.id : fallbackCallId(ids.responseId, output.length),
      name: typeof fn.name === 'string' ? fn.name : '',
    };
    output.push(item);
  }
  return responseObject(request, ids, { model, status, output, usage, incompleteReason: reason });
}

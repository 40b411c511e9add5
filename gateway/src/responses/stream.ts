/**
 * (Over 300 lines: one event sequence, kept whole so the order of the events reads top to bottom.)
 *
 * A chat-completions stream as a Responses stream: each chat chunk (the parsed JSON of one SSE
 * `data:`) becomes the Responses events it amounts to, in the order OpenAI sends them:
 *
 *   response.created → response.in_progress
 *   text:       output_item.added (message) → content_part.added → output_text.delta… (each URL
 *               citation, as it comes: output_text.annotation.added) → output_text.done →
 *               content_part.done → output_item.done
 *   each tool call (by the chat `tool_calls[].index`; a new id under an index is a new call):
 *               output_item.added (function_call) → function_call_arguments.delta… →
 *               function_call_arguments.done → output_item.done
 *   response.completed (response.incomplete when the provider stopped at the token limit or its
 *   content filter), with the whole response and its usage; response.failed, and nothing after
 *   it, when the provider reports an error inside its stream (or the stream breaks: fail()).
 *
 * `sequence_number` counts every event from 0. Items are numbered in the order they begin, and an
 * item is closed when the next begins (as OpenAI does), so output_index, content_index and item_id
 * always name an item the client has seen added and not yet done. A refusal streams as a `refusal`
 * content part of the message; content a provider streams as a list of parts is read as a whole
 * answer's is (answer.ts: its text parts). A call that begins while the open call's arguments are
 * not yet whole JSON (a provider that streams every call's head first, their arguments after, or
 * that interleaves the calls' argument pieces) is held: the open
 * call keeps streaming, and the held calls are shown after it closes, each with its whole
 * arguments in one delta, so that each call's `.done` events carry its arguments. Arguments that
 * come for a call already closed (after text began) are kept for the final response without
 * events. The usage-only chunk is absorbed; `usage` gives it to the meter.
 *
 * The whole output is kept for the final event, so it is held to a limit (`maxOutputBytes`, the
 * gateway's limit on a whole answer): past it the response fails (`tooLarge`), as a whole answer
 * that large is refused, rather than kept growing for a provider whose stream never ends.
 */
import type {
  Response,
  ResponseFunctionToolCall,
  ResponseOutputItem,
  ResponseOutputMessage,
  ResponseOutputRefusal,
  ResponseOutputText,
  ResponseStreamEvent,
} from 'openai/resources/responses/responses';
import { textOf } from './answer';
import { annotationsOf } from './annotations';
import { answeringModel, incompleteReason, requestedModel, responseObject, responseUsage, type ResponseState } from './envelope';
import { chatStreamError } from '../chat-stream-error';
import { fallbackCallId, itemId, type ResponseIds } from './ids';
import { logprobsOf } from './logprobs';
import { isObject, jsonText } from '../json-object';

export type { ResponseStreamEvent };

type Json = Record<string, unknown>;
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

type ItemStatus = 'in_progress' | 'completed' | 'incomplete';
type Part = ResponseOutputText | ResponseOutputRefusal;
type Logprob = ResponseOutputText.Logprob;
type Annotation = ResponseOutputText['annotations'][number];

interface MessageState {
  kind: 'message';
  outputIndex: number;
  id: string;
  parts: Part[];
  partOpen: boolean;
  status: ItemStatus;
}

interface CallState {
  kind: 'call';
  /** The chat tool call's `index` (or, from a provider that leaves it out, its id). */
  key: number | string;
  outputIndex: number;
  id: string;
  callId: string;
  /** The id the provider gave the call, if any. */
  providerId?: string;
  name: string;
  arguments: string;
  /** Closed without arguments, so given `{}`: arguments that still come replace it. */
  defaulted?: boolean;
  status: ItemStatus;
}

/** The usage a chat stream reported, in the chat shape (the provider's other fields, such as a cost, kept). */
export type ChatUsage = { prompt_tokens: number; completion_tokens: number } & Json;

/** One event without its sequence number, checked against the SDK's type for that event. */
type EventOf<T extends ResponseStreamEvent['type']> = Omit<Extract<ResponseStreamEvent, { type: T }>, 'sequence_number'>;

/**
 * A tool call delta's arguments as text: OpenAI's string piece, or the whole arguments as a JSON
 * object, which some providers (llama.cpp's server, TGI) give in one delta, as a whole answer's
 * (none when that cannot be written again, as a whole answer's).
 */
const argumentsDelta = (args: unknown): string =>
  typeof args === 'string' ? args : isObject(args) || Array.isArray(args) ? jsonText(args) : '';

/** Whether a call's arguments so far are whole JSON (else more of them is still to come). */
function wholeJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** Items added one by one: a chunk may have more logprobs than `push(...items)` takes arguments. */
function append<T>(to: T[], items: readonly T[]): void {
  for (const item of items) to.push(item);
}

const copy = (part: Part): Part =>
  part.type === 'output_text' ? { ...part, annotations: [...part.annotations], logprobs: [...(part.logprobs ?? [])] } : { ...part };

export class ChatToResponsesStream {
  private sequence = 0;
  private started = false;
  private ended = false;
  private hasFailed = false;
  private model: string;
  private finishReason: unknown = null;
  private chatUsage: ChatUsage | null = null;
  /** The service tier the chat stream says served it (every OpenAI chunk names it), for the meter. */
  tier: unknown;
  private readonly items: Array<MessageState | CallState> = [];
  /** The bytes of output kept: text (and its logprobs and citations, as JSON), refusals, call names and arguments (UTF-8), each item and part as first shown (JSON). */
  private kept = 0;
  private overLimit = false;
  private readonly calls = new Map<number | string, CallState>();
  /** Each call by its `index` (key) and the id the provider gave it: parallel calls may share an index. */
  private readonly byId = new Map<string, CallState>();
  /** Logprobs of tokens whose text the provider has not sent yet (a character split across tokens): given with it. */
  private readonly heldLogprobs: Logprob[] = [];
  /** Each output text's citations as JSON: one given again is found at once, not compared with each before it. */
  private readonly cited = new WeakMap<Part, Set<string>>();
  /** The item still open (at most one: an item is closed when the next begins). */
  private open: MessageState | CallState | null = null;
  /**
   * Calls begun while the open call's arguments were not yet whole (a provider that streams the
   * calls' heads first, their arguments after, or interleaves their pieces): shown once the open
   * call closes, each whole, so that no call is closed before its arguments came.
   */
  private readonly held: CallState[] = [];
  /** While calls are held, the call whose arguments came last: the one a token limit cut. */
  private fed: CallState | null = null;

  /** `called`: the model the gateway asked the provider for (the route's). */
  constructor(
    private readonly request: Record<string, unknown>,
    private readonly ids: ResponseIds,
    called = requestedModel(request),
    private readonly maxOutputBytes = Infinity,
  ) {
    this.model = called;
  }

  /** The usage seen, in the chat shape (prompt_tokens/completion_tokens), for the meter. */
  get usage(): ChatUsage | null {
    return this.chatUsage;
  }

  /** Whether the provider gave the finish_reason of the answer (the one choice a translation reads). */
  get finished(): boolean {
    return this.finishReason !== null;
  }

  /** Whether the response failed because its output passed `maxOutputBytes`. */
  get tooLarge(): boolean {
    return this.overLimit;
  }

  /** Whether the response ended as failed (a provider error in the stream, or fail()). */
  get failed(): boolean {
    return this.hasFailed;
  }

  /**
   * The opening events (`response.created`, `response.in_progress`). Left to push(), they name the
   * model of the provider's first chunk, as every later event does; start() itself, before any
   * chunk, names the model called.
   */
  start(): ResponseStreamEvent[] {
    const out: ResponseStreamEvent[] = [];
    if (this.started) return out;
    this.started = true;
    const response = this.response({ status: 'in_progress' });
    this.emit(out, { type: 'response.created', response });
    this.emit(out, { type: 'response.in_progress', response });
    return out;
  }

  /** Events for one chat chunk (deltas, function-call argument deltas; the usage chunk is absorbed). */
  push(chunk: unknown): ResponseStreamEvent[] {
    // The model is settled by the first event sent: every event of one response names the same.
    if (!this.started && isObject(chunk)) this.model = answeringModel(chunk.model, this.model);
    const out = this.start();
    if (!isObject(chunk)) return out;
    this.readUsage(chunk.usage); // also once ended: a usage chunk may follow a provider's error
    this.tier = chunk.service_tier ?? this.tier;
    if (this.ended) return out;
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    const choice = choices.find((c) => isObject(c) && (c.index ?? 0) === 0);
    const error = chatStreamError(chunk);
    if (error !== null) return [...out, ...this.fail(error)];
    if (!isObject(choice)) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    // Read as a whole answer's content is: a string, or text parts among others.
    const content = textOf(delta.content);
    const logprobs = logprobsOf(choice.logprobs);
    if (logprobs.length) this.kept += JSON.stringify(logprobs).length; // kept, now or with the text that follows
    if (content) this.text(out, 'output_text', content, [...this.heldLogprobs.splice(0), ...logprobs]);
    else if (!Array.isArray(delta.tool_calls)) append(this.heldLogprobs, logprobs); // a call's tokens are none of the text's
    annotationsOf(delta.annotations).forEach((annotation) => this.annotate(out, annotation));
    if (typeof delta.refusal === 'string' && delta.refusal) this.text(out, 'refusal', delta.refusal);
    if (Array.isArray(delta.tool_calls)) delta.tool_calls.forEach((call, position) => this.toolCall(out, call, position));
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    if (this.kept > this.maxOutputBytes) {
      this.overLimit = true;
      out.push(...this.fail(`the answer is larger than ${this.maxOutputBytes} bytes`));
    }
    return out;
  }

  /**
   * Closing events: the `.done` events of the open item, and `response.completed` with the usage
   * (`response.incomplete` when the finish reason was `length` or `content_filter`). Call it once
   * the provider's stream finished (`[DONE]`); for a stream that broke, call fail().
   */
  end(): ResponseStreamEvent[] {
    const out = this.start();
    if (this.ended) return out;
    this.ended = true;
    const reason = incompleteReason(this.finishReason);
    const status = reason ? 'incomplete' : 'completed';
    // Nothing said and nothing called: an empty message, as a whole answer would have.
    if (!this.items.length) this.part(out, this.message(out), 'output_text');
    this.close(out, status);
    const response = this.response({ status, incompleteReason: reason, usage: responseUsage(this.chatUsage) });
    this.emit(out, reason ? { type: 'response.incomplete', response } : { type: 'response.completed', response });
    return out;
  }

  /**
   * `response.failed` for a provider stream that broke or reported an error before it finished
   * (what arrived stays in its output; the item left open is incomplete, it will never finish).
   * Calls still held, never shown, are left out: its output is the items the client saw added.
   */
  fail(message: string): ResponseStreamEvent[] {
    const out = this.start();
    if (this.ended) return out;
    this.ended = true;
    this.hasFailed = true;
    if (this.open) this.open.status = 'incomplete';
    this.items.length -= this.held.splice(0).length; // the held calls are the last items begun
    this.open = null;
    const response = this.response({ status: 'failed', error: { code: 'server_error', message }, usage: responseUsage(this.chatUsage) });
    this.emit(out, { type: 'response.failed', response });
    return out;
  }

  // ---- items -------------------------------------------------------------------------------

  /** `logprobs`: the delta's tokens, when the client asked for them (request.ts). */
  private text(out: ResponseStreamEvent[], kind: Part['type'], delta: string, logprobs: Logprob[] = []): void {
    const message = this.open?.kind === 'message' ? this.open : this.message(out);
    const part = message.partOpen && message.parts.at(-1)?.type === kind ? message.parts.at(-1)! : this.part(out, message, kind);
    const at = { item_id: message.id, output_index: message.outputIndex, content_index: message.parts.length - 1 };
    if (part.type === 'output_text') {
      part.text += delta;
      append((part.logprobs ??= []), logprobs);
      this.kept += Buffer.byteLength(delta);
      this.emit(out, { type: 'response.output_text.delta', ...at, delta, logprobs });
    } else {
      part.refusal += delta;
      this.kept += Buffer.byteLength(delta);
      this.emit(out, { type: 'response.refusal.delta', ...at, delta });
    }
  }

  /**
   * A URL citation of the text: on the output text open (else a new one, as text would open), once
   * (providers may give a chunk's citations again with the next ones).
   */
  private annotate(out: ResponseStreamEvent[], annotation: Annotation): void {
    const message = this.open?.kind === 'message' ? this.open : this.message(out);
    const open = message.partOpen ? message.parts.at(-1) : undefined;
    const part = open?.type === 'output_text' ? open : this.part(out, message, 'output_text');
    if (part.type !== 'output_text') return;
    const json = JSON.stringify(annotation);
    const given = this.cited.get(part) ?? new Set<string>();
    if (given.has(json)) return;
    this.cited.set(part, given.add(json));
    part.annotations.push(annotation);
    this.kept += Buffer.byteLength(json);
    const at = { item_id: message.id, output_index: message.outputIndex, content_index: message.parts.length - 1 };
    this.emit(out, { type: 'response.output_text.annotation.added', ...at, annotation_index: part.annotations.length - 1, annotation });
  }

  /** A new message item, after closing the open item. */
  private message(out: ResponseStreamEvent[]): MessageState {
    this.close(out, 'completed');
    const outputIndex = this.items.length;
    const message: MessageState = {
      kind: 'message',
      outputIndex,
      id: itemId(this.ids.responseId, 'msg', outputIndex),
      parts: [],
      partOpen: false,
      status: 'in_progress',
    };
    this.items.push(message);
    this.open = message;
    this.emit(out, { type: 'response.output_item.added', output_index: outputIndex, item: this.shown(message) });
    return message;
  }

  /** A new content part of the message, after closing its open part. */
  private part(out: ResponseStreamEvent[], message: MessageState, kind: Part['type']): Part {
    this.closePart(out, message);
    const part: Part =
      kind === 'output_text' ? { type: 'output_text', text: '', annotations: [], logprobs: [] } : { type: 'refusal', refusal: '' };
    message.parts.push(part);
    message.partOpen = true;
    const at = { item_id: message.id, output_index: message.outputIndex, content_index: message.parts.length - 1 };
    this.kept += JSON.stringify(part).length;
    this.emit(out, { type: 'response.content_part.added', ...at, part: copy(part) });
    return part;
  }

  private closePart(out: ResponseStreamEvent[], message: MessageState): void {
    const part = message.parts.at(-1);
    if (!message.partOpen || !part) return;
    message.partOpen = false;
    const at = { item_id: message.id, output_index: message.outputIndex, content_index: message.parts.length - 1 };
    if (part.type === 'output_text')
      this.emit(out, { type: 'response.output_text.done', ...at, text: part.text, logprobs: [...(part.logprobs ?? [])] });
    else this.emit(out, { type: 'response.refusal.done', ...at, refusal: part.refusal });
    this.emit(out, { type: 'response.content_part.done', ...at, part: copy(part) });
  }

  private toolCall(out: ResponseStreamEvent[], delta: unknown, position: number): void {
    if (!isObject(delta)) return;
    // Chat numbers tool calls by `index`; a provider that leaves it out gives each call's id in
    // its first delta and nothing in the next ones (those continue the call begun last).
    const id = typeof delta.id === 'string' && delta.id ? delta.id : undefined;
    const last = this.held.at(-1) ?? this.open;
    const key = num(delta.index) ?? (id ? `id:${id}` : last?.kind === 'call' ? last.key : position);
    const fn = isObject(delta.function) ? delta.function : {};
    let call = this.calls.get(key);
    // Some providers (Ollama, some Gemini and vLLM adapters) give parallel calls one index: a new id
    // is a new call, and an id seen before under it (a piece naming its call) that call's.
    if (call?.providerId && id && id !== call.providerId) call = this.byId.get(`${key} ${id}`);
    if (!call) {
      // The open call whose arguments are not yet whole (none yet, or a provider interleaving the
      // calls' pieces) may get the rest after this one's head: this one waits.
      const hold = this.open?.kind === 'call' && (this.held.length > 0 || !wholeJson(this.open.arguments));
      if (!hold) this.close(out, 'completed');
      const outputIndex = this.items.length;
      call = {
        kind: 'call',
        key,
        outputIndex,
        id: itemId(this.ids.responseId, 'fc', outputIndex),
        callId: id ?? fallbackCallId(this.ids.responseId, outputIndex),
        providerId: id,
        name: typeof fn.name === 'string' ? fn.name : '',
        arguments: '',
        status: 'in_progress',
      };
      this.items.push(call);
      this.calls.set(key, call);
      if (id) this.byId.set(`${key} ${id}`, call);
      const shown = this.shown(call); // counted now, held or not
      if (hold) this.held.push(call);
      else this.announce(out, call, shown);
    } else if (!call.name && typeof fn.name === 'string') {
      call.name = fn.name; // a provider that names the function after its first delta
      this.kept += Buffer.byteLength(fn.name);
    }
    const piece = argumentsDelta(fn.arguments);
    if (!piece) return;
    if (call.defaulted) {
      call.arguments = ''; // a call's arguments after the next began: its `{}` was none
      call.defaulted = false;
    }
    call.arguments += piece;
    this.kept += Buffer.byteLength(piece);
    if (this.held.length) this.fed = call;
    if (this.open === call) {
      this.emit(out, { type: 'response.function_call_arguments.delta', item_id: call.id, output_index: call.outputIndex, delta: piece });
    }
  }

  /** Opens a call: its output_item.added, showing `shown`. */
  private announce(out: ResponseStreamEvent[], call: CallState, shown: ResponseOutputItem): void {
    this.open = call;
    this.emit(out, { type: 'response.output_item.added', output_index: call.outputIndex, item: shown });
  }

  /**
   * Closes the open item, if any, with its `.done` events, then shows each held call whole (its
   * arguments so far in one delta). `status` is the last item's; with calls held, the one cut
   * (`incomplete`) is the call whose arguments came last (the first, when none came), and the
   * calls after it that had none yet are cut too (theirs would have come after), as is any call
   * whose arguments do not parse (a provider interleaving the calls' pieces cut them all).
   */
  private close(out: ResponseStreamEvent[], status: 'completed' | 'incomplete'): void {
    const held = this.held.splice(0);
    if (!held.length) return this.closeOpen(out, status);
    const calls = [this.open as CallState, ...held];
    const fed = this.fed ? calls.indexOf(this.fed) : -1;
    const cut = Math.max(fed, 0); // none came: the first call was cut, before its arguments
    // Cut short, a call whose arguments do not parse was cut too, wherever the provider's pieces left it.
    const broken = (i: number) => status === 'incomplete' && calls[i].arguments !== '' && !wholeJson(calls[i].arguments);
    const statusAt = (i: number) => (i === cut || (i > cut && !calls[i].arguments) || broken(i) ? status : 'completed');
    this.closeOpen(out, statusAt(0));
    held.forEach((call, i) => {
      const args = call.arguments;
      this.announce(out, call, { ...this.item(call), arguments: '' } as ResponseFunctionToolCall);
      if (args)
        this.emit(out, { type: 'response.function_call_arguments.delta', item_id: call.id, output_index: call.outputIndex, delta: args });
      this.closeOpen(out, statusAt(i + 1));
    });
  }

  private closeOpen(out: ResponseStreamEvent[], status: 'completed' | 'incomplete'): void {
    const item = this.open;
    if (!item) return;
    this.open = null;
    if (item.kind === 'message') {
      this.closePart(out, item);
    } else {
      const at = { item_id: item.id, output_index: item.outputIndex };
      // A call finished without a single argument delta (chat providers stream none for a function
      // without parameters) called it with none: `{}`, as a whole answer's, which a client can parse.
      if (status === 'completed' && !item.arguments) {
        item.arguments = '{}';
        item.defaulted = true;
        this.kept += 2;
        this.emit(out, { type: 'response.function_call_arguments.delta', ...at, delta: item.arguments });
      }
      this.emit(out, { type: 'response.function_call_arguments.done', ...at, arguments: item.arguments, name: item.name });
    }
    item.status = status;
    this.emit(out, { type: 'response.output_item.done', output_index: item.outputIndex, item: this.item(item) });
  }

  /** A new item as its output_item.added shows it, counted as kept. */
  private shown(state: MessageState | CallState): ResponseOutputItem {
    const item = this.item(state);
    this.kept += JSON.stringify(item).length;
    return item;
  }

  /** An item as the Responses API shows it, a fresh object each time (events may be kept and sent later). */
  private item(state: MessageState | CallState): ResponseOutputItem {
    if (state.kind === 'message') {
      const message: ResponseOutputMessage = {
        id: state.id,
        type: 'message',
        status: state.status,
        content: state.parts.map(copy),
        role: 'assistant',
      };
      return message;
    }
    const call: ResponseFunctionToolCall = {
      id: state.id,
      type: 'function_call',
      status: state.status,
      arguments: state.arguments,
      call_id: state.callId,
      name: state.name,
    };
    return call;
  }

  // ---- the response --------------------------------------------------------------------------

  private response(state: Partial<ResponseState> & Pick<ResponseState, 'status'>): Response {
    const output = state.status === 'in_progress' ? [] : this.items.map((item) => this.item(item));
    const object = responseObject(this.request, this.ids, { model: this.model, output, usage: null, ...state });
    return object as Response; // without `output_text`, which the SDK computes
  }

  private readUsage(usage: unknown): void {
    if (!isObject(usage)) return;
    const prompt = num(usage.prompt_tokens) ?? num(usage.input_tokens);
    const completion = num(usage.completion_tokens) ?? num(usage.output_tokens);
    if (prompt === undefined && completion === undefined) return;
    this.chatUsage = { ...usage, prompt_tokens: prompt ?? 0, completion_tokens: completion ?? 0 };
  }

  private emit<T extends ResponseStreamEvent['type']>(out: ResponseStreamEvent[], event: EventOf<T> & { type: T }): void {
    out.push({ ...event, sequence_number: this.sequence++ } as unknown as ResponseStreamEvent);
  }
}

/** One event as SSE text: `event: <type>\ndata: <json>\n\n` (the Responses API names each event). */
export function sseEvent(event: ResponseStreamEvent): string {
  return `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`;
}

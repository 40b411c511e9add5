/**
 * The stream transforms, one per way an answer is relayed:
 * - chat, passed through: reads the final usage chunk for the meter and hides it from clients that
 *   did not ask for it (we add `stream_options.include_usage` upstream; a client whose code reads
 *   `choices[0]` of every chunk must not see an empty `choices`); complete at `[DONE]` (its own
 *   event, never text inside an answer) unless the provider sent an error inside the stream, or at
 *   a normal end of the response once every choice asked for has its `finish_reason` (some
 *   OpenAI-compatible servers send no `[DONE]`: the gateway writes it, as the client expects);
 * - responses, passed through: complete at `response.completed` / `incomplete`, a failure of the
 *   route at `response.failed`; the final event's `response.usage` is the meter's;
 * - responses translated from a chat stream (responses/stream.ts): opened with the first chunk (so
 *   the opening events name the provider's model, as the rest do), complete at `[DONE]` (or, as a
 *   chat stream, at a normal end after the finish_reason) unless the provider reported an error in
 *   the stream; a broken one ends with the translation's `response.failed`, and so do one whose
 *   output passes the whole answer's limit (the translation keeps it all for its final event) and
 *   one with an event that is not JSON before its finish.
 */
import type { EventSourceMessage } from 'eventsource-parser';
import { chatStreamError } from './chat-stream-error';
import { isObject } from './json-object';
import { parseJson } from './json-object';
import { readUsage, type Usage } from './providers/adapter';
import { searchesOf } from './searches';
import { ChatToResponsesStream, sseEvent } from './responses/stream';
import type { ResponseIds } from './responses/ids';
import { serialize, type StreamTransform } from './sse';

const INTERRUPTED = 'the provider stream ended before it finished';
const NOT_JSON = 'the provider sent an event that is not JSON';

const parse = (data: string) => parseJson(data) as Record<string, unknown> | null;

const DONE = Buffer.from('[DONE]');
const USAGE = Buffer.from('"usage"');
const FINISH = Buffer.from('"finish_reason"');
/** An `error` key (or a value "error": then `event` parses the chunk and finds no error; text has its quotes escaped). */
const ERROR = Buffer.from('"error"');
/** A choice that finished: its reason is a string (OpenAI's `"finish_reason":null` on every other chunk). */
const FINISHED = /"finish_reason"\s*:\s*"/;

/** No `key` in these events but `"key":null` (OpenAI's usage and finish_reason on every chunk). */
function onlyNull(b: Buffer, key: Buffer): boolean {
  for (let i = b.indexOf(key); i !== -1; i = b.indexOf(key, i + key.length)) {
    const j = i + key.length; // ":null"
    if (b[j] !== 0x3a || b[j + 1] !== 0x6e || b[j + 2] !== 0x75 || b[j + 3] !== 0x6c || b[j + 4] !== 0x6c) return false;
  }
  return true;
}

/** `choices`: how many the client asked for (`n`): each must finish for a stream without `[DONE]` to be whole. */
export function chatPassthrough(clientWantsUsage: boolean, choices = 1): StreamTransform {
  /** The provider reported an error inside its stream: the call failed. */
  let failed = false;
  /**
   * The client was told of the failure in a way its SDK raises: by a chunk with an `error` (the
   * openai SDKs throw on that field). A choice that finished with `error` or vLLM's `abort` alone
   * does not tell it (the SDK ended the stream quietly, the cut answer taken for a whole one): the
   * interrupted event, with `why`, then takes the place of the `[DONE]`, after which the SDK reads
   * nothing.
   */
  let told = false;
  let why: string | undefined;
  /** The choices that gave their finish_reason. */
  const finished = new Set<number>();
  /** An event after every choice finished that is not JSON: the response ended in the middle of it. */
  let cut = false;
  return {
    done: false,
    over: false,
    usage: null as Usage | null,
    // Neither the end, a finish, the usage chunk nor an error: `event` would write every one as it came.
    passes(events) {
      return (
        !this.done && events.indexOf(DONE) === -1 && onlyNull(events, USAGE) && onlyNull(events, FINISH) && events.indexOf(ERROR) === -1
      );
    },
    event(e) {
      if (e.data === '[DONE]') {
        this.done = !failed;
        this.over = true;
        if (failed && !told) {
          told = true;
          return interrupted(why ?? INTERRUPTED);
        }
      }
      const whole = finished.size === choices;
      const finishing = FINISHED.test(e.data);
      // Most chunks carry neither usage, a finish nor an error: no parse at all. Past the finish
      // every event is read (the usage chunk, at most): one cut short is no whole answer.
      const read = e.data !== '[DONE]' && (whole || finishing || e.data.includes('"usage"') || e.data.includes('"error"'));
      const json = read ? parse(e.data) : null;
      if (read && whole && !json) cut = true;
      const reported = json && chatStreamError(json);
      if (reported) {
        failed = true;
        if (json!.error) told = true;
        else why ??= reported;
      }
      if (json && finishing && Array.isArray(json.choices)) {
        for (const c of json.choices as unknown[]) {
          if (!isObject(c) || typeof c.finish_reason !== 'string' || !c.finish_reason) continue;
          const index = c.index ?? 0;
          if (typeof index === 'number' && Number.isInteger(index) && index >= 0 && index < choices) finished.add(index);
        }
      }
      const usage = json ? readUsage(json.usage, undefined, json.service_tier) : null;
      if (usage) {
        this.usage = usage;
        const empty = !Array.isArray(json!.choices) || json!.choices.length === 0;
        if (empty && !clientWantsUsage) return '';
      }
      return serialize(e);
    },
    finished: () => !failed && !cut && finished.size === choices,
    get failed() {
      return failed;
    },
    // Only after a stream the provider ended without `[DONE]`: the client's SDK may wait for it.
    end() {
      return this.done ? '' : 'data: [DONE]\n\n';
    },
    broken: (message?: string) => (told ? '' : interrupted(message ?? why ?? INTERRUPTED)),
  };
}

/** A chat stream's end when it broke: an event with the `error` object the openai SDKs raise. */
const interrupted = (message: string): string =>
  `data: ${JSON.stringify({ error: { message, type: 'upstream_error', code: 'stream_interrupted', param: null } })}\n\n`;

const FINAL = /^response\.(completed|incomplete|failed)$/;
/** A top-level key: inside a JSON string its quotes would be escaped. */
const SEQUENCE = /"sequence_number"\s*:\s*(\d+)/;

/**
 * `maxEventChars`: the longest event taken. `response.completed` (and `output_item.done`) carry the
 * whole response (or item): images a model generated come in them as base64, several MB each, so
 * they may be as large as a whole answer may be.
 */
export function responsesPassthrough(maxEventChars?: number, onResponse?: (response: unknown) => void): StreamTransform {
  let failed = false;
  // Every Responses event is numbered, an error event too: the one written when the stream breaks
  // takes the number after the last event's (read then, not from every event on the way).
  let seen = 0;
  let last = '';
  const next = () => {
    const n = SEQUENCE.exec(last);
    return n ? Number(n[1]) + 1 : seen;
  };
  return {
    done: false,
    over: false,
    usage: null as Usage | null,
    maxEventChars,
    event(e: EventSourceMessage) {
      seen++;
      last = e.data;
      const type = e.event ?? (/"(response\.|error)/.test(e.data) ? (parse(e.data)?.type as string | undefined) : undefined);
      // The provider's own error event told the client why the stream ends: no second one after it.
      if (type === 'error') failed = true;
      else if (type === 'response.created') onResponse?.(parse(e.data)?.response);
      else if (type && FINAL.test(type)) {
        // A response the provider failed is no complete answer (a failure of the route), though
        // its own event already told the client: nothing more is written for it (`broken`).
        failed = type === 'response.failed';
        this.done = !failed;
        this.over = true;
        const response = parse(e.data)?.response as { usage?: unknown; service_tier?: unknown } | undefined;
        const usage = readUsage(response?.usage, undefined, response?.service_tier);
        this.usage = usage && { ...usage, ...searchesOf(response) };
        onResponse?.(response);
      }
      return serialize(e);
    },
    get failed() {
      return failed;
    },
    broken: (message) => (failed ? '' : responsesError(next(), message)),
  };
}

/**
 * The Responses error event, with an `error` object beside its fields as the chat stream's error has
 * (and the Cold tier's queued event): the openai SDKs raise an event only for that object. Without
 * it, a client reading the events took the half answer before it for a whole one, and the stream
 * helper's `finalResponse()` was rejected with the event's plain object rather than an APIError.
 */
function responsesError(sequenceNumber: number, message = INTERRUPTED): string {
  const error = {
    type: 'error',
    code: 'stream_interrupted',
    message,
    param: null,
    sequence_number: sequenceNumber,
    error: { message, type: 'upstream_error', code: 'stream_interrupted', param: null },
  };
  return `event: error\ndata: ${JSON.stringify(error)}\n\n`;
}

/** Each event as SSE text, made as it is written. */
function* eachEvent(events: Parameters<typeof sseEvent>[0][]): Generator<string> {
  for (const event of events) yield sseEvent(event);
}

/**
 * `called`: the model the gateway asked the provider for (the route's); `maxOutputBytes`: the output
 * the translation may keep for its final event (past it, its response.failed and `tooLarge`).
 */
export function chatToResponses(
  request: Record<string, unknown>,
  ids: ResponseIds,
  called: string,
  maxOutputBytes = Infinity,
): StreamTransform {
  const translation = new ChatToResponsesStream(request, ids, called, maxOutputBytes);
  const write = (events: Parameters<typeof sseEvent>[0][]) => events.map(sseEvent).join('');
  /** An event after the finish that is not JSON: the response ended in the middle of it. */
  let cut = false;
  return {
    done: false,
    over: false,
    get usage() {
      return readUsage(translation.usage, undefined, translation.tier);
    },
    get tooLarge() {
      return translation.tooLarge;
    },
    get failed() {
      return translation.failed;
    },
    event(e) {
      if (e.data === '[DONE]') {
        // A stream that reported an error is no complete answer, even when it ends properly.
        this.done = !translation.failed;
        this.over = true;
        return '';
      }
      const chunk = parse(e.data);
      if (chunk) return write(translation.push(chunk));
      if (translation.finished) cut = true;
      // Skipped, its text would leave a hole in an answer said to be complete (an empty one is a keep-alive).
      else if (e.data.trim()) return write(translation.fail(NOT_JSON));
      return '';
    },
    // The same rule as a chat stream passed through: a normal end after the finish_reason is whole.
    finished: () => !translation.failed && !cut && translation.finished,
    // Four events carry the whole output (output_text.done, content_part.done, output_item.done,
    // response.completed): joined, an answer past 128 MiB made a string longer than V8 allows.
    end: () => eachEvent(translation.end()),
    // The translation's own response.failed (nothing when it already failed on a provider error).
    broken: (message = INTERRUPTED) => write(translation.fail(message)),
  };
}

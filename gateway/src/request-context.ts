/**
 * The routing context of one request, whatever its endpoint: the body to send (checked by the
 * endpoint), and what our request headers say (who is calling, the time-to-answer, what the
 * caller accepts when spend caps are exceeded, the idempotency key).
 *
 * With client keys the tenant is the key's (never `x-customer-id`), and the idempotency key is
 * scoped to it: two tenants sending the same `Idempotency-Key` (or the same messages) get two
 * jobs and two provider idempotency keys.
 */
import { hash } from 'node:crypto';
import { z } from 'zod';
import type { ClientKey } from './client-keys';
import { MAX_TEXT_LENGTH } from '../../schema/event-record';
import { DEFAULT_TIME_TO_ANSWER_MS, scopeOf, type Scopes } from './scopes';

/** The OpenAI API a request speaks, or a provider offers. */
export type ApiKind = 'chat' | 'responses' | 'embeddings';

export interface RequestContext<B extends { model: string } = { model: string } & Record<string, unknown>> {
  api: ApiKind;
  body: B;
  stream: boolean;
  idempotencyKey: string;
  userId: string;
  jobId: string;
  customerId: string;
  jobType: string;
  timeToAnswerMs: number;
  mustHaveAnswer: boolean;
  canUseCheaper: boolean;
  /** A Responses request translated for chat-only routes; absent when it cannot be (those routes are skipped). */
  asChat?: Record<string, unknown>;
  /** The client key the request came with (GATEWAY_AUTH=keys); its tenant is `customerId`. */
  clientKey?: ClientKey;
}

/** Half a UTF-16 pair, alone: text with one cannot be encoded (as UTF-8, in a header or a URI). */
const LONE_SURROGATE = /\p{Cs}/u;

/** Every endpoint's `model`: it goes into our response headers and the meter event (no longer than its limit). */
export const ModelName = z
  .string()
  .min(1, { error: 'expected a non-empty string' })
  .max(MAX_TEXT_LENGTH, {
    error: (i) => `expected at most ${MAX_TEXT_LENGTH} characters (the meter event's limit), got ${(i.input as string).length}`,
  })
  .refine((model) => !LONE_SURROGATE.test(model), { error: 'expected well-formed Unicode text (it has a lone surrogate)' });

/** Headers are case-insensitive; node:http gives them lowercased. */
export type Headers = Record<string, string | string[] | undefined>;
const header = (h: Headers, name: string): string | undefined => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

const NOT_ASCII = /[\u0080-\u00ff]/; // past ASCII: node:http gives header bytes as U+0000-U+00FF

/**
 * A header that is text (an id or a name): node:http reads header bytes as Latin-1, so one sent as
 * UTF-8 (curl from a terminal) is read back as UTF-8; bytes that are not UTF-8 stay Latin-1.
 */
export const textHeader = (h: Headers, name: string): string | undefined => {
  const v = header(h, name);
  if (v === undefined || !NOT_ASCII.test(v)) return v;
  const utf8 = Buffer.from(v, 'latin1').toString('utf8');
  return Buffer.from(utf8, 'utf8').toString('latin1') === v ? utf8 : v;
};

const MAX_TIME_TO_ANSWER_MS = 600_000;
/** Headers copied into the meter event: longer than the event record allows, the meter would refuse it. */
const EVENT_HEADERS = ['x-customer-id', 'x-job-id', 'x-user-id'] as const;

/** Refused before any provider is called (and paid): the call's event could not be metered. */
function tooLong(headers: Headers): string | null {
  for (const name of EVENT_HEADERS) {
    const v = textHeader(headers, name);
    if (v !== undefined && v.length > MAX_TEXT_LENGTH)
      return `${name}: expected at most ${MAX_TEXT_LENGTH} characters (the meter event's limit), got ${v.length}`;
  }
  return null;
}

/** The default idempotency key: a hash of user id + job id + input, the same on every retry and tier. */
export function idempotencyKeyFor(userId: string, jobId: string, input: unknown): string {
  return hash('sha256', JSON.stringify([userId, jobId, input]), 'hex');
}

/** The idempotency key within a tenant: the client's key, else the default's parts, hashed with the tenant. */
function tenantIdempotencyKey(tenant: string, given: string | undefined, userId: string, jobId: string, input: unknown): string {
  return hash('sha256', JSON.stringify(given ? [tenant, given] : [tenant, userId, jobId, input]), 'hex');
}

const YES = /^(true|1|yes|on)$/i;
const NO = /^(false|0|no|off)$/i;

/** A yes/no header: absent or empty, the default; a yes or a no; anything else, the refusal naming it. */
function yesOrNo(headers: Headers, name: string, fallback: boolean): boolean | string {
  const v = header(headers, name)?.trim();
  if (!v) return fallback;
  if (YES.test(v)) return true;
  if (NO.test(v)) return false;
  return `${name}: expected true or false (or 1/0, yes/no, on/off), got "${v.slice(0, 50)}"`;
}

export type RoutingValue = Omit<RequestContext, 'api' | 'body' | 'stream' | 'asChat'>;
export type HeaderResult = { ok: true; value: RoutingValue } | { ok: false; message: string };

/**
 * A request's context from its checked body and its routing headers: one literal with every field,
 * not `{ api, body, ...routing }`, whose copy V8 makes key by key on every request (the hot path).
 */
export function requestContext<B extends { model: string }>(
  api: ApiKind,
  body: B,
  stream: boolean,
  r: RoutingValue,
  asChat?: Record<string, unknown>,
): RequestContext<B> {
  return {
    api,
    body,
    stream,
    idempotencyKey: r.idempotencyKey,
    userId: r.userId,
    jobId: r.jobId,
    customerId: r.customerId,
    jobType: r.jobType,
    timeToAnswerMs: r.timeToAnswerMs,
    mustHaveAnswer: r.mustHaveAnswer,
    canUseCheaper: r.canUseCheaper,
    asChat,
    clientKey: r.clientKey,
  };
}

/**
 * How long the client waits, from the `openai` SDKs' timeout: the Node SDK's `x-stainless-timeout`
 * (whole seconds, truncated: `0` is a timeout under a second, of unknown length), else the Python
 * SDK's `x-stainless-read-timeout` (seconds, `5.0`: how long it waits for the answer's first byte),
 * less a tenth for the way to the gateway and back: an answer or a `202` later than that finds the
 * client gone (and its retry already sent). Anything but a positive number says nothing.
 */
function clientWaitMs(headers: Headers): number {
  const s = Number(header(headers, 'x-stainless-timeout'));
  if (s >= 1) return Math.floor(s * 900);
  const read = Number(header(headers, 'x-stainless-read-timeout'));
  return read > 0 ? Math.max(1, Math.floor(read * 900)) : Infinity;
}

/**
 * The request's time-to-answer: `x-time-to-answer-ms`, else its job type's scope, else the default,
 * and no longer than its client waits (clientWaitMs); what is wrong with the header, as a message.
 * Also read before the client key's check, which it bounds.
 */
export function timeToAnswerOf(headers: Headers, scopes: Scopes): number | string {
  const explicit = header(headers, 'x-time-to-answer-ms');
  if (explicit === undefined)
    return Math.min(
      scopeOf(scopes, textHeader(headers, 'x-job-type') ?? '')?.time_to_answer_ms ?? DEFAULT_TIME_TO_ANSWER_MS,
      clientWaitMs(headers),
    );
  const n = Number(explicit);
  if (Number.isInteger(n) && n >= 1 && n <= MAX_TIME_TO_ANSWER_MS) return Math.min(n, clientWaitMs(headers));
  return `x-time-to-answer-ms: expected whole milliseconds from 1 to ${MAX_TIME_TO_ANSWER_MS}, got "${explicit.slice(0, 50)}"`;
}

/**
 * Our routing headers; `input` is what the default idempotency key hashes (the messages, say).
 * `clientKey`: the request's client key, whose tenant replaces `x-customer-id`.
 */
export function readRoutingHeaders(headers: Headers, scopes: Scopes, input: unknown, clientKey?: ClientKey): HeaderResult {
  const long = tooLong(headers);
  if (long) return { ok: false, message: long };
  const jobType = textHeader(headers, 'x-job-type') ?? '';
  const tta = timeToAnswerOf(headers, scopes);
  if (typeof tta === 'string') return { ok: false, message: tta };
  const userId = textHeader(headers, 'x-user-id') ?? '';
  const jobId = textHeader(headers, 'x-job-id') ?? '';
  const mustHaveAnswer = yesOrNo(headers, 'x-must-have-answer', true);
  const canUseCheaper = yesOrNo(headers, 'x-can-use-cheaper', false);
  if (typeof mustHaveAnswer === 'string') return { ok: false, message: mustHaveAnswer };
  if (typeof canUseCheaper === 'string') return { ok: false, message: canUseCheaper };
  const given = header(headers, 'idempotency-key') || undefined;
  return {
    ok: true,
    value: {
      idempotencyKey: clientKey
        ? tenantIdempotencyKey(clientKey.tenant, given, userId, jobId, input)
        : (given ?? idempotencyKeyFor(userId, jobId, input)),
      userId,
      jobId,
      customerId: clientKey ? clientKey.tenant : (textHeader(headers, 'x-customer-id') ?? ''),
      jobType,
      timeToAnswerMs: tta,
      mustHaveAnswer,
      canUseCheaper,
      clientKey,
    },
  };
}

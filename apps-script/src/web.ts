/**
 * The web app's two entry points as plain functions: request in, reply out. Apps Script always
 * answers HTTP 200, so every outcome is in the JSON body: `ok` true, or `ok` false with `error`
 * (for people: names what is wrong, never echoes the secret or the sent token) and `code` (for
 * programs, one of schema/meter-reply.ts).
 */
import { EVENT_FIELDS } from '../../schema/event-record';
import { MeterRefusal, type MeterFailure } from '../../schema/meter-reply';
import { isAuthorized, requestToken } from './auth';
import { resolveSecret } from './config';
import { ingestEvents, parseEvents } from './ingest';
import type { MeterServices } from './services';

/** The parts of Apps Script's doGet/doPost event the meter reads. */
export interface WebEvent {
  parameter?: Record<string, string>;
  postData?: { contents?: string; type?: string };
}

export type JsonReply = { ok: true; [field: string]: unknown } | MeterFailure;
export type WebReply = { kind: 'json'; body: JsonReply | object } | { kind: 'text'; body: string; mimeType: 'csv' };

type GetAction = (svc: MeterServices, params: Record<string, string>) => WebReply;
type PostAction = (svc: MeterServices, body: unknown, params: Record<string, string>) => JsonReply;

const json = (body: JsonReply | object): WebReply => ({ kind: 'json', body });
const refuse = (code: MeterFailure['code'], error: string): MeterFailure => ({ ok: false, error, code });

/** Any exception as a reply: a refusal keeps its code; anything else (a Google service timing out, say) is `internal`. */
function failure(error: unknown): MeterFailure {
  if (error instanceof MeterRefusal) return refuse(error.code, error.message);
  return refuse('internal', error instanceof Error ? error.message : String(error));
}
const UNAUTHORIZED = refuse('unauthorized', 'unauthorized');

function authorized(svc: MeterServices, params: Record<string, string>, body: unknown): boolean {
  return isAuthorized(resolveSecret(svc.spreadsheet, svc.properties), requestToken(params, body));
}

/** The web app's routes; main.ts lists them, so one place shows everything the web app does. */
export interface WebRoutes {
  /** `doGet?action=<name>` */
  get: Record<string, GetAction>;
  /** `doPost?action=<name>`; no action means ingest. */
  post: Record<string, PostAction>;
  /** A POST body holding this key (e.g. `calls`) and no event field goes to this handler instead of ingest. */
  postBodyKeys: Record<string, PostAction>;
}

export const jsonReply = json;

function lookup<T>(table: Record<string, T>, name: string): T | undefined {
  return Object.prototype.hasOwnProperty.call(table, name) ? table[name] : undefined;
}

const has = (body: object, key: string) => Object.prototype.hasOwnProperty.call(body, key);

/**
 * True when a body is events: it has `events` or any event field. One event is ingested even if it
 * also holds a `calls` key (extra fields of an event are dropped), so an event is never refused as a
 * malformed call-record body and lost; `calls` next to `events` is refused by ingest, naming it.
 */
function isEventBody(body: object): boolean {
  return has(body, 'events') || EVENT_FIELDS.some((field) => has(body, field));
}

function ingest(svc: MeterServices, body: unknown): JsonReply {
  // Validate every event before taking the lock: a bad batch costs no sheet call at all.
  return ingestEvents(svc, parseEvents(body, svc));
}

export function handlePost(svc: MeterServices, routes: WebRoutes, e: WebEvent | undefined): JsonReply {
  try {
    const params = e?.parameter ?? {};
    const text = e?.postData?.contents ?? '';
    if (text.trim() === '') return refuse('invalid_body', 'body: expected JSON, got an empty body');
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return refuse('invalid_body', 'body: expected JSON, could not parse it');
    }
    if (!authorized(svc, params, body)) return UNAUTHORIZED;
    const action = params.action;
    if (action) {
      const handler = lookup(routes.post, action);
      if (!handler) return refuse('unknown_action', `action: unknown POST action "${action}"`);
      return handler(svc, body, params);
    }
    if (body && typeof body === 'object' && !Array.isArray(body) && !isEventBody(body)) {
      for (const key of Object.keys(routes.postBodyKeys)) {
        if (has(body, key)) return routes.postBodyKeys[key](svc, body, params);
      }
    }
    return ingest(svc, body);
  } catch (error) {
    return failure(error);
  }
}

export function handleGet(svc: MeterServices, routes: WebRoutes, e: WebEvent | undefined): WebReply {
  try {
    const params = e?.parameter ?? {};
    if (!authorized(svc, params, undefined)) return json(UNAUTHORIZED);
    const action = params.action ?? '';
    const handler = lookup(routes.get, action);
    if (!handler) {
      return json(refuse('unknown_action', `action: expected one of ${Object.keys(routes.get).join(', ')}, got "${action}"`));
    }
    return handler(svc, params);
  } catch (error) {
    return json(failure(error));
  }
}

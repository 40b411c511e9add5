/**
 * The web app's two entry points as plain functions: request in, reply out. Apps Script always
 * answers HTTP 200, so every outcome is in the JSON body (`ok` true or false). Error texts name
 * what is wrong and never echo the secret or the sent token.
 */
import { isAuthorized, requestToken } from './auth';
import { resolveSecret } from './config';
import { ingestEvents, parseEvents } from './ingest';
import type { MeterServices } from './services';

/** The parts of Apps Script's doGet/doPost event the meter reads. */
export interface WebEvent {
  parameter?: Record<string, string>;
  postData?: { contents?: string; type?: string };
}

export type JsonReply = { ok: boolean; error?: string };
export type WebReply = { kind: 'json'; body: JsonReply } | { kind: 'text'; body: string; mimeType: 'csv' };

type GetAction = (svc: MeterServices, params: Record<string, string>) => WebReply;
type PostAction = (svc: MeterServices, body: unknown, params: Record<string, string>) => JsonReply;

const json = (body: JsonReply): WebReply => ({ kind: 'json', body });
const failure = (error: unknown): JsonReply => ({ ok: false, error: error instanceof Error ? error.message : String(error) });
const UNAUTHORIZED: JsonReply = { ok: false, error: 'unauthorized' };

function authorized(svc: MeterServices, params: Record<string, string>, body: unknown): boolean {
  return isAuthorized(resolveSecret(svc.spreadsheet, svc.properties), requestToken(params, body));
}

/** The web app's routes; main.ts lists them, so one place shows everything the web app does. */
export interface WebRoutes {
  /** `doGet?action=<name>` */
  get: Record<string, GetAction>;
  /** `doPost?action=<name>`; no action means ingest. */
  post: Record<string, PostAction>;
  /** A POST body holding this key (e.g. `calls`) goes to this handler instead of ingest. */
  postBodyKeys: Record<string, PostAction>;
}

export const jsonReply = json;

function lookup<T>(table: Record<string, T>, name: string): T | undefined {
  return Object.prototype.hasOwnProperty.call(table, name) ? table[name] : undefined;
}

function ingest(svc: MeterServices, body: unknown): JsonReply {
  // Validate every event before taking the lock: a bad batch costs no sheet call at all.
  return ingestEvents(svc, parseEvents(body, svc));
}

export function handlePost(svc: MeterServices, routes: WebRoutes, e: WebEvent | undefined): JsonReply {
  try {
    const params = e?.parameter ?? {};
    const text = e?.postData?.contents ?? '';
    if (text.trim() === '') return { ok: false, error: 'body: expected JSON, got an empty body' };
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return { ok: false, error: 'body: expected JSON, could not parse it' };
    }
    if (!authorized(svc, params, body)) return UNAUTHORIZED;
    const action = params.action;
    if (action) {
      const handler = lookup(routes.post, action);
      if (!handler) return { ok: false, error: `action: unknown POST action "${action}"` };
      return handler(svc, body, params);
    }
    if (body && typeof body === 'object' && !Array.isArray(body)) {
      for (const key of Object.keys(routes.postBodyKeys)) {
        if (key in body) return routes.postBodyKeys[key](svc, body, params);
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
      return json({ ok: false, error: `action: expected one of ${Object.keys(routes.get).join(', ')}, got "${action}"` });
    }
    return handler(svc, params);
  } catch (error) {
    return json(failure(error));
  }
}

/**
 * Ids and times of a translated response. The response id is random, shaped like OpenAI's (`resp_`
 * and 48 hex digits); the ids of its output items derive from it and the item's place in the
 * output, so the same answer has the same item ids streamed or not, and tests can predict them.
 */
import { randomBytes } from 'node:crypto';

/** What a translation needs from the request path: the response's id and when the request came. */
export interface ResponseIds {
  responseId: string;
  /** Unix time of the request, in seconds (as `created_at`); milliseconds (`Date.now()`) also work. */
  now: number;
}

export function newResponseId(): string {
  return `resp_${randomBytes(24).toString('hex')}`;
}

const stem = (responseId: string) => (responseId.startsWith('resp_') ? responseId.slice('resp_'.length) : responseId);

/** `msg_…` for a message item, `fc_…` for a function call item, at that output index. */
export function itemId(responseId: string, kind: 'msg' | 'fc', outputIndex: number): string {
  return `${kind}_${stem(responseId)}_${outputIndex}`;
}

/** A call id for a provider's tool call that came without one (a client must answer it by id). */
export function fallbackCallId(responseId: string, outputIndex: number): string {
  return `call_${stem(responseId)}_${outputIndex}`;
}

/** Whole seconds, from seconds or milliseconds (no Unix time in seconds reaches 1e11 before the year 5138). */
export function unixSeconds(time: number): number {
  return Math.floor(time > 1e11 ? time / 1000 : time);
}

/**
 * Relays a provider's server-sent events to the client, event by event, with backpressure (a
 * full socket pauses the reading). Events are parsed with eventsource-parser, so every line ending
 * the SSE format allows (LF, CRLF, CR) and multi-line `data:` fields are read as the format says,
 * then written back in LF form. What is written for each event is the stream transform's choice
 * (stream-transforms.ts): passed through, or translated into another API's events.
 */
import type { ServerResponse } from 'node:http';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import type { Usage } from './providers/adapter';

/** How one API's stream is relayed: what to write per event, when it is complete, its usage. */
export interface StreamTransform {
  /** Written before the provider's first event (a translation's opening events). */
  start?(): string;
  /** What to write for one provider event ('' to write nothing). */
  event(e: EventSourceMessage): string;
  /** The provider said the stream is complete. */
  done: boolean;
  usage: Usage | null;
  /** Written once the stream is complete (a translation's closing events). */
  end?(): string;
  /** Written when the stream broke: the client must learn it, never a silent truncation. */
  broken(): string;
}

export interface RelayResult {
  usage: Usage | null;
  /** The provider's stream broke after it began (the client got an error event). */
  broken: boolean;
}

/** An event as SSE text, LF line endings, multi-line data kept as several `data:` lines. */
export function serialize(event: EventSourceMessage): string {
  const head = `${event.event ? `event: ${event.event}\n` : ''}${event.id !== undefined ? `id: ${event.id}\n` : ''}`;
  return `${head}data: ${event.data.split('\n').join('\ndata: ')}\n\n`;
}

/** A client that reads nothing for this long is cut off (its stream would hold the provider's open). */
const STALL_MS = 30_000;

/**
 * Resolves when the socket can take more, or is gone: a closed socket never drains, and a client
 * that stopped reading is cut off after STALL_MS, so every way a stream ends ends the relay.
 */
function writable(res: ServerResponse, stallMs: number): Promise<void> {
  if (res.destroyed || res.writableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => res.destroy(), stallMs);
    const done = () => {
      clearTimeout(timer);
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

export async function relaySse(
  first: Buffer,
  rest: AsyncIterator<Buffer>,
  res: ServerResponse,
  transform: StreamTransform,
  stallMs = STALL_MS,
  /** Runs before the response ends (the call's meter event is made durable first). */
  beforeEnd?: (result: RelayResult) => Promise<void>,
): Promise<RelayResult> {
  let out = transform.start?.() ?? '';
  const parser = createParser({ onEvent: (event) => (out += transform.event(event)) });
  const decoder = new TextDecoder();
  const feed = async (text: string) => {
    parser.feed(text);
    if (!out) return;
    const chunk = out;
    out = '';
    if (!res.write(chunk)) await writable(res, stallMs);
  };
  let failed = false;
  try {
    await feed(decoder.decode(first, { stream: true }));
    for (;;) {
      const next = await rest.next();
      if (next.done) break;
      await feed(decoder.decode(next.value, { stream: true }));
    }
    // A last event without its blank line still counts.
    await feed(`${decoder.decode()}\n\n`);
  } catch {
    failed = true;
  }
  const broken = failed || !transform.done;
  if (!res.destroyed) res.write(broken ? transform.broken() : (transform.end?.() ?? ''));
  const result = { usage: transform.usage, broken };
  await beforeEnd?.(result);
  res.end();
  return result;
}

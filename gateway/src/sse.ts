/**
 * Relays a provider's server-sent events to the client, event by event, with backpressure (a
 * full socket pauses the reading). Events are parsed with eventsource-parser, so every line ending
 * the SSE format allows (LF, CRLF, CR) and multi-line `data:` fields are read as the format says,
 * then written back in LF form. It reads the final usage chunk for the meter, and hides that
 * chunk from clients that did not ask for it (we add `stream_options.include_usage` upstream; a
 * client whose code reads `choices[0]` of every chunk must not see an empty `choices`).
 */
import type { ServerResponse } from 'node:http';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { readUsage, type Usage } from './providers/adapter';

export interface RelayResult {
  usage: Usage | null;
  /** The provider's stream broke after it began (the client got an error event). */
  broken: boolean;
  sawDone: boolean;
}

/** The usage an event carries, and whether it carries nothing else (an empty `choices`). */
function usageOf(data: string): { usage: Usage; empty: boolean } | null {
  if (!data.includes('"usage"')) return null; // most chunks: no parse at all
  try {
    const json = JSON.parse(data) as { usage?: unknown; choices?: unknown[] };
    const usage = readUsage(json.usage);
    return usage ? { usage, empty: !json.choices || json.choices.length === 0 } : null;
  } catch {
    return null;
  }
}

function serialize(event: EventSourceMessage): string {
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
  clientWantsUsage: boolean,
  stallMs = STALL_MS,
  /** Runs before the response ends (the call's meter event is made durable first). */
  beforeEnd?: (result: RelayResult) => Promise<void>,
): Promise<RelayResult> {
  const result: RelayResult = { usage: null, broken: false, sawDone: false };
  let out = '';
  const parser = createParser({
    onEvent(event) {
      if (event.data === '[DONE]') result.sawDone = true;
      const found = result.sawDone ? null : usageOf(event.data);
      if (found) result.usage = found.usage;
      if (found?.empty && !clientWantsUsage) return;
      out += serialize(event);
    },
  });
  const decoder = new TextDecoder();
  const feed = async (text: string) => {
    parser.feed(text);
    if (!out) return;
    const chunk = out;
    out = '';
    if (!res.write(chunk)) await writable(res, stallMs);
  };
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
    result.broken = true;
  }
  if (!result.sawDone) {
    // Never a silent truncation: the client learns the stream broke.
    result.broken = true;
    const error = {
      error: { message: 'the provider stream ended before it finished', type: 'upstream_error', code: 'stream_interrupted', param: null },
    };
    if (!res.destroyed) res.write(`data: ${JSON.stringify(error)}\n\n`);
  }
  await beforeEnd?.(result);
  res.end();
  return result;
}

/**
 * Relays a provider's server-sent events to the client, event by event, with backpressure (a
 * full socket pauses the reading). It reads the final usage chunk for the meter, and hides that
 * chunk from clients that did not ask for it (we add `stream_options.include_usage` upstream;
 * a client whose code reads `choices[0]` of every chunk must not see an empty `choices`).
 */
import { once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { readUsage, type Usage } from './providers/adapter';

export interface RelayResult {
  usage: Usage | null;
  /** The provider's stream broke after it began (the client got an error event). */
  broken: boolean;
  sawDone: boolean;
}

const USAGE = Buffer.from('"usage"');

function usageOnly(data: string): { usage: Usage | null; empty: boolean } | null {
  try {
    const json = JSON.parse(data) as { usage?: unknown; choices?: unknown[] };
    const usage = readUsage(json.usage);
    return usage ? { usage, empty: !json.choices || json.choices.length === 0 } : null;
  } catch {
    return null;
  }
}

async function write(res: ServerResponse, chunk: Buffer | string): Promise<void> {
  if (!res.write(chunk)) await once(res, 'drain');
}

export async function relaySse(
  first: Buffer,
  rest: AsyncIterator<Buffer>,
  res: ServerResponse,
  clientWantsUsage: boolean,
): Promise<RelayResult> {
  const result: RelayResult = { usage: null, broken: false, sawDone: false };
  let carry: Buffer = Buffer.alloc(0);
  const handle = async (chunk: Buffer, final: boolean) => {
    const buf = carry.length ? Buffer.concat([carry, chunk]) : chunk;
    // Events end with a blank line; forward whole events, keep the unfinished tail.
    const end = final ? buf.length : buf.lastIndexOf('\n\n') + 2;
    if (end < 2 && !final) {
      carry = buf;
      return;
    }
    const whole = buf.subarray(0, end);
    carry = Buffer.from(buf.subarray(end));
    if (whole.includes('[DONE]')) result.sawDone = true;
    if (!whole.includes(USAGE)) return write(res, whole);
    const kept: string[] = [];
    for (const event of whole.toString('utf8').split('\n\n')) {
      const data = event
        .split('\n')
        .find((l) => l.startsWith('data:'))
        ?.slice(5)
        .trim();
      const found = data && data !== '[DONE]' ? usageOnly(data) : null;
      if (found) result.usage = found.usage;
      if (found?.empty && !clientWantsUsage) continue;
      kept.push(event);
    }
    const text = kept.join('\n\n');
    if (text.trim()) await write(res, text.endsWith('\n\n') || !text ? text : `${text}${final ? '' : '\n\n'}`);
  };
  try {
    await handle(first, false);
    for (;;) {
      const next = await rest.next();
      if (next.done) break;
      await handle(next.value, false);
    }
    if (carry.length) await handle(Buffer.alloc(0), true);
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
  res.end();
  return result;
}

// What an open stream keeps in memory. A stream holds its client's request and its provider's call
// for its whole length, so any copy of the prompt either keeps is held that long: with a thousand
// streams of a 32 KB prompt, each extra copy is 32 MB.
import { once } from 'node:events';
import { createServer, request, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { Cancel } from '../../gateway/src/cancel';
import { readJsonBody } from '../../gateway/src/http-io';
import { callUpstream, type UpstreamAnswer } from '../../gateway/src/upstream';
import { chatToResponses } from '../../gateway/src/stream-transforms';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const MB = 1024 * 1024;
const OPEN = 20;

/** Memory in use once garbage is collected (a few rounds, with turns between, for external memory). */
async function used(kind: 'heapUsed' | 'arrayBuffers'): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((r) => setImmediate(r));
  }
  return process.memoryUsage()[kind];
}

const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function listen(server: Server): Promise<number> {
  servers.push(server);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

describe('an open stream does not keep copies of its prompt', () => {
  it("a request whose body was read does not keep the body's bytes while its answer is open", async () => {
    const held: IncomingMessage[] = []; // as a stream holds its request until its end
    let read = 0;
    const port = await listen(
      createServer(async (req) => {
        held.push(req);
        const body = await readJsonBody(req);
        expect(body.ok).toBe(true);
        read++; // no answer: the request stays open, as a stream's does
      }),
    );
    const payload = JSON.stringify({ prompt: 'x'.repeat(MB) });
    const before = await used('arrayBuffers');
    for (let i = 0; i < OPEN; i++) {
      const req = request({ port, host: '127.0.0.1', method: 'POST', headers: { 'content-type': 'application/json' } });
      req.on('error', () => {});
      req.end(payload);
    }
    await expect.poll(() => read, { timeout: 10_000 }).toBe(OPEN);
    const grown = ((await used('arrayBuffers')) - before) / MB;
    expect(held).toHaveLength(OPEN);
    expect(grown).toBeLessThan(OPEN / 4); // before: the 20 bodies' bytes, about 20 MB
  });

  it("a provider's stream under way does not keep the request body it was sent (undici's own copy aside)", async () => {
    // The provider answers each call with its first event and keeps the stream open.
    let calls = 0;
    const port = await listen(
      createServer((req, res) => {
        req.resume();
        req.on('end', () => {
          calls++;
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write('data: {"choices":[]}\n\n');
        });
      }),
    );
    const signals: Cancel[] = []; // the request's cancel, kept by the pipeline for the stream's length
    const answers: UpstreamAnswer[] = [];
    const before = await used('heapUsed');
    for (let i = 0; i < OPEN; i++) {
      const signal = new Cancel();
      signals.push(signal);
      // A string of its own per call, as each request's outbound body is (held on the V8 heap).
      const body = JSON.stringify({ model: 'm', stream: true, prompt: `${i}`.padEnd(MB, 'x') });
      answers.push(
        await callUpstream(
          { url: `http://127.0.0.1:${port}/v1/chat/completions`, headers: { 'content-type': 'application/json' }, body },
          { timeoutMs: 10_000, signal, stream: true },
        ),
      );
    }
    expect(calls).toBe(OPEN);
    expect(answers.every((a) => a.first !== undefined)).toBe(true);
    const grown = ((await used('heapUsed')) - before) / MB;
    expect(grown).toBeLessThan(OPEN / 4); // before: the 20 bodies' text, about 20 MB
    for (const s of signals) s.abort();
  });
});

describe('a Responses stream translated from chat closes a long answer', () => {
  it('gives its closing events one at a time, each carrying the whole text, not joined into one string', () => {
    // 140 MiB of text, under the whole answer's limit (256 MiB): output_text.done, content_part.done,
    // output_item.done and response.completed each carry it, and the four joined pass the longest
    // string V8 makes (about 512 MiB), which threw at the stream's end.
    const transform = chatToResponses({ model: 'm', input: 'hi', stream: true }, { responseId: 'resp_1', now: 0 }, 'm', 256 * MB);
    const text = 'a'.repeat(20 * MB);
    for (let i = 0; i < 7; i++) {
      const choice = { index: 0, delta: { content: text }, finish_reason: i === 6 ? 'stop' : null };
      const data = JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [choice] });
      transform.event({ id: undefined, event: undefined, data });
    }
    transform.event({ id: undefined, event: undefined, data: '[DONE]' });
    expect(transform.done).toBe(true);
    const closing: Array<{ type: string; chars: number }> = [];
    const tail = transform.end!();
    expect(typeof tail).not.toBe('string');
    for (const piece of tail as Iterable<string>) closing.push({ type: /^event: (\S+)/.exec(piece)![1], chars: piece.length });
    expect(closing.map((c) => c.type)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(closing.every((c) => c.chars > 140 * MB)).toBe(true);
  });
});

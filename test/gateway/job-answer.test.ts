// GET /v1/jobs/:id with a job whose result is a large answer: it goes out as the OpenAI endpoints'
// whole answers do, so a client that stops reading is cut at the stall limit rather than holding
// the answer in the gateway's memory, and one that reads gets it whole. A whole gateway stack with
// its in-process queue and worker on loopback, in front of a fake provider.
import { mkdtempSync } from 'node:fs';
import { request, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeProvider } from './fake-provider';
import { listenStack, testJob, writeOneRouteMap } from './harness';
import { until } from './keys-harness';

/** Over what loopback's socket buffers take at once: a client that reads nothing leaves the gateway writing. */
const CONTENT = 'x'.repeat(20 * 1024 * 1024);

let hot: FakeProvider;
let gateway: Awaited<ReturnType<typeof listenStack>>;
let jobId = '';

beforeAll(async () => {
  hot = await new FakeProvider().start();
  hot.always({ kind: 'ok', content: CONTENT });
  const dir = mkdtempSync(join(tmpdir(), 'job-answer-'));
  const routes = join(dir, 'routes.json');
  writeOneRouteMap(routes, hot.url);
  const env = { ROUTES_FILE: routes, METER_CSV_FILE: join(dir, 'e.csv'), SCOPES_FILE: join(dir, 'none.yaml'), HOT_API_KEY: 'k' };
  gateway = await listenStack(env, { http: true, worker: true, jobStallMs: 500 });
  ({ jobId } = await gateway.stack.queue.enqueue(testJob('long-answer', 'a long answer, please')));
  await until(async () => (await gateway.stack.queue.get(jobId))?.state === 'completed', 30_000);
});
afterAll(async () => {
  await gateway.stop();
  await hot.stop();
});

describe('a job whose result is a large answer', () => {
  it('to a client that reads nothing: cut at the stall limit, not held for as long as it keeps the connection', async () => {
    // Seen by the gateway: a client that reads nothing does not read the end of the connection either.
    let cut: boolean | null = null;
    const watch = (req: IncomingMessage, res: ServerResponse) => {
      if (req.url?.startsWith('/v1/jobs/')) res.on('close', () => (cut = !res.writableFinished));
    };
    gateway.server.on('request', watch);
    const req = request(`${gateway.url}/v1/jobs/${jobId}`, (res) => res.pause()); // reads nothing, ever
    req.on('error', () => {});
    req.end();
    // Before: the answer was written whole into the socket and kept there until the client hung up.
    await until(async () => cut !== null, 15_000);
    expect(cut).toBe(true);
    req.destroy();
    gateway.server.off('request', watch);
  });

  it('to a client that reads it: whole, byte for byte the job as the queue has it', async () => {
    const res = await fetch(`${gateway.url}/v1/jobs/${jobId}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    const text = await res.text();
    expect(text === JSON.stringify(await gateway.stack.queue.get(jobId))).toBe(true);
    const job = JSON.parse(text) as { result: { body: { choices: Array<{ message: { content: string } }> } } };
    expect(job.result.body.choices[0].message.content === CONTENT).toBe(true);
  });
});

describe('answers past the in-process queue’s limit', () => {
  // Before, every answer was kept for its week whatever its size: 14 answers of 20 MB held 280 MB
  // past the queue's 256 MB, and a long outage with large answers ran the gateway out of memory.
  it('the oldest answer is dropped: its poll says so (410 job_answer_dropped), the newest is answered whole', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 13; i++) ids.push((await gateway.stack.queue.enqueue(testJob(`more-${i}`, 'another long answer'))).jobId);
    await until(async () => (await gateway.stack.queue.counts()).completed === 14, 60_000);
    const res = await fetch(`${gateway.url}/v1/jobs/${jobId}`);
    expect(res.status).toBe(410);
    const { error } = (await res.json()) as { error: { message: string; type: string; param: string; code: string } };
    expect(error).toMatchObject({ type: 'invalid_request_error', param: 'id', code: 'job_answer_dropped' });
    expect(error.message).toContain('no longer kept');
    const newest = await fetch(`${gateway.url}/v1/jobs/${ids.at(-1)}`);
    expect(newest.status).toBe(200);
    const job = (await newest.json()) as { result: { body: { choices: Array<{ message: { content: string } }> } } };
    expect(job.result.body.choices[0].message.content === CONTENT).toBe(true);
  });
});

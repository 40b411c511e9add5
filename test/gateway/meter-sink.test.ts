// Meter events to the web app: batches, the 302 followed with GET, spooling while the meter is
// down, replay in order after a restart, none lost and none duplicated. And the shared flags.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisFlags } from '../../gateway/src/flags';
import { CsvSink, WebAppSink } from '../../gateway/src/meter-sink';
import { normalizeEvent } from '../../schema/event-record';

/** The meter web app as Apps Script serves it: POST → 302 → GET the answer; it dedups by event_id. */
class FakeMeterWebApp {
  stored: string[] = [];
  requests: string[] = [];
  down = false;
  server!: Server;
  url = '';
  private answers = new Map<string, string>();
  async start() {
    let n = 0;
    this.server = createServer(async (req, res) => {
      let body = '';
      for await (const c of req) body += c;
      this.requests.push(`${req.method} ${req.url!.split('?')[0]}`);
      if (this.down) return void res.writeHead(500).end('down');
      if (req.method === 'POST') {
        const url = new URL(req.url!, 'http://x');
        let answer: object;
        if (url.searchParams.get('token') !== 'tok') answer = { ok: false, error: 'unauthorized' };
        else {
          const events = JSON.parse(body).events as Array<{ event_id: string }>;
          const fresh = events.filter((e) => !this.stored.includes(e.event_id));
          this.stored.push(...fresh.map((e) => e.event_id));
          answer = { ok: true, appended: fresh.length, duplicates: events.length - fresh.length };
        }
        const key = `k${n++}`;
        this.answers.set(key, JSON.stringify(answer));
        return void res.writeHead(302, { location: `/echo?user_content_key=${key}` }).end();
      }
      const key = new URL(req.url!, 'http://x').searchParams.get('user_content_key')!;
      res.writeHead(200, { 'content-type': 'application/json' }).end(this.answers.get(key) ?? '{"ok":false,"error":"no such answer"}');
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/exec`;
    return this;
  }
  stop() {
    this.server.closeAllConnections();
    return new Promise<void>((r) => this.server.close(() => r()));
  }
}

const event = (i: number) =>
  normalizeEvent({ event_id: `e${i}`, cost_usd: 0.01, provider: 'openai' }, { now: () => new Date(), uuid: () => 'x' });
const quiet = { warn: () => {}, info: () => {}, error: () => {} };

let meter: FakeMeterWebApp | undefined;
afterEach(async () => {
  await meter?.stop();
  meter = undefined;
});

describe('meter sink: the web app', () => {
  it('posts batches, follows the 302 with a GET, and delivers every event once, in order', async () => {
    meter = await new FakeMeterWebApp().start();
    const sink = new WebAppSink({
      url: meter.url,
      token: 'tok',
      spoolDir: mkdtempSync(join(tmpdir(), 'spool-')),
      batchSize: 500,
      flushIntervalMs: 60_000,
      log: quiet,
    });
    for (let i = 0; i < 1200; i++) sink.send(event(i));
    await sink.flush();
    expect(meter.stored).toEqual(Array.from({ length: 1200 }, (_, i) => `e${i}`));
    expect(meter.requests.slice(0, 2)).toEqual(['POST /exec', 'GET /echo']);
    expect(meter.requests.filter((r) => r.startsWith('POST'))).toHaveLength(3); // 500 + 500 + 200
    expect(sink.stats.delivered).toBe(1200);
    await sink.close();
  });

  it('spools while the meter is down and replays in order after a restart: none lost, none doubled', async () => {
    meter = await new FakeMeterWebApp().start();
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    meter.down = true;
    const first = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, maxBackoffMs: 1, log: quiet });
    for (let i = 0; i < 10; i++) first.send(event(i));
    await first.flush();
    expect(meter.stored).toEqual([]);
    expect(first.stats.failedPosts).toBe(1);
    expect(readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8').trim().split('\n')).toHaveLength(10);
    await first.close();

    // The gateway restarts; the meter comes back.
    meter.down = false;
    const second = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, log: quiet });
    for (let i = 10; i < 15; i++) second.send(event(i));
    await second.flush();
    expect(meter.stored).toEqual(Array.from({ length: 15 }, (_, i) => `e${i}`));
    await second.flush();
    expect(meter.stored).toHaveLength(15);
    await second.close();
  });

  it('keeps events spooled while the token is refused, and never puts the token in the log', async () => {
    meter = await new FakeMeterWebApp().start();
    const warnings: string[] = [];
    const sink = new WebAppSink({
      url: meter.url,
      token: 'wrong-secret',
      spoolDir: mkdtempSync(join(tmpdir(), 'spool-')),
      flushIntervalMs: 60_000,
      log: { ...quiet, warn: (m) => warnings.push(m) },
    });
    sink.send(event(1));
    await sink.flush();
    expect(meter.stored).toEqual([]);
    expect(warnings.join('\n')).toContain('unauthorized');
    expect(warnings.join('\n')).not.toContain('wrong-secret');
    await sink.close();
  });
});

describe('meter sink: a local file that cannot be written', () => {
  it('reports the error and keeps the gateway running (no unhandled rejection)', async () => {
    const errors: string[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'csv-'));
    const sink = new CsvSink(dir, undefined, undefined, (m) => errors.push(m)); // a directory, not a file
    sink.send(event(1));
    await new Promise((r) => setTimeout(r, 150));
    expect(errors.join('\n')).toMatch(/meter CSV .*EISDIR/);
  });

  it('the web-app sink keeps events it could not spool, in order, for the next flush', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'spool-'));
    const blocked = join(dir, 'not-a-dir');
    writeFileSync(blocked, 'x'); // the spool directory path is a file: appends fail
    meter = await new FakeMeterWebApp().start();
    const sink = new WebAppSink({ url: meter.url, token: 'tok', spoolDir: blocked, flushIntervalMs: 60_000, log: quiet });
    sink.send(event(1));
    sink.send(event(2));
    await expect(sink.flush()).rejects.toThrow();
    expect(meter.stored).toEqual([]);
    await sink.close().catch(() => undefined);
  });
});

describe('flags shared through Redis', () => {
  it('a change on one gateway instance reaches another', async () => {
    const redis = new Redis('redis://127.0.0.1:6379/0');
    const key = `test:${process.pid}:${Date.now()}:flags`;
    const defaults = { enable_warm_fallback: true, enable_cold_queue: true, killed_models: [] };
    const a = new RedisFlags(defaults, redis, key, 50);
    const b = new RedisFlags(defaults, redis, key, 50);
    try {
      await a.update({ enable_warm_fallback: false, killed_models: ['gpt-4o'] });
      await b.refresh();
      expect(b.get()).toEqual({ enable_warm_fallback: false, enable_cold_queue: true, killed_models: ['gpt-4o'] });
    } finally {
      a.close();
      b.close();
      await redis.del(key);
      redis.disconnect();
    }
  });
});

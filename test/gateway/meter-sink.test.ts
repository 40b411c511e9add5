// Meter events to the web app: batches, the 302 followed with GET, spooling while the meter is
// down, replay in order after a restart, none lost and none duplicated. And the shared flags.
import { appendFileSync, existsSync, mkdtempSync, readFileSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RedisFlags } from '../../gateway/src/flags';
import { CsvSink, eventProblem } from '../../gateway/src/meter-sink';
import { WebAppSink, eventJson } from '../../gateway/src/meter-web-app';
import { normalizeEvent } from '../../schema/event-record';
import { callRecordProblem, type CallRecord } from '../../schema/call-record';
import { aCall } from '../meter/maintenance-setup';
import { FakeMeterWebApp } from './fake-meter';
import { until } from './instances';
import { TEST_REDIS_URL } from '../redis-db';

const event = (i: number) =>
  normalizeEvent({ event_id: `e${i}`, cost_usd: 0.01, provider: 'openai' }, { now: () => new Date(), uuid: () => 'x' });
const quiet = { warn: () => {}, info: () => {}, error: () => {} };

let meter: FakeMeterWebApp | undefined;
afterEach(async () => {
  await meter?.stop();
  meter = undefined;
});

/** A spool folder holding `n` events, spooled by a sink that found the meter down (then closed). */
async function spooledWhileDown(n: number): Promise<{ spoolDir: string; first: WebAppSink }> {
  const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
  meter!.mode = 'down';
  const first = new WebAppSink({ url: meter!.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, maxBackoffMs: 1, log: quiet });
  for (let i = 0; i < n; i++) first.send(event(i));
  await first.flush();
  return { spoolDir, first };
}

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
    const { spoolDir, first } = await spooledWhileDown(10);
    expect(meter.stored).toEqual([]);
    expect(first.stats.failedPosts).toBe(1);
    expect(readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8').trim().split('\n')).toHaveLength(10);
    await first.close();

    // The gateway restarts; the meter comes back.
    meter.mode = 'ok';
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

describe('meter sink: the wall clock set back during a backoff (an NTP step, a virtual machine resumed)', () => {
  afterEach(() => vi.restoreAllMocks());

  it('delivers once the backoff has passed, not once the clock has caught up with the hour it went back', async () => {
    meter = await new FakeMeterWebApp().start();
    meter.mode = 'down';
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const sink = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, maxBackoffMs: 50, log: quiet });
    sink.send(event(0));
    await sink.flush();
    expect(sink.stats.failedPosts).toBe(1);
    const wall = Date.now.bind(Date);
    vi.spyOn(Date, 'now').mockImplementation(() => wall() - 3_600_000);
    meter.mode = 'ok';
    const delivered = async () => (await sink.flush(), meter!.stored);
    await expect.poll(delivered, { timeout: 5000, interval: 20 }).toEqual(['e0']);
    await sink.close();
  });
});

describe('meter sink: a spool under traffic that never stops', () => {
  const posts = () => meter!.requests.filter((r) => r.startsWith('POST')).length;
  const spooledIds = (dir: string) =>
    readFileSync(join(dir, 'spool.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).event_id);

  it('is compacted to what is not delivered yet while events keep coming: none lost, none doubled', async () => {
    meter = await new FakeMeterWebApp().start();
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const sink = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, compactBytes: 2000, log: quiet });
    await Promise.all(Array.from({ length: 20 }, (_, i) => sink.send(event(i))));
    meter.hold();
    const delivering = sink.flush(); // the 20 are posted; the meter holds the post
    await until('the first post', () => posts() === 1);
    await Promise.all(Array.from({ length: 5 }, (_, i) => sink.send(event(20 + i)))); // traffic meanwhile
    meter.release();
    meter.hold();
    await until('the second post', () => posts() === 2);
    // The spool holds only the 5 not delivered yet: the delivered 20 were dropped without a pause in traffic.
    expect(spooledIds(spoolDir)).toEqual(['e20', 'e21', 'e22', 'e23', 'e24']);
    meter.release();
    await delivering;
    expect(meter.stored).toEqual(Array.from({ length: 25 }, (_, i) => `e${i}`));
    expect(sink.stats.duplicates).toBe(0);
    await sink.close();
  });

  it('the compaction after an outage copies what is left a piece at a time, not all of it in memory at once: 38 MB left, every event delivered once', async () => {
    meter = await new FakeMeterWebApp().start();
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const long = (what: string) => what.padEnd(1000, 'x');
    const lines = Array.from({ length: 6000 }, (_, i) =>
      JSON.stringify(
        eventJson({
          ...event(i),
          model: long('m'),
          region: long('r'),
          job_id: long('j'),
          customer_id: long('c'),
          reviewer_id: long('v'),
          error_code: long('x'),
        }),
      ),
    );
    const left = Buffer.from(lines.join('\n') + '\n');
    // Half the spool delivered before the outage ended (its bytes no longer matter), the other half left.
    const spool = join(spoolDir, 'spool.jsonl');
    writeFileSync(spool, '');
    truncateSync(spool, left.length);
    appendFileSync(spool, left);
    writeFileSync(join(spoolDir, 'spool.offset'), `${statSync(spool).ino}:${left.length}`);
    const sink = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, log: quiet });
    meter.hold();
    const delivering = sink.flush();
    await until('the first post', () => posts() === 1);
    // From the first batch's answer to the second post: the compaction (half delivered, half left).
    const before = process.memoryUsage().arrayBuffers;
    let peak = 0;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().arrayBuffers - before)), 1);
    meter.release();
    meter.hold();
    await until('the second post', () => posts() === 2);
    clearInterval(sampler);
    expect(statSync(spool).size).toBeLessThan(left.length); // compacted to what was left
    // Whole, the copy alone is all of it (38 MB); in pieces, what is beside it is a batch read (4 MB),
    // its post and the fake meter's copy of it, which Node 24 collects later than Node 20 (15 MB).
    expect(peak).toBeLessThan(left.length / 2);
    meter.release();
    await delivering;
    expect(meter.stored).toEqual(lines.map((_, i) => `e${i}`));
    await sink.close();
  }, 60_000);

  it('an offset left by a crash during a compaction is not applied to the new spool (it names the old file)', async () => {
    meter = await new FakeMeterWebApp().start();
    const { spoolDir, first } = await spooledWhileDown(10);
    await first.close();
    const threeLines = readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8').split('\n').slice(0, 3).join('\n').length + 1;
    // The old file's offset: every event of the spool is delivered all the same.
    writeFileSync(join(spoolDir, 'spool.offset'), `1:${threeLines}`);
    meter.mode = 'ok';
    const second = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, log: quiet });
    await second.flush();
    expect(meter.stored).toEqual(Array.from({ length: 10 }, (_, i) => `e${i}`));
    await second.close();
  });
});

describe('meter sink: events the meter refuses', () => {
  const rejected = (dir: string) =>
    readFileSync(join(dir, 'rejected.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { reason: string; record: { event_id: string } });

  it('a refused batch is split until only the refused events are left: every other event is delivered, in order', async () => {
    meter = await new FakeMeterWebApp().start();
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const errors: string[] = [];
    const sink = new WebAppSink({
      url: meter.url,
      token: 'tok',
      spoolDir,
      flushIntervalMs: 60_000,
      log: { ...quiet, error: (m) => errors.push(m) },
    });
    const ahead = new Date(Date.now() + 10 * 60_000); // a sender whose clock runs 10 minutes ahead
    for (let i = 0; i < 40; i++) sink.send(i === 3 || i === 29 ? { ...event(i), timestamp: ahead } : event(i));
    await sink.flush();
    const good = Array.from({ length: 40 }, (_, i) => `e${i}`).filter((id) => id !== 'e3' && id !== 'e29');
    expect(meter.stored).toEqual(good);
    expect(rejected(spoolDir).map((r) => r.record.event_id)).toEqual(['e3', 'e29']);
    expect(rejected(spoolDir)[0].reason).toMatch(/^refused by the meter: events\[0\]\.timestamp: expected a time at most 5 minutes/);
    expect(sink.stats).toMatchObject({ delivered: 38, rejected: 2 });
    expect(errors.join('\n')).toContain('kept in rejected.jsonl');
    await sink.flush(); // nothing left: nothing posted again
    expect(meter.stored).toHaveLength(38);
    await sink.close();
  });

  it('a spooled line cut inside a character is set aside alone, once: the events after it are delivered', async () => {
    meter = await new FakeMeterWebApp().start();
    const { spoolDir, first } = await spooledWhileDown(3);
    await first.close();
    // A line that ends inside the "é" of a customer id (what a write cut short leaves), then whole lines.
    const spool = join(spoolDir, 'spool.jsonl');
    const [e0, ...rest] = readFileSync(spool, 'utf8').trim().split('\n');
    const torn = Buffer.from('{"event_id":"torn","customer_id":"Jos\u00e9"').subarray(0, -2);
    writeFileSync(spool, Buffer.concat([Buffer.from(`${e0}\n`), torn, Buffer.from('\n'), Buffer.from(`${rest.join('\n')}\n`)]));
    meter.mode = 'ok';
    const second = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, log: quiet });
    const setAside = () =>
      existsSync(join(spoolDir, 'rejected.jsonl')) ? readFileSync(join(spoolDir, 'rejected.jsonl'), 'utf8').split('\n').length - 1 : 0;
    // The offset moved past the spool's end (the replacement character counted as 3 bytes, not 1): the
    // spool was read again from its start, for ever, the torn line set aside each time.
    let flushed = false;
    void second.flush().then(() => (flushed = true));
    await until('the flush, or the torn line set aside twice', () => flushed || setAside() > 1);
    expect(meter.stored).toEqual(['e0', 'e1', 'e2']);
    expect(setAside()).toBe(1);
    // rejected.jsonl stays one JSON object a line (jq stopped at the torn text), the text kept as it was read.
    const [kept] = rejected(spoolDir) as unknown as Array<{ reason: string; record: unknown }>;
    expect(kept.record).toBe('{"event_id":"torn","customer_id":"Jos\ufffd');
    expect(kept.reason).toMatch(/^refused by the meter: body: expected JSON/);
    await second.close();
  });

  it('an event the meter would refuse is never spooled: set aside at once with the reason, the others delivered', async () => {
    meter = await new FakeMeterWebApp().start();
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const sink = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, check: eventProblem, log: quiet });
    for (let i = 0; i < 5; i++) sink.send(i === 2 ? { ...event(i), customer_id: 'c'.repeat(1001) } : event(i));
    await sink.flush();
    expect(meter.stored).toEqual(['e0', 'e1', 'e3', 'e4']);
    expect(meter.posts).toEqual([4]); // one post: the meter never saw the bad event
    const [set] = rejected(spoolDir);
    expect(set.record.event_id).toBe('e2');
    expect(set.reason).toBe('refused before spooling: customer_id: expected text of at most 1000 characters');
    expect(readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8')).not.toContain('ccccc');
    await sink.close();
  });

  it('a call record with a model too long for the meter is set aside before spooling, not retried for ever ahead of the others', async () => {
    meter = await new FakeMeterWebApp().start();
    meter.mode = 'down'; // what is spooled stays there to be read
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const sink = new WebAppSink<CallRecord>(
      { url: meter.url, token: 'tok', key: 'calls', spoolDir, flushIntervalMs: 60_000, check: callRecordProblem, log: quiet },
      (r) => r,
    );
    await sink.send(aCall({ call_id: 'long', model: 'm'.repeat(50_001) }) as CallRecord);
    await sink.send(aCall({ call_id: 'fine' }) as CallRecord);
    const spooled = readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8').trim().split('\n');
    expect(spooled.map((l) => JSON.parse(l).call_id)).toEqual(['fine']);
    const [set] = rejected(spoolDir) as unknown as Array<{ reason: string; record: { call_id: string } }>;
    expect(set.record.call_id).toBe('long');
    expect(set.reason).toBe('refused before spooling: model: expected text of at most 1000 characters');
    await sink.close();
  });
});

describe('meter sink: a spool that passes its size limit', () => {
  it('alerts loudly (error and notice, again at each further 10 %), drops nothing, and delivers oldest first once the meter is back', async () => {
    meter = await new FakeMeterWebApp().start();
    meter.mode = 'busy';
    const spoolDir = mkdtempSync(join(tmpdir(), 'spool-'));
    const errors: string[] = [];
    const notices: string[] = [];
    const sink = new WebAppSink({
      url: meter.url,
      token: 'tok',
      spoolDir,
      flushIntervalMs: 60_000,
      maxBackoffMs: 1,
      maxSpoolBytes: 4000,
      onBacklog: (m) => notices.push(m),
      log: { ...quiet, error: (m) => errors.push(m) },
    });
    const size = JSON.stringify({ ...event(0), timestamp: new Date().toISOString() }).length + 1;
    const n = Math.ceil(4000 / size) + 10;
    for (let i = 0; i < n; i++) await sink.send(event(i));
    await sink.flush();
    expect(notices.length).toBeGreaterThanOrEqual(2); // passing the limit, then 10 % more
    expect(notices[0]).toMatch(/meter spool holds [\d.]+ MB not yet delivered, over its 0\.0 MB limit.*Nothing is dropped/);
    expect(errors.filter((e) => /over its/.test(e))).toHaveLength(notices.length);
    expect(sink.status()).toMatchObject({ over_limit: true, spool_limit_bytes: 4000 });
    const spooled = readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8').trim().split('\n');
    expect(spooled.map((l) => JSON.parse(l).event_id)).toEqual(Array.from({ length: n }, (_, i) => `e${i}`));
    meter.mode = 'ok';
    // A flush within the 1 ms backoff posts nothing: flushed again until one has posted.
    await until('the spool delivered once the backoff is over', async () => {
      await sink.flush();
      return meter!.stored.length > 0;
    });
    expect(meter.stored).toEqual(Array.from({ length: n }, (_, i) => `e${i}`));
    expect(sink.status()).toMatchObject({ over_limit: false });
    await sink.close();
  });
});

describe('meter sink: a local file that cannot be written', () => {
  it('reports the error and keeps the gateway running (no unhandled rejection)', async () => {
    const errors: string[] = [];
    const dir = mkdtempSync(join(tmpdir(), 'csv-'));
    const sink = new CsvSink(dir, undefined, undefined, (m) => errors.push(m)); // a directory, not a file
    await sink.send(event(1)).catch(() => undefined);
    await vi.waitFor(() => expect(errors.join('\n')).toMatch(/meter CSV .*EISDIR/));
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
    const redis = new Redis(TEST_REDIS_URL);
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

  it('flags gone from Redis (a restart without persistence) are the defaults on every instance, as on one started after', async () => {
    const redis = new Redis(TEST_REDIS_URL);
    const key = `test:${process.pid}:${Date.now()}:flags-lost`;
    const defaults = { enable_warm_fallback: true, enable_cold_queue: true, killed_models: [] };
    const running = new RedisFlags(defaults, redis, key, 60_000);
    try {
      await running.update({ enable_warm_fallback: false, killed_models: ['gpt-4o'] });
      await redis.del(key); // Redis restarted empty
      const started = new RedisFlags(defaults, redis, key, 60_000);
      await started.refresh();
      await running.refresh();
      started.close();
      expect(running.get()).toEqual(started.get());
      expect(running.get()).toEqual(defaults);
    } finally {
      running.close();
      await redis.del(key);
      redis.disconnect();
    }
  });
});

// The parts of "meter events across instances" one process shows: the Redis stream's refusals and
// its fall-back to the file spool, the spool folder's lock, and one CSV appended by two processes.
import { spawnSync } from 'node:child_process';
import { spawn } from '../children';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventProblem } from '../../gateway/src/meter-sink';
import { RedisStreamSink, type StreamSinkOptions } from '../../gateway/src/meter-stream';
import { eventJson, WebAppSink } from '../../gateway/src/meter-web-app';
import { CSV_HEADER, EVENT_FIELDS, MAX_TEXT_LENGTH, normalizeEvent } from '../../schema/event-record';
import { FakeMeterWebApp } from './fake-meter';
import { until } from './instances';
import { TEST_REDIS_URL } from '../redis-db';

const event = (i: number, at = new Date()) =>
  normalizeEvent({ event_id: `e${i}`, cost_usd: 0.01, provider: 'openai' }, { now: () => at, uuid: () => 'x' });
const quiet = { warn: () => {}, info: () => {}, error: () => {} };
const prefix = `test-meter-stream-${process.pid}`;
const redis = new Redis(TEST_REDIS_URL);

let meter: FakeMeterWebApp;
beforeEach(async () => {
  meter = await new FakeMeterWebApp().start();
});
afterEach(async () => {
  await meter.stop();
  const keys = await redis.keys(`${prefix}:*`);
  if (keys.length) await redis.del(...keys);
});
afterAll(() => redis.disconnect());

/** The event_ids the stream holds: an entry's field is one event's JSON or several joined by ",\n", a batch's array body either way. */
async function inStream(): Promise<string[]> {
  const entries = await redis.xrange(`${prefix}:meter:events`, '-', '+');
  return entries.flatMap(([, fields]) =>
    (JSON.parse(`[${fields[fields.indexOf('e') + 1]}]`) as Array<{ event_id: string }>).map((e) => e.event_id),
  );
}

function streamSink(client: Redis, spoolDir = mkdtempSync(join(tmpdir(), 'stream-spool-')), extra: Partial<StreamSinkOptions> = {}) {
  const fallback = new WebAppSink({ url: meter.url, token: 'tok', spoolDir, flushIntervalMs: 60_000, log: quiet });
  const sink = new RedisStreamSink({
    url: meter.url,
    token: 'tok',
    redis: client,
    prefix,
    toJson: eventJson,
    check: eventProblem,
    fallback,
    flushIntervalMs: 60_000,
    log: quiet,
    ...extra,
  });
  return { sink, fallback };
}

describe('meter events through the Redis stream', () => {
  it('a refused event is isolated and kept in Redis with the meter reason; the others are delivered and the stream emptied', async () => {
    const { sink } = streamSink(redis);
    const sent = [0, 1, 2, 3, 4].map((i) => (i === 2 ? event(i, new Date(Date.now() + 3_600_000)) : event(i)));
    await Promise.all(sent.map((e) => sink.send(e)));
    expect(await inStream()).toEqual(['e0', 'e1', 'e2', 'e3', 'e4']); // durable in Redis once send resolved
    await sink.flush();
    expect(meter.stored).toEqual(['e0', 'e1', 'e3', 'e4']);
    const rejected = await redis.xrange(`${prefix}:meter:rejected`, '-', '+');
    expect(rejected).toHaveLength(1);
    const fields = rejected[0][1];
    expect(fields[fields.indexOf('reason') + 1]).toMatch(/refused by the meter: events\[0\]\.timestamp/);
    expect(JSON.parse(fields[fields.indexOf('record') + 1])).toMatchObject({ event_id: 'e2' });
    expect(await redis.xlen(`${prefix}:meter:events`)).toBe(0);
    await sink.close();
  });

  it('events of one entry the meter has only in part stay in Redis; after a crash another gateway delivers the rest, each event stored once', async () => {
    const { sink: first } = streamSink(redis, undefined, { batchSize: 2 }); // the 5 events in posts of 2
    await Promise.all([0, 1, 2, 3, 4].map((i) => first.send(event(i))));
    meter.downAfter(1); // the meter takes e0 and e1, then is lost
    await first.flush();
    expect(meter.stored).toEqual(['e0', 'e1']);
    expect(await inStream()).toEqual(['e0', 'e1', 'e2', 'e3', 'e4']); // not acknowledged: e2..e4 are not settled
    await first.close(); // as if it died: its entry stays pending with it

    meter.downAfter(Infinity);
    const { sink: second } = streamSink(redis, undefined, { claimIdleMs: 1 });
    await second.flush(); // claims the dead one's entry and delivers it whole
    expect(meter.stored).toEqual(['e0', 'e1', 'e2', 'e3', 'e4']);
    expect(second.stats).toMatchObject({ delivered: 3, duplicates: 2 });
    expect(await inStream()).toEqual([]);
    await second.close();
  });

  it('entries written by an earlier version, one event each, are delivered beside newer ones', async () => {
    for (const i of [0, 1]) await redis.xadd(`${prefix}:meter:events`, '*', 'e', JSON.stringify(eventJson(event(i))));
    const { sink } = streamSink(redis);
    await Promise.all([2, 3].map((i) => sink.send(event(i))));
    await sink.flush();
    expect(meter.stored).toEqual(['e0', 'e1', 'e2', 'e3']);
    expect(await redis.xlen(`${prefix}:meter:events`)).toBe(0);
    await sink.close();
  });

  it('the backlog /health shows falls back to 0 once the meter is back and has every event', async () => {
    const { sink } = streamSink(redis, undefined, { maxBackoffMs: 1 });
    meter.mode = 'down';
    await Promise.all(Array.from({ length: 20 }, (_, i) => sink.send(event(i))));
    await sink.flush();
    expect(sink.status()).toMatchObject({ stream_backlog_events: 20 });
    meter.mode = 'ok';
    await until('the meter has every event', async () => {
      await sink.flush();
      return meter.stored.length === 20;
    });
    expect(await redis.xlen(`${prefix}:meter:events`)).toBe(0);
    expect(sink.status()).toMatchObject({ stream_backlog_events: 0 }); // before: 20 for as long as the process ran
    await sink.close();
  });

  it('a backlog over its limit is told of again when it builds up again after the stream drained', async () => {
    const notices: string[] = [];
    const { sink } = streamSink(redis, undefined, { maxBackoffMs: 1, maxBacklog: 5, onBacklog: (m) => notices.push(m) });
    const outage = async (from: number) => {
      meter.mode = 'down';
      await Promise.all(Array.from({ length: 10 }, (_, i) => sink.send(event(from + i))));
      await sink.flush();
      meter.mode = 'ok';
      await until('the meter has every event', async () => {
        await sink.flush();
        return meter.stored.length === from + 10;
      });
    };
    await outage(0);
    expect(notices).toHaveLength(1);
    await outage(10);
    expect(notices).toHaveLength(2); // before: the first notice was the process's only one
    expect(notices[1]).toMatch(/holds about 10 events not yet delivered, over its limit of 5/);
    await sink.close();
  });

  it('with Redis unreachable, events go to the file spool within a second and are delivered from there', async () => {
    const down = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: null, lazyConnect: false });
    down.on('error', () => undefined);
    const spoolDir = mkdtempSync(join(tmpdir(), 'stream-spool-'));
    const { sink } = streamSink(down, spoolDir);
    await Promise.all([0, 1, 2].map((i) => sink.send(event(i))));
    expect(readFileSync(join(spoolDir, 'spool.jsonl'), 'utf8').trim().split('\n')).toHaveLength(3);
    await sink.flush().catch(() => undefined); // the stream's own delivery fails: Redis is down
    expect(meter.stored).toEqual(['e0', 'e1', 'e2']);
    expect(sink.status()).toMatchObject({ fell_back_to_spool: 3 });
    down.disconnect();
    await sink.close();
  });

  it('with Redis unreachable, an event the record rules refuse is set aside in the spool folder, not held for Redis or lost', async () => {
    const down = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: null, lazyConnect: false });
    down.on('error', () => undefined);
    const spoolDir = mkdtempSync(join(tmpdir(), 'stream-spool-'));
    const { sink } = streamSink(down, spoolDir);
    const bad = { ...event(0), model: 'm'.repeat(MAX_TEXT_LENGTH + 1) }; // a field over its limit
    await sink.send(bad); // before: waited for Redis, and was gone with the process
    const kept = readFileSync(join(spoolDir, 'rejected.jsonl'), 'utf8').trim().split('\n');
    expect(kept).toHaveLength(1);
    expect(JSON.parse(kept[0])).toMatchObject({
      reason: expect.stringMatching(/refused before spooling: .*model/),
      record: { event_id: 'e0' },
    });
    expect(sink.stats.rejected).toBe(1);
    down.disconnect();
    await sink.close();
  });
});

describe('a spool folder belongs to one process', () => {
  it('a second sink on the same folder takes <dir>.2; a lock left by a dead process is taken over; close frees it', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'spool-lock-')), 'meter-spool');
    const warnings: string[] = [];
    const first = new WebAppSink({ url: meter.url, token: 'tok', spoolDir: dir, flushIntervalMs: 60_000, log: quiet });
    const second = new WebAppSink({
      url: meter.url,
      token: 'tok',
      spoolDir: dir,
      flushIntervalMs: 60_000,
      log: { ...quiet, warn: (m) => warnings.push(m) },
    });
    expect([first.dir, second.dir]).toEqual([dir, `${dir}.2`]);
    expect(warnings[0]).toContain(`${dir} is held by process ${process.pid}; this gateway spools to ${dir}.2`);
    await Promise.all([first.close(), second.close()]);
    expect(existsSync(join(dir, 'lock'))).toBe(false);

    const dead = spawnSync(process.execPath, ['-e', '']).pid!; // a pid that no longer runs
    writeFileSync(join(dir, 'lock'), `${dead}\nelsewhere\n`);
    const third = new WebAppSink({ url: meter.url, token: 'tok', spoolDir: dir, flushIntervalMs: 60_000, log: quiet });
    expect(third.dir).toBe(dir);
    expect(readFileSync(join(dir, 'lock'), 'utf8')).toMatch(new RegExp(`^${process.pid}\n`));
    await third.close();
  });
});

describe('one CSV, two processes', () => {
  it('rows of two processes appending big groups at once never mix: one header, every row whole and once', async () => {
    const csv = join(mkdtempSync(join(tmpdir(), 'csv-two-')), 'events.csv');
    const sinkModule = join(import.meta.dirname, '../../gateway/src/meter-sink.ts');
    const recordModule = join(import.meta.dirname, '../../schema/event-record.ts');
    // Each process sends 10 groups of 4,000 events, each group in one turn (about 1.2 MB: more than one write).
    // Each says when it is loaded and waits for the word to begin, so that both begin together.
    const script = (tag: string) => `
      const { CsvSink } = await import(${JSON.stringify(sinkModule)});
      const { normalizeEvent } = await import(${JSON.stringify(recordModule)});
      const sink = new CsvSink(${JSON.stringify(csv)});
      process.stdout.write('ready\\n');
      await new Promise((r) => process.stdin.once('data', r));
      const base = normalizeEvent({ cost_usd: 0.01, provider: 'openai', model: 'm'.repeat(200) }, { now: () => new Date(), uuid: () => 'x' });
      for (let g = 0; g < 10; g++) {
        const sent = [];
        for (let i = 0; i < 4000; i++) sent.push(sink.send({ ...base, event_id: '${tag}-' + g + '-' + i }));
        await Promise.all(sent);
      }
      await sink.close();`;
    const start = (tag: string) => {
      const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script(tag)], {
        stdio: ['pipe', 'pipe', 'inherit'],
      });
      return {
        child,
        ready: new Promise((resolve) => child.stdout.once('data', resolve)),
        exited: new Promise<number | null>((resolve) => child.on('exit', resolve)),
      };
    };
    const runs = [start('a'), start('b')];
    await Promise.all(runs.map((r) => r.ready));
    for (const r of runs) r.child.stdin.end('go\n');
    expect(await Promise.all(runs.map((r) => r.exited))).toEqual([0, 0]);
    const [header, ...rows] = readFileSync(csv, 'utf8').trim().split('\n');
    expect(header).toBe(CSV_HEADER);
    expect(rows).toHaveLength(80_000);
    expect(rows.every((r) => r.split(',').length === EVENT_FIELDS.length && /^(a|b)-\d-\d+,/.test(r))).toBe(true);
    expect(new Set(rows.map((r) => r.split(',')[0])).size).toBe(80_000);
  }, 60_000);
});

/**
 * Meter events through a Redis stream shared by every gateway on one Redis (QUEUE_STORE_URL and
 * METER_URL set): the stream, not a file of this process, is where an event is durable before its
 * answer is released.
 *
 * - `send` appends the event with XADD (the XADDs of one turn of the event loop go in one pipeline,
 *   one round trip) and resolves once Redis has it.
 * - Every gateway delivers, as a consumer of one consumer group: XREADGROUP batches of up to 500,
 *   posted to the meter (meter-post.ts), then XACK and XDEL in one MULTI, only after the meter has
 *   them. The stream thus holds only events the meter has not confirmed.
 * - Events read by a gateway that died (kill -9, a lost machine) stay pending under its consumer
 *   name; any gateway claims those idle for `claimIdleMs` (XAUTOCLAIM) and delivers them.
 * - Delivery is at least once (a crash between the meter's answer and the XACK posts a batch
 *   again); the meter stores each event_id once, so the sheet gets each event exactly once.
 * - Records the meter refuses for good go to the `rejected` stream with its reason (newest 100,000).
 * - When Redis does not take an append within `appendTimeoutMs` (down, reconnecting), the event
 *   goes to `fallback`, this process's file spool, which posts it to the meter itself: answers are
 *   not held back by Redis, and an event that reaches both is stored once by its event_id.
 */
import type { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { EventRecord } from '../../schema/event-record';
import { DeliveryLoop, MeterPoster, type MeterPostOptions } from './meter-post';
import type { MeterSink } from './meter-sink';
import { within } from './within';

export interface StreamSinkOptions extends MeterPostOptions {
  redis: Redis;
  /** Key prefix: the stream is `<prefix>:meter:events`, refused records `<prefix>:meter:rejected`. */
  prefix: string;
  /** The record as the meter's JSON. */
  toJson: (record: EventRecord) => unknown;
  check?: (json: unknown) => string | null;
  /** Where an event goes when Redis does not take it in time (the file spool). */
  fallback: MeterSink;
  batchSize?: number;
  flushIntervalMs?: number;
  /** How long an event stays pending with a consumer before another gateway claims it (default 60 s). */
  claimIdleMs?: number;
  appendTimeoutMs?: number;
  /** Events waiting in the stream above which the sink alerts (default 1,000,000). */
  maxBacklog?: number;
  onBacklog?: (message: string) => void;
}

type Entry = { id: string; line: string };
type RawEntry = [id: string, fields: string[] | null];
const GROUP = 'meter';
const REJECTED_KEEP = 100_000;
const CONSUMER_GONE_MS = 10 * 60_000;

export class RedisStreamSink implements MeterSink {
  readonly kind = 'meter web app';
  readonly key: string;
  /** This process's consumer name in the group: host, pid and a random tag. */
  readonly consumer = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly poster: MeterPoster;
  private readonly ready: Promise<void>;
  private pending: Array<{ record: EventRecord; line: string; done: () => void }> = [];
  private appending = new Set<Promise<void>>();
  private readonly loop: DeliveryLoop;
  private unsent = 0;
  private backlog = 0;
  private alerted = false;
  /** Events that went to the file spool because Redis did not take them in time. */
  private fellBack = 0;

  constructor(private readonly opts: StreamSinkOptions) {
    this.key = `${opts.prefix}:meter:events`;
    this.poster = new MeterPoster(opts);
    this.ready = this.createGroup().then(() => this.forgetGoneConsumers());
    this.loop = new DeliveryLoop(
      this.poster,
      () => this.deliver(),
      (error) => opts.log.error(`meter stream: ${error.message}; events stay in Redis and are tried again`),
      opts.flushIntervalMs,
    );
  }

  get stats() {
    return this.poster.stats;
  }

  send(record: EventRecord): Promise<void> {
    const json = this.opts.toJson(record);
    const line = JSON.stringify(json);
    const problem = this.opts.check?.(json) ?? null;
    if (problem) {
      this.stats.rejected++;
      return this.setAside([line], `refused before spooling: ${problem}`).catch(() => undefined);
    }
    const written = new Promise<void>((done) => this.pending.push({ record, line, done }));
    if (this.pending.length === 1) setImmediate(() => this.append());
    if (++this.unsent >= (this.opts.batchSize ?? 500)) {
      this.unsent = 0;
      void written.then(() => this.loop.kick());
    }
    return written;
  }

  /** One pipeline of XADDs for what was sent in this turn; what Redis does not take in time goes to the file spool. */
  private append(): void {
    if (!this.pending.length) return;
    const group = this.pending;
    this.pending = [];
    const job = this.xadd(group.map((p) => p.line)).then(async (added) => {
      if (!added) {
        this.fellBack += group.length;
        await Promise.all(group.map((p) => this.opts.fallback.send(p.record)));
      }
      for (const p of group) p.done();
    });
    this.appending.add(job);
    void job.finally(() => this.appending.delete(job));
  }

  private async xadd(lines: string[]): Promise<boolean> {
    if (this.redisDown()) return false;
    const pipeline = this.opts.redis.pipeline();
    for (const line of lines) pipeline.xadd(this.key, '*', 'e', line);
    const replies = await within(pipeline.exec(), this.opts.appendTimeoutMs ?? 1000).catch(() => null);
    return replies !== null && replies.every(([error]) => !error);
  }

  /** Known to be down: the connection was lost or failed (it is tried again meanwhile); no wait for it then. */
  private redisDown(): boolean {
    return ['reconnecting', 'close', 'end'].includes(this.opts.redis.status);
  }

  private async createGroup(): Promise<void> {
    // From 0: events appended before the group existed are delivered too.
    await this.opts.redis.xgroup('CREATE', this.key, GROUP, '0', 'MKSTREAM').catch((error: Error) => {
      if (!error.message.includes('BUSYGROUP')) throw error;
    });
  }

  /** Consumers of gateways gone for 10 minutes with nothing pending are removed (a live one is made again on its next read). */
  private async forgetGoneConsumers(): Promise<void> {
    const consumers = (await this.opts.redis.xinfo('CONSUMERS', this.key, GROUP)) as Array<Array<string | number>>;
    for (const c of consumers) {
      const field = (name: string) => c[c.indexOf(name) + 1];
      if (Number(field('pending')) === 0 && Number(field('idle')) > CONSUMER_GONE_MS)
        await this.opts.redis.xgroup('DELCONSUMER', this.key, GROUP, String(field('name')));
    }
  }

  /** Own pending events first (a post that failed), then those of a dead gateway, then new ones. */
  private async deliver(): Promise<void> {
    await this.ready.catch(() => this.createGroup());
    for (const read of [() => this.read('0'), () => this.claim(), () => this.read('>')]) {
      for (;;) {
        const entries = await read().catch((error: Error) => this.regroup(error));
        if (!entries.length) break;
        if (!(await this.settle(entries))) return this.measureBacklog();
      }
    }
  }

  /** The stream was deleted (FLUSHDB, say): the group is made again and the read tried on the next tick. */
  private async regroup(error: Error): Promise<Entry[]> {
    if (!error.message.includes('NOGROUP')) throw error;
    await this.createGroup();
    return [];
  }

  private async read(from: '0' | '>'): Promise<Entry[]> {
    const count = this.opts.batchSize ?? 500;
    const reply = (await this.opts.redis.xreadgroup('GROUP', GROUP, this.consumer, 'COUNT', count, 'STREAMS', this.key, from)) as Array<
      [string, RawEntry[]]
    > | null;
    return this.entries(reply?.[0]?.[1] ?? []);
  }

  private async claim(): Promise<Entry[]> {
    const idle = this.opts.claimIdleMs ?? 60_000;
    const count = this.opts.batchSize ?? 500;
    const [, raw] = (await this.opts.redis.xautoclaim(this.key, GROUP, this.consumer, idle, '0-0', 'COUNT', count)) as [string, RawEntry[]];
    if (raw.length) this.opts.log.info(`meter stream: claimed ${raw.length} event(s) left pending by another gateway`);
    return this.entries(raw);
  }

  /** Entries with their line; one deleted meanwhile (no fields) is acknowledged and dropped. */
  private async entries(raw: RawEntry[]): Promise<Entry[]> {
    const gone = raw.filter(([, fields]) => !fields).map(([id]) => id);
    if (gone.length) await this.ack(gone);
    return raw.filter(([, f]) => f).map(([id, fields]) => ({ id, line: fields![fields!.indexOf('e') + 1] }));
  }

  private settle(entries: Entry[]): Promise<boolean> {
    return this.poster.settle(entries, {
      line: (e) => e.line,
      setAside: (refused, reason) =>
        this.setAside(
          refused.map((e) => e.line),
          reason,
        ),
      done: (settled) => this.ack(settled.map((e) => e.id)),
    });
  }

  /** The meter has these: acknowledged and deleted together, so the stream keeps only what it lacks. */
  private async ack(ids: string[]): Promise<void> {
    await this.opts.redis
      .multi()
      .xack(this.key, GROUP, ...ids)
      .xdel(this.key, ...ids)
      .exec();
  }

  private async setAside(lines: string[], reason: string): Promise<void> {
    this.opts.log.error(`meter: ${lines.length} event(s) ${reason}; kept in Redis ${this.opts.prefix}:meter:rejected`);
    const at = new Date().toISOString();
    const pipeline = this.opts.redis.pipeline();
    for (const record of lines)
      pipeline.xadd(
        `${this.opts.prefix}:meter:rejected`,
        'MAXLEN',
        '~',
        REJECTED_KEEP,
        '*',
        'rejected_at',
        at,
        'reason',
        reason,
        'record',
        record,
      );
    await pipeline.exec();
  }

  /** After a failed post: how much waits in the stream, and a notice when it passes the limit. */
  private async measureBacklog(): Promise<void> {
    this.backlog = await this.opts.redis.xlen(this.key).catch(() => this.backlog);
    const limit = this.opts.maxBacklog ?? 1_000_000;
    if (this.backlog <= limit || this.alerted) return;
    this.alerted = true;
    const message =
      `meter stream ${this.key} holds ${this.backlog} events not yet delivered, over its limit of ${limit}: the meter has not ` +
      `taken events for a while. Nothing is dropped; check METER_URL, METER_TOKEN, the web app, and Redis's memory.`;
    this.opts.log.error(message);
    this.opts.onBacklog?.(message);
  }

  async flush(): Promise<void> {
    if (this.pending.length) this.append();
    await Promise.all(this.appending);
    await this.opts.fallback.flush();
    // Not while Redis is away: its commands would wait for it, and a shutdown with them.
    if (this.poster.waiting() || this.opts.redis.status !== 'ready') return;
    this.loop.kick();
    await this.loop.current;
  }

  status(): Record<string, unknown> {
    return {
      kind: this.kind,
      stream: this.key,
      consumer: this.consumer,
      stream_backlog_events: this.backlog,
      fell_back_to_spool: this.fellBack,
      ...this.stats,
      spool: this.opts.fallback.status(),
    };
  }

  /** Delivers what it can, then leaves the group if nothing is pending with it (else another gateway claims it). */
  async close(): Promise<void> {
    this.loop.stop();
    try {
      await this.flush();
      if (this.opts.redis.status !== 'ready') return;
      const mine = (await this.opts.redis.xpending(this.key, GROUP, '-', '+', 1, this.consumer)) as unknown[];
      if (!mine.length) await this.opts.redis.xgroup('DELCONSUMER', this.key, GROUP, this.consumer);
    } catch (error) {
      this.opts.log.warn(`meter stream: ${(error as Error).message} while closing; pending events are claimed by another gateway`);
    } finally {
      await this.opts.fallback.close();
    }
  }
}

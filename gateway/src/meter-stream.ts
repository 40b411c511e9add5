/**
 * Meter events through a Redis stream shared by every gateway on one Redis (QUEUE_STORE_URL and
 * METER_URL set): the stream, not a file of this process, is where an event is durable before its
 * answer is released.
 *
 * - `send` appends the event and resolves once Redis has it. The events sent in one turn of the
 *   event loop (the answers of concurrent requests) share one stream entry, up to 50 to an entry:
 *   one XADD, one round trip. An entry's field `e` holds its events' JSON lines joined by ",\n"
 *   (JSON.stringify writes no raw newline, so the split is exact); an entry of one event is the
 *   format of earlier versions, which are thus read as before, and an earlier version reading a
 *   newer entry posts its events as part of its batch (joined by commas, as a batch is).
 * - Every gateway delivers, as a consumer of one consumer group: XREADGROUP of about 500 events
 *   (the entries to read are reckoned from the events per entry of the last read), posted to the
 *   meter (meter-post.ts) in batches of up to 500, then XACK and XDEL in one MULTI of the entries
 *   whose events the meter all has (or set aside, below): an entry split across two posts, or by a
 *   refused batch's halves, is acknowledged once its last event is settled. The stream thus holds
 *   only entries with events the meter has not confirmed. A read that comes back full is followed
 *   by another; otherwise the next waits for 500 more events sent or the second's timer.
 * - Entries read by a gateway that died (kill -9, a lost machine) stay pending under its consumer
 *   name; any gateway claims those idle for `claimIdleMs` (XAUTOCLAIM) and delivers them.
 * - Delivery is at least once (a crash between the meter's answer and the XACK posts a batch again,
 *   and an entry not wholly settled is read again with the events of it the meter already has); the
 *   meter stores each event_id once, so the sheet gets each event exactly once.
 * - Records the meter refuses for good, or the record rules refuse before appending (`check`), go to
 *   the `rejected` stream, one each, with the reason (newest 100,000); when Redis does not take
 *   them in time, to `rejected.jsonl` in `fallback`'s folder.
 * - When Redis does not take an append within `appendTimeoutMs` (down, reconnecting), the events
 *   go to `fallback`, this process's file spool, which posts them to the meter itself: answers are
 *   not held back by Redis, and an event that reaches both is stored once by its event_id. An event
 *   sent with a shorter wait (an answer's time-to-answer left) has its turn wait that long at most.
 */
import type { Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { EventRecord } from '../../schema/event-record';
import { DeliveryLoop, MeterPoster, type MeterPostOptions, type Settling } from './meter-post';
import type { MeterSink } from './meter-sink';
import type { WebAppSink } from './meter-web-app';
import { within } from './within';

export interface StreamSinkOptions extends MeterPostOptions {
  redis: Redis;
  /** Key prefix: the stream is `<prefix>:meter:events`, refused records `<prefix>:meter:rejected`. */
  prefix: string;
  /** The record as the meter's JSON. */
  toJson: (record: EventRecord) => unknown;
  check?: (json: unknown) => string | null;
  /** Where an event, or a refused record, goes when Redis does not take it in time (the file spool). */
  fallback: WebAppSink;
  batchSize?: number;
  flushIntervalMs?: number;
  /** How long an event stays pending with a consumer before another gateway claims it (default 60 s). */
  claimIdleMs?: number;
  appendTimeoutMs?: number;
  /** Events waiting in the stream (about: entries times the events per entry last read) above which the sink alerts (default 1,000,000). */
  maxBacklog?: number;
  onBacklog?: (message: string) => void;
  /** How long a stop gives the last delivery and leaving the group (default 2 s): a stalled Redis must not hold it. */
  closeTimeoutMs?: number;
}

type Entry = { id: string; lines: string[] };
type RawEntry = [id: string, fields: string[] | null];
/** What a read got from Redis (entries, deleted ones too) and the entries with events among them. */
type Read = { got: number; entries: Entry[] };
/** An event read from the stream, with what is left unsettled of its entry. */
type Item = { line: string; entry: { id: string; left: number } };
/** The events sent in one turn of the event loop, appended together. */
type Turn = { records: EventRecord[]; lines: string[]; waitMs: number; written: Promise<void>; done: () => void };
const GROUP = 'meter';
/** Events in one stream entry at most: a turn's events above it take several entries. */
const EVENTS_PER_ENTRY = 50;
/** Between the events of an entry; a JSON line holds no raw newline. */
const SEPARATOR = ',\n';
const REJECTED_KEEP = 100_000;
const CONSUMER_GONE_MS = 10 * 60_000;
/**
 * What a stop gives the last delivery: it comes after the shutdown grace and the 2 s for cut requests
 * (start.ts), inside Kubernetes' 30 s. What it does not deliver stays in Redis for another gateway.
 */
const CLOSE_TIMEOUT_MS = 2_000;

export class RedisStreamSink implements MeterSink {
  readonly kind = 'meter web app';
  readonly key: string;
  /** This process's consumer name in the group: host, pid and a random tag. */
  readonly consumer = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly poster: MeterPoster;
  private readonly ready: Promise<void>;
  private turn: Turn | null = null;
  private appending = new Set<Promise<void>>();
  private readonly loop: DeliveryLoop;
  private unsent = 0;
  private backlog = 0;
  private alerted = false;
  /** Events per entry in the last read: how many entries a read asks for, and the backlog in events from the stream's length. */
  private perEntry = EVENTS_PER_ENTRY;
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

  send(record: EventRecord, waitMs?: number): Promise<void> {
    const json = this.opts.toJson(record);
    const line = JSON.stringify(json);
    const problem = this.opts.check?.(json) ?? null;
    if (problem) {
      this.stats.rejected++;
      return this.setAside([line], `refused before spooling: ${problem}`, waitMs).catch(() => undefined);
    }
    const turn = (this.turn ??= this.nextTurn());
    turn.records.push(record);
    turn.lines.push(line);
    if (waitMs !== undefined) turn.waitMs = Math.min(turn.waitMs, waitMs);
    if (++this.unsent >= (this.opts.batchSize ?? 500)) {
      this.unsent = 0;
      void turn.written.then(() => this.loop.kick());
    }
    return turn.written;
  }

  /** The events of this turn, appended once it ends; all resolve together. */
  private nextTurn(): Turn {
    let done = () => {};
    const written = new Promise<void>((resolve) => (done = resolve));
    setImmediate(() => this.append());
    return { records: [], lines: [], waitMs: this.opts.appendTimeoutMs ?? 1000, written, done };
  }

  /** This turn's events in as few entries as they fit; what Redis does not take in time goes to the file spool. */
  private append(): void {
    const turn = this.turn;
    if (!turn) return;
    this.turn = null;
    const job = this.xadd(turn.lines, turn.waitMs).then(async (added) => {
      if (!added) {
        this.fellBack += turn.records.length;
        await Promise.all(turn.records.map((r) => this.opts.fallback.send(r)));
      }
      turn.done();
    });
    this.appending.add(job);
    void job.finally(() => this.appending.delete(job));
  }

  private async xadd(lines: string[], waitMs: number): Promise<boolean> {
    if (this.redisDown()) return false;
    const pipeline = this.opts.redis.pipeline();
    for (let i = 0; i < lines.length; i += EVENTS_PER_ENTRY)
      pipeline.xadd(this.key, '*', 'e', lines.slice(i, i + EVENTS_PER_ENTRY).join(SEPARATOR));
    const replies = await within(pipeline.exec(), waitMs).catch(() => null);
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

  /**
   * Own pending entries first (a post that failed), then those of a dead gateway, then new ones;
   * each read again while it comes back full (more wait), else the next waits for a kick or the timer.
   */
  private async deliver(): Promise<void> {
    await this.ready.catch(() => this.createGroup());
    for (const read of [(n: number) => this.read('0', n), (n: number) => this.claim(n), (n: number) => this.read('>', n)]) {
      for (let full = true; full;) {
        const count = this.count();
        const { got, entries } = await read(count).catch((error: Error) => this.regroup(error));
        full = got === count;
        if (entries.length && !(await this.settle(entries))) return this.measureBacklog();
      }
    }
    // A backlog measured in an outage is measured again as it drains: /health shows what still waits.
    if (this.backlog) await this.measureBacklog();
  }

  /** Entries to read for about `batchSize` events, by the events per entry of the last read. */
  private count(): number {
    const size = this.opts.batchSize ?? 500;
    return Math.max(1, Math.min(size, Math.floor(size / this.perEntry)));
  }

  /** The stream was deleted (FLUSHDB, say): the group is made again and the read tried on the next tick. */
  private async regroup(error: Error): Promise<Read> {
    if (!error.message.includes('NOGROUP')) throw error;
    await this.createGroup();
    return { got: 0, entries: [] };
  }

  private async read(from: '0' | '>', count: number): Promise<Read> {
    const reply = (await this.opts.redis.xreadgroup('GROUP', GROUP, this.consumer, 'COUNT', count, 'STREAMS', this.key, from)) as Array<
      [string, RawEntry[]]
    > | null;
    const raw = reply?.[0]?.[1] ?? [];
    return { got: raw.length, entries: await this.entries(raw) };
  }

  private async claim(count: number): Promise<Read> {
    const idle = this.opts.claimIdleMs ?? 60_000;
    const [, raw] = (await this.opts.redis.xautoclaim(this.key, GROUP, this.consumer, idle, '0-0', 'COUNT', count)) as [string, RawEntry[]];
    const entries = await this.entries(raw);
    const events = entries.reduce((n, e) => n + e.lines.length, 0);
    if (events) this.opts.log.info(`meter stream: claimed ${events} event(s) left pending by another gateway`);
    return { got: raw.length, entries };
  }

  /** Entries with their events; one deleted meanwhile (no fields) or holding none is acknowledged and dropped. */
  private async entries(raw: RawEntry[]): Promise<Entry[]> {
    const entries: Entry[] = [];
    const empty: string[] = [];
    for (const [id, fields] of raw) {
      const at = fields ? fields.indexOf('e') : -1;
      if (at < 0 || !fields![at + 1]) empty.push(id);
      else entries.push({ id, lines: fields![at + 1].split(SEPARATOR) });
    }
    if (empty.length) await this.ack(empty);
    return entries;
  }

  /** The entries' events in posts of up to `batchSize`; false when the meter could not take one now. */
  private async settle(entries: Entry[]): Promise<boolean> {
    const items = entries.flatMap(({ id, lines }) => {
      const entry = { id, left: lines.length };
      return lines.map((line): Item => ({ line, entry }));
    });
    this.perEntry = items.length / entries.length;
    const size = this.opts.batchSize ?? 500;
    for (let i = 0; i < items.length; i += size) {
      if (!(await this.poster.settle(items.slice(i, i + size), this.settling))) return false;
    }
    return true;
  }

  /** What the meter has, or set aside, counts down its entry; an entry is acknowledged with its last event. */
  private readonly settling: Settling<Item> = {
    line: (item) => item.line,
    setAside: (refused, reason) =>
      this.setAside(
        refused.map((item) => item.line),
        reason,
      ),
    done: async (settled) => {
      const whole = settled.filter((item) => --item.entry.left === 0).map((item) => item.entry.id);
      if (whole.length) await this.ack(whole);
    },
  };

  /** The meter has these entries' events: acknowledged and deleted together, so the stream keeps only what it lacks. */
  private async ack(ids: string[]): Promise<void> {
    await this.opts.redis
      .multi()
      .xack(this.key, GROUP, ...ids)
      .xdel(this.key, ...ids)
      .exec();
  }

  /**
   * Kept in the `rejected` stream; when Redis does not take them within `waitMs` (down, stalled), in
   * the spool folder's rejected.jsonl instead: a refused record is never held for Redis nor lost
   * with the process. One whose late XADD lands too is in both.
   */
  private async setAside(lines: string[], reason: string, waitMs = this.opts.appendTimeoutMs ?? 1000): Promise<void> {
    if (!this.redisDown()) {
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
      const replies = await within(pipeline.exec(), waitMs).catch(() => null);
      if (replies?.every(([error]) => !error)) {
        this.opts.log.error(`meter: ${lines.length} event(s) ${reason}; kept in Redis ${this.opts.prefix}:meter:rejected`);
        return;
      }
    }
    await this.opts.fallback.setAside(lines, reason);
  }

  /** After a failed post, and as that backlog drains: how much waits in the stream, and a notice when it passes the limit. */
  private async measureBacklog(): Promise<void> {
    this.backlog = await this.opts.redis
      .xlen(this.key)
      .then((entries) => Math.round(entries * this.perEntry))
      .catch(() => this.backlog);
    const limit = this.opts.maxBacklog ?? 1_000_000;
    if (this.backlog <= limit) return this.backUnder();
    if (this.alerted) return;
    this.alerted = true;
    const message =
      `meter stream ${this.key} holds about ${this.backlog} events not yet delivered, over its limit of ${limit}: the meter has not ` +
      `taken events for a while. Nothing is dropped; check METER_URL, METER_TOKEN, the web app, and Redis's memory.`;
    this.opts.log.error(message);
    this.opts.onBacklog?.(message);
  }

  /** Back under the limit: said once, and the next time it is passed is told again. */
  private backUnder(): void {
    if (this.alerted) this.opts.log.info(`meter stream ${this.key} back under its limit (about ${this.backlog} events waiting)`);
    this.alerted = false;
  }

  async flush(): Promise<void> {
    await this.appendPending();
    await this.opts.fallback.flush();
    await this.deliverNow();
  }

  /** This turn's events in Redis or, if it does not take them in time, the file spool (bounded by the append wait). */
  private async appendPending(): Promise<void> {
    this.append();
    await Promise.all(this.appending);
  }

  private async deliverNow(): Promise<void> {
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

  /**
   * Delivers what it can, then leaves the group if nothing is pending with it (else another gateway
   * claims it). A Redis that is connected but stalls would answer neither: that part is given
   * `closeTimeoutMs`, and what it leaves stays in the stream.
   */
  async close(): Promise<void> {
    this.loop.stop();
    try {
      await this.appendPending();
      await within(this.deliverAndLeave(), this.opts.closeTimeoutMs ?? CLOSE_TIMEOUT_MS, 'Redis (or the meter)');
    } catch (error) {
      this.opts.log.warn(`meter stream: ${(error as Error).message} while closing; pending events are claimed by another gateway`);
    } finally {
      await this.opts.fallback.close();
    }
  }

  private async deliverAndLeave(): Promise<void> {
    await this.deliverNow();
    if (this.opts.redis.status !== 'ready') return;
    const mine = (await this.opts.redis.xpending(this.key, GROUP, '-', '+', 1, this.consumer)) as unknown[];
    if (!mine.length) await this.opts.redis.xgroup('DELCONSUMER', this.key, GROUP, this.consumer);
  }
}

/**
 * Where the gateway's meter events go: with METER_URL, the meter web app through a Redis stream
 * shared by every gateway (meter-stream.ts) when QUEUE_STORE_URL is set, else through a spool on
 * disk of this process (meter-web-app.ts); without METER_URL, a local CSV file with the events
 * header, which several processes may append to (append-log.ts writes whole lines).
 *
 * `send` resolves once the record is written to a file (append-log.ts: group commit, one write per
 * turn of the event loop), so an answer released after it has its event on disk, safe from a
 * crash of the process. A record the meter would refuse (checked against the shared record's rules)
 * is never spooled: it goes to `rejected.jsonl` with the reason.
 */
import { accessSync, closeSync, constants, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Redis } from 'ioredis';
import type { GatewayEnv } from './env';
import {
  CSV_HEADER,
  EVENT_FIELDS,
  eventToCsvLine,
  fieldKind,
  MAX_COUNT,
  COST_LIMIT_USD,
  MAX_TEXT_LENGTH,
  normalizeEvent,
  type EventRecord,
} from '../../schema/event-record';
import { AppendLog } from './append-log';
import { ConfigError } from './errors';
import { RedisStreamSink } from './meter-stream';
import { eventJson, WebAppSink } from './meter-web-app';

export interface MeterSink<T = EventRecord> {
  readonly kind: string;
  /**
   * Resolves once the record is on disk (spool or CSV), or set aside as refused; never rejects.
   * `waitMs`: how long the caller can wait for a shared store (the Redis stream) before the record
   * goes to this process's own disk instead (an answer's time-to-answer); local sinks ignore it.
   */
  send(record: T, waitMs?: number): Promise<void>;
  /** Writes what is pending (and, for the web app, tries to deliver it). */
  flush(): Promise<void>;
  close(): Promise<void>;
  /** What /health shows of the sink. */
  status(): Record<string, unknown>;
}

export type Log = { warn: (msg: string) => void; info: (msg: string) => void; error: (msg: string) => void };

export class CsvSink<T = EventRecord> implements MeterSink<T> {
  readonly kind = 'csv';
  private readonly log: AppendLog;
  constructor(
    readonly file: string,
    header = CSV_HEADER,
    private readonly toLine: (record: T) => string = eventToCsvLine as unknown as (record: T) => string,
    /** A failed append (disk full, say) is reported here; it never crashes the gateway. */
    onError: (message: string) => void = (m) => process.stderr.write(`${m}\n`),
  ) {
    this.log = new AppendLog(file, { header, onError: (m) => onError(`meter CSV ${m}`) });
  }
  send(record: T): Promise<void> {
    return this.log.append(this.toLine(record));
  }
  flush(): Promise<void> {
    return this.log.written();
  }
  close(): Promise<void> {
    return this.log.close();
  }
  status(): Record<string, unknown> {
    return { kind: this.kind, unwritten: this.log.unwritten };
  }
}

const KINDS = EVENT_FIELDS.map((f) => [f, fieldKind(f)] as const);

/** A quick look with the record's own field kinds and text limit: true when no value could be refused. */
function plainlyValid(e: Record<string, unknown>): boolean {
  for (const [f, kind] of KINDS) {
    const v = e[f];
    if (kind === 'text' || kind === 'id') {
      if (typeof v !== 'string' || v.length > MAX_TEXT_LENGTH) return false;
    } else if (kind === 'int') {
      if (!Number.isInteger(v) || (v as number) < 0 || (v as number) > MAX_COUNT) return false;
    } else if (kind === 'decimal' || kind === 'unit') {
      if (v === null) continue;
      // NaN and the infinities fail one comparison or the other.
      if (typeof v !== 'number' || !(v >= 0) || !(kind === 'decimal' ? v < COST_LIMIT_USD : v <= 1)) return false;
    } else if (typeof v !== (kind === 'bool' ? 'boolean' : 'string')) return false;
  }
  return true;
}

/**
 * The reason the meter would refuse this event JSON, by the shared record's rules; null if none.
 * The full rules (normalizeEvent) cost about as much as the rest of the event's way to disk, so an
 * event that passes the quick look goes on; one it doubts gets the full rules and their reason (a
 * rule the quick look does not cover, such as the id's characters, is caught by the meter's refusal).
 */
export function eventProblem(json: unknown): string | null {
  if (plainlyValid(json as Record<string, unknown>)) return null;
  try {
    normalizeEvent(json, { now: () => new Date(), uuid: () => 'checked' });
    return null;
  } catch (error) {
    return (error as Error).message;
  }
}

type MeterEnv = Pick<
  GatewayEnv,
  'METER_URL' | 'METER_TOKEN' | 'METER_SPOOL_DIR' | 'METER_CSV_FILE' | 'METER_CLAIM_IDLE_MS' | 'REDIS_PREFIX'
>;

export function createMeterSink(env: MeterEnv, log: Log, onBacklog?: (message: string) => void, redis: Redis | null = null): MeterSink {
  if (env.METER_URL) {
    const meter = { url: env.METER_URL, token: env.METER_TOKEN, check: eventProblem, onBacklog, log };
    const spool = new WebAppSink({ ...meter, spoolDir: env.METER_SPOOL_DIR });
    if (!redis) return spool;
    const prefix = env.REDIS_PREFIX ?? 'gateway';
    return new RedisStreamSink({ ...meter, redis, prefix, toJson: eventJson, fallback: spool, claimIdleMs: env.METER_CLAIM_IDLE_MS });
  }
  appendableAtStart(env.METER_CSV_FILE);
  return new CsvSink(env.METER_CSV_FILE, CSV_HEADER, eventToCsvLine, (m) => log.error(m));
}

/**
 * Refuses at start a METER_CSV_FILE that cannot be appended to (a folder, a parent that is a file or
 * not writable): the gateway ran, and released every answer with its event kept only in memory. The
 * file itself is not made here: its first write makes it with its header (append-log.ts).
 */
function appendableAtStart(file: string): void {
  try {
    mkdirSync(dirname(file), { recursive: true });
    if (existsSync(file)) closeSync(openSync(file, 'a'));
    else accessSync(dirname(file), constants.W_OK | constants.X_OK);
  } catch (error) {
    throw new ConfigError(
      `METER_CSV_FILE: ${file} cannot be appended to (${(error as Error).message}); set it to a file this process may write`,
    );
  }
}

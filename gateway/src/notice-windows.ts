/**
 * The notification windows (notify.ts), one per kind of notice: the first notice opens the window
 * and goes out at once; notices while it is open are held for one follow-up at its end. With Redis
 * the windows and the held notices are the fleet's, so however many instances queue work, a window
 * makes one message and one follow-up; in process, each process has its own.
 *
 * Redis keys (`<p>` the prefix, `<kind>` the notice's kind):
 *   `<p>:notice:<kind>`        the open window: SET NX PX of the open's token (OPEN), so one instance opens it
 *   `<p>:notice:<kind>:held`   the notices held for the follow-up (JSON, the first 1,000 kept)
 *   `<p>:notice:<kind>:count`  how many were held, all of them counted
 *   `<p>:notice:<kind>:claim`  the instance sending the follow-up (SET NX PX, CLAIM_MS)
 * Held notices expire a window plus a minute after the last one (if every instance stopped). A take
 * claims them and reads them, leaving them held: they are removed only once sent (`sent`), by the
 * claim's holder, so a take that runs after its caller gave up on it (Redis stalled, then went on)
 * removes nothing; while the claim lasts no other take gets them, so one instance sends each
 * follow-up (two, should a claim lapse before its holder marks them sent: a notice twice rather
 * than none). Notices held past their window's end (the instances waiting for it stopped, or
 * crashed) are `lapsed`: any instance sends their follow-up.
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Notice, NoticeKind } from './notify';
import { TAKE_OR_OWN } from './sent-again';

export interface Held {
  notices: Notice[];
  /** How many notices were held in all (more than `notices` when some were not kept). */
  total: number;
  /** Redis: the take's claim, and what it read (list entries, count), for `sent` to remove. */
  claim?: { token: string; listed: number; counted: number };
}

export interface NoticeWindows {
  /** Opens the window of `kind` for `ms`; true when this call opened it. `force`: open it even if open (a follow-up's next window). */
  open(kind: NoticeKind, ms: number, force?: boolean): Promise<boolean>;
  /** Holds a notice for the follow-up of the window (of `ms`); the ms until it ends (0: it has ended). */
  hold(kind: NoticeKind, notice: Notice, ms: number): Promise<number>;
  /** Takes every notice held for `kind`: one caller at a time gets them (the others none), until it calls `sent`. */
  take(kind: NoticeKind): Promise<Held>;
  /** The notices of `held` (a take's) were sent: they are no longer held; those held since stay. */
  sent(kind: NoticeKind, held: Held): Promise<void>;
  /** Closes the window (a process that flushes); the fleet's window in Redis runs its course. */
  close(kind: NoticeKind): Promise<void>;
  /** Of `kinds`, those with notices held and their window ended: a follow-up nobody may be waiting to send. */
  lapsed(kinds: readonly NoticeKind[]): Promise<NoticeKind[]>;
}

/** Notices kept per window for the follow-up's lists; the count covers them all. */
const KEEP_HELD = 1000;

/** In process: this process's own windows, keeping as many held notices as Redis's. */
export class MemoryNoticeWindows implements NoticeWindows {
  /** When each window ends, on the monotonic clock: setting the wall clock back must not hold notices for the hour given back. */
  private readonly ends = new Map<NoticeKind, number>();
  private readonly held = new Map<NoticeKind, Held>();

  async open(kind: NoticeKind, ms: number, force = false): Promise<boolean> {
    if (!force && (this.ends.get(kind) ?? -Infinity) > performance.now()) return false;
    this.ends.set(kind, performance.now() + ms);
    return true;
  }
  async hold(kind: NoticeKind, notice: Notice): Promise<number> {
    const held = this.held.get(kind) ?? { notices: [], total: 0 };
    if (held.notices.length < KEEP_HELD) held.notices.push(notice);
    held.total++;
    this.held.set(kind, held);
    return Math.max(0, (this.ends.get(kind) ?? 0) - performance.now());
  }
  async take(kind: NoticeKind): Promise<Held> {
    const held = this.held.get(kind) ?? { notices: [], total: 0 };
    this.held.delete(kind);
    return held;
  }
  /** Nothing: in process a take removes what it reads (no store to answer late). */
  async sent(): Promise<void> {}
  async close(kind: NoticeKind): Promise<void> {
    this.ends.delete(kind);
  }
  /** None: this process holds only its own notices, and waits for each window it holds them for. */
  async lapsed(): Promise<NoticeKind[]> {
    return [];
  }
}

/** Held notices outlive their window by this much (if every instance stopped before its end). */
const HELD_GRACE_MS = 60_000;
/**
 * How long a take's claim lasts: its holder marks the notices sent within a round trip or two; a
 * holder that never does (it stopped, or gave up on a stalled Redis) leaves them to the next take.
 */
const CLAIM_MS = 5000;

/**
 * KEYS held, count, claim; ARGV token, claim ms. The held notices and their count, claimed; none if
 * another holds the claim. A claim holding this take's own token is this take sent again
 * (sent-again.ts): it still reads them, where it would find them claimed, and their follow-up would
 * wait for the lapsed sweep.
 */
const TAKE = `
${TAKE_OR_OWN}
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then return {{}, false} end
if not take_or_own(KEYS[3], ARGV[1], ARGV[2]) then return {{}, false} end
return {redis.call('LRANGE', KEYS[1], 0, -1), redis.call('GET', KEYS[2])}`;

/**
 * KEYS window; ARGV token (new to each open), ms. 1 when this open opened the window: also when it
 * finds its own token there, this open sent again (sent-again.ts), which would find the window open
 * and hold the first notice for the follow-up a window later.
 */
const OPEN = `
${TAKE_OR_OWN}
if take_or_own(KEYS[1], ARGV[1], ARGV[2]) then return 1 end
return 0`;

/** KEYS held, count, claim; ARGV token, entries read, count read. Removes what the claim's take read, if the claim is still its. */
const SENT = `
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return 0 end
redis.call('LTRIM', KEYS[1], ARGV[2], -1)
if redis.call('DECRBY', KEYS[2], ARGV[3]) <= 0 then redis.call('DEL', KEYS[2]) end
redis.call('DEL', KEYS[3])
return 1`;

export class RedisNoticeWindows implements NoticeWindows {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    /** How long a take's claim lasts (CLAIM_MS; shortened by tests). */
    private readonly claimMs = CLAIM_MS,
  ) {}

  private parts(kind: NoticeKind): string[] {
    return [this.key(kind, ':held'), this.key(kind, ':count'), this.key(kind, ':claim')];
  }

  private key(kind: NoticeKind, part = ''): string {
    return `${this.prefix}:notice:${kind}${part}`;
  }

  async open(kind: NoticeKind, ms: number, force = false): Promise<boolean> {
    const key = this.key(kind);
    if (force) return (await this.redis.set(key, '1', 'PX', ms)) === 'OK';
    return (await this.redis.eval(OPEN, 1, key, randomUUID(), ms)) === 1;
  }

  async hold(kind: NoticeKind, notice: Notice, ms: number): Promise<number> {
    const [held, count] = [this.key(kind, ':held'), this.key(kind, ':count')];
    const replies = await this.redis
      .multi()
      .rpush(held, JSON.stringify(notice))
      .ltrim(held, 0, KEEP_HELD - 1)
      .incr(count)
      .pexpire(held, ms + HELD_GRACE_MS)
      .pexpire(count, ms + HELD_GRACE_MS)
      .pttl(this.key(kind))
      .exec();
    return Math.max(0, Number(replies?.[5]?.[1] ?? 0));
  }

  async take(kind: NoticeKind): Promise<Held> {
    const token = randomUUID();
    const [raw, count] = (await this.redis.eval(TAKE, 3, ...this.parts(kind), token, this.claimMs)) as [string[], string | null];
    const notices = raw.flatMap((text) => parseNotice(text, kind));
    const counted = Number(count ?? 0);
    const claim = raw.length || count !== null ? { token, listed: raw.length, counted } : undefined;
    return { notices, total: Math.max(counted, notices.length), claim };
  }

  async sent(kind: NoticeKind, held: Held): Promise<void> {
    if (!held.claim) return;
    const { token, listed, counted } = held.claim;
    await this.redis.eval(SENT, 3, ...this.parts(kind), token, listed, counted);
  }

  async close(): Promise<void> {}

  async lapsed(kinds: readonly NoticeKind[]): Promise<NoticeKind[]> {
    const pipeline = this.redis.pipeline();
    for (const kind of kinds) pipeline.exists(this.key(kind, ':held')).pttl(this.key(kind));
    const replies = (await pipeline.exec()) ?? [];
    // PTTL -2: no window (it ended); held notices left then are nobody's follow-up yet.
    return kinds.filter((_, i) => replies[2 * i]?.[1] === 1 && replies[2 * i + 1]?.[1] === -2);
  }
}

/** A held notice as this code wrote it; anything else in the list (a hand-written value) is skipped. */
function parseNotice(text: string, kind: NoticeKind): Notice[] {
  try {
    const value = JSON.parse(text) as Partial<Notice>;
    if (!value || value.kind !== kind) return [];
    const strings = (v: unknown) => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : undefined);
    return [
      {
        kind,
        jobIds: strings(value.jobIds),
        tenant: typeof value.tenant === 'string' ? value.tenant : undefined,
        detail: typeof value.detail === 'string' ? value.detail : undefined,
      },
    ];
  } catch {
    return [];
  }
}

export function noticeWindowsFor(redis: Redis | null, prefix: string): NoticeWindows {
  return redis ? new RedisNoticeWindows(redis, prefix) : new MemoryNoticeWindows();
}

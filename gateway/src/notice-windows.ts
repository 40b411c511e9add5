/**
 * The notification windows (notify.ts), one per kind of notice: the first notice opens the window
 * and goes out at once; notices while it is open are held for one follow-up at its end. With Redis
 * the windows and the held notices are the fleet's, so however many instances queue work, a window
 * makes one message and one follow-up; in process, each process has its own.
 *
 * Redis keys (`<p>` the prefix, `<kind>` the notice's kind):
 *   `<p>:notice:<kind>`        the open window: SET NX PX, so one instance opens it
 *   `<p>:notice:<kind>:held`   the notices held for the follow-up (JSON, the first 1,000 kept)
 *   `<p>:notice:<kind>:count`  how many were held, all of them counted
 * Held notices expire a window plus a minute after the last one (if every instance stopped), and
 * are taken in one transaction, so one instance sends each follow-up. Notices held past their
 * window's end (the instances waiting for it stopped, or crashed) are `lapsed`: any instance sends
 * their follow-up.
 */
import type { Redis } from 'ioredis';
import type { Notice, NoticeKind } from './notify';

export interface Held {
  notices: Notice[];
  /** How many notices were held in all (more than `notices` when some were not kept). */
  total: number;
}

export interface NoticeWindows {
  /** Opens the window of `kind` for `ms`; true when this call opened it. `force`: open it even if open (a follow-up's next window). */
  open(kind: NoticeKind, ms: number, force?: boolean): Promise<boolean>;
  /** Holds a notice for the follow-up of the window (of `ms`); the ms until it ends (0: it has ended). */
  hold(kind: NoticeKind, notice: Notice, ms: number): Promise<number>;
  /** Takes every notice held for `kind`; each is taken once, by one caller. */
  take(kind: NoticeKind): Promise<Held>;
  /** Closes the window (a process that flushes); the fleet's window in Redis runs its course. */
  close(kind: NoticeKind): Promise<void>;
  /** Of `kinds`, those with notices held and their window ended: a follow-up nobody may be waiting to send. */
  lapsed(kinds: readonly NoticeKind[]): Promise<NoticeKind[]>;
}

/** In process: this process's own windows. */
export class MemoryNoticeWindows implements NoticeWindows {
  private readonly ends = new Map<NoticeKind, number>();
  private readonly held = new Map<NoticeKind, Notice[]>();

  async open(kind: NoticeKind, ms: number, force = false): Promise<boolean> {
    if (!force && (this.ends.get(kind) ?? -Infinity) > Date.now()) return false;
    this.ends.set(kind, Date.now() + ms);
    return true;
  }
  async hold(kind: NoticeKind, notice: Notice): Promise<number> {
    const list = this.held.get(kind) ?? [];
    list.push(notice);
    this.held.set(kind, list);
    return Math.max(0, (this.ends.get(kind) ?? 0) - Date.now());
  }
  async take(kind: NoticeKind): Promise<Held> {
    const notices = this.held.get(kind) ?? [];
    this.held.delete(kind);
    return { notices, total: notices.length };
  }
  async close(kind: NoticeKind): Promise<void> {
    this.ends.delete(kind);
  }
  /** None: this process holds only its own notices, and waits for each window it holds them for. */
  async lapsed(): Promise<NoticeKind[]> {
    return [];
  }
}

/** Notices kept per window for the follow-up's lists; the count covers them all. */
const KEEP_HELD = 1000;
/** Held notices outlive their window by this much (if every instance stopped before its end). */
const HELD_GRACE_MS = 60_000;

export class RedisNoticeWindows implements NoticeWindows {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  private key(kind: NoticeKind, part = ''): string {
    return `${this.prefix}:notice:${kind}${part}`;
  }

  async open(kind: NoticeKind, ms: number, force = false): Promise<boolean> {
    const key = this.key(kind);
    const set = force ? await this.redis.set(key, '1', 'PX', ms) : await this.redis.set(key, '1', 'PX', ms, 'NX');
    return set === 'OK';
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
    const [held, count] = [this.key(kind, ':held'), this.key(kind, ':count')];
    const replies = await this.redis.multi().lrange(held, 0, -1).get(count).del(held, count).exec();
    const raw = (replies?.[0]?.[1] ?? []) as string[];
    const notices = raw.flatMap((text) => parseNotice(text, kind));
    return { notices, total: Math.max(Number(replies?.[1]?.[1] ?? 0), notices.length) };
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

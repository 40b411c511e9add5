/**
 * The budget guardrail: the pause flag `pause_ai_tasks` (`1` = paused, missing = not
 * paused) in the store, set by the budget webhook at `percentUsed >= BUDGET_PAUSE_AT_PERCENT` for
 * the capped provider or by an operator, cleared by /budget/resume. Requests read a local copy
 * refreshed every 100 ms (one read at a time: while Redis does not answer, the value last read stays
 * in force and no reads pile up behind it); the worker reads the store itself when it picks up a job (at most 2 s,
 * then the local copy: worker.ts).
 *
 * A Redis that loses its data (restarted without it, or flushed) must not lift the pause, yet a
 * resume, or the key deleted by hand, must. Beside the flag, `pause_ai_tasks:mark` holds a number
 * that only grows: Redis's time in ms at the last pause or resume written through the gateway (or
 * at the first read of a pause set by hand). Each instance remembers the mark it last read with the
 * pause. The flag gone while the mark is what this instance last read, or newer (a resume writes a
 * newer one), is a resume; gone with the mark gone too, or older (a snapshot from before), is Redis's
 * loss, and an instance that last read the pause puts both back (PUT_BACK), as spend-days.ts puts
 * back a counter read below its last read. Only instances that had the pause put it back: one started
 * after the loss knows of none, and is not paused until they do (a first start on an empty Redis is
 * not paused).
 */
import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { z } from 'zod';

const PAUSE_KEY = 'pause_ai_tasks';
export const PAUSED_MESSAGE = 'paused by budget guardrail';

export interface PauseFlag {
  /** The local copy (at most 100 ms old). */
  paused(): boolean;
  /** Reads the store now. */
  refresh(): Promise<boolean>;
  /** Sets the flag; true when it was not set before (so the pause notice goes out once). */
  set(): Promise<boolean>;
  /** Clears the flag; true when it was set as it was cleared (so a resume says whether it lifted a pause). */
  clear(): Promise<boolean>;
  close(): void;
}

export class MemoryPause implements PauseFlag {
  private value = false;
  paused() {
    return this.value;
  }
  async refresh() {
    return this.value;
  }
  async set() {
    const was = this.value;
    this.value = true;
    return !was;
  }
  async clear() {
    const was = this.value;
    this.value = false;
    return was;
  }
  close() {}
}

/**
 * Lua: the mark KEYS[2] holds (0: none, also for a value that is no whole number of ms, as markOf
 * reads it: Lua's `nan`, `inf` or `-5` were numbers to the scripts); the next mark, Redis's clock in
 * ms but past it (a clock set back still gives a newer one); whether the flag `v` read now is gone
 * by Redis's loss (ARGV: 1 when this instance last read the pause, and the mark it read with it):
 * gone while the mark is gone or older than that one.
 */
const MARKS = `
local function mark_held()
  local v = redis.call('GET', KEYS[2])
  if v and string.match(v, '^[1-9]%d*$') and #v <= 15 then return tonumber(v) end
  return 0
end
local function next_mark()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local m = mark_held()
  if now <= m then now = m + 1 end
  return now
end
local function lost_here(v)
  return not v and ARGV[1] == '1' and mark_held() < tonumber(ARGV[2])
end`;

/**
 * KEYS: the flag, the mark, the last set that found the flag unset. ARGV: as PUT_BACK's, then this
 * set's token (new to each set). Pauses; returns 1 when the flag was set before, the new mark, and 1
 * when the flag was gone by a loss this instance had the pause through (the pause is not new then:
 * no second notice for a pause that never lifted). A set Redis already ran, sent again
 * (sent-again.ts), answers what it answered then: run again, it would find its own pause, and the
 * notice of a new pause would never go out.
 * Only a set that found the flag unset (a new pause, or one put back) is kept: one that found it set,
 * sent again, finds it set again (or, after a resume meanwhile, pauses anew). Kept too, it overwrote
 * the token of a new pause whose answer was lost when the same webhook sent to another instance (its
 * sender saw no answer) landed before that pause was sent again, and no notice went out at all.
 */
const SET_PAUSE = `
${MARKS}
local last = redis.call('GET', KEYS[3])
if last then
  local token, was, m, l = string.match(last, '^(%S+) (%d) (%d+) (%d)$')
  if token == ARGV[3] then return {tonumber(was), tonumber(m), tonumber(l)} end
end
local v = redis.call('GET', KEYS[1])
local before = 0
if v == '1' then before = 1 end
local lost = 0
if lost_here(v) then lost = 1 end
local mark = next_mark()
redis.call('SET', KEYS[1], '1')
redis.call('SET', KEYS[2], string.format('%.0f', mark))
if before == 0 then
  redis.call('SET', KEYS[3], ARGV[3] .. ' ' .. before .. ' ' .. string.format('%.0f', mark) .. ' ' .. lost, 'EX', 3600)
end
return {before, mark, lost}`;

/**
 * KEYS: the flag, the mark. Resumes: the mark first (a write Redis refuses, read-only, leaves both
 * as they were). A Redis out of memory refuses the mark but still deletes: the flag deleted with the
 * mark as it is is a resume all the same (as a DEL by hand), so that a paused queue that filled Redis
 * can drain. Returns the new mark, and 1 when the flag was set (a pause lifted) as the clear ran.
 */
const CLEAR_PAUSE = `
${MARKS}
local was = 0
if redis.call('GET', KEYS[1]) == '1' then was = 1 end
local mark = next_mark()
local moved = redis.pcall('SET', KEYS[2], string.format('%.0f', mark))
if type(moved) == 'table' and moved.err then
  if not string.find(moved.err, '^OOM') then return redis.error_reply(moved.err) end
  mark = mark_held()
end
redis.call('DEL', KEYS[1])
return {mark, was}`;

/**
 * KEYS: the flag, the mark. ARGV: 1 when this instance last read the pause, and the mark it read
 * with it. Run when a read found the flag set with no mark (set by hand: marked now, so that its
 * deletion by hand is told from a loss), or the flag gone with the mark gone or older than this
 * instance's (a loss: both put back). Checked again here, as another instance may have acted since.
 * Returns 1 when paused, the mark, and 1 when put back.
 */
const PUT_BACK = `
${MARKS}
local v = redis.call('GET', KEYS[1])
local m = mark_held()
if v == '1' then
  if m == 0 then
    m = next_mark()
    redis.call('SET', KEYS[2], string.format('%.0f', m))
  end
  return {1, m, 0}
end
if not lost_here(v) then return {0, m, 0} end
redis.call('SET', KEYS[1], '1')
redis.call('SET', KEYS[2], ARGV[2])
return {1, tonumber(ARGV[2]), 1}`;

interface PauseCommands {
  pauseSet(flag: string, mark: string, last: string, hadPause: 0 | 1, lastMark: number, token: string): Promise<[number, number, number]>;
  pauseClear(flag: string, mark: string): Promise<[number, number]>;
  pausePutBack(flag: string, mark: string, hadPause: 0 | 1, lastMark: number): Promise<[number, number, number]>;
}

/** A mark as the scripts read it (mark_held): a value that is no whole number of ms, up to 15 digits (written by hand), is none. */
const markOf = (v: string | null): number => (v !== null && /^[1-9]\d{0,14}$/.test(v) ? Number(v) : 0);

export class RedisPause implements PauseFlag {
  private value = false;
  /** The mark read or written with the value (0: none yet). */
  private mark = 0;
  /** The read sent and not yet answered: later ones join it rather than queue behind it. */
  private reading: Promise<boolean> | null = null;
  /** This instance's sets and clears so far: a read answers for Redis as it was when the read was sent. */
  private writes = 0;
  private readonly timer: NodeJS.Timeout;
  private readonly redis: Redis & PauseCommands;
  private readonly markKey: string;
  private readonly lastSetKey: string;
  constructor(
    redis: Redis,
    refreshMs = 100,
    /** Tests use a key of their own; everything else the shared `pause_ai_tasks`. */
    private readonly key = PAUSE_KEY,
    /** Told when this instance put back a pause Redis lost. */
    private readonly warn: (message: string) => void = () => undefined,
  ) {
    this.markKey = `${key}:mark`;
    this.lastSetKey = `${key}:set`;
    redis.defineCommand('pauseSet', { numberOfKeys: 3, lua: SET_PAUSE });
    redis.defineCommand('pauseClear', { numberOfKeys: 2, lua: CLEAR_PAUSE });
    redis.defineCommand('pausePutBack', { numberOfKeys: 2, lua: PUT_BACK });
    this.redis = redis as Redis & PauseCommands;
    this.timer = setInterval(() => void this.refresh().catch(() => undefined), refreshMs);
    this.timer.unref();
    void this.refresh().catch(() => undefined);
  }
  paused() {
    return this.value;
  }
  refresh() {
    // Commands wait for a reconnection or a stalled Redis: one read per tick would pile up (600 a
    // minute) and all be sent when it answers.
    const writes = this.writes;
    this.reading ??= this.read(writes)
      // A read sent before this instance's own set or clear says what Redis held before it: on a slow
      // Redis it answered "not paused" after the webhook, and the capped provider was called again.
      .then(([paused, mark]) => {
        if (writes !== this.writes) return this.value;
        this.mark = mark;
        return (this.value = paused);
      })
      .finally(() => (this.reading = null));
    return this.reading;
  }
  /** The flag and its mark, read (a plain read: it answers also while Redis refuses writes), and put back when Redis lost them. */
  private async read(writes: number): Promise<[boolean, number]> {
    const [flag, markRead] = await this.redis.mget(this.key, this.markKey);
    const mark = markOf(markRead);
    const unmarked = flag === '1' && mark === 0;
    const lost = flag === null && this.value && mark < this.mark;
    // After this instance's own set or clear the read is not used (refresh), nor acted on.
    if ((!unmarked && !lost) || writes !== this.writes) return [flag === '1', mark];
    const [paused, after, putBack] = await this.redis
      .pausePutBack(this.key, this.markKey, this.value ? 1 : 0, this.mark)
      // Refused (Redis full, read-only): paused all the same, and a loss is found again at the next read.
      .catch(() => [1, this.mark, 0] as const);
    if (putBack) this.warnLost();
    return [paused === 1, after];
  }
  async set() {
    const had = this.value ? 1 : 0;
    // In force here at once, before Redis has it (Redis away: this instance pauses all the same).
    this.value = true;
    this.writes++;
    // Read and set in one script: a value other than 1 (an operator's hand-written 0) was "not
    // paused", so this pause is new and its notice goes out; a pause Redis lost is put back, not new.
    const [before, mark, lost] = await this.redis
      .pauseSet(this.key, this.markKey, this.lastSetKey, had, this.mark, randomUUID())
      .catch((error: Error) => this.undo(error));
    this.value = true; // a read sent before the set may have answered meanwhile
    this.mark = mark;
    if (lost) this.warnLost();
    return before !== 1 && !lost;
  }
  /** Read in the same script as the clear: a read before it missed a pause set in between. */
  async clear(): Promise<boolean> {
    this.value = false;
    this.writes++;
    const [mark, was] = await this.redis.pauseClear(this.key, this.markKey).catch((error: Error) => this.undo(error));
    this.mark = mark;
    this.value = false;
    return was === 1;
  }
  private warnLost() {
    this.warn(`budget pause: ${this.key} was lost by Redis while paused (restarted without its data, or flushed): put back`);
  }
  /** Redis refused the write (full, read-only): what it holds stays in force here too, as on every other instance. */
  private async undo(error: Error): Promise<never> {
    await this.refresh().catch(() => undefined);
    throw error;
  }
  close() {
    clearInterval(this.timer);
  }
}

export const BudgetWebhook = z.strictObject({
  provider: z.string().min(1),
  percentUsed: z.number().finite().min(0),
});

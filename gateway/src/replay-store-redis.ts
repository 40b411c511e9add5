/**
 * Idempotent replay's state in Redis, one string key per idempotency key, so every instance sees
 * every claim and answer. The value's first byte says what it holds, then the request's
 * fingerprint (64 hex characters), then:
 *   `R` running: the claim's token; the key expires with the lease (PX), renewed while it runs;
 *   `D` answered: the answer's status and headers as JSON, a newline, the body's bytes (EX 24 h);
 *   `L` answered but too large to keep: `{"status","bytes"}`.
 * Each operation is one Lua script (one round trip, atomic): the claim reads and, when the key is
 * free, takes it; renew, keep and release act only while the caller's own claim is there, or (renew
 * and keep) while no other claim has taken the key since it was lost.
 */
import type { Redis } from 'ioredis';
import { mustSend } from './redis-held';
import { isAnswer, newToken, type Claim, type Lease, type NotKept, type ReplayStore, type StoredAnswer } from './replay-store';

/**
 * Claimed: nil. Another body: `X`. Running: `R`. Otherwise the whole value (answered or not kept).
 * A key holding this very claim (its token is new to each claim) is this claim sent again
 * (sent-again.ts), claimed: else it would be answered `R`, a 409 for the request's own key.
 */
const CLAIM = `
local v = redis.call('GET', KEYS[1])
if not v or v == ARGV[1] then
  if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
  return false
end
if string.sub(v, 2, 1 + #ARGV[3]) ~= ARGV[3] then return 'X' end
if string.sub(v, 1, 1) == 'R' then return 'R' end
return v`;

/**
 * ARGV: the claim's own value, then `renew <ms>`, `keep <ms> <value>` or `release`. 1 when done. A
 * key gone (its lease ran out, or Redis lost it in a restart or a flush) with no claim since is
 * still the caller's to renew or keep: else the answer was not kept, and a repeat ran and was paid again.
 */
const IF_HELD = `
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] and (v or ARGV[2] == 'release') then return 0 end
if not v and ARGV[2] == 'renew' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3]) end
if ARGV[2] == 'renew' then redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif ARGV[2] == 'keep' then redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
else redis.call('DEL', KEYS[1]) end
return 1`;

interface ReplayCommands {
  replayClaimBuffer(key: string, running: string, leaseMs: number, fingerprint: string): Promise<Buffer | null>;
  replayIfHeld(key: string, running: string, op: string, ms?: number, value?: Buffer): Promise<number>;
}

export class RedisReplayStore implements ReplayStore {
  private readonly redis: Redis & ReplayCommands;

  constructor(
    redis: Redis,
    private readonly prefix: string,
  ) {
    redis.defineCommand('replayClaim', { numberOfKeys: 1, lua: CLAIM });
    redis.defineCommand('replayIfHeld', { numberOfKeys: 1, lua: IF_HELD });
    this.redis = redis as Redis & ReplayCommands;
  }

  async claim(key: string, fingerprint: string, leaseMs: number): Promise<Claim> {
    mustSend(this.redis); // Redis away: the request runs without replay at once, its claim not held for later
    const token = newToken();
    const lease = { key, token, fingerprint };
    const v = await this.redis.replayClaimBuffer(this.keyOf(key), running(lease), leaseMs, fingerprint);
    if (v === null) return { kind: 'claimed', lease };
    const kind = String.fromCharCode(v[0]);
    if (kind === 'X') return { kind: 'other_body' };
    if (kind === 'R') return { kind: 'running' };
    const rest = v.subarray(1 + fingerprint.length);
    if (kind === 'L') return { kind: 'not_kept', notKept: JSON.parse(rest.toString('utf8')) as NotKept };
    return { kind: 'answered', answer: decodeAnswer(rest) };
  }

  async renew(lease: Lease, leaseMs: number): Promise<boolean> {
    return (await this.redis.replayIfHeld(this.keyOf(lease.key), running(lease), 'renew', leaseMs)) === 1;
  }

  async keep(lease: Lease, result: StoredAnswer | NotKept, ttlMs: number): Promise<boolean> {
    const value = isAnswer(result)
      ? Buffer.concat([Buffer.from(`D${lease.fingerprint}${encodeMeta(result)}\n`), result.body])
      : Buffer.from(`L${lease.fingerprint}${JSON.stringify({ status: result.status, bytes: result.bytes })}`);
    return (await this.redis.replayIfHeld(this.keyOf(lease.key), running(lease), 'keep', ttlMs, value)) === 1;
  }

  async release(lease: Lease): Promise<void> {
    await this.redis.replayIfHeld(this.keyOf(lease.key), running(lease), 'release');
  }

  private keyOf(key: string): string {
    return `${this.prefix}:idempotency:${key}`;
  }
}

const running = (lease: Lease) => `R${lease.fingerprint}${lease.token}`;

const encodeMeta = (a: StoredAnswer) => JSON.stringify({ status: a.status, headers: a.headers, stream: a.stream });

/** The status and headers (JSON never holds a raw newline), a newline, the body. */
function decodeAnswer(rest: Buffer): StoredAnswer {
  const nl = rest.indexOf(10);
  const meta = JSON.parse(rest.subarray(0, nl).toString('utf8')) as Omit<StoredAnswer, 'body'>;
  return { ...meta, body: Buffer.from(rest.subarray(nl + 1)) };
}

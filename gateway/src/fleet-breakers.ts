/**
 * Breakers that act as one across the gateway instances on one Redis (docs/gateway.md, "Breakers
 * across instances"). Each instance keeps its own breaker per route (breaker.ts) and reads it
 * without a Redis call; this class keeps them in step:
 *
 * - a failed call adds to the route's shared count of consecutive failures (one MULTI, not awaited
 *   by the request); whichever instance brings it to 5 opens its breaker;
 * - an instance whose breaker opens announces it on a pub/sub channel and in a state key, so the
 *   others open theirs within milliseconds and an instance started later opens it at start;
 * - in half-open one instance in the whole fleet probes: the one holding the route's probe lease
 *   (SET NX PX), taken by the first instance that has a request for the route; its probes close
 *   the breaker everywhere (or open it again everywhere);
 * - a success costs no Redis call, except the first one after failures were counted (it resets
 *   the shared count and tells the others the route answered: a Cold job failing there since, on
 *   any instance, is the job's own) and a probe's (it renews the lease).
 *
 * A route is known to the fleet as `<id>:<fingerprint of its settings>`, so instances running
 * different maps never share the breaker of two different endpoints that happen to have one id.
 * If Redis cannot be reached, each breaker behaves as in a single process.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { ChainableCommander, Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { BreakerState, ChangeCause } from './breaker';
import type { Route } from './route';
import { within } from './within';

/** How long the shared failure count lives without a new failure. */
const COUNT_TTL_MS = 10 * 60_000;
/** How long a tripped (open or half-open) route stays known to an instance started later. */
const TRIPPED_TTL_MS = 24 * 3_600_000;
/**
 * How long a lease, a state read or a goodbye waits for Redis. Commands wait for a reconnection
 * (the store's connection retries forever): a breaker must not wait that long to probe.
 */
const WAIT_MS = 1000;
/**
 * How often the subscription is pinged. A connection that only listens sends nothing, so a link
 * that died without a reset went unnoticed for hours (TCP keep-alive) and the fleet's breakers
 * went unheard; a ping gives it a command that the store's dead-link timeout (stores.ts) watches.
 */
const SUB_PING_MS = 5000;

type Lease = 'none' | 'asking' | 'mine' | 'theirs';

interface Message {
  route: string;
  /**
   * `answered`: a success here reset the fleet's count (a Cold job failing on the route is then the job's own);
   * `released`: the probe lease held here was given back (a stop, a reload), for another instance to take now.
   */
  state: 'open' | 'closed' | 'failing' | 'answered' | 'released';
  from: string;
}

interface Watched {
  route: Route;
  name: string;
  /** Failures may have been counted in Redis since the last success seen here. */
  counting: boolean;
  lease: Lease;
  retry: NodeJS.Timeout | null;
}

/**
 * A probe lease given back, and said so, only while it is still this instance's (KEYS[1]; ARGV: the
 * instance, the channel, the message): one that lapsed during a long probe may be another's now.
 */
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1`;

/** The route's name for the fleet: its id and a fingerprint of its tier and settings. */
function fleetName(route: Route): string {
  const fingerprint = createHash('sha256').update(route.settings).digest('hex').slice(0, 8);
  return `${route.label}:${fingerprint}`;
}

export class FleetBreakers {
  /** This instance, so it ignores its own announcements. */
  readonly instance = randomUUID();
  private readonly sub: Redis;
  private readonly channel: string;
  private byName = new Map<string, Watched>();
  private readonly watched = new WeakMap<Route, Watched>();
  private warned = false;
  private pinging: NodeJS.Timeout | null = null;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly log: Logger,
  ) {
    this.sub = redis.duplicate();
    this.sub.on('error', (error: Error) => this.unreachable(error));
    this.channel = `${prefix}:breakers`;
  }

  /** Subscribes, then reads the fleet's state of every route before the instance takes traffic. */
  async start(routes: Route[]): Promise<void> {
    this.sub.on('message', (_channel: string, text: string) => this.receive(text));
    // After a reconnection, announcements may have been missed: read the state keys again.
    this.sub.on('ready', () => void this.sync([...this.byName.values()]));
    // Redis away at start: the subscription is made once it answers (as after a reconnection); no wait for it.
    await within(this.sub.subscribe(this.channel), WAIT_MS, 'Redis').catch((error: Error) => this.unreachable(error));
    this.pinging = setInterval(() => void this.sub.ping().catch(() => undefined), SUB_PING_MS).unref();
    await this.watch(routes);
  }

  /** Follows these routes from now on (at start, and after a reload of the routing map). */
  async watch(routes: Route[]): Promise<void> {
    const next = new Map<string, Watched>();
    const fresh: Watched[] = [];
    for (const route of routes) {
      let w = this.watched.get(route);
      if (!w) {
        w = this.attach(route);
        fresh.push(w);
      }
      next.set(w.name, w);
    }
    const dropped = [...this.byName].filter(([name]) => !next.has(name)).map(([, w]) => w);
    this.byName = next;
    await Promise.all([this.sync(fresh), this.giveBack(dropped)]);
  }

  /**
   * Routes no longer in force here (a reload removed or changed them): their probe leases held here
   * are given back, so an instance still running them probes at once rather than once the lease lapses.
   */
  private async giveBack(dropped: Watched[]): Promise<void> {
    for (const w of dropped) this.stopRetry(w);
    const held = dropped.filter((w) => w.lease === 'mine');
    for (const w of held) w.lease = 'none';
    await this.release(held);
  }

  /**
   * Gives these routes' probe leases back and says so: the instances refused the lease would
   * otherwise wait for it to lapse (two open periods) before asking again, the route unprobed.
   */
  private async release(held: Watched[]): Promise<void> {
    if (!held.length) return;
    const pipe = this.redis.pipeline();
    for (const w of held) {
      const message = JSON.stringify({ route: w.name, state: 'released', from: this.instance });
      pipe.eval(RELEASE, 1, this.key(w, 'probe'), this.instance, this.channel, message);
    }
    await within(pipe.exec(), WAIT_MS).catch(() => 0);
  }

  /** Stops following; a probe lease held here is given back, so another instance probes at once. */
  async close(): Promise<void> {
    const held = [...this.byName.values()].filter((w) => w.lease === 'mine');
    for (const w of this.byName.values()) this.stopRetry(w);
    if (this.pinging) clearInterval(this.pinging);
    this.sub.disconnect();
    await this.release(held);
  }

  private key(w: Watched, part: 'open' | 'tripped' | 'failures' | 'probe'): string {
    return `${this.prefix}:breaker:${w.name}:${part}`;
  }

  private attach(route: Route): Watched {
    const w: Watched = { route, name: fleetName(route), counting: false, lease: 'none', retry: null };
    this.watched.set(route, w);
    route.breaker.onChange((state, cause) => this.changed(w, state, cause));
    route.breaker.onOutcome((success, probe) => this.outcome(w, success, probe));
    route.breaker.gateProbes(() => this.mayProbe(w));
    return w;
  }

  /**
   * Reads the shared state: a tripped route opens here for what is left of its open period; one the
   * fleet no longer has tripped, open or half-open here, closes (its closing was announced while this
   * instance did not hear: read again after a reconnection). This instance's own openings and closings
   * go out on the same connection before the read, so the state read includes them.
   */
  private async sync(list: Watched[]): Promise<void> {
    if (!list.length) return;
    const pipe = this.redis.pipeline();
    for (const w of list) pipe.exists(this.key(w, 'tripped')).pttl(this.key(w, 'open')).exists(this.key(w, 'failures'));
    const replies = await within(pipe.exec(), WAIT_MS, 'Redis').catch((error: Error) => this.unreachable(error));
    if (!replies) return; // not known now: these routes start closed here, as in a single process
    const leases = list.map((w, i) => {
      const [tripped, openMs, failures] = [0, 1, 2].map((k) => replies[i * 3 + k][1] as number);
      if (failures === 1) w.counting = true;
      if (tripped !== 1) {
        if (w.route.breaker.state() !== 'closed') w.route.breaker.closeFromFleet();
        return;
      }
      w.route.breaker.openFromFleet(Math.max(0, openMs));
      // Half-open in the fleet already: ask for the probe now, so the first request can be it.
      if (w.route.breaker.state() === 'half-open') return this.takeLease(w);
    });
    await Promise.all(leases);
  }

  private changed(w: Watched, state: BreakerState, cause: ChangeCause): void {
    w.lease = 'none';
    w.counting = false;
    this.stopRetry(w);
    if (cause === 'fleet' || state === 'half-open') return;
    const multi = this.redis.multi();
    if (state === 'open') {
      multi
        .set(this.key(w, 'open'), this.instance, 'PX', w.route.breaker.openMs)
        .set(this.key(w, 'tripped'), this.instance, 'PX', TRIPPED_TTL_MS)
        .del(this.key(w, 'failures'), this.key(w, 'probe'));
    } else {
      multi.del(this.key(w, 'open'), this.key(w, 'tripped'), this.key(w, 'failures'), this.key(w, 'probe'));
    }
    this.send(multi, w, state);
    this.log.info({ route: w.route.label, breaker: state }, `breaker ${state}: announced to the other instances`);
  }

  private outcome(w: Watched, success: boolean, probe: boolean): void {
    if (success) {
      // The first success after counted failures resets the shared count and tells the other instances
      // the route answered (a worker that serves no live request learns it only so); a steady success costs nothing.
      if (w.counting) {
        w.counting = false;
        this.send(this.redis.multi().del(this.key(w, 'failures')), w, 'answered');
      }
      if (probe && w.lease === 'mine') this.redis.pexpire(this.key(w, 'probe'), 2 * w.route.breaker.openMs).catch(() => {});
      return;
    }
    if (w.route.breaker.state() !== 'closed') return; // the opening is announced instead
    w.counting = true;
    const failures = this.key(w, 'failures');
    const multi = this.redis.multi().incr(failures).pexpire(failures, COUNT_TTL_MS);
    this.send(multi, w, 'failing', (replies) => {
      const count = replies?.[0]?.[1];
      const { breaker } = w.route;
      if (typeof count === 'number' && count >= breaker.failureThreshold && breaker.state() === 'closed') breaker.trip();
    });
  }

  /** Adds the announcement to `multi` and runs it. */
  private send(multi: ChainableCommander, w: Watched, state: Message['state'], then?: (r: [Error | null, unknown][] | null) => void) {
    const message: Message = { route: w.name, state, from: this.instance };
    multi
      .publish(this.channel, JSON.stringify(message))
      .exec()
      .then((replies) => {
        this.warned = false;
        then?.(replies);
      })
      .catch((e: Error) => this.unreachable(e));
  }

  private receive(text: string): void {
    let m: Message;
    try {
      m = JSON.parse(text) as Message;
    } catch {
      return;
    }
    const w = this.byName.get(m.route);
    if (!w || m.from === this.instance) return;
    if (m.state === 'released') {
      if (w.lease !== 'theirs') return;
      this.stopRetry(w);
      w.lease = 'none'; // the next request for the route asks for the lease
    } else if (m.state === 'failing') w.counting = true;
    else if (m.state === 'answered') {
      w.counting = false;
      w.route.breaker.answeredInFleet();
    } else if (m.state === 'open') w.route.breaker.openFromFleet();
    else w.route.breaker.closeFromFleet();
  }

  /** The probe gate: only the holder of the route's lease probes; the first to ask takes it. */
  private mayProbe(w: Watched): boolean {
    if (w.lease === 'none') void this.takeLease(w);
    return w.lease === 'mine';
  }

  private async takeLease(w: Watched): Promise<void> {
    w.lease = 'asking';
    const key = this.key(w, 'probe');
    try {
      // Held here already (asked again after a reconnection): still this instance's to probe with.
      const taken = this.redis
        .set(key, this.instance, 'PX', 2 * w.route.breaker.openMs, 'NX')
        .then(async (reply) => reply === 'OK' || (await this.redis.get(key)) === this.instance);
      const won = await within(taken, WAIT_MS, 'Redis');
      if (w.lease !== 'asking') return; // the state changed meanwhile
      if (won) {
        w.lease = 'mine';
        return;
      }
      w.lease = 'theirs';
      // If the holder goes away, its lease lapses: ask again then.
      const left = await within(this.redis.pttl(key), WAIT_MS).catch(() => 0);
      w.retry = setTimeout(() => w.lease === 'theirs' && (w.lease = 'none'), Math.max(0, left));
      w.retry.unref();
    } catch (error) {
      if (w.lease === 'asking') w.lease = 'mine'; // Redis unreachable: probe as a single process would
      this.unreachable(error as Error);
    }
  }

  private stopRetry(w: Watched): void {
    if (w.retry) clearTimeout(w.retry);
    w.retry = null;
  }

  private unreachable(error: Error): null {
    if (!this.warned) this.log.warn({ err: error.message }, 'breakers: Redis unreachable, each instance decides alone until it answers');
    this.warned = true;
    return null;
  }
}

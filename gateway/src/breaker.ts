/**
 * Circuit breaker per route, with the gateway's semantics (docs/gateway.md) on top of opossum:
 *   closed    → open       after 5 consecutive failed calls (the route is then skipped, not called)
 *   open      → half-open  30 s later
 *   half-open: one probe at a time, at most one every 30 s, using a live request (no synthetic
 *              calls that cost tokens); 2 successes out of 2 → closed; a failed probe → open for
 *              another 30 s.
 *
 * opossum runs every call (its rolling stats give latency percentiles, counts and events), but its
 * own tripping rule is percentage-based over a window, not "5 consecutive", and it closes after a
 * single half-open success. So opossum's own opening is switched off (volumeThreshold is never
 * reached) and the state machine here decides. Time comes from an injected clock, so tests (and
 * the Lisbon drill's shortened intervals) drive it without waiting.
 *
 * Several gateway instances on one Redis make their breakers act as one (fleet-breakers.ts): the
 * fleet opens and closes a breaker here from outside (`openFromFleet`, `closeFromFleet`, `trip`),
 * and may gate the half-open probe so that one instance probes for all of them (`gateProbes`).
 *
 * A streamed answer is scored when the stream ends, not at its first byte (`run`'s `held`, then
 * `end`): a provider that always breaks mid-stream must count failures only, and a probe that is
 * a stream is decided by how it ends.
 */
import CircuitBreaker from 'opossum';
import type { Clock } from './deadline';

export type BreakerState = 'closed' | 'open' | 'half-open';
/** Who changed the state: this instance (its own calls, or time passing) or the fleet's word. */
export type ChangeCause = 'local' | 'fleet';

export interface BreakerOptions {
  failureThreshold?: number;
  openMs?: number;
  probesToClose?: number;
  /** The test's clock, for both the open periods and the times of day (ms since the epoch) it tells. */
  now?: Clock;
}

class FailedCall {
  constructor(readonly result: unknown) {}
}

/** Permission to make one call; a probe when the breaker is half-open. */
export interface Ticket {
  probe: boolean;
  /** A held call's opossum call, ended by `end` (true: a success). */
  ended?: (success: boolean) => void;
}

const ignore = () => {};

export class Breaker {
  readonly failureThreshold: number;
  readonly openMs: number;
  readonly probesToClose: number;
  /** Open periods and probe slots: monotonic, so a wall clock set back does not hold a route open. */
  private readonly now: Clock;
  /** Times of day (ms since the epoch): a success's, and the next call's for the worker. */
  private readonly wall: Clock;
  private current: BreakerState = 'closed';
  private consecutiveFailures = 0;
  private openedAt = 0;
  /** When it opened here: one the fleet opened earlier was open here only from then. */
  private openHereAt = 0;
  private lastProbeAt = -Infinity;
  private probeInFlight = false;
  private probeSuccesses = 0;
  private openTotalMs = 0;
  /** When a call last succeeded here (or the fleet's probes closed it): the route answers. */
  private lastSuccessAt = -Infinity;
  /** opossum executes the calls and keeps the rolling statistics. */
  readonly circuit: CircuitBreaker<[() => Promise<unknown>], unknown>;
  private readonly listeners: Array<(state: BreakerState, cause: ChangeCause) => void> = [];
  private readonly outcomeListeners: Array<(success: boolean, probe: boolean) => void> = [];
  /** In half-open: may this instance probe now? (Set by the fleet; absent: always.) */
  private probeGate: (() => boolean) | null = null;

  constructor(
    readonly name: string,
    options: BreakerOptions = {},
  ) {
    this.failureThreshold = options.failureThreshold ?? 5;
    this.openMs = options.openMs ?? 30_000;
    this.probesToClose = options.probesToClose ?? 2;
    this.now = options.now ?? (() => performance.now());
    this.wall = options.now ?? Date.now;
    this.circuit = new CircuitBreaker((fn: () => Promise<unknown>) => fn(), {
      name,
      timeout: false, // attempts carry their own deadline (a per-attempt timer)
      volumeThreshold: Number.MAX_SAFE_INTEGER, // opossum never opens on its own
      errorThresholdPercentage: 100,
      rollingCountTimeout: 60_000,
      rollingCountBuckets: 12,
      rollingPercentilesEnabled: true,
      // Its snapshot, every 5 s, sorted a minute of latencies (about 4 % of the hot path's
      // instructions) for a listener nobody registers; the route health reads stats on demand.
      enableSnapshots: false,
    });
  }

  onChange(listener: (state: BreakerState, cause: ChangeCause) => void): void {
    this.listeners.push(listener);
  }

  /** Told of every call outcome that counted (a success or a failure; not a cancelled call). */
  onOutcome(listener: (success: boolean, probe: boolean) => void): void {
    this.outcomeListeners.push(listener);
  }

  /** In half-open, a probe goes only when `gate` says yes (the fleet's single probe). */
  gateProbes(gate: () => boolean): void {
    this.probeGate = gate;
  }

  private set(state: BreakerState, cause: ChangeCause = 'local'): void {
    if (state === this.current) return;
    if (this.current === 'open') this.openTotalMs += this.openMsSoFar();
    this.current = state;
    for (const l of this.listeners) l(state, cause);
  }

  private openAt(at: number, cause: ChangeCause): void {
    this.openedAt = at;
    this.openHereAt = this.now();
    this.consecutiveFailures = 0;
    this.probeSuccesses = 0;
    this.set('open', cause);
  }

  /** Opens now: the fleet's count of consecutive failures reached the threshold. */
  trip(): void {
    if (this.state() !== 'open') this.openAt(this.now(), 'local');
  }

  /** Another instance opened this route's breaker: open here too, for what is left of its period. */
  openFromFleet(remainingMs = this.openMs): void {
    const state = this.state();
    // Half-open here as in the fleet (read again after a reconnection): nothing opened.
    if (state === 'open' || (state === 'half-open' && remainingMs <= 0)) return;
    this.openAt(this.now() - (this.openMs - Math.max(0, Math.min(remainingMs, this.openMs))), 'fleet');
  }

  /**
   * Another instance's call to it succeeded (after failures the fleet counted): a Cold job's failure
   * here since is the job's own (`answeredSince`), also on a worker that serves no live request.
   */
  answeredInFleet(): void {
    this.lastSuccessAt = this.wall();
  }

  /** Another instance's probes closed it. */
  closeFromFleet(): void {
    this.lastSuccessAt = this.wall();
    if (this.current === 'closed') return;
    this.consecutiveFailures = 0;
    this.probeSuccesses = 0;
    this.set('closed', 'fleet');
  }

  /** The state now (open turns half-open by itself once 30 s have passed). */
  state(): BreakerState {
    if (this.current === 'open' && this.now() - this.openedAt >= this.openMs) {
      this.set('half-open');
      this.probeSuccesses = 0;
      this.lastProbeAt = -Infinity;
    }
    return this.current;
  }

  /** May a call go now? In half-open this takes the single probe slot. */
  tryAcquire(): Ticket | null {
    const state = this.state();
    if (state === 'closed') return { probe: false };
    if (state === 'open') return null;
    if (this.probeInFlight || this.now() - this.lastProbeAt < this.openMs) return null;
    if (this.probeGate && !this.probeGate()) return null; // another instance probes for the fleet
    this.probeInFlight = true;
    this.lastProbeAt = this.now();
    return { probe: true };
  }

  /**
   * Runs one call through opossum and records its outcome. `failed` says what counts as a
   * failure; `neutral` what counts as neither (a call our own client cancelled says nothing about
   * the route: it frees a probe slot and leaves the count of consecutive failures as it was);
   * `held` what is handed back unscored, to be scored by `end` (a stream, once it has ended).
   */
  run<T>(
    ticket: Ticket,
    call: () => Promise<T>,
    failed: (result: T) => boolean,
    neutral?: (result: T) => boolean,
    held?: (result: T) => boolean,
  ): Promise<T> {
    if (held) return this.runHeld(ticket, call, failed, held, neutral);
    // A failed answer (a 500, say) is thrown inside opossum so its statistics count it, then
    // handed back: the caller decides what to do with the answer.
    const fired = this.circuit.fire(async () => {
      const r = await call();
      if (failed(r)) throw new FailedCall(r);
      return r;
    });
    return this.scored(ticket, fired as Promise<T>, neutral);
  }

  /**
   * A call whose answer, when `held` says so, goes back at its first byte unscored: opossum's call
   * stays open until `end` settles it, so its statistics count (and time) it by how it ended.
   * Any other answer is scored as `run` scores it.
   */
  private async runHeld<T>(
    ticket: Ticket,
    call: () => Promise<T>,
    failed: (result: T) => boolean,
    held: (result: T) => boolean,
    neutral?: (result: T) => boolean,
  ): Promise<T> {
    let calling: Promise<T> | undefined;
    const fired = this.circuit.fire(() =>
      (calling = call()).then((r) => {
        if (failed(r)) throw new FailedCall(r);
        if (!held(r)) return r;
        return new Promise<T>((resolve, reject) => (ticket.ended = (ok) => (ok ? resolve(r) : reject(new FailedCall(r)))));
      }),
    ) as Promise<T>;
    // opossum calls the action at once (fire's executor); `ended` is set before `calling` settles here.
    const r = calling ? await (calling as Promise<T>).catch(ignore) : undefined;
    if (!ticket.ended) return this.scored(ticket, fired, neutral);
    fired.catch(ignore); // a failed end, counted by opossum: nothing to wait for
    return r as T;
  }

  private async scored<T>(ticket: Ticket, fired: Promise<T>, neutral?: (result: T) => boolean): Promise<T> {
    try {
      const result = await fired;
      if (neutral?.(result)) this.release(ticket);
      else this.record(ticket, true);
      return result;
    } catch (error) {
      this.record(ticket, false);
      if (error instanceof FailedCall) return error.result as T;
      throw error;
    }
  }

  /** Scores a held call once it has ended: a success, a failure, or neither (null: our client hung up). */
  end(ticket: Ticket, success: boolean | null): void {
    if (success === null) this.release(ticket);
    else this.record(ticket, success);
    // opossum counts a call our client cancelled as a success, held or not.
    ticket.ended?.(success !== false);
  }

  /** Records an outcome: a call's, or one told from outside (tests). */
  record(ticket: Ticket, success: boolean): void {
    if (ticket.probe) this.probeInFlight = false;
    const state = this.state();
    if (success) {
      this.lastSuccessAt = this.wall();
      this.consecutiveFailures = 0;
      if (state === 'half-open' && ticket.probe && ++this.probeSuccesses >= this.probesToClose) this.set('closed');
    } else {
      this.consecutiveFailures++;
      if (state === 'half-open' || (state === 'closed' && this.consecutiveFailures >= this.failureThreshold))
        this.openAt(this.now(), 'local');
    }
    for (const l of this.outcomeListeners) l(success, ticket.probe);
  }

  /**
   * The earliest time (ms since the epoch) a call may go: now when closed; when the open period ends; in half-open the
   * next probe slot (a probe under way: a second later, when its answer is usually known).
   */
  nextCallAt(): number {
    const state = this.state();
    const now = this.now();
    const at = (monotonic: number) => this.wall() + (monotonic - now);
    if (state === 'closed') return at(now);
    if (state === 'open') return at(this.openedAt + this.openMs);
    // A probe under way here, or the fleet's probe held by another instance: look again in a second.
    if (this.probeInFlight || (this.probeGate && !this.probeGate())) return at(now + Math.min(1000, this.openMs));
    return at(Math.max(now, this.lastProbeAt + this.openMs));
  }

  /** Whether a call succeeded here after `at` (ms since the epoch). */
  answeredSince(at: number): boolean {
    return this.lastSuccessAt > at;
  }

  /** Total time spent open, including the current open period. */
  secondsOpen(): number {
    const current = this.current === 'open' ? this.openMsSoFar() : 0;
    return (this.openTotalMs + current) / 1000;
  }

  /**
   * The current open period's time here so far. It ends after `openMs`, though the state turns
   * half-open only when next read (a request or a scrape), maybe long after on a quiet gateway.
   */
  private openMsSoFar(): number {
    return Math.max(0, Math.min(this.now(), this.openedAt + this.openMs) - this.openHereAt);
  }

  /** Releases a probe slot that was taken but not used (the request ended before calling). */
  release(ticket: Ticket): void {
    if (ticket.probe) {
      this.probeInFlight = false;
      this.lastProbeAt = -Infinity;
    }
  }

  shutdown(): void {
    this.circuit.shutdown();
  }
}

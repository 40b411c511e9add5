/**
 * The voice concierge's call service, behind the voice server's endpoints (endpoints.ts):
 *   start    answer or voicemail, with the consent line; 503 monthly_cap while new calls pause
 *   events   the spend guard over an event or a batch of events, all-or-nothing
 *   end      the call record, once (ending again answers the same record); its cost added to the month's
 *   rollup   the meter's monthly spend; at or over the cap new calls pause on every instance
 * New calls pause while the UTC month's own spend (what its ended calls cost) or the last rollup
 * posted in it is at or over spend_guard.monthly_usd_cap; a new month starts at 0.
 * Call state lives in the call store (call-store.ts), so any gateway instance takes any request.
 * A batch is checked first (a bad event refuses it, naming it), then applied as one change that
 * the store appends atomically: concurrent batches for one call are all applied, in one order.
 */
import { randomUUID } from 'node:crypto';
import { isOpen, parseBusinessHours, type Window } from './business-hours';
import type { Concierge } from './config';
import { applyEvent, guardConfig, newCall, VoiceEventError, type CallState, type GuardConfig, type VoiceEvent } from './spend-guard';
import { afterCall, buildCallRecord, callCostUsd, endRefusal, type CallEndDeps } from './call-end';
import type { EndCallBody, StartCallBody } from './bodies';
import type { GuardBatch, MonthSpend, Reduce, StoredCall, VoiceStore } from './call-store';
import { anotherBatch, eventKey, keptKey, withKey } from './event-keys';
import type { Workflow } from './workflow';

/**
 * A change to a call, as the store keeps it: a checked batch of events (numbered by the bridge's
 * guard feed, so a batch sent again is applied once), or the call's end.
 */
export type CallChange =
  | { kind: 'events'; events: VoiceEvent[]; batch?: GuardBatch; key?: string }
  | { kind: 'voicemail'; reason: string }
  | { kind: 'end'; body: EndCallBody; at: string; by: string };

/** How a change applies to a call: the spend guard over the events; the record, once, at the end. */
export function callReducer(config: Concierge): Reduce<CallChange> {
  const guard = guardConfig(config);
  return (call, change) => {
    if (change.kind === 'events') {
      const b = change.batch;
      const last = call.guardBatch;
      if (b && last?.feed === b.feed && b.n <= last.n) return call; // sent again: applied already
      if (b) call.guardBatch = b;
      // After the end the record is made and sent: events are in neither it nor the meter, so not in the state either.
      if (call.record) return call;
      if (change.key !== undefined) {
        // A POST sent again with its Idempotency-Key: applied already (the key with another batch: refused, not applied).
        if (keptKey(call, change.key)) return call;
        call.eventKeys = withKey(call, change.key);
      }
      for (const e of change.events) {
        try {
          applyEvent(call.state, e, guard);
        } catch {
          // Checked before it was stored; one that throws anyway is skipped, so it never poisons the call.
        }
      }
      return call;
    }
    if (change.kind === 'voicemail') return { ...call, voicemail_reason: change.reason };
    if (call.record) return call;
    const at = new Date(change.at);
    return { ...call, ended_at: change.at, endedBy: change.by, record: buildCallRecord(call, change.body, config, at) };
  };
}

type RollupEvent = { type: 'billing.monthly_rollup'; monthly_usd: number };

/** A time's UTC month, `YYYY-MM`, and the month before it. */
const monthOf = (at: Date) => at.toISOString().slice(0, 7);
const monthBefore = (at: Date) => monthOf(new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() - 1, 1)));

export interface VoiceDeps {
  config: Concierge;
  store: VoiceStore<CallChange>;
  log: { warn: (m: string) => void; error: (m: string) => void };
  now?: () => Date;
  /** What follows a finished call (record, summary, meter events). */
  afterCall?: Omit<CallEndDeps, 'config' | 'log'>;
  workflow?: Workflow;
}

/** The public part of the guard's state in answers. */
function publicState(s: CallState) {
  return { inputMs: s.inputMs, outputMs: s.outputMs, turns: s.turns, estUsd: Number(s.estUsd.toFixed(6)), ttfbBreaches: s.ttfbBreaches };
}

export class VoiceService {
  readonly guard: GuardConfig;
  get workflow(): Workflow | undefined {
    return this.deps.workflow;
  }
  private readonly hours: Window[];
  /** The month whose turn this instance has looked at (whether the month before was paused). */
  private turnSeen = '';
  /** Whether this instance has taken over the pause an earlier version kept (takeOldPause). */
  private oldPauseTaken = false;
  constructor(private readonly deps: VoiceDeps) {
    this.guard = guardConfig(deps.config);
    const parsed = parseBusinessHours(deps.config.meta.business_hours_local);
    if (!parsed.ok) throw new Error(`meta.business_hours_local: ${parsed.error}`);
    this.hours = parsed.windows;
  }

  /** The time on the service's clock: a call's start, end and business hours are read on it. */
  now(): Date {
    return this.deps.now?.() ?? new Date();
  }

  async start(input: StartCallBody) {
    const c = this.deps.config;
    const at = input.at ? new Date(input.at) : this.now();
    // While new calls are paused a new one is kept as a voicemail call with the pause reason, so its
    // record can say why it was not answered.
    const paused = await this.monthlyPaused();
    const open = isOpen(this.hours, at, c.meta.timezone);
    const voicemailReason = paused
      ? 'monthly_cap'
      : (input.trigger ?? (!open && c.guardrails.after_hours_to_voicemail ? 'after_hours' : null));
    // A known call_id (a start sent again, its first answer lost) is answered as it was stored: a call
    // answered before the pause goes on, and a voicemail keeps the reason it was given.
    const call = await this.deps.store.create({
      call_id: input.call_id,
      from: input.from,
      country: input.country ?? null,
      started_at: at.toISOString(),
      ended_at: null,
      action: voicemailReason ? 'voicemail' : 'answer',
      ...(voicemailReason ? { voicemail_reason: voicemailReason } : {}),
      state: { ...newCall(), intent: voicemailReason ? 'voicemail' : 'unknown' },
      version: 0,
    });
    if (call.action === 'voicemail' && call.voicemail_reason === 'monthly_cap')
      return { status: 503, body: { reason: 'monthly_cap', message: 'new calls are paused: the monthly voice spend cap is reached' } };
    const voicemail = c.intents.find((i) => i.id === 'voicemail');
    return {
      status: 200,
      body: {
        action: call.action,
        ...(call.action === 'voicemail'
          ? {
              reason: call.voicemail_reason ?? 'after_hours',
              function: voicemail?.on_match.call ?? 'route_to_voicemail',
              privacy_notice: voicemail?.on_match.privacy_notice ?? true,
            }
          : {}),
        consent_line: c.consent.opening_line,
        consent: { retry_if_no_ack: c.consent.retry_if_no_ack, max_retries: c.consent.max_retries },
        language: c.meta.primary_language,
        model: c.meta.model,
      },
    };
  }

  /**
   * Checks a batch (each event's fields; none depends on the call's state), so a bad event refuses
   * the whole batch before anything is stored. Returns the guard's events and the last rollup.
   */
  private check(events: unknown[]): { problem: string } | { guarded: VoiceEvent[]; rollup: number | null } {
    const scratch = newCall();
    const guarded: VoiceEvent[] = [];
    let rollup: number | null = null;
    for (const [i, raw] of events.entries()) {
      const e = raw as VoiceEvent | RollupEvent;
      if (!e || typeof e !== 'object') return { problem: `events[${i}]: expected an event object` };
      if (e.type === 'billing.monthly_rollup') {
        // JSON's 1e309 parses as Infinity: finite only.
        if (typeof e.monthly_usd !== 'number' || !Number.isFinite(e.monthly_usd) || e.monthly_usd < 0)
          return { problem: `events[${i}].monthly_usd: expected a finite number >= 0` };
        rollup = e.monthly_usd;
        continue;
      }
      try {
        applyEvent(scratch, e, this.guard);
      } catch (error) {
        if (!(error instanceof VoiceEventError)) throw error;
        return { problem: `events[${i}].${error.message}` };
      }
      guarded.push(e);
    }
    return { guarded, rollup };
  }

  /**
   * Applies a batch all-or-nothing: a bad event refuses the batch, naming it. `batch`: the guard
   * feed's number for these events (the HTTP endpoint sends none); `key`: the request's
   * Idempotency-Key, so a batch sent again with it (a retry after a timeout) is applied once.
   */
  async events(id: string, events: unknown[], batch?: GuardBatch, key?: string) {
    const checked = this.check(events);
    if ('problem' in checked) {
      const known = await this.deps.store.get(id);
      if (!known) return { status: 404, body: { error: `no call ${id} (start it with POST /v1/voice/calls)` } };
      return { status: 400, body: { error: checked.problem } };
    }
    const kept = key !== undefined ? eventKey(key, events) : undefined;
    const call = await this.deps.store.apply(id, {
      kind: 'events',
      events: checked.guarded,
      ...(batch ? { batch } : {}),
      ...(kept !== undefined ? { key: kept } : {}),
    });
    if (!call) return { status: 404, body: { error: `no call ${id} (start it with POST /v1/voice/calls)` } };
    // The key came with another batch before: this one is not applied, and the sender is told so
    // (taken for a retry, its audio, turns and cost would be lost without a word).
    const seen = kept !== undefined ? keptKey(call, kept) : undefined;
    if (anotherBatch(seen, kept))
      return {
        status: 422,
        body: {
          error: `Idempotency-Key: call ${id} took another batch with this key; nothing of this one was applied (a new batch needs a new key)`,
        },
      };
    if (checked.rollup !== null) await this.rollup(checked.rollup);
    // Ended before this batch (the fold is up to it): not applied, so the sender knows its cost went unrecorded.
    // A batch sent again with its key, applied before the end, is answered as applied.
    if (call.record && seen === undefined)
      return {
        status: 409,
        body: {
          error: `call ${id} has ended: its record and meter events were made at its end (${call.ended_at}), so events sent after it are not applied; send a call's events before POST /v1/voice/calls/${id}/end`,
        },
      };
    const s = call.state;
    return {
      status: 200,
      body: {
        action: s.action,
        ...(s.reason ? { reason: s.reason } : {}),
        state: publicState(s),
        intent: s.intent,
        ...(s.estUsd_at_disconnect !== null ? { estUsd_at_disconnect: s.estUsd_at_disconnect } : {}),
      },
    };
  }

  /** `tenant`: the customer_id of what follows the call to the meter (the phone bridge's). */
  async end(id: string, body: EndCallBody, tenant = '') {
    const now = this.now();
    const stored = await this.deps.store.get(id);
    const refusal = stored && endRefusal(stored, body, now);
    if (refusal) return { status: 400, body: { error: refusal } };
    const by = randomUUID();
    const call = await this.deps.store.apply(id, { kind: 'end', body, at: now.toISOString(), by });
    if (!call) return { status: 404, body: { error: `no call ${id} (start it with POST /v1/voice/calls)` } };
    const fresh = call.endedBy === by; // this request's change made the record
    if (fresh) {
      const usd = this.deps.afterCall
        ? afterCall(
            call.record!,
            call,
            { ...this.deps.afterCall, config: this.deps.config, log: this.deps.log },
            body.responses_metered,
            tenant,
          )
        : callCostUsd(call.record!, null);
      // The month the call ended in, as its record says (the phone bridge writes it up to a minute later);
      // an ended_at before the call's start (a duration_s sent with it is what the record takes) is not.
      const endedAt = body.ended_at && Date.parse(body.ended_at) >= Date.parse(call.started_at) ? new Date(body.ended_at) : now;
      await this.addToMonth(id, usd, endedAt);
    }
    return { status: 200, body: call.record, fresh };
  }

  /**
   * An answered call handed to voicemail mid-way (the phone bridge's `network_issue`): kept with
   * the call, so a status callback on any instance records why it ended.
   */
  async toVoicemail(id: string, reason: string): Promise<void> {
    await this.deps.store.apply(id, { kind: 'voicemail', reason });
  }

  /** The stored call (null when unknown or expired). */
  get(id: string): Promise<StoredCall | null> {
    return this.deps.store.get(id);
  }

  /** Whether a month's spend pauses new calls: its own total, or its last rollup, at or over the cap. */
  private over(m: MonthSpend): boolean {
    const cap = this.deps.config.spend_guard.monthly_usd_cap;
    return m.usd >= cap || (m.rollup !== null && m.rollup >= cap);
  }

  /**
   * Whether new calls pause now: one read of the month's spend. The first start of a month on this
   * instance reads the month before too, and the pause it held lifting is logged once in the fleet.
   */
  private async monthlyPaused(): Promise<boolean> {
    await this.takeOldPause();
    const now = this.now();
    const month = monthOf(now);
    if (this.turnSeen === month) return this.over((await this.deps.store.monthSpend([month]))[0]!);
    this.turnSeen = month;
    const [current, before] = await this.deps.store.monthSpend([month, monthBefore(now)]);
    const paused = this.over(current!);
    if (!paused && this.over(before!) && (await this.deps.store.firstAtMonth(month)))
      this.deps.log.warn(`voice: new calls resumed: a new month (${month}) began`);
    return paused;
  }

  /**
   * Adds an ended call's cost to the month of its end (once: only the end that made the record adds).
   * A store that fails here is logged; the call's record stands, and its cost is not counted.
   */
  private async addToMonth(id: string, usd: number, endedAt: Date): Promise<void> {
    if (!Number.isFinite(usd) || usd <= 0) return;
    // The month of the end the record says, not of the clock after the store's round trips: a call
    // ended at 23:59:59.9 on the month's last day is that month's.
    const month = monthOf(endedAt);
    try {
      const { before, after } = await this.deps.store.addMonthSpend(month, usd);
      // A month already over (a call ended in its last moment, recorded after the turn) pauses nothing now.
      if (!this.over(before) && this.over(after) && month === monthOf(this.now()))
        this.deps.log.warn(`voice: monthly spend ${Number(after.usd.toFixed(6))} USD reached the cap; new calls paused`);
    } catch (error) {
      this.deps.log.error(`call ${id}: its cost (${usd} USD) was not added to the month's voice spend: ${(error as Error).message}`);
    }
  }

  /**
   * A gateway upgraded while an earlier version's pause held (a rollup at the cap, kept as
   * `<p>:voice:monthly_paused` until a lower one): kept as the current month's rollup at the cap,
   * so new calls stay paused until a rollup below it or the next month. Once per instance; the
   * first instance to look takes it.
   */
  private async takeOldPause(): Promise<void> {
    if (this.oldPauseTaken) return;
    const month = monthOf(this.now());
    const cap = this.deps.config.spend_guard.monthly_usd_cap;
    if (await this.deps.store.takeOldPause(month, cap)) {
      this.deps.log.warn(
        `voice: new calls stay paused: the monthly pause set before this version is kept as ${month}'s rollup at the cap (${cap} USD); a rollup below the cap, or the next month, lifts it`,
      );
    }
    this.oldPauseTaken = true;
  }

  /** The meter's rollup of the month's spend, kept as the month's last (the month it is posted in, UTC). */
  async rollup(monthlyUsd: number): Promise<void> {
    await this.takeOldPause(); // first, so this rollup is the month's last
    const { before, after } = await this.deps.store.setMonthRollup(monthOf(this.now()), monthlyUsd);
    const paused = this.over(after);
    if (paused !== this.over(before))
      this.deps.log.warn(paused ? `voice: monthly spend ${monthlyUsd} USD reached the cap; new calls paused` : 'voice: new calls resumed');
  }
}

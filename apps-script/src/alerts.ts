/**
 * `checkSpendCaps()`: posts a spend alert to the team's Slack webhook when today's cost or the
 * 7-day cost is strictly greater than its cap (the same rule as the gateway's routing). Calls
 * without a price are counted in the alert, since their cost is missing from the totals, and so
 * are rows whose cost cell holds no number ≥ 0 (typed by hand), which the totals leave out.
 *
 * One alert per crossing and day: the UTC day of the last alert that Slack accepted is kept per
 * cap in a script property. A post that fails (non-2xx or exception) is not recorded, so the next
 * run tries again. Two runs can overlap (the 10-minute trigger and the menu's "Check spend caps
 * now"): what is due is decided under the script lock, and the run that will post records its
 * claim there before it lets go, so the other posts nothing; the post itself is made without the
 * lock, and its outcome recorded under it again. A claim whose run was cut off runs out
 * (SENDING_MS), and the next run posts what is still due.
 *
 * The day of the last run is kept too: the first run of a new UTC day alerts a cap the previous
 * day ended over and that was not alerted that day (spend in its last minutes, after its last
 * check): its daily cap, and its 7-day cap when that is not still crossed today (today's alert
 * says it then). The webhook URL is a secret (anyone holding it can post): it is never logged.
 */
import { overCap } from '../../schema/spend-cap';
import { configText, readCaps, readConfig } from './config';
import type { MeterServices } from './services';
import { cellTime } from './events-sheet';
import {
  capExceeded,
  costOrNothing,
  readSpendRows,
  roundUsd,
  spendTotals,
  undatedCosts,
  unpricedCounts,
  unreadableCosts,
  type SpendTotals,
} from './spend';
import { DAY_MS } from './utc-day';
import { errorText } from './error-text';
import type { Caps } from './config';
import { recordWithPropertyLock, withPropertyLock } from './lock';
import { MeterRefusal } from '../../schema/meter-reply';

const ALERT_STATE_PROPERTY = 'SPEND_ALERT_STATE';

type CapKind = 'daily' | 'burn7d';
/**
 * Per cap, the UTC day of the last alert Slack took; `checked`, the UTC day of the last run;
 * `sending`, the run that is posting an alert now and since when (ms).
 */
type AlertState = Partial<Record<CapKind | 'checked', string>> & { sending?: { run: string; since: number } };
/** A claim on posting older than this is of a run Apps Script stopped (6 minutes at most): the next run posts. */
const SENDING_MS = 10 * 60_000;

/** A day that ended over caps not alerted that day: which, that day's cost and its 7 days' cost. */
interface LateCrossing {
  day: string;
  kinds: CapKind[];
  cost: number;
  last7d: number;
}

export interface CapCheck {
  totals: SpendTotals;
  /** Events marked as having no price (counted at the part of their cost known, $0 when none is), today and in the 7 days. */
  unpriced: SpendTotals;
  /** Rows whose cost cell holds no number ≥ 0 (left out of the totals), today and in the 7 days. */
  unreadable: SpendTotals;
  /** Rows with a cost and a timestamp that is not a date (in no window: left out of every total). */
  undated: number;
  caps: Caps;
  crossed: CapKind[];
  /** Crossed caps not yet alerted today. */
  due: CapKind[];
  posted: boolean;
  message: string;
}

function utcDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

const usd = (value: number, decimals: number) => `$${value.toFixed(decimals)}`;

/** A cap as set: 2 decimals, or as many as it has (up to 10): a $0.005 cap read "$0.01", above the $0.006 that crossed it. */
function usdCap(cap: number): string {
  let d = 2;
  while (d < 10 && Number(cap.toFixed(d)) !== cap) d++;
  return usd(cap, d);
}

/**
 * A cost beside its cap, to `decimals` or as many more as it takes not to read as the cap, nor as
 * nothing when it is not (up to 10, roundUsd's): a 7-day cost of $200.004 crossing a $200 cap read
 * "$200.00 of $200.00", and today's $0.00003 beside a crossed 7-day cap "$0.0000".
 */
function usdBeside(value: number, cap: number, decimals: number): string {
  let d = decimals;
  const hidden = () => (value !== cap && usd(value, d) === usd(cap, d)) || (value > 0 && Number(value.toFixed(d)) === 0);
  while (d < 10 && hidden()) d++;
  return usd(value, d);
}

/** "N calls without a price" for the 7 days (and today), or '' when there are none. */
function unpricedNote(unpriced: SpendTotals): string {
  if (unpriced.last7d === 0) return '';
  const calls = (n: number) => `${n} call${n === 1 ? '' : 's'}`;
  return `${calls(unpriced.last7d)} without a price in the last 7 days (${unpriced.today} today): their cost is not known in full and only the part of it known is counted ($0 when none is), so the totals are too low`;
}

/** "N rows with a cost that is not a number ≥ 0 …" (typed by hand over the meter's), or '' when there are none. */
function unreadableNote(unreadable: SpendTotals): string {
  if (unreadable.last7d === 0) return '';
  const rows = unreadable.last7d === 1 ? '1 row' : `${unreadable.last7d} rows`;
  return `${rows} with a cost that is not a number ≥ 0 in the last 7 days (${unreadable.today} today): left out of the totals, correct them in the events tab`;
}

/** "N rows with a cost and a timestamp that is not a date …", or '' when there are none. */
function undatedNote(undated: number): string {
  if (undated === 0) return '';
  const rows =
    undated === 1
      ? '1 row with a cost and a timestamp that is not a date: left out of every total, correct it'
      : `${undated} rows with a cost and a timestamp that is not a date: left out of every total, correct them`;
  return `${rows} in the events tab`;
}

/**
 * The alert: Block Kit blocks plus a top-level `text` (the plain form, and the notification text).
 * With `late`, the alert of an earlier day's daily cap that was not alerted that day: that day's
 * cost stands where today's does.
 */
function slackPayload(
  check: Pick<CapCheck, 'totals' | 'caps' | 'unpriced' | 'unreadable' | 'undated'>,
  crossed: CapKind[],
  now: Date,
  sheetUrl: string,
  late?: LateCrossing,
) {
  const { caps } = check;
  const totals = late ? { ...check.totals, today: late.cost, last7d: late.last7d } : check.totals;
  const headline = `AI spend alert: ${capNames(crossed)} crossed${late ? ` on ${late.day}` : ''}`;
  const dayName = late ? `${late.day} (UTC)` : 'Today (UTC)';
  const weekName = late ? `7 days to ${late.day}` : 'Last 7 days';
  const todayUsd = usdBeside(totals.today, caps.dailyCapUsd, 4);
  const weekUsd = usdBeside(totals.last7d, caps.burn7dCapUsd, 2);
  const today = `${late ? `${late.day} (not alerted that day)` : 'Today'}: ${todayUsd} of ${usdCap(caps.dailyCapUsd)} daily cap`;
  const week = `${weekName}: ${weekUsd} of ${usdCap(caps.burn7dCapUsd)} 7-day cap`;
  const notes = [unpricedNote(check.unpriced), unreadableNote(check.unreadable), undatedNote(check.undated)].filter(Boolean);
  const noteBlocks = notes.map((note) => ({ type: 'section', text: { type: 'mrkdwn', text: `:warning: ${note}.` } }));
  return {
    text: [`${headline}.`, `${today}.`, `${week}.`, ...notes.map((note) => `${note}.`)].join(' '),
    blocks: [
      { type: 'header', text: { type: 'plain_text', text: headline, emoji: true } },
      {
        type: 'section',
        fields: [
          { type: 'mrkdwn', text: `*${dayName}*\n${todayUsd} of ${usdCap(caps.dailyCapUsd)} cap` },
          { type: 'mrkdwn', text: `*${weekName}*\n${weekUsd} of ${usdCap(caps.burn7dCapUsd)} cap` },
        ],
      },
      ...noteBlocks,
      {
        type: 'context',
        elements: [
          {
            type: 'mrkdwn',
            text: `UTC day ${utcDay(now)} · checked ${now.toISOString().slice(11, 16)} UTC · <${sheetUrl}|Open the meter> · routing is degraded while a cap is exceeded`,
          },
        ],
      },
    ],
  };
}

/**
 * The alert state; an unreadable one (edited by hand) counts as empty. A read that fails (the
 * Properties service) ends the run before anything is posted: taken as empty, it re-posted
 * today's alerts and, saved over the real state, lost the day of the last run and so its late alert.
 */
function readState(svc: Pick<MeterServices, 'properties'>): AlertState {
  const text = svc.properties.getProperty(ALERT_STATE_PROPERTY) ?? '{}';
  let state: unknown;
  try {
    state = JSON.parse(text);
  } catch {
    return {};
  }
  // JSON that is no object (null, a number, a list) is unreadable too: read as one, it failed every run.
  return state && typeof state === 'object' && !Array.isArray(state) ? (state as AlertState) : {};
}

const capNames = (kinds: CapKind[]) => kinds.map((k) => (k === 'daily' ? 'daily cap' : '7-day cap')).join(' and ');

/**
 * The day of the previous run, when it ended over caps not alerted that day: spend in the last
 * minutes of a UTC day is seen by no check of that day (and a post that failed until midnight
 * would be lost). A 7-day cap still crossed today is left to today's alert.
 */
function lateCrossing(rows: unknown[][], state: AlertState, today: string, caps: Caps, crossedNow: CapKind[]): LateCrossing | null {
  const day = state.checked;
  if (!day || !(day < today)) return null;
  const end = Date.parse(`${day}T00:00:00Z`) + DAY_MS;
  let cost = 0;
  let last7d = 0;
  for (const [time, cell] of rows) {
    const t = cellTime(time);
    if (!(t >= end - 7 * DAY_MS && t < end)) continue; // a timestamp that is no date (NaN) is in no window
    last7d += costOrNothing(cell);
    if (t >= end - DAY_MS) cost += costOrNothing(cell);
  }
  const late = { day, kinds: [] as CapKind[], cost: roundUsd(cost), last7d: roundUsd(last7d) };
  if (state.daily !== day && overCap(late.cost, caps.dailyCapUsd)) late.kinds.push('daily');
  if (state.burn7d !== day && !crossedNow.includes('burn7d') && overCap(late.last7d, caps.burn7dCapUsd)) late.kinds.push('burn7d');
  return late.kinds.length ? late : null;
}

/** Why an alert cannot be posted at all ('' when it can): nothing to retry until Config changes. */
export function unusable(webhook: string): string {
  if (webhook === '') return 'SLACK_WEBHOOK_URL is empty: no alert posted';
  return /^https:\/\//.test(webhook) ? '' : 'SLACK_WEBHOOK_URL is not an https URL: no alert posted';
}

/** Posts an alert; '' when Slack took it, else why not (the webhook never in it). */
export function postAlert(svc: MeterServices, webhook: string, payload: object): string {
  try {
    const response = svc.fetch(webhook, {
      method: 'post',
      contentType: 'application/json',
      payload: JSON.stringify(payload),
      muteHttpExceptions: true,
    });
    const code = response.getResponseCode();
    return code >= 200 && code < 300 ? '' : `Slack answered HTTP ${code}; the alert will be retried on the next run`;
  } catch (error) {
    return `posting the alert failed (${withoutWebhook(errorText(error), webhook)}); it will be retried on the next run`;
  }
}

export function checkSpendCaps(svc: MeterServices): CapCheck {
  const config = readConfig(svc.spreadsheet);
  const caps = readCaps(config);
  const now = svc.now();
  const rows = readSpendRows(svc, 'error_code');
  const { totals, unpriced, unreadable, undated, crossed } = spendFigures(rows, caps, now);
  const day = utcDay(now);
  const webhook = configText(config, 'SLACK_WEBHOOK_URL');
  const cannot = unusable(webhook);
  const runId = svc.uuid();
  const result: CapCheck = { totals, unpriced, unreadable, undated, caps, crossed, due: [], posted: false, message: '' };
  // What is due, decided on the state as it is under the lock, and this run's claim on posting it.
  const claim = claimOrBusy(svc, () => claimPosting(svc, rows, result, day, runId, now.getTime(), cannot));
  const unread = [unreadableNote(unreadable), undatedNote(undated)].filter(Boolean);
  if ('busy' in claim) result.message = `${claim.busy}: this run posted nothing, the next one decides`;
  else if ('holder' in claim) {
    result.message = `another run of checkSpendCaps has been posting an alert since ${new Date(claim.holder).toISOString()}: this run posted nothing (a run cut off is taken over ${SENDING_MS / 60_000} minutes after it started)`;
  } else {
    const state = claim.state;
    const stateBefore = JSON.stringify(state);
    result.due = crossed.filter((k) => state[k] !== day);
    // Read once, before the first post: a Sheets call that timed out between two posts would end
    // the run with the first posted and unrecorded, and the next run would post it again.
    let url: string | undefined;
    const sheetUrl = () => (url ??= svc.spreadsheet.getUrl());
    const run: AlertRun = { svc, webhook, cannot, now, day, state, result, sheetUrl };

    let posting: ReturnType<typeof alertLateCrossing>;
    try {
      posting = alertLateCrossing(run, rows);
      alertDue(run);
    } catch (error) {
      // A Sheets call failing after the claim (the link, read before the first post): what was
      // posted is recorded and the claim let go, or the next run would wait out SENDING_MS.
      if (claim.claimed) saved(svc, state, runId, result.posted);
      throw error;
    }
    const { earlier, lateSettled } = posting;
    if (lateSettled) state.checked = day;
    if (claim.claimed || JSON.stringify(state) !== stateBefore) result.message += saved(svc, state, runId, result.posted);
    result.message = earlier + result.message;
  }
  // Said on every run, not only in an alert.
  result.message += unread.map((note) => `; ${note}`).join('');
  svc.log(`checkSpendCaps: ${result.message}`);
  return result;
}

/**
 * The claim, or why the lock could not be had: the export or retention may hold it for longer than
 * the wait on a large tab, and failing there (Google's e-mail of a failed trigger) would say nothing
 * more than that the next run, 10 minutes on, decides.
 */
function claimOrBusy<T>(svc: Pick<MeterServices, 'lock'>, claim: () => T): T | { busy: string } {
  try {
    return withPropertyLock(svc, claim);
  } catch (error) {
    if (error instanceof MeterRefusal && error.code === 'busy') return { busy: error.message };
    throw error;
  }
}

/** The ms since which another run has been posting, when its claim is still fresh. */
function otherSender(state: AlertState, runId: string, nowMs: number): number | null {
  const s = state.sending;
  if (!s || typeof s !== 'object' || s.run === runId || typeof s.since !== 'number') return null;
  return Math.abs(nowMs - s.since) < SENDING_MS ? s.since : null;
}

/**
 * Under the lock: the alert state, and this run's claim on posting (recorded before the lock is let
 * go) when an alert is due; or, when another run holds a fresh claim, since when it holds it.
 */
function claimPosting(
  svc: Pick<MeterServices, 'properties'>,
  rows: unknown[][],
  check: CapCheck,
  day: string,
  runId: string,
  nowMs: number,
  cannot: string,
): { holder: number } | { state: AlertState; claimed: boolean } {
  const state = readState(svc);
  const holder = otherSender(state, runId, nowMs);
  if (holder !== null) return { holder };
  const due = check.crossed.some((k) => state[k] !== day) || lateCrossing(rows, state, day, check.caps, check.crossed) !== null;
  if (cannot || !due) return { state, claimed: false };
  svc.properties.setProperty(ALERT_STATE_PROPERTY, JSON.stringify({ ...state, sending: { run: runId, since: nowMs } }));
  return { state, claimed: true };
}

/** The totals, the calls without a price, the rows left out, and the caps crossed. */
function spendFigures(rows: unknown[][], caps: Caps, now: Date) {
  const totals = spendTotals(rows, now.getTime());
  const unpriced = unpricedCounts(
    rows.map((r) => [r[0], r[2]]),
    now.getTime(),
  );
  const unreadable = unreadableCosts(rows, now.getTime());
  const undated = undatedCosts(rows);
  const crossed: CapKind[] = [];
  if (overCap(totals.today, caps.dailyCapUsd)) crossed.push('daily');
  if (overCap(totals.last7d, caps.burn7dCapUsd)) crossed.push('burn7d');
  return { totals, unpriced, unreadable, undated, crossed };
}

/** One run's alerting: where it posts (or why it cannot), its day, the alert state it updates, and its result. */
interface AlertRun {
  svc: MeterServices;
  webhook: string;
  cannot: string;
  now: Date;
  day: string;
  state: AlertState;
  result: CapCheck;
  /** The meter's link in the alert, read at most once a run. */
  sheetUrl: () => string;
}

/** The alert for caps crossed on an earlier day and not alerted then; what the message begins with. */
function alertLateCrossing(run: AlertRun, rows: unknown[][]): { earlier: string; lateSettled: boolean } {
  const { svc, webhook, cannot, now, day, state, result, sheetUrl } = run;
  let earlier = '';
  let lateSettled = true;
  const late = lateCrossing(rows, state, day, result.caps, result.crossed);
  if (late) {
    const what = `${capNames(late.kinds)} crossed on ${late.day} and not alerted that day`;
    const why = cannot || postAlert(svc, webhook, slackPayload(result, late.kinds, now, sheetUrl(), late));
    if (!why) {
      // Never back: today's alert, taken by an earlier run while this one kept failing, stays recorded.
      for (const k of late.kinds) if (!(state[k] && state[k] > late.day)) state[k] = late.day;
      result.posted = true;
    }
    lateSettled = !why || cannot !== ''; // a failed post is tried again on the next run
    earlier = why ? `${what}, but ${why}; ` : `alert posted for the ${what}; `;
  }
  return { earlier, lateSettled };
}

/** The alert for the caps crossed today and not yet alerted; the result's message says how it went. */
function alertDue(run: AlertRun): void {
  const { svc, webhook, cannot, now, day, state, result, sheetUrl } = run;
  const { totals, caps, crossed, due } = result;
  if (!capExceeded(totals, caps)) result.message = `under both caps (today ${usd(totals.today, 4)}, 7 days ${usd(totals.last7d, 2)})`;
  else if (due.length === 0) result.message = `cap(s) ${crossed.join(', ')} crossed; already alerted today`;
  else {
    const why = cannot
      ? `cap(s) ${due.join(', ')} crossed, but ${cannot}`
      : postAlert(svc, webhook, slackPayload(result, due, now, sheetUrl()));
    if (!why) {
      for (const k of due) state[k] = day;
      result.posted = true;
    }
    result.message = why || `alert posted for ${due.join(', ')}`;
  }
}

/**
 * Records the alerts that went out and the day of this run, and lets go of its claim; '' or what
 * the log must say. Under the lock, on the state as it is then: another run's record made
 * meanwhile is kept, and no day goes back. Posted first, recorded after: a state that cannot be
 * saved (the Properties service failing half-way) means a second alert once the claim runs out,
 * never a missed one.
 *
 * A lock still busy after its wait is held by the export or retention (a cap check holds it for a
 * moment only, and cannot take it meanwhile either): the record is then made without it rather
 * than lost, which would post the alert again once the claim ran out.
 */
function saved(svc: Pick<MeterServices, 'properties' | 'lock'>, state: AlertState, runId: string, posted: boolean): string {
  const record = () => {
    const now = readState(svc);
    for (const k of ['daily', 'burn7d', 'checked'] as const) {
      const day = state[k];
      if (day && !(now[k] && now[k] >= day)) now[k] = day;
    }
    if (now.sending && now.sending.run === runId) delete now.sending;
    svc.properties.setProperty(ALERT_STATE_PROPERTY, JSON.stringify(now));
  };
  try {
    recordWithPropertyLock(svc, record);
    return '';
  } catch (error) {
    return posted
      ? `, but its state could not be saved (${errorText(error)}): it may be posted again on a later run`
      : `; the alert state could not be saved (${errorText(error)})`;
  }
}

/**
 * The text without the webhook: the URL's path is its secret (Slack's `/services/T…/B…/…`), so
 * every URL goes, and every segment of the path wherever it appears (an error may quote it whole,
 * twice, or cut).
 */
function withoutWebhook(text: string, webhook: string): string {
  let out = text.replace(/https?:\/\/\S+/g, '<webhook>');
  // No URL class in Apps Script: the path is what follows the host.
  const path = webhook.replace(/^https?:\/\/[^/]*/, '').split(/[?#]/)[0];
  for (const segment of path.split('/').filter((p) => p.length >= 3)) out = out.split(segment).join('<secret>');
  return out;
}

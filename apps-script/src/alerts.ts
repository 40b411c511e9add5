/**
 * `checkSpendCaps()`: posts a spend alert to the team's Slack webhook when today's cost or the
 * 7-day cost is strictly greater than its cap (the same rule as the gateway's routing). Calls
 * without a price are counted in the alert, since their cost is missing from the totals.
 *
 * One alert per crossing and day: the UTC day of the last alert that Slack accepted is kept per
 * cap in a script property. A post that fails (non-2xx or exception) is not recorded, so the next
 * run tries again. The webhook URL is a secret (anyone holding it can post): it is never logged.
 */
import { overCap } from '../../schema/spend-cap';
import { configText, readCaps, readConfig } from './config';
import type { MeterServices } from './services';
import { capExceeded, readSpendRows, spendTotals, unpricedCounts, type SpendTotals } from './spend';
import type { Caps } from './config';

const ALERT_STATE_PROPERTY = 'SPEND_ALERT_STATE';

type CapKind = 'daily' | 'burn7d';
type AlertState = Partial<Record<CapKind, string>>;

export interface CapCheck {
  totals: SpendTotals;
  /** Events marked as having no price (counted as $0 in the totals), today and in the 7 days. */
  unpriced: SpendTotals;
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

/** "N calls without a price" for the 7 days (and today), or '' when there are none. */
function unpricedNote(unpriced: SpendTotals): string {
  if (unpriced.last7d === 0) return '';
  const calls = (n: number) => `${n} call${n === 1 ? '' : 's'}`;
  return `${calls(unpriced.last7d)} without a price in the last 7 days (${unpriced.today} today): their cost is unknown and counted as $0, so the totals are too low`;
}

/** The alert: Block Kit blocks plus a top-level `text` (the plain form, and the notification text). */
function slackPayload(check: Pick<CapCheck, 'totals' | 'caps' | 'unpriced'>, crossed: CapKind[], now: Date, sheetUrl: string) {
  const { totals, caps } = check;
  const names = crossed.map((k) => (k === 'daily' ? 'daily cap' : '7-day cap')).join(' and ');
  const today = `Today: ${usd(totals.today, 4)} of ${usd(caps.dailyCapUsd, 2)} daily cap`;
  const week = `Last 7 days: ${usd(totals.last7d, 2)} of ${usd(caps.burn7dCapUsd, 2)} 7-day cap`;
  const note = unpricedNote(check.unpriced);
  const noteBlock = note ? [{ type: 'section', text: { type: 'mrkdwn', text: `:warning: ${note}.` } }] : [];
  return {
    text: `AI spend alert: ${names} crossed. ${today}. ${week}.${note ? ` ${note}.` : ''}`,
    blocks: [
      { type: 'header', text: { type: 'plain_text', text: `AI spend alert: ${names} crossed`, emoji: true } },
      {
        type: 'section',
        fields: [
          { type: 'mrkdwn', text: `*Today (UTC)*\n${usd(totals.today, 4)} of ${usd(caps.dailyCapUsd, 2)} cap` },
          { type: 'mrkdwn', text: `*Last 7 days*\n${usd(totals.last7d, 2)} of ${usd(caps.burn7dCapUsd, 2)} cap` },
        ],
      },
      ...noteBlock,
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

function readState(svc: Pick<MeterServices, 'properties'>): AlertState {
  try {
    return JSON.parse(svc.properties.getProperty(ALERT_STATE_PROPERTY) ?? '{}') as AlertState;
  } catch {
    return {};
  }
}

export function checkSpendCaps(svc: MeterServices): CapCheck {
  const config = readConfig(svc.spreadsheet);
  const caps = readCaps(config);
  const now = svc.now();
  const rows = readSpendRows(svc, 'error_code');
  const totals = spendTotals(rows, now.getTime());
  const unpriced = unpricedCounts(
    rows.map((r) => [r[0], r[2]]),
    now.getTime(),
  );
  const crossed: CapKind[] = [];
  if (overCap(totals.today, caps.dailyCapUsd)) crossed.push('daily');
  if (overCap(totals.last7d, caps.burn7dCapUsd)) crossed.push('burn7d');
  const day = utcDay(now);
  const state = readState(svc);
  const due = crossed.filter((k) => state[k] !== day);
  const result: CapCheck = { totals, unpriced, caps, crossed, due, posted: false, message: '' };

  if (!capExceeded(totals, caps)) result.message = `under both caps (today ${usd(totals.today, 4)}, 7 days ${usd(totals.last7d, 2)})`;
  else if (due.length === 0) result.message = `cap(s) ${crossed.join(', ')} crossed; already alerted today`;
  else {
    const webhook = configText(config, 'SLACK_WEBHOOK_URL');
    if (webhook === '') result.message = `cap(s) ${due.join(', ')} crossed, but SLACK_WEBHOOK_URL is empty: no alert posted`;
    else if (!/^https:\/\//.test(webhook)) result.message = 'SLACK_WEBHOOK_URL is not an https URL: no alert posted';
    else {
      const payload = slackPayload(result, due, now, svc.spreadsheet.getUrl());
      try {
        const response = svc.fetch(webhook, {
          method: 'post',
          contentType: 'application/json',
          payload: JSON.stringify(payload),
          muteHttpExceptions: true,
        });
        const code = response.getResponseCode();
        if (code >= 200 && code < 300) {
          result.posted = true;
          result.message = `alert posted for ${due.join(', ')}${saved(svc, state, due, day)}`;
        } else {
          result.message = `Slack answered HTTP ${code}; the alert will be retried on the next run`;
        }
      } catch (error) {
        result.message = `posting the alert failed (${withoutWebhook(errorText(error), webhook)}); it will be retried on the next run`;
      }
    }
  }
  svc.log(`checkSpendCaps: ${result.message}`);
  return result;
}

/**
 * Records that today's alert went out; '' or what the log must say. Posted first, recorded after:
 * a state that cannot be saved (the Properties service failing half-way) means a second alert on
 * the next run, never a missed one.
 */
function saved(svc: Pick<MeterServices, 'properties'>, state: AlertState, due: CapKind[], day: string): string {
  for (const k of due) state[k] = day;
  try {
    svc.properties.setProperty(ALERT_STATE_PROPERTY, JSON.stringify(state));
    return '';
  } catch (error) {
    return `, but its state could not be saved (${errorText(error)}): it may be posted again on the next run`;
  }
}

/** An error's message, whatever realm it came from (a plain `instanceof Error` misses some). */
const errorText = (error: unknown): string => String((error as { message?: unknown } | null)?.message ?? error);

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

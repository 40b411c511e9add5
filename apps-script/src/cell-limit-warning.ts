/**
 * The warning before Google's cell limit, where ingest is refused (`spreadsheet_full`) and the
 * gateway spools events: from 80 % of the limit on, a Slack alert once per UTC day, saying how
 * full the spreadsheet is, which tabs take the room and how to free it. Run by the hourly
 * refreshDigest: at the heaviest load the docs plan for, 80 % to 100 % takes more than a day,
 * and the 10-minute cap check keeps its few calls. The UTC day of the last alert Slack took is
 * kept in a script property; a post that fails is not recorded, so the next run tries again. Two
 * refreshes can overlap (the hourly trigger and the menu's "Refresh digest"): the run that posts
 * records its claim under the script lock first, so the other posts nothing; a claim whose run was
 * stopped runs out after SENDING_MS.
 */
import { postAlert, unusable } from './alerts';
import { configText, readConfig } from './config';
import { errorText } from './error-text';
import { recordWithPropertyLock, withPropertyLock } from './lock';
import type { MeterServices } from './services';
import { SPREADSHEET_CELL_LIMIT, cellsByTab } from './tabs';

const WARN_SHARE = 0.8;
const ALERT_DAY_PROPERTY = 'CELL_LIMIT_ALERT_DAY';
/** The run posting the alert now, and since when: `{"run":…,"since":ms}`. */
const SENDING_PROPERTY = 'CELL_LIMIT_ALERT_SENDING';
/** Longer than a run lasts (Apps Script stops one at 6 minutes). */
const SENDING_MS = 10 * 60_000;

type TabCells = ReturnType<typeof cellsByTab>;

/** 8300000 → "8,300,000" (no Intl needed). */
const count = (n: number) => String(n).replace(/\B(?=(\d{3})+$)/g, ',');
const percent = (cells: number) => Math.floor((cells / SPREADSHEET_CELL_LIMIT) * 100);
/** Tab names are typed by people: never a Slack link or mention. */
const slackSafe = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** "spreadsheet 83 % full (8,300,000 of 10,000,000 cells)", as the Digest tab shows it. */
export function fullness(tabs: TabCells): string {
  const cells = tabs.reduce((n, t) => n + t.cells, 0);
  return `spreadsheet ${percent(cells)} % full (${count(cells)} of ${count(SPREADSHEET_CELL_LIMIT)} cells)`;
}

function alertPayload(tabs: TabCells, cells: number, sheetUrl: string) {
  const headline = `Meter spreadsheet is ${percent(cells)} % full`;
  const largest = tabs
    .slice(0, 3)
    .map((t) => `${slackSafe(t.name)}: ${count(t.cells)} cells`)
    .join(', ');
  const text =
    `${headline}: ${count(cells)} of Google's ${count(SPREADSHEET_CELL_LIMIT)} cells. At 100 % ingest is refused ` +
    `(spreadsheet_full) and the gateway keeps the events spooled until there is room. Largest tabs: ${largest}. ` +
    `To free room: shorten Config RETENTION_DAYS (not below 7: the 7-day caps count a week of events) and apply retention ` +
    `(it deletes exported events older than it), ` +
    `and move old rows of the back-office tabs to another spreadsheet (docs/meter.md, "Growth over months").`;
  return {
    text,
    blocks: [
      { type: 'header', text: { type: 'plain_text', text: headline, emoji: true } },
      { type: 'section', text: { type: 'mrkdwn', text } },
      { type: 'context', elements: [{ type: 'mrkdwn', text: `<${sheetUrl}|Open the meter>` }] },
    ],
  };
}

/** The claim on posting: which run, since when (ms); null when none or unreadable. */
function readClaim(svc: Pick<MeterServices, 'properties'>): { run: string; since: number } | null {
  try {
    const c = JSON.parse(svc.properties.getProperty(SENDING_PROPERTY) ?? 'null') as { run?: unknown; since?: unknown } | null;
    return c && typeof c === 'object' && typeof c.run === 'string' && typeof c.since === 'number' ? { run: c.run, since: c.since } : null;
  } catch {
    return null;
  }
}

/**
 * Under the lock: the day recorded if Slack took the alert, and this run's claim let go; '' or what
 * the log must say. A lock still busy after its wait is held by the export or retention (a refresh
 * holds it for a moment only, and cannot take it meanwhile either): recorded without it then
 * rather than lost, which would post the alert again once the claim ran out.
 */
function recorded(svc: MeterServices, run: string, day: string | null): string {
  const record = () => {
    if (day) svc.properties.setProperty(ALERT_DAY_PROPERTY, day);
    if (readClaim(svc)?.run === run) svc.properties.deleteProperty(SENDING_PROPERTY);
  };
  try {
    recordWithPropertyLock(svc, record);
    return '';
  } catch (error) {
    return day
      ? `, but its day could not be saved (${errorText(error)}): it may be posted again on a later run`
      : `; its claim could not be let go (${errorText(error)}): the next run posts ${SENDING_MS / 60_000} minutes after this one`;
  }
}

function warn(svc: MeterServices, tabs: TabCells): string {
  const cells = tabs.reduce((n, t) => n + t.cells, 0);
  const said = `spreadsheet at ${percent(cells)} % of Google's ${count(SPREADSHEET_CELL_LIMIT)} cell limit (${count(cells)} cells)`;
  if (cells < WARN_SHARE * SPREADSHEET_CELL_LIMIT) return said;
  const nowMs = svc.now().getTime();
  const day = new Date(nowMs).toISOString().slice(0, 10);
  const webhook = configText(readConfig(svc.spreadsheet), 'SLACK_WEBHOOK_URL');
  const cannot = unusable(webhook);
  const run = svc.uuid();
  const sheetUrl = svc.spreadsheet.getUrl(); // read before the claim: a Sheets call timing out after it would hold the claim
  // Decided and claimed under the lock: a refresh that overlaps this one posts nothing.
  const decision = withPropertyLock(svc, () => {
    if (svc.properties.getProperty(ALERT_DAY_PROPERTY) === day) return 'alerted';
    const claim = readClaim(svc);
    if (claim && Math.abs(nowMs - claim.since) < SENDING_MS)
      return `another refresh has been posting the alert since ${new Date(claim.since).toISOString()}: this one posted nothing`;
    if (!cannot) svc.properties.setProperty(SENDING_PROPERTY, JSON.stringify({ run, since: nowMs }));
    return '';
  });
  if (decision === 'alerted') return `${said}; already alerted today`;
  if (decision) return `${said}; ${decision}`;
  if (cannot) return `${said}; ${cannot}`;
  const why = postAlert(svc, webhook, alertPayload(tabs, cells, sheetUrl));
  return why ? `${said}; ${why}${recorded(svc, run, null)}` : `${said}; alert posted${recorded(svc, run, day)}`;
}

/**
 * Alerts when the spreadsheet is past 80 % of the cell limit (`tabs` as counted, else counted
 * here); what the log says. Never throws: a failure here must not stop the digest.
 */
export function warnNearCellLimit(svc: MeterServices, tabs?: TabCells): string {
  try {
    return warn(svc, tabs ?? cellsByTab(svc.spreadsheet));
  } catch (error) {
    return `the cell-limit check failed (${errorText(error)})`;
  }
}

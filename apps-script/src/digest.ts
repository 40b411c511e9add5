/**
 * The digest for non-engineers (Document 2, "Reports and aggregates", 1): a `Digest` tab kept
 * current by the script, the weekly e-mail, the pii-free tab that Looker Studio reads, and the
 * Linking API URL that builds the report from a template.
 *
 * Rows with pii_flag true are left out of everything here: the figures, the tab, the e-mail and
 * the Looker Studio data source.
 */
import { EVENT_FIELDS, type EventField } from '../../schema/event-record';
import { configText, readConfig, type ConfigValues } from './config';
import { cellNumber, cellTime, columnOf, getEventsSheet, readAllRows } from './events-sheet';
import type { MeterServices, SheetLike } from './services';
import { DAY_MS, roundUsd, utcDayStart } from './spend';

const DIGEST_TAB = 'Digest';
const PUBLIC_TAB = 'events_public';
const TOP_N = 10;
const SERIES_DAYS = 30;

const col = (f: EventField) => columnOf(f) - 1;

interface CustomerCost {
  customer_id: string;
  cost_usd: number;
  calls: number;
}

interface ModelTokens {
  model: string;
  tokens_total: number;
  cost_usd: number;
  /** null when the model used no tokens (guard against dividing by zero). */
  usd_per_1k_tokens: number | null;
}

export interface DigestFigures {
  generatedAt: string;
  today: number;
  last7d: number;
  last30d: number;
  /** Oldest first, one entry per UTC day (days without events are 0). */
  daily: Array<{ day: string; cost_usd: number }>;
  topCustomers7d: CustomerCost[];
  topModels30d: ModelTokens[];
  /** Rows left out because pii_flag is true. */
  piiRowsExcluded: number;
  /** Voice concierge rollups over the last 7 and 30 days (null when there is no calls tab). */
  voice?: { last7d: VoiceRollup; last30d: VoiceRollup } | null;
}

/** The digest's numbers from the events tab's rows (pure: the tests compare it to a direct computation). */
export function computeDigest(rows: unknown[][], nowMs: number): DigestFigures {
  const today = utcDayStart(nowMs);
  const start7 = today - 6 * DAY_MS;
  const start30 = today - (SERIES_DAYS - 1) * DAY_MS;
  const daily = new Array<number>(SERIES_DAYS).fill(0);
  const customers = new Map<string, CustomerCost>();
  const models = new Map<string, { tokens: number; cost: number }>();
  let pii = 0;
  let t7 = 0;
  let todayCost = 0;
  for (const row of rows) {
    if (row[col('pii_flag')] === true) {
      pii++;
      continue;
    }
    const t = cellTime(row[col('timestamp')]);
    if (!(t >= start30)) continue;
    const cost = cellNumber(row[col('cost_usd')]);
    const day = Math.min(SERIES_DAYS - 1, Math.floor((t - start30) / DAY_MS)); // future-dated rows count as today
    daily[day] += cost;
    if (t >= today) todayCost += cost;
    const model = String(row[col('model')] || 'unknown');
    const m = models.get(model) ?? { tokens: 0, cost: 0 };
    m.tokens += cellNumber(row[col('input_tokens')]) + cellNumber(row[col('output_tokens')]);
    m.cost += cost;
    models.set(model, m);
    if (t >= start7) {
      t7 += cost;
      const id = String(row[col('customer_id')] || '(none)');
      const c = customers.get(id) ?? { customer_id: id, cost_usd: 0, calls: 0 };
      c.cost_usd += cost;
      c.calls++;
      customers.set(id, c);
    }
  }
  const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  return {
    generatedAt: new Date(nowMs).toISOString(),
    today: roundUsd(todayCost),
    last7d: roundUsd(t7),
    last30d: roundUsd(daily.reduce((a, b) => a + b, 0)),
    daily: daily.map((cost, i) => ({ day: new Date(start30 + i * DAY_MS).toISOString().slice(0, 10), cost_usd: roundUsd(cost) })),
    topCustomers7d: [...customers.values()]
      .map((c) => ({ ...c, cost_usd: roundUsd(c.cost_usd) }))
      .sort((a, b) => b.cost_usd - a.cost_usd || byName(a.customer_id, b.customer_id))
      .slice(0, TOP_N),
    topModels30d: [...models.entries()]
      .map(([model, m]) => ({
        model,
        tokens_total: m.tokens,
        cost_usd: roundUsd(m.cost),
        usd_per_1k_tokens: m.tokens > 0 ? roundUsd(m.cost / (m.tokens / 1000)) : null,
      }))
      .sort((a, b) => b.tokens_total - a.tokens_total || byName(a.model, b.model))
      .slice(0, TOP_N),
    piiRowsExcluded: pii,
  };
}

/** Document 3's rollups over the call records of a period (answered = every outcome but voicemail_left). */
export interface VoiceRollup {
  calls: number;
  answered: number;
  booking_rate: number | null;
  escalation_rate: number | null;
  containment_rate: number | null;
  avg_turns: number | null;
  avg_ttfb_s: number | null;
  asr_wer: number | null;
  cost_per_call: number | null;
  cost_per_booking: number | null;
}

const CALL_COL = { started_at: 1, turns: 5, ttfb_s: 6, asr_wer: 7, escalated: 9, outcome: 10, cost: 11 };

export function voiceRollup(rows: unknown[][], nowMs: number, days: number): VoiceRollup {
  const from = utcDayStart(nowMs) - (days - 1) * DAY_MS;
  const recent = rows.filter((r) => cellTime(r[CALL_COL.started_at]) >= from);
  const answered = recent.filter((r) => r[CALL_COL.outcome] !== 'voicemail_left');
  const bookings = recent.filter((r) => r[CALL_COL.outcome] === 'booking');
  const escalations = answered.filter((r) => r[CALL_COL.escalated] === true).length;
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
  const nums = (col: number, list = recent) =>
    list.filter((r) => r[col] !== '' && r[col] !== null && r[col] !== undefined).map((r) => cellNumber(r[col]));
  const ratio = (a: number, b: number) => (b ? a / b : null);
  return {
    calls: recent.length,
    answered: answered.length,
    booking_rate: ratio(bookings.length, answered.length),
    escalation_rate: ratio(escalations, answered.length),
    containment_rate: ratio(answered.length - escalations, answered.length),
    avg_turns: mean(nums(CALL_COL.turns)),
    avg_ttfb_s: mean(nums(CALL_COL.ttfb_s)),
    asr_wer: mean(nums(CALL_COL.asr_wer)),
    cost_per_call: mean(nums(CALL_COL.cost)),
    cost_per_booking: bookings.length ? nums(CALL_COL.cost, bookings).reduce((a, b) => a + b, 0) / bookings.length : null,
  };
}

/** Fixed layout (same cells every refresh, so the chart's range never moves). Width 4. */
const LAYOUT = {
  width: 4,
  scoreRow: 4,
  customersHeader: 7,
  modelsHeader: 7 + TOP_N + 3,
  dailyHeader: 7 + 2 * (TOP_N + 3),
};

const pad = (cells: unknown[]): unknown[] => [...cells, ...new Array(LAYOUT.width - cells.length).fill('')];
const text = (s: string) => (s === '' ? '' : `'${s}`);

/** The Digest tab's cells, top to bottom. */
function digestGrid(d: DigestFigures): unknown[][] {
  const grid: unknown[][] = [];
  grid.push(pad(['AI spend digest', `updated ${d.generatedAt.slice(0, 16).replace('T', ' ')} UTC`]));
  grid.push(pad([`Rows with pii_flag TRUE are left out of this tab (${d.piiRowsExcluded} row(s)).`]));
  grid.push(pad(['Cost today (UTC)', 'Cost last 7 days', 'Cost last 30 days']));
  grid.push(pad([d.today, d.last7d, d.last30d]));
  grid.push(pad([]));
  grid.push(pad([]));
  grid.push(pad(['Top customers by cost, last 7 days']));
  grid.push(pad(['customer_id', 'cost_usd', 'calls']));
  for (let i = 0; i < TOP_N; i++) {
    const c = d.topCustomers7d[i];
    grid.push(pad(c ? [text(c.customer_id), c.cost_usd, c.calls] : []));
  }
  grid.push(pad([]));
  grid.push(pad(['Top models by tokens, last 30 days']));
  grid.push(pad(['model', 'tokens_total', 'cost_usd', '$ per 1K tokens']));
  for (let i = 0; i < TOP_N; i++) {
    const m = d.topModels30d[i];
    grid.push(pad(m ? [text(m.model), m.tokens_total, m.cost_usd, m.usd_per_1k_tokens ?? 'n/a'] : []));
  }
  grid.push(pad([]));
  grid.push(pad(['Daily cost, last 30 days']));
  grid.push(pad(['day', 'cost_usd']));
  for (const point of d.daily) grid.push(pad([text(point.day), point.cost_usd]));
  grid.push(pad([]));
  grid.push(pad(['Voice concierge (calls tab)']));
  grid.push(pad(['metric', 'last 7 days', 'last 30 days']));
  const v = d.voice;
  const metric = (label: string, key: keyof VoiceRollup) =>
    pad([label, v ? (v.last7d[key] ?? 'n/a') : 'n/a', v ? (v.last30d[key] ?? 'n/a') : 'n/a']);
  grid.push(
    metric('calls', 'calls'),
    metric('answered calls', 'answered'),
    metric('booking rate', 'booking_rate'),
    metric('escalation rate', 'escalation_rate'),
  );
  grid.push(metric('containment rate', 'containment_rate'), metric('average turns', 'avg_turns'), metric('average TTFB (s)', 'avg_ttfb_s'));
  grid.push(
    metric('ASR WER (sampled calls)', 'asr_wer'),
    metric('cost per call (audio, USD)', 'cost_per_call'),
    metric('cost per booking (audio, USD)', 'cost_per_booking'),
  );
  return grid;
}

/** Columns of the pii-free tab: what a public dashboard needs (no ids of people or reviewers). */
const PUBLIC_FIELDS: EventField[] = [
  'timestamp',
  'actor_type',
  'provider',
  'model',
  'region',
  'input_tokens',
  'output_tokens',
  'latency_ms',
  'cost_usd',
  'customer_id',
  'pii_flag',
  'decision',
  'error_code',
];

function letter(column: number): string {
  let s = '';
  for (let n = column; n > 0; n = Math.floor((n - 1) / 26)) s = String.fromCharCode(65 + ((n - 1) % 26)) + s;
  return s;
}

/** A live QUERY over the events tab that drops pii rows; Sheets recalculates it on every change. */
function publicQueryFormula(): string {
  const columns = PUBLIC_FIELDS.map((f) => letter(columnOf(f))).join(', ');
  return `=QUERY(events!A:${letter(EVENT_FIELDS.length)}, "select ${columns} where ${letter(columnOf('pii_flag'))} <> true", 1)`;
}

function ensureTab(svc: MeterServices, name: string): SheetLike {
  return svc.spreadsheet.getSheetByName(name) ?? svc.spreadsheet.insertSheet(name);
}

/** Keeps the public tab's formula in place and its grid as tall as the events tab. */
function refreshPublicTab(svc: MeterServices, eventRows: number): SheetLike {
  const sheet = ensureTab(svc, PUBLIC_TAB);
  const width = PUBLIC_FIELDS.length;
  const maxCols = sheet.getMaxColumns();
  if (maxCols > width) sheet.deleteColumns(width + 1, maxCols - width);
  else if (maxCols < width) sheet.insertColumnsAfter(maxCols, width - maxCols);
  const needed = eventRows + 1;
  const maxRows = sheet.getMaxRows();
  if (maxRows < needed) sheet.insertRowsAfter(maxRows, needed - maxRows);
  sheet.getRange(1, 1).setFormula(publicQueryFormula());
  return sheet;
}

export interface DigestRefresh {
  figures: DigestFigures;
  message: string;
}

/** `refreshDigest()`: reads the events tab once and rewrites the Digest tab's fixed block. */
export function refreshDigest(svc: MeterServices): DigestRefresh {
  const rows = readAllRows(getEventsSheet(svc.spreadsheet));
  const figures = computeDigest(rows, svc.now().getTime());
  const calls = svc.spreadsheet.getSheetByName('calls');
  if (calls) {
    const last = calls.getLastRow();
    const callRows = last >= 2 ? calls.getRange(2, 1, last - 1, 14).getValues() : [];
    figures.voice = { last7d: voiceRollup(callRows, svc.now().getTime(), 7), last30d: voiceRollup(callRows, svc.now().getTime(), 30) };
  }
  const sheet = ensureTab(svc, DIGEST_TAB);
  const grid = digestGrid(figures);
  if (sheet.getMaxRows() < grid.length) sheet.insertRowsAfter(sheet.getMaxRows(), grid.length - sheet.getMaxRows());
  sheet.getRange(1, 1, grid.length, LAYOUT.width).setValues(grid);
  sheet.getRange(LAYOUT.scoreRow, 1, 1, 3).setNumberFormat('"$"#,##0.00');
  if (sheet.getCharts().length === 0) {
    const series = sheet.getRange(LAYOUT.dailyHeader + 1, 1, SERIES_DAYS + 1, 2);
    const chart = sheet
      .newChart()
      .setChartType(svc.lineChart as never)
      .addRange(series as never)
      .setPosition(1, LAYOUT.width + 2, 0, 0)
      .setOption('title', 'Daily cost (USD), last 30 days')
      .setOption('legend', { position: 'none' })
      .build();
    sheet.insertChart(chart as never);
  }
  refreshPublicTab(svc, rows.length);
  const message = `digest refreshed: today $${figures.today.toFixed(4)}, 7 days $${figures.last7d.toFixed(2)}, 30 days $${figures.last30d.toFixed(2)}`;
  svc.log(`refreshDigest: ${message}`);
  return { figures, message };
}

/** Looker Studio Linking API: a copy of the template report on the pii-free tab. */
export function lookerReportUrl(svc: MeterServices, config: ConfigValues = readConfig(svc.spreadsheet)): string {
  const template = configText(config, 'LOOKER_TEMPLATE_REPORT_ID');
  if (!template) throw new Error('Config LOOKER_TEMPLATE_REPORT_ID is empty: put the id of your template report there (see README)');
  const sheet = svc.spreadsheet.getSheetByName(PUBLIC_TAB);
  if (!sheet) throw new Error(`the "${PUBLIC_TAB}" tab is missing: run "Refresh digest" from the Meter menu first`);
  const q = (s: string) => encodeURIComponent(s);
  return (
    'https://lookerstudio.google.com/reporting/create' +
    `?c.reportId=${q(template)}&r.reportName=${q('AI spend')}` +
    `&ds.ds0.connector=googleSheets&ds.ds0.spreadsheetId=${q(svc.spreadsheet.getId())}` +
    `&ds.ds0.worksheetId=${sheet.getSheetId()}&ds.ds0.hasHeader=true&ds.ds0.datasourceName=${q('AI events (no PII)')}`
  );
}

const EMAIL = /^[^\s@,;]+@[^\s@,;]+\.[^\s@,;]+$/;
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

export interface WeeklyDigestResult {
  sent: boolean;
  recipients: string[];
  message: string;
}

/** `sendWeeklyDigest()`: one e-mail to TEAM_EMAILS with the scorecards, the top tables and links. */
export function sendWeeklyDigest(svc: MeterServices): WeeklyDigestResult {
  const config = readConfig(svc.spreadsheet);
  const listed = configText(config, 'TEAM_EMAILS')
    .split(/[,;\s]+/)
    .filter(Boolean);
  const bad = listed.filter((a) => !EMAIL.test(a));
  const finish = (sent: boolean, recipients: string[], message: string): WeeklyDigestResult => {
    svc.log(`sendWeeklyDigest: ${message}`);
    return { sent, recipients, message };
  };
  if (bad.length) return finish(false, [], `Config TEAM_EMAILS has entries that are not e-mail addresses: ${bad.join(', ')}; nothing sent`);
  if (listed.length === 0) return finish(false, [], 'Config TEAM_EMAILS is empty; nothing sent');
  const quota = svc.mail.getRemainingDailyQuota();
  if (quota < listed.length) {
    return finish(
      false,
      listed,
      `MailApp quota left today is ${quota}, ${listed.length} recipient(s) needed; nothing sent (the next Monday run tries again, or send from the menu)`,
    );
  }
  const { figures } = refreshDigest(svc);
  const sheetUrl = svc.spreadsheet.getUrl();
  const digestTab = svc.spreadsheet.getSheetByName(DIGEST_TAB);
  const links: Array<[string, string]> = [
    ['Digest tab', `${sheetUrl}#gid=${digestTab ? digestTab.getSheetId() : 0}`],
    ['Meter spreadsheet', sheetUrl],
  ];
  try {
    links.push(['Looker Studio report', lookerReportUrl(svc, config)]);
  } catch {
    // No template configured: the e-mail simply has no report link.
  }
  const money = (n: number, d = 2) => `$${n.toFixed(d)}`;
  const lines = [
    `AI spend digest, week to ${figures.generatedAt.slice(0, 10)} (UTC)`,
    '',
    `Cost today: ${money(figures.today, 4)}   Last 7 days: ${money(figures.last7d)}   Last 30 days: ${money(figures.last30d)}`,
    '',
    'Top customers by cost, last 7 days:',
    ...figures.topCustomers7d.map((c) => `  ${c.customer_id}: ${money(c.cost_usd)} (${c.calls} calls)`),
    '',
    'Top models by tokens, last 30 days:',
    ...figures.topModels30d.map(
      (m) =>
        `  ${m.model}: ${m.tokens_total} tokens, ${money(m.cost_usd)}, ${m.usd_per_1k_tokens === null ? 'n/a' : money(m.usd_per_1k_tokens, 4)} per 1K tokens`,
    ),
    '',
    ...links.map(([label, url]) => `${label}: ${url}`),
    '',
    `Rows flagged as personal data (${figures.piiRowsExcluded}) are left out.`,
  ];
  const table = (head: string[], body: string[][]) =>
    `<table cellpadding="4" style="border-collapse:collapse"><tr>${head.map((h) => `<th align="left">${esc(h)}</th>`).join('')}</tr>` +
    body.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('') +
    '</table>';
  const html = [
    `<h2>AI spend digest</h2><p>Week to ${figures.generatedAt.slice(0, 10)} (UTC)</p>`,
    table(['Today', 'Last 7 days', 'Last 30 days'], [[money(figures.today, 4), money(figures.last7d), money(figures.last30d)]]),
    '<h3>Top customers by cost, last 7 days</h3>',
    table(
      ['customer_id', 'cost', 'calls'],
      figures.topCustomers7d.map((c) => [c.customer_id, money(c.cost_usd), String(c.calls)]),
    ),
    '<h3>Top models by tokens, last 30 days</h3>',
    table(
      ['model', 'tokens', 'cost', '$ per 1K tokens'],
      figures.topModels30d.map((m) => [
        m.model,
        String(m.tokens_total),
        money(m.cost_usd),
        m.usd_per_1k_tokens === null ? 'n/a' : money(m.usd_per_1k_tokens, 4),
      ]),
    ),
    `<p>${links.map(([label, url]) => `<a href="${esc(url)}">${esc(label)}</a>`).join(' · ')}</p>`,
    `<p style="color:#666">Rows flagged as personal data (${figures.piiRowsExcluded}) are left out.</p>`,
  ].join('\n');
  svc.mail.sendEmail({
    to: listed.join(','),
    subject: `AI spend digest: ${money(figures.last7d)} in the last 7 days`,
    body: lines.join('\n'),
    htmlBody: html,
    name: 'AI usage meter',
  });
  return finish(true, listed, `sent to ${listed.length} recipient(s)`);
}

/**
 * The `Digest` tab, rewritten by `refreshDigest()` (hourly and from the menu): scorecards (and the
 * part of them that is estimated), calls without a price and cost cells that hold no number, top
 * customers and models, the daily series with its chart, the voice rollups. The layout is fixed
 * (same cells every refresh), so the chart's range never moves.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import { fullness, warnNearCellLimit } from './cell-limit-warning';
import { SERIES_DAYS, computeDigest, estimatedParts, type DigestFigures } from './digest';
import { getEventsSheet, readAllRows } from './events-sheet';
import { publicSpareRows, publicTabGrid, refreshPublicTab } from './public-tab';
import type { MeterServices, Sheet } from './services';
import { checkSheetTimeZone } from './sheet-time-zone';
import { cellsByTab, giveUpSpare, growFor, insertTabs } from './tabs';
import { voiceRollups, type VoiceRollup } from './voice-rollup';

export const DIGEST_TAB = 'Digest';
const TOP_N = 10;

/** Width 4; rows of the fixed blocks. */
const LAYOUT = {
  width: 4,
  scoreRow: 4,
  customersHeader: 7,
  modelsHeader: 7 + TOP_N + 3,
  dailyHeader: 7 + 2 * (TOP_N + 3),
};

const pad = (cells: unknown[]): unknown[] => [...cells, ...new Array(LAYOUT.width - cells.length).fill('')];
const text = (s: string) => (s === '' ? '' : `'${s}`);

function voiceBlock(v: DigestFigures['voice'], unread = ''): unknown[][] {
  const metric = (label: string, key: keyof VoiceRollup) =>
    pad([label, v ? (v.last7d[key] ?? 'n/a') : 'n/a', v ? (v.last30d[key] ?? 'n/a') : 'n/a']);
  return [
    pad(['Voice concierge (calls tab)', text(unread && `not read: ${unread}`)]),
    pad(['metric', 'last 7 days', 'last 30 days']),
    metric('calls', 'calls'),
    metric('answered calls', 'answered'),
    metric('booking rate', 'booking_rate'),
    metric('escalation rate', 'escalation_rate'),
    metric('containment rate', 'containment_rate'),
    metric('average turns', 'avg_turns'),
    metric('average TTFB (s)', 'avg_ttfb_s'),
    metric('ASR WER (sampled calls)', 'asr_wer'),
    metric('cost per call (model, USD)', 'cost_per_call'),
    metric('cost per booking (model, USD)', 'cost_per_booking'),
    metric('calls with a cost that is not a number ≥ 0', 'unreadable_costs'),
  ];
}

/** The Digest tab's cells, top to bottom; `full` says how full the spreadsheet is. */
function digestGrid(d: DigestFigures, full: string): unknown[][] {
  const grid: unknown[][] = [];
  grid.push(pad(['AI spend digest', `updated ${d.generatedAt.slice(0, 16).replace('T', ' ')} UTC`, text(full)]));
  grid.push(pad([`Rows with pii_flag TRUE are left out of this tab (${d.piiRowsExcluded} row(s)).`]));
  // Beside the scorecards, the part of each that is an estimate (calls marked ESTIMATED, counted in them).
  grid.push(pad(['Cost today (UTC)', 'Cost last 7 days', 'Cost last 30 days', 'Of which estimated: today / 7 days / 30 days']));
  grid.push(pad([d.today, d.last7d, d.last30d, text(estimatedParts(d).join(' / '))]));
  // Their cost is not known in full (counted above at the part known, 0 when none is), so the scorecards are too low.
  // Beside them, the rows whose cost cell holds no number ≥ 0 (typed by hand), left out of the scorecards.
  grid.push(
    pad([
      'Calls without a price today',
      'Calls without a price, last 7 days',
      'Calls without a price, last 30 days',
      'Rows with a cost that is not a number ≥ 0, last 30 days',
    ]),
  );
  grid.push(pad([d.unpriced.today, d.unpriced.last7d, d.unpriced.last30d, d.unreadableCosts30d]));
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
  grid.push(...voiceBlock(d.voice, d.voiceUnread));
  return grid;
}

export interface DigestRefresh {
  figures: DigestFigures;
  message: string;
}

/** The events tab as the public tab follows it: its rows, and the spare rows kept beyond them (publicSpareRows). */
export interface EventRows {
  rows: number;
  spare: number;
}

/** The digest's figures, from one read of the events tab (and the calls tab), and how many event rows it read. */
export function digestFigures(svc: MeterServices): { figures: DigestFigures; eventRows: EventRows; voiceRefusal?: MeterRefusal } {
  const rows = readAllRows(getEventsSheet(svc.spreadsheet));
  checkSheetTimeZone(svc.spreadsheet);
  const nowMs = svc.now().getTime();
  const figures = computeDigest(rows, nowMs);
  const eventRows = { rows: rows.length, spare: publicSpareRows(rows, nowMs) };
  try {
    figures.voice = voiceRollups(svc);
  } catch (error) {
    // The calls tab edited by hand (columns moved, renamed): the spend figures, the public tab and the
    // weekly e-mail (which has no voice figures) do not wait for it; refreshDigest still fails saying so.
    if (!(error instanceof MeterRefusal)) throw error;
    figures.voice = null;
    figures.voiceUnread = error.message;
    return { figures, eventRows, voiceRefusal: error };
  }
  return { figures, eventRows };
}

/**
 * Rewrites the Digest tab's fixed block and the public tab's grid from the figures; the tabs' cells,
 * counted once the public tab is sized.
 */
export function writeDigestTabs(svc: MeterServices, figures: DigestFigures, eventRows: EventRows): ReturnType<typeof cellsByTab> {
  const rows = digestGrid(figures, '').length;
  // First, for both tabs together: the cell limit is the one thing that can refuse them, and then neither tab changes.
  // The Digest keeps the columns it was made with (Google's 26): its rows grow back at that width.
  const width = Math.max(LAYOUT.width, svc.spreadsheet.getSheetByName(DIGEST_TAB)?.getMaxColumns() ?? 0);
  const grids = [publicTabGrid(eventRows.rows), { name: DIGEST_TAB, rows, columns: width }];
  giveUpSpare(svc.spreadsheet, grids[0], grids); // the public tab's spare rows, before the Digest is refused room
  const [, sheet] = insertTabs(svc.spreadsheet, grids);
  // Only a Digest shortened by hand is shorter than its block. Grown before the public tab takes its
  // spare rows, which it does only where they fit after: they must not take the room counted above for the Digest.
  growFor(svc.spreadsheet, sheet, rows, 0);
  refreshPublicTab(svc, eventRows.rows, eventRows.spare);
  const tabs = cellsByTab(svc.spreadsheet);
  const grid = digestGrid(figures, fullness(tabs));
  sheet.getRange(1, 1, grid.length, LAYOUT.width).setValues(grid);
  // Today to 4 decimals, as the spend answer, the alert and the e-mail: a sub-cent day showed $0.00 beside its estimated part.
  sheet.getRange(LAYOUT.scoreRow, 1, 1, 3).setNumberFormats([['"$"#,##0.0000', '"$"#,##0.00', '"$"#,##0.00']]);
  addChart(svc, sheet);
  return tabs;
}

/** The daily series' line chart, unless the tab has one. */
function addChart(svc: MeterServices, sheet: Sheet): void {
  if (sheet.getCharts().length > 0) return;
  const series = sheet.getRange(LAYOUT.dailyHeader + 1, 1, SERIES_DAYS + 1, 2);
  const chart = sheet
    .newChart()
    .setChartType(svc.lineChart)
    .addRange(series)
    .setPosition(1, LAYOUT.width + 2, 0, 0)
    .setOption('title', 'Daily cost (USD), last 30 days')
    .setOption('legend', { position: 'none' })
    .build();
  sheet.insertChart(chart);
}

/** Writes the tabs, then warns when the spreadsheet nears the cell limit (also when the tabs were refused); what the log says of it. */
function writeAndWarn(svc: MeterServices, figures: DigestFigures, eventRows: EventRows): string {
  let tabs: ReturnType<typeof cellsByTab>;
  try {
    tabs = writeDigestTabs(svc, figures, eventRows);
  } catch (error) {
    svc.log(`refreshDigest: ${warnNearCellLimit(svc)}`); // a spreadsheet too full for them is what the warning is for
    throw error;
  }
  return warnNearCellLimit(svc, tabs);
}

/**
 * `refreshDigest()`: reads the events tab once, rewrites the Digest tab's fixed block, and warns near
 * the cell limit. A calls tab it cannot read fails the run once the rest is written, naming why.
 */
export function refreshDigest(svc: MeterServices): DigestRefresh {
  const done = refreshDigestTabs(svc);
  if (done instanceof MeterRefusal) throw done;
  return done;
}

/** refreshDigest's work; a calls tab it cannot read is returned (its refusal) once the rest is written, not thrown. */
export function refreshDigestTabs(svc: MeterServices): DigestRefresh | MeterRefusal {
  const { figures, eventRows, voiceRefusal } = digestFigures(svc);
  const cells = writeAndWarn(svc, figures, eventRows);
  if (voiceRefusal) {
    svc.log(`refreshDigest: the spend figures are refreshed, the voice rollups are not: ${voiceRefusal.message}`);
    return voiceRefusal;
  }
  const unpriced = figures.unpriced.last7d ? `; ${figures.unpriced.last7d} call(s) without a price in 7 days` : '';
  const unreadable = figures.unreadableCosts30d
    ? `; ${figures.unreadableCosts30d} row(s) with a cost that is not a number ≥ 0 in 30 days, left out`
    : '';
  const estimated = figures.estimated.last7d ? `; $${figures.estimated.last7d.toFixed(2)} of it estimated in 7 days` : '';
  const message = `digest refreshed: today $${figures.today.toFixed(4)}, 7 days $${figures.last7d.toFixed(2)}, 30 days $${figures.last30d.toFixed(2)}${estimated}${unpriced}${unreadable}; ${cells}`;
  svc.log(`refreshDigest: ${message}`);
  return { figures, message };
}

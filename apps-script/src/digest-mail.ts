/**
 * `sendWeeklyDigest()`: one e-mail to Config TEAM_EMAILS (Mondays 08:00 UTC) with the scorecards,
 * the part of the cost that is estimated, the calls without a price and the cost cells it could not
 * read, the top tables and links. Rows
 * flagged as personal data are left out. The remaining MailApp quota is checked first: the e-mail
 * goes to everyone or to no one. The Digest tab is rewritten on the way, but a tab that cannot be
 * (the spreadsheet full, Sheets timing out) does not stop the e-mail: it says so instead.
 */
import { configText, readConfig } from './config';
import { estimatedSentence, unpricedSentence, unreadableCostSentence, usdText, type DigestFigures } from './digest';
import { DIGEST_TAB, digestFigures, writeDigestTabs, type EventRows } from './digest-tab';
import { errorText } from './error-text';
import { lookerReportUrl } from './public-tab';
import type { MeterServices } from './services';

const EMAIL = /^[^\s@,;]+@[^\s@,;]+\.[^\s@,;]+$/;
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
/** A cost: 2 decimals (today's 4), more when they would show a cost above 0 as $0.00 (digest.ts). */
const money = usdText;
/**
 * $ per 1K tokens: 4 decimals, or 2 significant digits below $0.001 (up to 10 decimals):
 * an embedding model's $0.00002 read "$0.0000 per 1K tokens", as if it cost nothing.
 */
const perK = (n: number | null) => {
  if (n === null) return 'n/a';
  let d = 4;
  while (d < 10 && n > 0 && n < 10 ** (1 - d)) d++;
  return `$${n.toFixed(d)}`;
};

export interface WeeklyDigestResult {
  sent: boolean;
  recipients: string[];
  message: string;
}

/**
 * The line saying the calls tab was not read (why: its refusal's message). The Digest's voice block
 * shows n/a only when the tab was written (`stale` empty); else it still holds the last refresh's.
 */
const voiceUnread = (why: string, stale: string) =>
  `The voice rollups (calls tab) were not read${stale ? '' : ", the Digest's voice block left n/a"}: ${why}`;

/** What people should know about the costs: the part estimated, calls without a price, cells not read. */
const notes = (f: DigestFigures) => [estimatedSentence(f, money), unpricedSentence(f), unreadableCostSentence(f)].filter(Boolean);

function plainBody(f: DigestFigures, links: Array<[string, string]>, stale: string, unread: string): string {
  return [
    `AI spend digest, week to ${f.generatedAt.slice(0, 10)} (UTC)`,
    '',
    `Cost today: ${money(f.today, 4)}   Last 7 days: ${money(f.last7d)}   Last 30 days: ${money(f.last30d)}`,
    ...notes(f),
    '',
    'Top customers by cost, last 7 days:',
    ...f.topCustomers7d.map((c) => `  ${c.customer_id}: ${money(c.cost_usd)} (${c.calls} calls)`),
    '',
    'Top models by tokens, last 30 days:',
    ...f.topModels30d.map(
      (m) => `  ${m.model}: ${m.tokens_total} tokens, ${money(m.cost_usd)}, ${perK(m.usd_per_1k_tokens)} per 1K tokens`,
    ),
    '',
    ...links.map(([label, url]) => `${label}: ${url}`),
    ...(stale ? [`The Digest tab could not be refreshed: ${stale}.`] : []),
    ...(unread ? [`${voiceUnread(unread, stale)}.`] : []),
    '',
    `Rows flagged as personal data (${f.piiRowsExcluded}) are left out.`,
  ].join('\n');
}

function htmlBody(f: DigestFigures, links: Array<[string, string]>, stale: string, unread: string): string {
  const table = (head: string[], body: string[][]) =>
    `<table cellpadding="4" style="border-collapse:collapse"><tr>${head.map((h) => `<th align="left">${esc(h)}</th>`).join('')}</tr>` +
    body.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('') +
    '</table>';
  return [
    `<h2>AI spend digest</h2><p>Week to ${f.generatedAt.slice(0, 10)} (UTC)</p>`,
    table(['Today', 'Last 7 days', 'Last 30 days'], [[money(f.today, 4), money(f.last7d), money(f.last30d)]]),
    ...notes(f).map((s) => `<p><b>${esc(s)}</b></p>`),
    '<h3>Top customers by cost, last 7 days</h3>',
    table(
      ['customer_id', 'cost', 'calls'],
      f.topCustomers7d.map((c) => [c.customer_id, money(c.cost_usd), String(c.calls)]),
    ),
    '<h3>Top models by tokens, last 30 days</h3>',
    table(
      ['model', 'tokens', 'cost', '$ per 1K tokens'],
      f.topModels30d.map((m) => [m.model, String(m.tokens_total), money(m.cost_usd), perK(m.usd_per_1k_tokens)]),
    ),
    `<p>${links.map(([label, url]) => `<a href="${esc(url)}">${esc(label)}</a>`).join(' · ')}</p>`,
    ...(stale ? [`<p>The Digest tab could not be refreshed: ${esc(stale)}.</p>`] : []),
    ...(unread ? [`<p>${esc(voiceUnread(unread, stale))}.</p>`] : []),
    `<p style="color:#666">Rows flagged as personal data (${f.piiRowsExcluded}) are left out.</p>`,
  ].join('\n');
}

function digestLinks(svc: MeterServices, config: ReturnType<typeof readConfig>): Array<[string, string]> {
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
  return links;
}

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
  // A calls tab it cannot read leaves the Digest tab's voice block unread (and says so there): the e-mail has no voice figures.
  // Said apart from a tab not refreshed: its spend figures were.
  const { figures, eventRows, voiceRefusal } = digestFigures(svc);
  const stale = refreshTabs(svc, figures, eventRows);
  const unread = voiceRefusal?.message ?? '';
  const links = digestLinks(svc, config);
  svc.mail.sendEmail({
    to: listed.join(','),
    subject: `AI spend digest: ${money(figures.last7d)} in the last 7 days`,
    body: plainBody(figures, links, stale, unread),
    htmlBody: htmlBody(figures, links, stale, unread),
    name: 'AI usage meter',
  });
  const notRead = unread ? `; the voice rollups were not read: ${unread}` : '';
  return finish(
    true,
    listed,
    `sent to ${listed.length} recipient(s)${stale ? `; the Digest tab could not be refreshed (${stale})` : ''}${notRead}`,
  );
}

/**
 * The Digest tab rewritten with the e-mail's figures; '' or why it could not be. The e-mail goes
 * out either way: it has its figures, and the weekly run is not tried again for a week.
 */
function refreshTabs(svc: MeterServices, figures: DigestFigures, eventRows: EventRows): string {
  try {
    writeDigestTabs(svc, figures, eventRows);
    return '';
  } catch (error) {
    return errorText(error);
  }
}

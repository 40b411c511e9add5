/**
 * The entry file: the only place that touches Apps Script globals. Every function exported here
 * becomes a top-level function of the bundle (build.mjs writes the wrappers), which is what web
 * apps, triggers, menus and the editor's Run button call. Logic lives in the modules; this file
 * gathers the services, hands them over and turns replies into ContentService output.
 */
import { MeterRefusal } from '../../schema/meter-reply';
import * as alerts from './alerts';
import { backOfficeAction } from './backoffice';
import { exportCallsSince, storeCalls } from './calls-tab';
import * as archive from './archive-export';
import * as digestMail from './digest-mail';
import * as digestTab from './digest-tab';
import { lookerReportUrl } from './public-tab';
import * as retention from './retention';
import { setup as runSetup } from './setup';
import type { MeterServices } from './services';
import { spendSummary } from './spend';
import { handleGet, handlePost, jsonReply, type WebEvent, type WebReply, type WebRoutes } from './web';

function services(): MeterServices {
  return {
    spreadsheet: SpreadsheetApp.getActiveSpreadsheet(),
    lock: LockService.getScriptLock(),
    properties: PropertiesService.getScriptProperties(),
    newDataValidation: () => SpreadsheetApp.newDataValidation(),
    triggers: ScriptApp,
    monday: ScriptApp.WeekDay.MONDAY,
    uuid: () => Utilities.getUuid(),
    now: () => new Date(),
    flush: () => SpreadsheetApp.flush(),
    log: (message) => console.log(message),
    fetch: (url, options) => UrlFetchApp.fetch(url, options),
    mail: MailApp,
    drive: DriveApp,
    lineChart: Charts.ChartType.LINE,
    base64: (text) => Utilities.base64Encode(text),
    calendar: (id) => (id ? CalendarApp.getCalendarById(id) : CalendarApp.getDefaultCalendar()),
  };
}

/** What an export answers: the events (the default) or the calls; anything else is refused by name. */
function exportOf(what: string | undefined): 'events' | 'calls' {
  if (what === undefined || what === '' || what === 'events' || what === 'calls') return what === 'calls' ? 'calls' : 'events';
  throw new MeterRefusal('invalid_argument', `what: expected events or calls, got "${what.slice(0, 50)}"`);
}

const ROUTES: WebRoutes = {
  get: {
    spend: (svc) => jsonReply(spendSummary(svc)),
    export: (svc, params) => ({
      kind: 'text',
      mimeType: 'csv',
      body: exportOf(params.what) === 'calls' ? exportCallsSince(svc, params.since) : archive.exportSince(svc, params.since),
    }),
  },
  post: {
    book_slot: (svc, body) => backOfficeAction(svc, 'book_slot', body),
    reschedule_slot: (svc, body) => backOfficeAction(svc, 'reschedule_slot', body),
    create_lead: (svc, body) => backOfficeAction(svc, 'create_lead', body),
    route_to_voicemail: (svc, body) => backOfficeAction(svc, 'route_to_voicemail', body),
  },
  postBodyKeys: {
    calls: (svc, body) => storeCalls(svc, body),
  },
};

function output(reply: WebReply): GoogleAppsScript.Content.TextOutput {
  if (reply.kind === 'text') {
    return ContentService.createTextOutput(reply.body).setMimeType(ContentService.MimeType.CSV);
  }
  return ContentService.createTextOutput(JSON.stringify(reply.body)).setMimeType(ContentService.MimeType.JSON);
}

/** Shows a result to whoever ran a menu item; triggers and the editor have no UI, so just log. */
function tell(message: string): string {
  console.log(message);
  try {
    SpreadsheetApp.getActiveSpreadsheet().toast(message, 'Meter', 10);
  } catch {
    // No spreadsheet UI in this execution (trigger or web app).
  }
  return message;
}

/** Web app: ingest (and the back-office actions). */
export function doPost(e: WebEvent): GoogleAppsScript.Content.TextOutput {
  return output({ kind: 'json', body: handlePost(services(), ROUTES, e) });
}

/** Web app: read-only actions (`?action=spend`, `?action=export&since=`). */
export function doGet(e: WebEvent): GoogleAppsScript.Content.TextOutput {
  return output(handleGet(services(), ROUTES, e));
}

/** Creates or repairs tabs, formats, validation and triggers; safe to run again. */
export function setup(): string {
  const report = runSetup(services());
  return tell(
    [
      report.changes.length ? `Changed: ${report.changes.join('; ')}` : 'Nothing to change: the meter is set up.',
      ...report.notes.map((n) => `Note: ${n}`),
    ].join('\n'),
  );
}

/** Time-driven, every 10 minutes: Slack alert when a cap is crossed. */
export function checkSpendCaps(): string {
  return tell(alerts.checkSpendCaps(services()).message);
}

/** Time-driven, daily 03:00 UTC: deletes exported rows older than the short window. */
export function applyRetention(): string {
  return tell(retention.applyRetention(services()).message);
}

/** Time-driven, daily 01:00 UTC: previous day's events (and late arrivals) to the archive folder. */
export function exportArchive(): string {
  return tell(archive.exportArchive(services()).message);
}

/** Time-driven, Mondays 08:00 UTC: the digest e-mail to TEAM_EMAILS. */
export function sendWeeklyDigest(): string {
  return tell(digestMail.sendWeeklyDigest(services()).message);
}

/** Time-driven, hourly, and from the menu: rewrites the Digest tab. */
export function refreshDigest(): string {
  return tell(digestTab.refreshDigest(services()).message);
}

/** Menu: opens a dialog with the Looker Studio Linking API URL. */
export function showLookerReportLink(): string {
  const url = lookerReportUrl(services());
  const safe = url.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
  SpreadsheetApp.getUi().showModalDialog(
    HtmlService.createHtmlOutput(
      `<p>Opens a copy of the template report on the <b>events_public</b> tab (no rows flagged as personal data).</p>` +
        `<p><a href="${safe}" target="_blank" rel="noopener">Open the Looker Studio report</a></p>`,
    )
      .setWidth(420)
      .setHeight(140),
    'Looker Studio report',
  );
  return url;
}

/** Simple trigger: the meter's menu. */
export function onOpen(): void {
  SpreadsheetApp.getUi()
    .createMenu('Meter')
    .addItem('Set up or repair', 'setup')
    .addItem('Refresh digest', 'refreshDigest')
    .addItem('Check spend caps now', 'checkSpendCaps')
    .addItem('Open the Looker Studio report', 'showLookerReportLink')
    .addSeparator()
    .addItem('Export to the archive now', 'exportArchive')
    .addItem('Apply retention now', 'applyRetention')
    .addItem('Send the weekly digest now', 'sendWeeklyDigest')
    .addToUi();
}

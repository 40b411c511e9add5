/**
 * The entry file: the only place that touches Apps Script globals. Every function exported here
 * becomes a top-level function of the bundle (build.mjs writes the wrappers), which is what web
 * apps, triggers, menus and the editor's Run button call. Logic lives in the modules; this file
 * gathers the services, hands them over and turns replies into ContentService output.
 */
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
    log: (message) => console.log(message),
  };
}

const ROUTES: WebRoutes = {
  get: {
    spend: (svc) => jsonReply(spendSummary(svc)),
  },
  post: {},
  postBodyKeys: {},
};

function output(reply: WebReply): GoogleAppsScript.Content.TextOutput {
  if (reply.kind === 'text') {
    return ContentService.createTextOutput(reply.body).setMimeType(ContentService.MimeType.CSV);
  }
  return ContentService.createTextOutput(JSON.stringify(reply.body)).setMimeType(ContentService.MimeType.JSON);
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
  const text = [
    report.changes.length ? `Changed: ${report.changes.join('; ')}` : 'Nothing to change: the meter is set up.',
    ...report.notes.map((n) => `Note: ${n}`),
  ].join('\n');
  console.log(text);
  return text;
}

/** Simple trigger: the meter's menu. */
export function onOpen(): void {
  SpreadsheetApp.getUi()
    .createMenu('Meter')
    .addItem('Set up or repair', 'setup')
    .addToUi();
}

/**
 * Fakes of the other Apps Script services the meter uses, a clock the test controls, and the
 * loader that runs the built bundle (apps-script/dist) in a node:vm context holding only these
 * services: no require, no process, no Buffer, as in Apps Script.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import vm from 'node:vm';
import type { Blob, FetchOptions, MeterServices } from '../../../apps-script/src/services';
import { CallCounter, FakeDataValidationBuilder, FakeSpreadsheet } from './spreadsheet';

export class Clock {
  constructor(public ms = Date.parse('2026-11-22T12:00:00.000Z')) {}
  set(iso: string) {
    this.ms = Date.parse(iso);
  }
  advance(ms: number) {
    this.ms += ms;
  }
  now() {
    return new Date(this.ms);
  }
}

export class FakeLock {
  /** Another execution holds the lock: tryLock answers false. */
  busy = false;
  held = false;
  waits: number[] = [];
  constructor(private readonly calls: CallCounter) {}
  /**
   * The fake cannot tell executions apart: a tryLock while the lock is held is taken to come from
   * another execution (a request arriving while one is running), which waits and gets false.
   */
  tryLock(ms: number) {
    this.calls.count('Lock.tryLock');
    this.waits.push(ms);
    if (this.busy || this.held) return false;
    this.held = true;
    return true;
  }
  waitLock(ms: number) {
    if (!this.tryLock(ms)) throw new Error('Lock timeout: another process was holding the lock for too long.');
  }
  hasLock() {
    this.calls.count('Lock.hasLock');
    return this.held;
  }
  releaseLock() {
    this.calls.count('Lock.releaseLock');
    this.held = false;
  }
}

export class FakeProperties {
  readonly store = new Map<string, string>();
  constructor(private readonly calls: CallCounter) {}
  getProperty(key: string) {
    this.calls.count('Properties.getProperty');
    return this.store.has(key) ? (this.store.get(key) as string) : null;
  }
  setProperty(key: string, value: string) {
    this.calls.count('Properties.setProperty');
    if (typeof value !== 'string') throw new Error('Property values must be strings.');
    this.store.set(key, value);
    return this;
  }
  deleteProperty(key: string) {
    this.calls.count('Properties.deleteProperty');
    this.store.delete(key);
    return this;
  }
  getProperties() {
    this.calls.count('Properties.getProperties');
    return Object.fromEntries(this.store);
  }
}

export interface FakeTriggerSpec {
  handler: string;
  every?: string;
  n?: number;
  atHour?: number;
  weekDay?: unknown;
  timeZone?: string;
  id: string;
}

const weekday = (name: string) => name as unknown as GoogleAppsScript.Base.Weekday;
const LINE_CHART = 'LINE' as unknown as GoogleAppsScript.Charts.ChartType;

export class FakeTrigger {
  constructor(readonly spec: FakeTriggerSpec) {}
  getHandlerFunction() {
    return this.spec.handler;
  }
  getUniqueId() {
    return this.spec.id;
  }
}

class FakeClockTriggerBuilder {
  constructor(
    private readonly app: FakeScriptApp,
    private readonly spec: FakeTriggerSpec,
  ) {}
  everyMinutes(n: number) {
    if (![1, 5, 10, 15, 30].includes(n)) throw new Error('Invalid argument: minutes. Should be 1, 5, 10, 15 or 30');
    Object.assign(this.spec, { every: 'minutes', n });
    return this;
  }
  everyHours(n: number) {
    Object.assign(this.spec, { every: 'hours', n });
    return this;
  }
  everyDays(n: number) {
    Object.assign(this.spec, { every: 'days', n });
    return this;
  }
  everyWeeks(n: number) {
    Object.assign(this.spec, { every: 'weeks', n });
    return this;
  }
  onWeekDay(day: unknown) {
    this.spec.weekDay = day;
    return this;
  }
  atHour(hour: number) {
    if (hour < 0 || hour > 23) throw new Error('Invalid argument: hour');
    this.spec.atHour = hour;
    return this;
  }
  inTimezone(tz: string) {
    this.spec.timeZone = tz;
    return this;
  }
  create() {
    this.app.calls.count('ClockTriggerBuilder.create');
    if (!this.spec.every && this.spec.weekDay === undefined) throw new Error('The trigger has no schedule.');
    const trigger = new FakeTrigger({ ...this.spec });
    this.app.triggers.push(trigger);
    return trigger;
  }
}

export class FakeScriptApp {
  readonly triggers: FakeTrigger[] = [];
  /** Platform enum values: the fake's are their names (the d.ts declares a numeric enum nobody can construct). */
  readonly WeekDay = { MONDAY: weekday('MONDAY'), TUESDAY: weekday('TUESDAY'), SUNDAY: weekday('SUNDAY') };
  serviceUrl = 'https://script.google.com/macros/s/FAKE/exec';
  private next = 1;
  constructor(readonly calls: CallCounter) {}
  getProjectTriggers() {
    this.calls.count('ScriptApp.getProjectTriggers');
    return this.triggers.slice();
  }
  deleteTrigger(trigger: FakeTrigger) {
    this.calls.count('ScriptApp.deleteTrigger');
    const i = this.triggers.indexOf(trigger);
    if (i >= 0) this.triggers.splice(i, 1);
  }
  newTrigger(handler: string) {
    this.calls.count('ScriptApp.newTrigger');
    const spec: FakeTriggerSpec = { handler, id: String(this.next++) };
    return { timeBased: () => new FakeClockTriggerBuilder(this, spec) };
  }
  getService() {
    return { getUrl: () => this.serviceUrl };
  }
}

export class FakeTextOutput {
  private mime = 'TEXT';
  constructor(private readonly content: string) {}
  setMimeType(mime: string) {
    this.mime = mime;
    return this;
  }
  getMimeType() {
    return this.mime;
  }
  getContent() {
    return this.content;
  }
}

export const FakeContentService = {
  MimeType: { JSON: 'JSON', CSV: 'CSV', TEXT: 'TEXT' },
  createTextOutput: (text = '') => new FakeTextOutput(text),
};

export interface FetchRecord {
  url: string;
  options: FetchOptions;
}

export class FakeBlob {
  constructor(
    public name: string,
    readonly bytes: number[],
  ) {}
  setName(name: string) {
    this.name = name;
    return this;
  }
  getName() {
    return this.name;
  }
  getBytes() {
    return this.bytes.slice();
  }
  getBlob() {
    return this;
  }
}

/**
 * UrlFetchApp.fetch: every request is recorded; `respond` decides the answer (a status code, or
 * throw to act as a network failure). muteHttpExceptions false + non-2xx throws, as the real one does.
 * A slow URL: `latencyMs` passes on the clock while the request is out, and `meanwhile` runs then
 * (another request reaching the web app, say).
 */
export class FakeUrlFetch {
  readonly requests: FetchRecord[] = [];
  respond: (req: FetchRecord) => { code: number; body?: string } = () => ({ code: 200, body: 'ok' });
  latencyMs = 0;
  meanwhile: ((req: FetchRecord) => void) | null = null;
  constructor(
    private readonly calls: CallCounter,
    private readonly clock: Clock,
  ) {}
  fetch = (url: string, options: FetchOptions = {}) => {
    this.calls.count('UrlFetchApp.fetch');
    const req = { url, options };
    this.requests.push(req);
    this.clock.advance(this.latencyMs);
    this.meanwhile?.(req);
    const { code, body = '' } = this.respond(req);
    if (!options.muteHttpExceptions && (code < 200 || code >= 300)) {
      throw new Error(`Request failed for ${url} returned code ${code}. Truncated server response: ${body}`);
    }
    return { getResponseCode: () => code, getContentText: () => body, getBlob: () => new FakeBlob('download', [...Buffer.from(body)]) };
  };
  /** Parsed JSON payloads of the requests sent to `url`. */
  payloads(url?: string): any[] {
    return this.requests
      .filter((r) => !url || r.url === url)
      .map((r) => (typeof r.options.payload === 'string' ? JSON.parse(r.options.payload) : (r.options.payload ?? null)));
  }
}

export class FakeMail {
  readonly sent: Array<{ to: string; subject: string; body: string; htmlBody?: string }> = [];
  quota = 100;
  constructor(private readonly calls: CallCounter) {}
  sendEmail(message: { to: string; subject: string; body: string; htmlBody?: string }) {
    this.calls.count('MailApp.sendEmail');
    const n = message.to.split(',').length;
    if (n > this.quota) throw new Error('Service invoked too many times for one day: email.');
    this.quota -= n;
    this.sent.push(message);
  }
  getRemainingDailyQuota() {
    this.calls.count('MailApp.getRemainingDailyQuota');
    return this.quota;
  }
}

export class FakeFile {
  description = '';
  constructor(
    private readonly calls: CallCounter,
    readonly id: string,
    readonly name: string,
    readonly content: string,
    readonly mimeType: string,
  ) {}
  getId() {
    return this.id;
  }
  getName() {
    return this.name;
  }
  getUrl() {
    return `https://drive.google.com/file/d/${this.id}/view`;
  }
  getBlob() {
    return { getDataAsString: () => this.content };
  }
  getDescription() {
    this.calls.count('File.getDescription');
    return this.description;
  }
  setDescription(text: string) {
    this.calls.count('File.setDescription');
    this.description = text;
    return this;
  }
}

export class FakeFolder {
  readonly files: FakeFile[] = [];
  constructor(
    private readonly drive: FakeDrive,
    readonly id: string,
    readonly name: string,
  ) {}
  getId() {
    return this.id;
  }
  getName() {
    return this.name;
  }
  createFile(nameOrBlob: string | Pick<Blob, 'getBlob'>, content = '', mimeType = 'text/plain') {
    this.drive.calls.count('Folder.createFile');
    const blob = typeof nameOrBlob === 'string' ? null : nameOrBlob.getBlob();
    const file = blob
      ? new FakeFile(
          this.drive.calls,
          `file-${this.drive.nextId++}`,
          blob.getName() ?? 'Untitled',
          Buffer.from(blob.getBytes()).toString('latin1'),
          'audio/mpeg',
        )
      : new FakeFile(this.drive.calls, `file-${this.drive.nextId++}`, nameOrBlob as string, content, mimeType);
    this.files.push(file);
    return file;
  }
  getFilesByName(name: string) {
    this.drive.calls.count('Folder.getFilesByName');
    const matches = this.files.filter((f) => f.name === name);
    let i = 0;
    return { hasNext: () => i < matches.length, next: () => matches[i++] };
  }
}

export class FakeDrive {
  readonly folders: FakeFolder[] = [];
  nextId = 1;
  constructor(readonly calls: CallCounter) {}
  createFolder(name: string) {
    this.calls.count('DriveApp.createFolder');
    const folder = new FakeFolder(this, `folder-${this.nextId++}`, name);
    this.folders.push(folder);
    return folder;
  }
  getFolderById(id: string) {
    this.calls.count('DriveApp.getFolderById');
    const folder = this.folders.find((f) => f.id === id);
    if (!folder)
      throw new Error(
        'No item with the given ID could be found. Possibly because you have not edited this item or you do not have permission to access it.',
      );
    return folder;
  }
}

export class FakeCalendarEvent {
  deleted = false;
  readonly tags = new Map<string, string>();
  constructor(
    private readonly calls: CallCounter,
    readonly id: string,
    public title: string,
    public start: Date,
    public end: Date,
    readonly options: { description?: string; location?: string },
  ) {}
  getId() {
    this.calls.count('CalendarEvent.getId');
    return this.id;
  }
  setTime(start: GoogleAppsScript.Base.Date, end: GoogleAppsScript.Base.Date) {
    this.calls.count('CalendarEvent.setTime');
    this.start = new Date(start.getTime());
    this.end = new Date(end.getTime());
    return this;
  }
  /** Apps Script's event tags: key/value pairs stored with the event, readable later. */
  setTag(key: string, value: string) {
    this.calls.count('CalendarEvent.setTag');
    this.tags.set(key, value);
    return this;
  }
  getTag(key: string) {
    this.calls.count('CalendarEvent.getTag');
    return this.tags.get(key) ?? '';
  }
  deleteEvent() {
    this.calls.count('CalendarEvent.deleteEvent');
    this.deleted = true;
  }
  getDescription() {
    this.calls.count('CalendarEvent.getDescription');
    return this.options.description ?? '';
  }
}

export class FakeCalendar {
  readonly events: FakeCalendarEvent[] = [];
  private next = 1;
  constructor(
    readonly id: string,
    private readonly calls: CallCounter,
  ) {}
  createEvent(title: string, start: Date, end: Date, options: { description?: string; location?: string } = {}) {
    this.calls.count('Calendar.createEvent');
    const ev = new FakeCalendarEvent(
      this.calls,
      `evt-${this.next++}@google.com`,
      title,
      new Date(start.getTime()),
      new Date(end.getTime()),
      options,
    );
    this.events.push(ev);
    return ev;
  }
  getEventById(id: string) {
    this.calls.count('Calendar.getEventById');
    return this.events.find((e) => e.id === id && !e.deleted) ?? null;
  }
  /** Events that overlap [start, end), as the real getEvents(startTime, endTime) answers. */
  getEvents(start: GoogleAppsScript.Base.Date, end: GoogleAppsScript.Base.Date) {
    this.calls.count('Calendar.getEvents');
    return this.live().filter((e) => e.start.getTime() < end.getTime() && e.end.getTime() > start.getTime());
  }
  live() {
    return this.events.filter((e) => !e.deleted);
  }
}

export class FakeUi {
  readonly menus: Array<{ name: string; items: Array<[string, string]> }> = [];
  readonly dialogs: Array<{ title: string; html: string }> = [];
  showModalDialog(output: { getContent(): string }, title: string) {
    this.dialogs.push({ title, html: output.getContent() });
  }
  createMenu(name: string) {
    const menu = { name, items: [] as Array<[string, string]> };
    const builder = {
      addItem: (label: string, fn: string) => {
        menu.items.push([label, fn]);
        return builder;
      },
      addSeparator: () => builder,
      addToUi: () => {
        this.menus.push(menu);
      },
    };
    return builder;
  }
}

/** Every fake, wired together. */
export class FakePlatform {
  readonly calls = new CallCounter();
  readonly clock = new Clock();
  readonly spreadsheet = new FakeSpreadsheet(this.calls);
  readonly lock = new FakeLock(this.calls);
  readonly properties = new FakeProperties(this.calls);
  readonly scriptApp = new FakeScriptApp(this.calls);
  readonly ui = new FakeUi();
  readonly urlFetch = new FakeUrlFetch(this.calls, this.clock);
  readonly mail = new FakeMail(this.calls);
  readonly drive = new FakeDrive(this.calls);
  readonly calendar = new FakeCalendar('primary', this.calls);
  readonly logs: string[] = [];
  /** Calls to services outside the spreadsheet made while the script lock was held (should stay empty). */
  readonly outboundUnderLock: string[] = [];

  constructor() {
    this.calls.observe((name) => {
      if (this.lock.held && /^(UrlFetchApp|Calendar|CalendarEvent|DriveApp|Folder|File|MailApp)\./.test(name))
        this.outboundUnderLock.push(name);
    });
  }

  /** The services as modules take them, for unit tests of the modules. */
  services(): MeterServices {
    return {
      spreadsheet: this.spreadsheet,
      lock: this.lock,
      properties: this.properties,
      newDataValidation: () => new FakeDataValidationBuilder(this.calls),
      triggers: this.scriptApp,
      monday: this.scriptApp.WeekDay.MONDAY,
      uuid: () => randomUUID(),
      now: () => this.clock.now(),
      log: (m) => this.logs.push(m),
      fetch: this.urlFetch.fetch,
      mail: this.mail,
      drive: this.drive,
      lineChart: LINE_CHART,
      base64: (text) => Buffer.from(text).toString('base64'),
      calendar: (id) => (id === '' || id === this.calendar.id ? this.calendar : null),
    };
  }

  /** The globals of an Apps Script project, backed by these fakes. */
  globals(): Record<string, unknown> {
    const clock = this.clock;
    const HostDate = Date;
    // The bundle's `new Date()` and `Date.now()` read the test's clock.
    class ClockDate extends HostDate {
      constructor(...args: unknown[]) {
        if (args.length === 0) super(clock.ms);
        else super(...(args as [number]));
      }
      static now() {
        return clock.ms;
      }
    }
    const calls = this.calls;
    return {
      Date: ClockDate,
      SpreadsheetApp: {
        getActiveSpreadsheet: () => this.spreadsheet,
        newDataValidation: () => new FakeDataValidationBuilder(calls),
        getUi: () => this.ui,
      },
      LockService: { getScriptLock: () => this.lock },
      PropertiesService: { getScriptProperties: () => this.properties },
      ScriptApp: this.scriptApp,
      ContentService: FakeContentService,
      Utilities: { getUuid: () => randomUUID(), base64Encode: (text: string) => Buffer.from(text).toString('base64') },
      CalendarApp: {
        getDefaultCalendar: () => this.calendar,
        getCalendarById: (id: string) => (id === this.calendar.id ? this.calendar : null),
      },
      UrlFetchApp: { fetch: this.urlFetch.fetch },
      MailApp: this.mail,
      DriveApp: this.drive,
      Charts: { ChartType: { LINE: LINE_CHART } },
      HtmlService: {
        createHtmlOutput: (html: string) => {
          const out = { getContent: () => html, setWidth: () => out, setHeight: () => out };
          return out;
        },
      },
      console: { log: (...a: unknown[]) => this.logs.push(a.join(' ')), error: (...a: unknown[]) => this.logs.push(a.join(' ')) },
      Logger: { log: (...a: unknown[]) => this.logs.push(a.join(' ')) },
    };
  }
}

export const DIST = join(import.meta.dirname, '..', '..', '..', 'apps-script', 'dist');

/** The built bundle's .js files, concatenated in name order (Apps Script's load order). */
export function bundleSource(): string {
  return readdirSync(DIST)
    .filter((f) => f.endsWith('.js'))
    .sort()
    .map((f) => readFileSync(join(DIST, f), 'utf8'))
    .join('\n');
}

export type Bundle = Record<string, (...args: unknown[]) => unknown>;

/** Loads the built bundle into a fresh V8 context whose globals are the platform's fakes. */
export function loadBundle(platform: FakePlatform): Bundle {
  const context = vm.createContext(platform.globals());
  vm.runInContext(bundleSource(), context, { filename: 'apps-script/dist/meter.js' });
  return context as unknown as Bundle;
}

/** A doPost/doGet event as Apps Script builds it. */
export function webEvent(parameter: Record<string, string> = {}, body?: unknown) {
  return {
    parameter,
    postData:
      body === undefined ? undefined : { contents: typeof body === 'string' ? body : JSON.stringify(body), type: 'application/json' },
  };
}

/** Calls doPost/doGet of a bundle and parses the JSON reply. */
export function callJson(bundle: Bundle, fn: 'doPost' | 'doGet', parameter: Record<string, string> = {}, body?: unknown) {
  const out = bundle[fn](webEvent(parameter, body)) as FakeTextOutput;
  expectMime(out, 'JSON');
  return JSON.parse(out.getContent());
}

function expectMime(out: FakeTextOutput, mime: string) {
  if (out.getMimeType() !== mime) throw new Error(`expected a ${mime} reply, got ${out.getMimeType()}`);
}

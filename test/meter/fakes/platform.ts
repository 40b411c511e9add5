/**
 * Every fake wired together, and the loader that runs the built bundle (apps-script/dist) in a
 * node:vm context holding only these services: no require, no process, no Buffer, as in Apps Script.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import vm from 'node:vm';
import type { MeterServices } from '../../../apps-script/src/services';
import { CallCounter } from './calls';
import { FakeCalendar, FakeDrive, FakeMail, FakeUrlFetch } from './outbound';
import { FakeDataValidationBuilder } from './range';
import { Clock, FakeContentService, FakeLock, FakeProperties, FakeScriptApp, FakeUi, type FakeTextOutput } from './script';
import { FakeSpreadsheet } from './spreadsheet';

export type { FakeTextOutput } from './script';

const LINE_CHART = 'LINE' as unknown as GoogleAppsScript.Charts.ChartType;
/** Calls that change a spreadsheet (Sheets applies them at a flush or at the end of the script). */
const SHEET_WRITE = /^(Range\.(set|clear|createFilter)|Sheet\.(set|clear|delete|insert|hide)|Spreadsheet\.(set|insert)|Filter\.remove)/;

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
  /**
   * Sheet writes made under the script lock and not yet flushed when it was let go (should stay
   * empty). Apps Script buffers a script's spreadsheet writes and applies them at
   * SpreadsheetApp.flush() or when the script ends; the lock does not wait for them (Google's Lock
   * reference: flush before releaseLock). The next execution to take the lock reads the tab without them.
   */
  readonly unflushedAtRelease: string[] = [];
  /** The sheet writes made under the lock since it was taken or the spreadsheet last flushed. */
  private pendingWrites: string[] = [];

  constructor() {
    this.calls.observe((name) => {
      if (this.lock.held && /^(UrlFetchApp|Calendar|CalendarEvent|DriveApp|Folder|File|MailApp)\./.test(name))
        this.outboundUnderLock.push(name);
      this.trackFlush(name);
    });
  }

  private trackFlush(name: string): void {
    if (name === 'Lock.tryLock' || name === 'SpreadsheetApp.flush') this.pendingWrites = [];
    else if (name === 'Lock.releaseLock') {
      if (this.pendingWrites.length) this.unflushedAtRelease.push(...this.pendingWrites);
      this.pendingWrites = [];
    } else if (this.lock.held && SHEET_WRITE.test(name)) this.pendingWrites.push(name);
  }

  /** SpreadsheetApp.flush(): applies the script's pending spreadsheet writes. */
  flush(): void {
    this.calls.count('SpreadsheetApp.flush');
    this.spreadsheet.applyBufferedWrites();
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
      flush: () => this.flush(),
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
        flush: () => this.flush(),
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

/**
 * Fakes of the script's own services: a clock the test controls, LockService, PropertiesService,
 * ScriptApp's triggers, ContentService and the spreadsheet UI.
 */
import type { CallCounter } from './calls';

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
    this.calls.count('Properties.setProperty', key);
    if (typeof value !== 'string') throw new Error('Property values must be strings.');
    this.store.set(key, value);
    this.calls.done('Properties.setProperty', key); // the key as the call's second name
    return this;
  }
  deleteProperty(key: string) {
    this.calls.count('Properties.deleteProperty', key);
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

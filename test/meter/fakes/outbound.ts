/**
 * Fakes of the services outside the spreadsheet: UrlFetchApp (with slow URLs), MailApp, DriveApp
 * (folders, files, blobs) and CalendarApp (events with tags).
 */
import type { Blob, FetchOptions } from '../../../apps-script/src/services';
import type { CallCounter } from './calls';
import type { Clock } from './script';

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

/** Apps Script's limit on a blob: a file made from text is one. */
const BLOB_LIMIT_BYTES = 50 * 1024 * 1024;

export class FakeFolder {
  readonly files: FakeFile[] = [];
  trashed = false;
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
    // Apps Script makes no blob, so no file, of more than 50 MB.
    if (Buffer.byteLength(content) > BLOB_LIMIT_BYTES)
      throw new Error(`Exception: the blob is larger than the maximum of ${BLOB_LIMIT_BYTES} bytes`);
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
    this.drive.calls.done('Folder.createFile');
    return file;
  }
  isTrashed() {
    this.drive.calls.count('Folder.isTrashed');
    return this.trashed;
  }
  setTrashed(trashed: boolean) {
    this.drive.calls.count('Folder.setTrashed');
    this.trashed = trashed;
    return this;
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
    this.calls.done('DriveApp.createFolder');
    return folder;
  }
  /** Every folder of this name, trashed ones too, as the real one answers. */
  getFoldersByName(name: string) {
    this.calls.count('DriveApp.getFoldersByName');
    const matches = this.folders.filter((f) => f.name === name);
    let i = 0;
    return { hasNext: () => i < matches.length, next: () => matches[i++] };
  }
  /** Folders not in the trash whose name starts with `base` (the meter adds the spreadsheet's id). */
  live(base: string) {
    return this.folders.filter((f) => !f.trashed && f.name.startsWith(base));
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
  getStartTime() {
    this.calls.count('CalendarEvent.getStartTime');
    return new Date(this.start.getTime());
  }
  getEndTime() {
    this.calls.count('CalendarEvent.getEndTime');
    return new Date(this.end.getTime());
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
    this.calls.done('Calendar.createEvent');
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

/**
 * The parts of Apps Script's services the meter uses, cut from Google's own type definitions
 * (@types/google-apps-script). Each slice `Pick`s the methods the meter calls, with Google's
 * parameters and results. Where a method leads to another Apps Script object, the result is our
 * slice of that object (`Returning`), so an in-memory fake can stand in for it; overloaded
 * methods are written out with the overloads the meter uses. Modules take these as parameters
 * (never the globals); main.ts passes the real services, so the type checker proves they fit.
 */
type GSpreadsheet = GoogleAppsScript.Spreadsheet.Spreadsheet;
type GSheet = GoogleAppsScript.Spreadsheet.Sheet;
type GRange = GoogleAppsScript.Spreadsheet.Range;
type GTextFinder = GoogleAppsScript.Spreadsheet.TextFinder;
type GChartBuilder = GoogleAppsScript.Spreadsheet.EmbeddedChartBuilder;
type GValidationBuilder = GoogleAppsScript.Spreadsheet.DataValidationBuilder;
type GProperties = GoogleAppsScript.Properties.Properties;
type GScriptApp = GoogleAppsScript.Script.ScriptApp;
type GClockBuilder = GoogleAppsScript.Script.ClockTriggerBuilder;
type GResponse = GoogleAppsScript.URL_Fetch.HTTPResponse;
type GBlob = GoogleAppsScript.Base.Blob;
type GFolder = GoogleAppsScript.Drive.Folder;
type GFileIterator = GoogleAppsScript.Drive.FileIterator;
type GFolderIterator = GoogleAppsScript.Drive.FolderIterator;
type GCalendar = GoogleAppsScript.Calendar.Calendar;
type GCalendarEvent = GoogleAppsScript.Calendar.CalendarEvent;

/** Google's method `K` of `T` with its own parameters, returning `R` (our slice of what it returns). */
type Returning<T, K extends keyof T, R> = T[K] extends (...args: infer A) => unknown ? (...args: A) => R : never;

export type CellValue = string | number | boolean | Date;

interface TextFinder {
  matchCase: Returning<GTextFinder, 'matchCase', TextFinder>;
  matchEntireCell: Returning<GTextFinder, 'matchEntireCell', TextFinder>;
  useRegularExpression: Returning<GTextFinder, 'useRegularExpression', TextFinder>;
  findAll: Returning<GTextFinder, 'findAll', Range[]>;
}

type DataValidation = Pick<GoogleAppsScript.Spreadsheet.DataValidation, 'getAllowInvalid'>;

interface DataValidationBuilder {
  requireValueInList(values: string[], showDropdown: boolean): DataValidationBuilder;
  requireCheckbox(): DataValidationBuilder;
  setAllowInvalid: Returning<GValidationBuilder, 'setAllowInvalid', DataValidationBuilder>;
  build: Returning<GValidationBuilder, 'build', DataValidation>;
}

type Filter = Pick<GoogleAppsScript.Spreadsheet.Filter, 'remove'>;

interface Range extends Pick<GRange, 'getRow' | 'getNumRows' | 'getValues' | 'getValue' | 'getFormulas'> {
  setValues: Returning<GRange, 'setValues', Range>;
  setNumberFormat: Returning<GRange, 'setNumberFormat', Range>;
  setNumberFormats: Returning<GRange, 'setNumberFormats', Range>;
  setFontWeight: Returning<GRange, 'setFontWeight', Range>;
  /** The rule is our slice of Google's DataValidation (a method, so Google's own type fits too). */
  setDataValidation(rule: DataValidation | null): Range;
  createFilter: Returning<GRange, 'createFilter', Filter>;
  createTextFinder: Returning<GRange, 'createTextFinder', TextFinder>;
  setFormula: Returning<GRange, 'setFormula', Range>;
}

type EmbeddedChart = Pick<GoogleAppsScript.Spreadsheet.EmbeddedChart, 'getChartId'>;

interface ChartBuilder {
  setChartType: Returning<GChartBuilder, 'setChartType', ChartBuilder>;
  addRange(range: Range): ChartBuilder;
  setPosition: Returning<GChartBuilder, 'setPosition', ChartBuilder>;
  setOption: Returning<GChartBuilder, 'setOption', ChartBuilder>;
  build: Returning<GChartBuilder, 'build', EmbeddedChart>;
}

export interface Sheet
  extends
    Pick<GSheet, 'getName' | 'getLastRow' | 'getMaxRows' | 'getMaxColumns' | 'deleteRows' | 'deleteColumns'>,
    Pick<GSheet, 'setFrozenRows' | 'getFrozenRows' | 'getSheetId'> {
  getRange(row: number, column: number, numRows?: number, numColumns?: number): Range;
  getRange(a1Notation: string): Range;
  insertRowsAfter: Returning<GSheet, 'insertRowsAfter', Sheet>;
  insertColumnsAfter: Returning<GSheet, 'insertColumnsAfter', Sheet>;
  hideSheet: Returning<GSheet, 'hideSheet', Sheet>;
  getFilter: Returning<GSheet, 'getFilter', Filter | null>;
  getCharts: Returning<GSheet, 'getCharts', EmbeddedChart[]>;
  insertChart(chart: EmbeddedChart): void;
  newChart: Returning<GSheet, 'newChart', ChartBuilder>;
}

export interface Spreadsheet extends Pick<GSpreadsheet, 'getSpreadsheetTimeZone' | 'setSpreadsheetTimeZone' | 'getId' | 'getUrl'> {
  getSheetByName: Returning<GSpreadsheet, 'getSheetByName', Sheet | null>;
  insertSheet(sheetName: string): Sheet;
  getSheets: Returning<GSpreadsheet, 'getSheets', Sheet[]>;
}

type Lock = Pick<GoogleAppsScript.Lock.Lock, 'tryLock' | 'releaseLock'>;

export interface Properties extends Pick<GProperties, 'getProperty'> {
  setProperty: Returning<GProperties, 'setProperty', Properties>;
  deleteProperty: Returning<GProperties, 'deleteProperty', Properties>;
}

type Trigger = Pick<GoogleAppsScript.Script.Trigger, 'getHandlerFunction'>;

interface ClockTriggerBuilder {
  everyMinutes: Returning<GClockBuilder, 'everyMinutes', ClockTriggerBuilder>;
  everyHours: Returning<GClockBuilder, 'everyHours', ClockTriggerBuilder>;
  everyDays: Returning<GClockBuilder, 'everyDays', ClockTriggerBuilder>;
  everyWeeks: Returning<GClockBuilder, 'everyWeeks', ClockTriggerBuilder>;
  onWeekDay: Returning<GClockBuilder, 'onWeekDay', ClockTriggerBuilder>;
  atHour: Returning<GClockBuilder, 'atHour', ClockTriggerBuilder>;
  inTimezone: Returning<GClockBuilder, 'inTimezone', ClockTriggerBuilder>;
  create: Returning<GClockBuilder, 'create', Trigger>;
}

interface Triggers {
  getProjectTriggers: Returning<GScriptApp, 'getProjectTriggers', Trigger[]>;
  deleteTrigger(trigger: Trigger): void;
  newTrigger: Returning<
    GScriptApp,
    'newTrigger',
    { timeBased: Returning<GoogleAppsScript.Script.TriggerBuilder, 'timeBased', ClockTriggerBuilder> }
  >;
}

/** UrlFetchApp.fetch's options, exactly Google's. */
export type FetchOptions = GoogleAppsScript.URL_Fetch.URLFetchRequestOptions;

export interface Blob extends Pick<GBlob, 'getBytes' | 'getName'> {
  setName: Returning<GBlob, 'setName', Blob>;
  /** Makes a Blob a BlobSource, which Folder.createFile takes. */
  getBlob: Returning<GBlob, 'getBlob', Blob>;
}

interface HttpResponse extends Pick<GResponse, 'getResponseCode' | 'getContentText'> {
  getBlob: Returning<GResponse, 'getBlob', Blob>;
}

interface Mail extends Pick<GoogleAppsScript.Mail.MailApp, 'getRemainingDailyQuota'> {
  sendEmail(message: { to: string; subject: string; body: string; htmlBody?: string; name?: string }): void;
}

interface File extends Pick<GoogleAppsScript.Drive.File, 'getId' | 'getName' | 'getUrl' | 'getDescription'> {
  setDescription: Returning<GoogleAppsScript.Drive.File, 'setDescription', File>;
}

export interface Folder extends Pick<GFolder, 'getId' | 'getName' | 'isTrashed'> {
  setTrashed: Returning<GFolder, 'setTrashed', Folder>;
  createFile(blob: Pick<Blob, 'getBlob'>): File;
  createFile(name: string, content: string, mimeType: string): File;
  getFilesByName: Returning<GFolder, 'getFilesByName', Pick<GFileIterator, 'hasNext'> & { next: Returning<GFileIterator, 'next', File> }>;
}

interface Drive {
  getFolderById: Returning<GoogleAppsScript.Drive.DriveApp, 'getFolderById', Folder>;
  createFolder: Returning<GoogleAppsScript.Drive.DriveApp, 'createFolder', Folder>;
  getFoldersByName: Returning<
    GoogleAppsScript.Drive.DriveApp,
    'getFoldersByName',
    Pick<GFolderIterator, 'hasNext'> & { next: Returning<GFolderIterator, 'next', Folder> }
  >;
}

export interface CalendarEvent extends Pick<
  GCalendarEvent,
  'getId' | 'getTag' | 'getDescription' | 'deleteEvent' | 'getStartTime' | 'getEndTime'
> {
  setTime: Returning<GCalendarEvent, 'setTime', CalendarEvent>;
  setTag: Returning<GCalendarEvent, 'setTag', CalendarEvent>;
}

export interface Calendar {
  createEvent(title: string, startTime: Date, endTime: Date, options: { description?: string; location?: string }): CalendarEvent;
  getEventById: Returning<GCalendar, 'getEventById', CalendarEvent | null>;
  getEvents(startTime: Date, endTime: Date): CalendarEvent[];
}

/** Everything the meter's modules need from the platform, gathered by main.ts. */
export interface MeterServices {
  spreadsheet: Spreadsheet;
  /** The script lock (one per script, shared by every web-app request and trigger). */
  lock: Lock;
  /** Script properties: secrets and small state that must not sit in the sheet. */
  properties: Properties;
  newDataValidation: () => DataValidationBuilder;
  triggers: Triggers;
  /** ScriptApp.WeekDay.MONDAY. */
  monday: GoogleAppsScript.Base.Weekday;
  uuid: () => string;
  now: () => Date;
  /** SpreadsheetApp.flush: applies the script's pending sheet writes (Apps Script buffers them until then or the script's end). */
  flush: () => void;
  /** UrlFetchApp.fetch. */
  fetch: (url: string, options: FetchOptions) => HttpResponse;
  mail: Mail;
  drive: Drive;
  /** Utilities.base64Encode, for basic authentication. */
  base64: (text: string) => string;
  /** A calendar by id ('' = the default calendar of the deploying user); null if not found. */
  calendar: (id: string) => Calendar | null;
  /** Charts.ChartType.LINE. */
  lineChart: GoogleAppsScript.Charts.ChartType;
  log: (message: string) => void;
}

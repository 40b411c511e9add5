/**
 * The slices of Apps Script services the meter uses. Modules take these as parameters (never the
 * globals), so tests can hand them in-memory fakes, and `main.ts` hands them the real services:
 * the type checker proves the real ones fit, because main.ts passes them where these are expected.
 */

export type CellValue = string | number | boolean | Date;

interface TextFinderLike {
  matchCase(matchCase: boolean): TextFinderLike;
  matchEntireCell(entire: boolean): TextFinderLike;
  useRegularExpression(useRegEx: boolean): TextFinderLike;
  findAll(): RangeLike[];
}

type DataValidationLike = object;

interface DataValidationBuilderLike {
  requireValueInList(values: string[], showDropdown?: boolean): DataValidationBuilderLike;
  requireCheckbox(): DataValidationBuilderLike;
  setAllowInvalid(allowInvalidData: boolean): DataValidationBuilderLike;
  build(): DataValidationLike;
}

interface FilterLike {
  getRange(): RangeLike;
}

interface RangeLike {
  getRow(): number;
  getNumRows(): number;
  getValues(): unknown[][];
  getValue(): unknown;
  setValues(values: unknown[][]): RangeLike;
  setNumberFormat(format: string): RangeLike;
  setFontWeight(weight: string | null): RangeLike;
  setDataValidation(rule: DataValidationLike | null): RangeLike;
  createFilter(): FilterLike;
  createTextFinder(text: string): TextFinderLike;
  clearContent(): RangeLike;
  setFormula(formula: string): RangeLike;
}

type ChartLike = object;

interface ChartBuilderLike {
  setChartType(type: never): ChartBuilderLike;
  addRange(range: never): ChartBuilderLike;
  setPosition(anchorRowPos: number, anchorColPos: number, offsetX: number, offsetY: number): ChartBuilderLike;
  setOption(option: string, value: unknown): ChartBuilderLike;
  build(): ChartLike;
}

export interface SheetLike {
  getName(): string;
  getLastRow(): number;
  getMaxRows(): number;
  getMaxColumns(): number;
  getRange(row: number, column: number, numRows?: number, numColumns?: number): RangeLike;
  getRange(a1Notation: string): RangeLike;
  insertRowsAfter(afterPosition: number, howMany: number): SheetLike;
  deleteRows(rowPosition: number, howMany: number): void;
  insertColumnsAfter(afterPosition: number, howMany: number): SheetLike;
  deleteColumns(columnPosition: number, howMany: number): void;
  setFrozenRows(rows: number): void;
  getFrozenRows(): number;
  getFilter(): FilterLike | null;
  getSheetId(): number;
  clear(): SheetLike;
  getCharts(): ChartLike[];
  insertChart(chart: never): void;
  newChart(): ChartBuilderLike;
}

export interface SpreadsheetLike {
  getSheetByName(name: string): SheetLike | null;
  insertSheet(sheetName: string): SheetLike;
  getSheets(): SheetLike[];
  getSpreadsheetTimeZone(): string;
  setSpreadsheetTimeZone(timezone: string): void;
  getId(): string;
  getUrl(): string;
}

interface LockLike {
  tryLock(timeoutInMillis: number): boolean;
  releaseLock(): void;
}

export interface PropertiesLike {
  getProperty(key: string): string | null;
  setProperty(key: string, value: string): PropertiesLike;
  deleteProperty(key: string): PropertiesLike;
}

interface TriggerLike {
  getHandlerFunction(): string;
}

interface ClockTriggerBuilderLike {
  everyMinutes(n: number): ClockTriggerBuilderLike;
  everyHours(n: number): ClockTriggerBuilderLike;
  everyDays(n: number): ClockTriggerBuilderLike;
  everyWeeks(n: number): ClockTriggerBuilderLike;
  onWeekDay(day: never): ClockTriggerBuilderLike;
  atHour(hour: number): ClockTriggerBuilderLike;
  inTimezone(timezone: string): ClockTriggerBuilderLike;
  create(): TriggerLike;
}

interface TriggersLike {
  getProjectTriggers(): TriggerLike[];
  deleteTrigger(trigger: TriggerLike): void;
  newTrigger(functionName: string): { timeBased(): ClockTriggerBuilderLike };
}

interface HttpResponseLike {
  getResponseCode(): number;
  getContentText(): string;
  getBlob(): BlobLike;
}

interface CalendarEventLike {
  getId(): string;
  setTime(startTime: Date, endTime: Date): CalendarEventLike;
  deleteEvent(): void;
}

export interface CalendarLike {
  createEvent(title: string, startTime: Date, endTime: Date, options?: { description?: string; location?: string }): CalendarEventLike;
  getEventById(iCalId: string): CalendarEventLike | null;
}

export interface FetchOptions {
  method?: 'get' | 'post' | 'put' | 'delete' | 'patch';
  /** form fields (Twilio's Messages API takes a form). */
  contentType?: string;
  payload?: string | Record<string, string>;
  headers?: Record<string, string>;
  muteHttpExceptions?: boolean;
  followRedirects?: boolean;
}

/** UrlFetchApp.fetch. */
type FetchLike = (url: string, options: FetchOptions) => HttpResponseLike;

interface MailLike {
  sendEmail(message: { to: string; subject: string; body: string; htmlBody?: string; name?: string }): void;
  getRemainingDailyQuota(): number;
}

interface FileLike {
  getId(): string;
  getName(): string;
  getUrl(): string;
}

interface BlobLike {
  setName(name: string): BlobLike;
  getBytes(): number[];
}

export interface FolderLike {
  getId(): string;
  getName(): string;
  createFile(name: string, content: string, mimeType: string): FileLike;
  /** createFile(blob): the real parameter type is a platform Blob, so callers pass it through `as never`. */
  createFile(blob: never): FileLike;
  getFilesByName(name: string): { hasNext(): boolean; next(): FileLike };
}

interface DriveLike {
  getFolderById(id: string): FolderLike;
  createFolder(name: string): FolderLike;
}

/** Everything the meter's modules need from the platform, gathered by main.ts. */
export interface MeterServices {
  spreadsheet: SpreadsheetLike;
  /** The script lock (one per script, shared by every web-app request and trigger). */
  lock: LockLike;
  /** Script properties: secrets and small state that must not sit in the sheet. */
  properties: PropertiesLike;
  newDataValidation: () => DataValidationBuilderLike;
  triggers: TriggersLike;
  /** ScriptApp.WeekDay.MONDAY: an enum value only the platform has. */
  monday: unknown;
  uuid: () => string;
  now: () => Date;
  fetch: FetchLike;
  mail: MailLike;
  drive: DriveLike;
  /** Utilities.base64Encode, for basic authentication. */
  base64: (text: string) => string;
  /** A calendar by id ('' = the default calendar of the deploying user); null if not found. */
  calendar: (id: string) => CalendarLike | null;
  /** Charts.ChartType.LINE: an enum value only the platform has. */
  lineChart: unknown;
  log: (message: string) => void;
}

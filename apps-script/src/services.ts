/**
 * The slices of Apps Script services the meter uses. Modules take these as parameters (never the
 * globals), so tests can hand them in-memory fakes, and `main.ts` hands them the real services:
 * the type checker proves the real ones fit, because main.ts passes them where these are expected.
 */

export type CellValue = string | number | boolean | Date;

export interface TextFinderLike {
  matchCase(matchCase: boolean): TextFinderLike;
  matchEntireCell(entire: boolean): TextFinderLike;
  useRegularExpression(useRegEx: boolean): TextFinderLike;
  findAll(): RangeLike[];
}

export interface DataValidationLike {}

export interface DataValidationBuilderLike {
  requireValueInList(values: string[], showDropdown?: boolean): DataValidationBuilderLike;
  requireCheckbox(): DataValidationBuilderLike;
  setAllowInvalid(allowInvalidData: boolean): DataValidationBuilderLike;
  build(): DataValidationLike;
}

export interface FilterLike {
  getRange(): RangeLike;
}

export interface RangeLike {
  getRow(): number;
  getNumRows(): number;
  getValues(): unknown[][];
  setValues(values: unknown[][]): RangeLike;
  setNumberFormat(format: string): RangeLike;
  setFontWeight(weight: string | null): RangeLike;
  setDataValidation(rule: DataValidationLike | null): RangeLike;
  createFilter(): FilterLike;
  createTextFinder(text: string): TextFinderLike;
  clearContent(): RangeLike;
  setFormula(formula: string): RangeLike;
}

export interface ChartLike {}

export interface ChartBuilderLike {
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

export interface LockLike {
  tryLock(timeoutInMillis: number): boolean;
  releaseLock(): void;
}

export interface PropertiesLike {
  getProperty(key: string): string | null;
  setProperty(key: string, value: string): PropertiesLike;
  deleteProperty(key: string): PropertiesLike;
}

export interface TriggerLike {
  getHandlerFunction(): string;
}

export interface ClockTriggerBuilderLike {
  everyMinutes(n: number): ClockTriggerBuilderLike;
  everyHours(n: number): ClockTriggerBuilderLike;
  everyDays(n: number): ClockTriggerBuilderLike;
  everyWeeks(n: number): ClockTriggerBuilderLike;
  onWeekDay(day: never): ClockTriggerBuilderLike;
  atHour(hour: number): ClockTriggerBuilderLike;
  inTimezone(timezone: string): ClockTriggerBuilderLike;
  create(): TriggerLike;
}

export interface TriggersLike {
  getProjectTriggers(): TriggerLike[];
  deleteTrigger(trigger: TriggerLike): void;
  newTrigger(functionName: string): { timeBased(): ClockTriggerBuilderLike };
}

export interface HttpResponseLike {
  getResponseCode(): number;
  getContentText(): string;
}

export interface FetchOptions {
  method?: 'get' | 'post' | 'put' | 'delete' | 'patch';
  contentType?: string;
  payload?: string;
  headers?: Record<string, string>;
  muteHttpExceptions?: boolean;
  followRedirects?: boolean;
}

/** UrlFetchApp.fetch. */
export type FetchLike = (url: string, options: FetchOptions) => HttpResponseLike;

export interface MailLike {
  sendEmail(message: { to: string; subject: string; body: string; htmlBody?: string; name?: string }): void;
  getRemainingDailyQuota(): number;
}

export interface FileLike {
  getId(): string;
  getName(): string;
  getUrl(): string;
}

export interface FolderLike {
  getId(): string;
  getName(): string;
  createFile(name: string, content: string, mimeType: string): FileLike;
  getFilesByName(name: string): { hasNext(): boolean; next(): FileLike };
}

export interface DriveLike {
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
  /** Charts.ChartType.LINE: an enum value only the platform has. */
  lineChart: unknown;
  log: (message: string) => void;
}

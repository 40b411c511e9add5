/**
 * In-memory SpreadsheetApp that behaves like the real one where the meter depends on it:
 * 1-based ranges; a range outside the sheet's rows or columns throws; setValues with the wrong
 * dimensions throws; written strings are read the way Sheets reads typed input (numbers,
 * booleans, dates and formulas are recognised; a leading apostrophe keeps text as text);
 * getValues returns numbers, booleans, strings and Dates as such; the 10 million cell limit of
 * a spreadsheet holds. Every service call is counted, so tests and benches can show that a
 * feature's cost does not grow with the sheet.
 */

export type Cell = string | number | boolean | Date;

export const CELL_LIMIT = 10_000_000;

/** Which calls a fault or an observer is about: the call's `Class.method` and, for writes, the tab. */
type CallFilter = (name: string, tab?: string) => boolean;

/** The message Apps Script throws when the Sheets service times out part-way through a script. */
export const SHEETS_TIMEOUT = 'Service Spreadsheets timed out while accessing document with id fake-spreadsheet-id.';
/** Calls that reach the Sheets service. */
export const SHEETS_CALL: CallFilter = (name) => /^(Spreadsheet|Sheet|Range|TextFinder)\./.test(name);

/**
 * Counts service calls by `Class.method`. Coordinates of a Range object are local, not calls.
 * Also where faults are injected (a call that throws, as Google's services do half-way through a
 * script) and where observers see every call.
 */
export class CallCounter {
  readonly byName = new Map<string, number>();
  total = 0;
  private faults: Array<{ after: CallFilter; fail: CallFilter; message: string; armed: boolean }> = [];
  private readonly observers: Array<(name: string) => void> = [];
  count(name: string, tab?: string): void {
    const fault = this.faults.find((f) => f.armed && f.fail(name, tab));
    if (fault) {
      this.faults.splice(this.faults.indexOf(fault), 1);
      throw new Error(fault.message);
    }
    this.total++;
    this.byName.set(name, (this.byName.get(name) ?? 0) + 1);
    for (const f of this.faults) if (!f.armed && f.after(name, tab)) f.armed = true;
    for (const observe of this.observers) observe(name);
  }
  /** Once a call matching `after` has run, the next call matching `fail` throws `message` (once). */
  failAfter(after: CallFilter, fail: CallFilter = SHEETS_CALL, message = SHEETS_TIMEOUT): void {
    this.faults.push({ after, fail, message, armed: false });
  }
  /** Whether an injected fault is still waiting to fire. */
  pendingFaults(): number {
    return this.faults.length;
  }
  observe(observer: (name: string) => void): void {
    this.observers.push(observer);
  }
  reset(): void {
    this.total = 0;
    this.byName.clear();
  }
  get(name: string): number {
    return this.byName.get(name) ?? 0;
  }
}

/** A formula cell: the fake cannot calculate, so reading it gives its text behind a marker. */
export class Formula {
  constructor(readonly text: string) {}
}

const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;
const ISO_DATE = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$/;

/** What Sheets stores for a value written with setValues (it parses strings as typed input). */
export function parseWritten(value: unknown): Cell | Formula {
  if (value === null || value === undefined) return '';
  if (typeof value === 'number' || typeof value === 'boolean') return value;
  if (Object.prototype.toString.call(value) === '[object Date]') return new Date((value as Date).getTime());
  if (typeof value !== 'string') return String(value);
  if (value.startsWith("'")) return value.slice(1);
  if (value.startsWith('=')) return new Formula(value);
  const t = value.trim();
  if (NUMBER.test(t)) return Number(t);
  if (/^(true|false)$/i.test(t)) return t.toLowerCase() === 'true';
  if (ISO_DATE.test(t) && Number.isFinite(Date.parse(t))) return new Date(Date.parse(t));
  return value;
}

function readCell(cell: Cell | Formula | undefined): Cell {
  if (cell === undefined) return '';
  if (cell instanceof Formula) return `#FORMULA(${cell.text})`;
  if (cell instanceof Date) return new Date(cell.getTime());
  return cell;
}

function columnNumber(letters: string): number {
  let n = 0;
  for (const ch of letters.toUpperCase()) n = n * 26 + (ch.charCodeAt(0) - 64);
  return n;
}

export class FakeDataValidation {
  constructor(
    readonly kind: 'list' | 'checkbox',
    readonly values: string[],
    readonly allowInvalid: boolean,
  ) {}
  getAllowInvalid() {
    return this.allowInvalid;
  }
}

export class FakeDataValidationBuilder {
  private kind: 'list' | 'checkbox' = 'list';
  private values: string[] = [];
  private allowInvalid = true;
  constructor(private readonly calls: CallCounter) {}
  requireValueInList(values: string[]) {
    this.calls.count('DataValidationBuilder.requireValueInList');
    this.kind = 'list';
    this.values = values.slice();
    return this;
  }
  requireCheckbox() {
    this.calls.count('DataValidationBuilder.requireCheckbox');
    this.kind = 'checkbox';
    return this;
  }
  setAllowInvalid(allow: boolean) {
    this.calls.count('DataValidationBuilder.setAllowInvalid');
    this.allowInvalid = allow;
    return this;
  }
  build() {
    this.calls.count('DataValidationBuilder.build');
    return new FakeDataValidation(this.kind, this.values, this.allowInvalid);
  }
}

export class FakeTextFinder {
  private regex = false;
  private caseSensitive = false;
  private entire = false;
  constructor(
    private readonly range: FakeRange,
    private readonly text: string,
  ) {}
  useRegularExpression(flag: boolean) {
    this.range.sheet.calls.count('TextFinder.useRegularExpression');
    this.regex = flag;
    return this;
  }
  matchCase(flag: boolean) {
    this.range.sheet.calls.count('TextFinder.matchCase');
    this.caseSensitive = flag;
    return this;
  }
  matchEntireCell(flag: boolean) {
    this.range.sheet.calls.count('TextFinder.matchEntireCell');
    this.entire = flag;
    return this;
  }
  findAll(): FakeRange[] {
    this.range.sheet.calls.count('TextFinder.findAll');
    const source = this.regex ? this.text : this.text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    const pattern = new RegExp(this.entire ? `^(?:${source})$` : source, this.caseSensitive ? '' : 'i');
    const hits: FakeRange[] = [];
    const { row, column, numRows, numColumns, sheet } = this.range;
    for (let r = row; r < row + numRows; r++) {
      for (let c = column; c < column + numColumns; c++) {
        const cell = sheet.cellAt(r, c);
        if (cell === '' || cell instanceof Formula) continue;
        if (pattern.test(cell instanceof Date ? cell.toISOString() : String(cell))) hits.push(new FakeRange(sheet, r, c, 1, 1));
      }
    }
    return hits;
  }
}

export class FakeFilter {
  constructor(readonly range: FakeRange) {}
  remove() {
    this.range.sheet.calls.count('Filter.remove');
    if (this.range.sheet.filter === this) this.range.sheet.filter = null;
  }
  getRange() {
    this.range.sheet.calls.count('Filter.getRange');
    return this.range;
  }
}

export interface FormatRecord {
  row: number;
  column: number;
  numRows: number;
  numColumns: number;
  value: unknown;
}

export class FakeRange {
  constructor(
    readonly sheet: FakeSheet,
    readonly row: number,
    readonly column: number,
    readonly numRows: number,
    readonly numColumns: number,
  ) {}
  // Coordinates are properties of the Range object: local, not counted as service calls.
  getRow() {
    return this.row;
  }
  getColumn() {
    return this.column;
  }
  getNumRows() {
    return this.numRows;
  }
  getNumColumns() {
    return this.numColumns;
  }
  getValues(): Cell[][] {
    this.sheet.calls.count('Range.getValues');
    const out: Cell[][] = [];
    for (let r = 0; r < this.numRows; r++) {
      const src = this.sheet.data[this.row - 1 + r];
      const line: Cell[] = new Array(this.numColumns);
      for (let c = 0; c < this.numColumns; c++) line[c] = readCell(src?.[this.column - 1 + c]);
      out.push(line);
    }
    return out;
  }
  getValue(): Cell {
    this.sheet.calls.count('Range.getValue');
    return readCell(this.sheet.data[this.row - 1]?.[this.column - 1]);
  }
  getFormulas(): string[][] {
    this.sheet.calls.count('Range.getFormulas');
    const out: string[][] = [];
    for (let r = 0; r < this.numRows; r++) {
      const line: string[] = [];
      for (let c = 0; c < this.numColumns; c++) {
        const cell = this.sheet.data[this.row - 1 + r]?.[this.column - 1 + c];
        line.push(cell instanceof Formula ? cell.text : '');
      }
      out.push(line);
    }
    return out;
  }
  setValues(values: unknown[][]) {
    this.sheet.calls.count('Range.setValues', this.sheet.nameForTest());
    if (!Array.isArray(values) || values.length !== this.numRows) {
      throw new Error(
        `The number of rows in the data does not match the number of rows in the range. The data has ${Array.isArray(values) ? values.length : 0} but the range has ${this.numRows}.`,
      );
    }
    for (const line of values) {
      if (!Array.isArray(line) || line.length !== this.numColumns) {
        throw new Error(
          `The number of columns in the data does not match the number of columns in the range. The data has ${Array.isArray(line) ? line.length : 0} but the range has ${this.numColumns}.`,
        );
      }
    }
    values.forEach((line, r) => {
      const target = this.sheet.rowForWrite(this.row + r);
      line.forEach((value, c) => {
        target[this.column - 1 + c] = parseWritten(value);
      });
    });
    this.sheet.trim();
    return this;
  }
  setValue(value: unknown) {
    this.sheet.calls.count('Range.setValue');
    this.sheet.rowForWrite(this.row)[this.column - 1] = parseWritten(value);
    this.sheet.trim();
    return this;
  }
  clearContent() {
    this.sheet.calls.count('Range.clearContent');
    for (let r = this.row; r < this.row + this.numRows; r++) {
      const line = this.sheet.data[r - 1];
      if (!line) continue;
      for (let c = this.column; c < this.column + this.numColumns; c++) line[c - 1] = '';
    }
    this.sheet.trim();
    return this;
  }
  private record(list: FormatRecord[], name: string, value: unknown) {
    this.sheet.calls.count(name);
    list.push({ row: this.row, column: this.column, numRows: this.numRows, numColumns: this.numColumns, value });
    return this;
  }
  setNumberFormat(format: string) {
    return this.record(this.sheet.numberFormats, 'Range.setNumberFormat', format);
  }
  setFontWeight(weight: string | null) {
    return this.record(this.sheet.fontWeights, 'Range.setFontWeight', weight);
  }
  setDataValidation(rule: FakeDataValidation | null) {
    return this.record(this.sheet.validations, 'Range.setDataValidation', rule);
  }
  createFilter() {
    this.sheet.calls.count('Range.createFilter');
    if (this.sheet.filter) throw new Error("You can't create a filter in a sheet that already has a filter.");
    this.sheet.filter = new FakeFilter(this);
    return this.sheet.filter;
  }
  setFormula(formula: string) {
    this.sheet.calls.count('Range.setFormula');
    this.sheet.rowForWrite(this.row)[this.column - 1] = new Formula(formula);
    return this;
  }
  createTextFinder(text: string) {
    this.sheet.calls.count('Range.createTextFinder');
    return new FakeTextFinder(this, text);
  }
}

export class FakeChart {
  private static next = 1;
  readonly id = FakeChart.next++;
  constructor(readonly options: Record<string, unknown>) {}
  getChartId() {
    return this.id;
  }
}

class FakeChartBuilder {
  private readonly options: Record<string, unknown> = {};
  constructor(private readonly sheet: FakeSheet) {}
  setChartType(type: unknown) {
    this.options.type = type;
    return this;
  }
  addRange(range: FakeRange) {
    this.options.range = { row: range.row, column: range.column, numRows: range.numRows, numColumns: range.numColumns };
    return this;
  }
  setPosition(row: number, column: number) {
    this.options.position = [row, column];
    return this;
  }
  setOption(name: string, value: unknown) {
    this.options[name] = value;
    return this;
  }
  build() {
    this.sheet.calls.count('EmbeddedChartBuilder.build');
    return new FakeChart({ ...this.options });
  }
}

export class FakeSheet {
  /** Rows with content (row 1 = index 0); rows past it are empty up to maxRows. */
  data: Array<Array<Cell | Formula>> = [];
  numberFormats: FormatRecord[] = [];
  fontWeights: FormatRecord[] = [];
  validations: FormatRecord[] = [];
  filter: FakeFilter | null = null;
  charts: FakeChart[] = [];
  frozenRows = 0;
  private static nextId = 1;
  readonly sheetId = FakeSheet.nextId++;
  hidden = false;

  constructor(
    readonly spreadsheet: FakeSpreadsheet,
    private name: string,
    public maxRows = 1000,
    public maxColumns = 26,
  ) {}

  get calls() {
    return this.spreadsheet.calls;
  }

  /** Test helper (not a service call): the row array to write into, created on demand. */
  rowForWrite(row: number): Array<Cell | Formula> {
    while (this.data.length < row) this.data.push([]);
    return this.data[row - 1];
  }

  /** Drops trailing empty rows so getLastRow is the last row with content. */
  trim(): void {
    while (this.data.length > 0 && this.data[this.data.length - 1].every((c) => c === '' || c === undefined)) this.data.pop();
  }

  /** Test helper: the stored cell, without counting a call. */
  cellAt(row: number, column: number): Cell | Formula {
    return this.data[row - 1]?.[column - 1] ?? '';
  }

  /** Test helper: fills rows quickly (already parsed values), without counting calls. */
  loadRows(startRow: number, rows: Cell[][]): void {
    if (startRow + rows.length - 1 > this.maxRows) this.maxRows = startRow + rows.length - 1;
    rows.forEach((line, i) => {
      this.rowForWrite(startRow + i);
      this.data[startRow + i - 1] = line.slice();
    });
    this.trim();
  }

  getName() {
    this.calls.count('Sheet.getName');
    return this.name;
  }
  setName(name: string) {
    this.calls.count('Sheet.setName');
    this.name = name;
    return this;
  }
  nameForTest() {
    return this.name;
  }
  getLastRow() {
    this.calls.count('Sheet.getLastRow');
    return this.data.length;
  }
  getLastColumn() {
    this.calls.count('Sheet.getLastColumn');
    return this.data.reduce((m, line) => {
      let last = line.length;
      while (last > 0 && (line[last - 1] === '' || line[last - 1] === undefined)) last--;
      return Math.max(m, last);
    }, 0);
  }
  getMaxRows() {
    this.calls.count('Sheet.getMaxRows');
    return this.maxRows;
  }
  getMaxColumns() {
    this.calls.count('Sheet.getMaxColumns');
    return this.maxColumns;
  }
  getRange(a: number | string, column?: number, numRows = 1, numColumns = 1): FakeRange {
    this.calls.count('Sheet.getRange');
    if (typeof a === 'string') return this.rangeFromA1(a);
    const row = a;
    const col = column as number;
    if (!Number.isInteger(row) || !Number.isInteger(col) || !Number.isInteger(numRows) || !Number.isInteger(numColumns)) {
      throw new Error('Range coordinates must be whole numbers.');
    }
    if (numRows < 1) throw new Error('The number of rows in the range must be at least 1.');
    if (numColumns < 1) throw new Error('The number of columns in the range must be at least 1.');
    if (row < 1 || col < 1 || row + numRows - 1 > this.maxRows || col + numColumns - 1 > this.maxColumns) {
      throw new Error('The coordinates of the range are outside the dimensions of the sheet.');
    }
    return new FakeRange(this, row, col, numRows, numColumns);
  }
  private rangeFromA1(a1: string): FakeRange {
    const cols = /^([A-Z]+):([A-Z]+)$/i.exec(a1);
    if (cols) {
      const c1 = columnNumber(cols[1]);
      const c2 = columnNumber(cols[2]);
      if (c2 > this.maxColumns) throw new Error(`Range not found: ${a1}`);
      return new FakeRange(this, 1, c1, this.maxRows, c2 - c1 + 1);
    }
    const cells = /^([A-Z]+)(\d+):([A-Z]+)(\d+)$/i.exec(a1);
    if (!cells) throw new Error(`Range not found: ${a1}`);
    const r1 = Number(cells[2]);
    const c1 = columnNumber(cells[1]);
    return new FakeRange(this, r1, c1, Number(cells[4]) - r1 + 1, columnNumber(cells[3]) - c1 + 1);
  }
  insertRowsAfter(after: number, howMany: number) {
    this.calls.count('Sheet.insertRowsAfter');
    if (after < 1 || after > this.maxRows || howMany < 1) throw new Error('Those rows are out of bounds.');
    this.spreadsheet.assertCellsFit(howMany * this.maxColumns);
    if (after < this.data.length) this.data.splice(after, 0, ...Array.from({ length: howMany }, () => []));
    this.maxRows += howMany;
    return this;
  }
  deleteRows(start: number, howMany: number) {
    this.calls.count('Sheet.deleteRows');
    if (start < 1 || howMany < 1 || start + howMany - 1 > this.maxRows) throw new Error('Those rows are out of bounds.');
    if (howMany >= this.maxRows - this.frozenRows) throw new Error('Sorry, it is not possible to delete all non-frozen rows.');
    this.data.splice(start - 1, howMany);
    this.maxRows -= howMany;
    this.trim();
  }
  deleteRow(row: number) {
    this.deleteRows(row, 1);
    return this;
  }
  insertColumnsAfter(after: number, howMany: number) {
    this.calls.count('Sheet.insertColumnsAfter');
    this.spreadsheet.assertCellsFit(howMany * this.maxRows);
    for (const line of this.data) if (line.length > after) line.splice(after, 0, ...new Array(howMany).fill(''));
    this.maxColumns += howMany;
    return this;
  }
  deleteColumns(start: number, howMany: number) {
    this.calls.count('Sheet.deleteColumns');
    if (start < 1 || start + howMany - 1 > this.maxColumns) throw new Error('Those columns are out of bounds.');
    for (const line of this.data) line.splice(start - 1, howMany);
    this.maxColumns -= howMany;
    this.trim();
  }
  setFrozenRows(rows: number) {
    this.calls.count('Sheet.setFrozenRows');
    this.frozenRows = rows;
  }
  getFrozenRows() {
    this.calls.count('Sheet.getFrozenRows');
    return this.frozenRows;
  }
  getFilter() {
    this.calls.count('Sheet.getFilter');
    return this.filter;
  }
  getSheetId() {
    this.calls.count('Sheet.getSheetId');
    return this.sheetId;
  }
  getCharts() {
    this.calls.count('Sheet.getCharts');
    return this.charts.slice();
  }
  newChart() {
    this.calls.count('Sheet.newChart');
    return new FakeChartBuilder(this);
  }
  insertChart(chart: FakeChart) {
    this.calls.count('Sheet.insertChart');
    this.charts.push(chart);
  }
  hideSheet() {
    this.calls.count('Sheet.hideSheet');
    this.hidden = true;
    return this;
  }
  clear() {
    this.calls.count('Sheet.clear');
    this.data = [];
    return this;
  }
}

export class FakeSpreadsheet {
  readonly sheets: FakeSheet[] = [];
  timeZone = 'America/Los_Angeles';
  readonly toasts: string[] = [];
  constructor(
    readonly calls = new CallCounter(),
    readonly id = 'fake-spreadsheet-id',
  ) {}

  /** Test helper: a tab by name without counting a call. */
  tab(name: string): FakeSheet | undefined {
    return this.sheets.find((s) => s.nameForTest() === name);
  }
  assertCellsFit(added: number): void {
    const cells = this.sheets.reduce((n, s) => n + s.maxRows * s.maxColumns, 0);
    if (cells + added > CELL_LIMIT) {
      throw new Error(`This action would increase the number of cells in the workbook above the limit of ${CELL_LIMIT} cells.`);
    }
  }
  getSheetByName(name: string) {
    this.calls.count('Spreadsheet.getSheetByName');
    return this.tab(name) ?? null;
  }
  insertSheet(name: string) {
    this.calls.count('Spreadsheet.insertSheet');
    if (this.tab(name)) throw new Error(`A sheet with the name "${name}" already exists. Please enter another name.`);
    this.assertCellsFit(1000 * 26);
    const sheet = new FakeSheet(this, name);
    this.sheets.push(sheet);
    return sheet;
  }
  getSheets() {
    this.calls.count('Spreadsheet.getSheets');
    return this.sheets.slice();
  }
  getSpreadsheetTimeZone() {
    this.calls.count('Spreadsheet.getSpreadsheetTimeZone');
    return this.timeZone;
  }
  setSpreadsheetTimeZone(tz: string) {
    this.calls.count('Spreadsheet.setSpreadsheetTimeZone');
    this.timeZone = tz;
  }
  getId() {
    this.calls.count('Spreadsheet.getId');
    return this.id;
  }
  getUrl() {
    this.calls.count('Spreadsheet.getUrl');
    return `https://docs.google.com/spreadsheets/d/${this.id}/edit`;
  }
  toast(message: string, _title?: string, _seconds?: number) {
    this.calls.count('Spreadsheet.toast');
    this.toasts.push(message);
  }
}

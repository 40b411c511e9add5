/**
 * In-memory SpreadsheetApp that behaves like the real one where the meter depends on it:
 * 1-based ranges; a range outside the sheet's rows or columns throws; setValues with the wrong
 * dimensions throws; written strings are read the way Sheets reads typed input (cells.ts);
 * the 10 million cell limit of a spreadsheet holds. Every service call is counted (calls.ts).
 */
import { CallCounter } from './calls';
import type { Cell } from './cells';
import { Formula } from './cells';
import { FakeChart, FakeChartBuilder, FakeFilter, FakeRange, type FormatRecord } from './range';

export const CELL_LIMIT = 10_000_000;

function columnNumber(letters: string): number {
  let n = 0;
  for (const ch of letters.toUpperCase()) n = n * 26 + (ch.charCodeAt(0) - 64);
  return n;
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
    const rows = /^(\d+):(\d+)$/.exec(a1);
    if (rows) {
      const r1 = Number(rows[1]);
      const r2 = Number(rows[2]);
      if (r1 < 1 || r2 < r1 || r2 > this.maxRows) throw new Error(`Range not found: ${a1}`);
      return new FakeRange(this, r1, 1, r2 - r1 + 1, this.maxColumns);
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
  /**
   * When set, values written wait here, as Apps Script keeps a script's writes until
   * SpreadsheetApp.flush() or the end of the script (`endScript`); another execution reads the
   * sheet without them. Off by default: the tests then see every write at once.
   */
  bufferedWrites: Array<() => void> | null = null;
  constructor(
    readonly calls = new CallCounter(),
    readonly id = 'fake-spreadsheet-id',
  ) {}

  /** Applies the buffered writes (a flush, or the end of a script). */
  applyBufferedWrites(): void {
    const writes = this.bufferedWrites ?? [];
    if (this.bufferedWrites) this.bufferedWrites = [];
    for (const write of writes) write();
  }

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

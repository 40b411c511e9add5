/**
 * The fake Range and what hangs off it (data validation, TextFinder, filter, chart builder), as
 * the meter uses them: 1-based coordinates, setValues with the wrong dimensions throws, written
 * strings stored the way Sheets reads typed input, and a text longer than a cell holds (50,000
 * characters) refused as Sheets refuses it.
 */
import type { CallCounter } from './calls';
import { parseWritten, readCell, Formula, type Cell } from './cells';
import type { FakeSheet } from './spreadsheet';

/** The most characters Sheets stores in one cell. */
const CELL_CHARACTERS = 50_000;

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
      if (line.some((v) => typeof v === 'string' && v.length > CELL_CHARACTERS))
        throw new Error(`Your input contains more than the maximum of ${CELL_CHARACTERS} characters in a single cell.`);
    }
    const write = () => {
      values.forEach((line, r) => {
        const target = this.sheet.rowForWrite(this.row + r);
        line.forEach((value, c) => {
          target[this.column - 1 + c] = parseWritten(value);
        });
      });
      this.sheet.trim();
    };
    const buffer = this.sheet.spreadsheet.bufferedWrites;
    if (buffer) buffer.push(write);
    else write();
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
  /** One call, a format per cell (recorded cell by cell). */
  setNumberFormats(formats: string[][]) {
    this.sheet.calls.count('Range.setNumberFormats');
    if (formats.length !== this.numRows || formats.some((r) => r.length !== this.numColumns))
      throw new Error('The number of rows or columns in the data does not match the range.');
    formats.forEach((r, i) =>
      r.forEach((value, j) =>
        this.sheet.numberFormats.push({ row: this.row + i, column: this.column + j, numRows: 1, numColumns: 1, value }),
      ),
    );
    return this;
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

export class FakeChartBuilder {
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

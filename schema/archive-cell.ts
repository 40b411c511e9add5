/**
 * What the archive accepts in each field of an event CSV: one definition for both sides. The
 * archive builds its row checks from it (archive/event-sql.ts) and refuses a whole file on any bad
 * row; the meter's export reads its rows' cells by it (apps-script/src/archive-export.ts) and holds
 * back a row the archive would refuse (a cell edited by hand), instead of writing a file the
 * archive cannot take. Text is read as the archive's SQL reads it: trimmed of spaces only.
 */
import {
  COST_LIMIT_USD,
  DECIMAL_TEXT_SOURCE,
  EXPECTED,
  MAX_COUNT,
  RFC3339_SOURCE,
  fieldKind,
  parseRfc3339,
  type EventField,
} from './event-record';
import { ID_PATTERN_SOURCE, ID_RULE } from './ids';

/** A number field: its text matches `pattern` (whole, trimmed) and is finite, then stays within `max`. */
export interface NumberRule {
  pattern: string;
  expected: string;
  max: number;
  /** `max` itself is accepted (counts, scores), or not (costs: below the limit). */
  maxIncluded: boolean;
  rangeExpected: string;
}

export const NUMBER_RULES: Record<'int' | 'decimal' | 'unit', NumberRule> = {
  int: { pattern: '[0-9]+', expected: EXPECTED.count, max: MAX_COUNT, maxIncluded: true, rangeExpected: EXPECTED.countRange },
  decimal: {
    pattern: DECIMAL_TEXT_SOURCE,
    expected: EXPECTED.cost,
    max: COST_LIMIT_USD,
    maxIncluded: false,
    rangeExpected: EXPECTED.costRange,
  },
  unit: { pattern: DECIMAL_TEXT_SOURCE, expected: EXPECTED.unit, max: 1, maxIncluded: true, rangeExpected: EXPECTED.unit },
};

/** A boolean field's texts (any case, trimmed); empty reads as false. */
export const BOOL_TEXTS = ['true', 'false'] as const;
export const EXPECTED_ID = `an event id (${ID_RULE})`;
export const EXPECTED_BOOL = 'true or false';
export const EXPECTED_TIME = 'an RFC 3339 date-time such as 2026-01-31T12:00:00Z';

const full = (source: string) => new RegExp(`^(?:${source})$`);
const PATTERNS = {
  id: full(ID_PATTERN_SOURCE),
  time: new RegExp(RFC3339_SOURCE),
  int: full(NUMBER_RULES.int.pattern),
  decimal: full(NUMBER_RULES.decimal.pattern),
  unit: full(NUMBER_RULES.unit.pattern),
};
/** SQL's trim: spaces only (a tab or line break stays, and fails the number patterns there too). */
const trimSpaces = (text: string) => text.replace(/^ +| +$/g, '');

/**
 * What the archive expected of a field's text, or null when it accepts it. `text` is the field as
 * the archive reads it from the CSV (null or '' for an empty cell; text fields without their mark).
 */
export function archiveFieldProblem(field: EventField, text: string | null): string | null {
  const kind = fieldKind(field);
  const empty = text === null || text === '';
  switch (kind) {
    case 'id':
      return !empty && PATTERNS.id.test(text) ? null : EXPECTED_ID;
    case 'time':
      return !empty && PATTERNS.time.test(trimSpaces(text)) && parseRfc3339(text) ? null : EXPECTED_TIME;
    case 'int':
    case 'decimal':
    case 'unit': {
      if (empty) return null;
      const rule = NUMBER_RULES[kind];
      const t = trimSpaces(text);
      const n = Number(t);
      if (!PATTERNS[kind].test(t) || !Number.isFinite(n)) return rule.expected;
      return n > rule.max || (n === rule.max && !rule.maxIncluded) ? rule.rangeExpected : null;
    }
    case 'bool':
      return empty || (BOOL_TEXTS as readonly string[]).includes(trimSpaces(text).toLowerCase()) ? null : EXPECTED_BOOL;
    case 'text':
      return null;
  }
}

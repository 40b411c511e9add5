/**
 * The event record in SQL, derived from the one definition in schema/event-record.ts: the
 * checks a CSV row must pass (same rules as the meter's ingest) and the typed columns of the
 * archive (timestamp TIMESTAMP in UTC, counts BIGINT, cost DECIMAL, scores DOUBLE, booleans).
 * Both read the `staged` table: every field as text, plus `line`.
 */
import { NEUTRAL_MARK } from '../schema/csv-cell';
import { BOOL_TEXTS, EXPECTED_BOOL, EXPECTED_ID, EXPECTED_TIME, NUMBER_RULES } from '../schema/archive-cell';
import { EVENT_FIELDS, RFC3339_SOURCE, TEXT_FIELDS, fieldKind, type EventField } from '../schema/event-record';
import { ID_PATTERN_SOURCE } from '../schema/ids';

const COST_TYPE = 'DECIMAL(18,9)';

/**
 * A time as the meter reads it (parseRfc3339): DuckDB's cast takes neither a lower-case `t`/`z` nor
 * a leap second, so the text is upper-cased and `:60` read as the instant after `:59`; and it takes
 * hour 24 and an offset past 23:59 (`+24:00`, `+99:99`), which the meter refuses (checked apart).
 */
const LEAP = `':60([.Z+-])'`;
const instantText = (c: string) => `regexp_replace(upper(trim(${c})), ${LEAP}, ':59\\1')`;
const leapSecond = (c: string) => `CASE WHEN regexp_matches(upper(${c}), ${LEAP}) THEN INTERVAL 1 SECOND ELSE INTERVAL 0 SECOND END`;
const instant = (c: string) => `(CAST(${instantText(c)} AS TIMESTAMPTZ) + ${leapSecond(c)})`;
/** A time's offset is `Z` or at most 23:59 either way (the text already has the RFC 3339 shape). */
const offsetInRange = (c: string) =>
  `(upper(right(trim(${c}), 1)) = 'Z' OR (substr(trim(${c}), -5, 2) <= '23' AND substr(trim(${c}), -2) <= '59'))`;

/** The meter's decimal text: no sign, no `_`, no hex (DuckDB's cast takes `+5`, `1_000`, `-0`). */

const q = (f: EventField) => `"${f}"`;
const present = (f: EventField) => `(${q(f)} IS NOT NULL AND ${q(f)} <> '')`;

/**
 * SQL conditions that are true when the field's text is not acceptable, each with what was
 * expected: the rules of schema/archive-cell.ts, which the meter's export holds its rows to as well.
 * Counts and costs have the meter's own limits (schema/event-record.ts), which also keep them
 * inside BIGINT and DECIMAL(18,9).
 */
function checks(f: EventField): Array<[string, string]> {
  const c = q(f);
  const kind = fieldKind(f);
  switch (kind) {
    case 'id':
      return [[`NOT coalesce(regexp_full_match(${c}, '${ID_PATTERN_SOURCE}'), false)`, `expected ${EXPECTED_ID}`]];
    case 'time':
      return [
        [
          `NOT (coalesce(regexp_full_match(trim(${c}), '${RFC3339_SOURCE}'), false) AND substr(trim(${c}), 12, 2) <= '23' AND ${offsetInRange(c)} AND TRY_CAST(${instantText(c)} AS TIMESTAMPTZ) IS NOT NULL)`,
          `expected ${EXPECTED_TIME}`,
        ],
      ];
    case 'int':
    case 'decimal':
    case 'unit': {
      const rule = NUMBER_RULES[kind];
      const value = `TRY_CAST(trim(${c}) AS DOUBLE)`;
      const number = `coalesce(regexp_full_match(trim(${c}), '${rule.pattern}') AND isfinite(${value}), false)`;
      return [
        [`${present(f)} AND NOT ${number}`, `expected ${rule.expected}`],
        [`${present(f)} AND ${number} AND ${value} ${rule.maxIncluded ? '>' : '>='} ${rule.max}`, `expected ${rule.rangeExpected}`],
      ];
    }
    case 'bool':
      return [[`${present(f)} AND lower(trim(${c})) NOT IN (${BOOL_TEXTS.map((t) => `'${t}'`).join(', ')})`, `expected ${EXPECTED_BOOL}`]];
    case 'text':
      return [];
  }
}

/**
 * One row per problem (line, field, what was expected and what came), found in a single scan:
 * each row builds the list of its problems, and only rows with some are kept.
 */
const RULES = EVENT_FIELDS.flatMap((f) => checks(f).map((rule) => [f, rule] as const));
export const STAGE_CHECKS =
  `SELECT line, problem.field AS field, problem.problem AS problem FROM (` +
  `SELECT line, unnest(list_filter([${RULES.map(
    ([f, [bad, expected]]) =>
      `CASE WHEN ${bad} THEN {'field': '${f}', 'problem': '${expected}, got "' || coalesce(left(${q(f)}, 60), '') || '"'} END`,
  ).join(', ')}], x -> x IS NOT NULL)) AS problem FROM staged)`;

function typed(f: EventField): string {
  const c = q(f);
  switch (fieldKind(f)) {
    case 'time':
      return `CAST(${instant(c)} AT TIME ZONE 'UTC' AS TIMESTAMP) AS ${c}`;
    case 'int':
      return `coalesce(CAST(trim(${c}) AS BIGINT), 0) AS ${c}`;
    case 'decimal':
      // Through DOUBLE, so exponent forms such as 1.5e-7 (JavaScript's way to print small costs) parse.
      return `CAST(CAST(nullif(${c}, '') AS DOUBLE) AS ${COST_TYPE}) AS ${c}`;
    case 'unit':
      return `CAST(nullif(${c}, '') AS DOUBLE) AS ${c}`;
    case 'bool':
      return `coalesce(lower(trim(${c})) = 'true', false) AS ${c}`;
    default:
      return `coalesce(${c}, '') AS ${c}`;
  }
}

/** The staged rows with archive types (and `line`, for ordering). */
export const SELECT_TYPED = `SELECT line, ${EVENT_FIELDS.map(typed).join(', ')} FROM staged`;

/** Marker of the guard's error, so the caller knows to look for the lines at fault. */
export const GUARD_ERROR = 'archive-row-check-failed';

/**
 * Typed rows straight from a CSV source, in one streaming pass. A row that fails any check stops
 * the query (DuckDB's error()), so nothing of a bad file is ever written; the caller then runs
 * the slower line-numbered check (STAGE_CHECKS) to say which lines and fields are wrong.
 */
export function selectTypedGuarded(source: string): string {
  const anyBad = RULES.map(([, [bad]]) => `(${bad})`).join(' OR ');
  return `SELECT ${EVENT_FIELDS.map(typed).join(', ')} FROM ${source} WHERE CASE WHEN ${anyBad} THEN error('${GUARD_ERROR}') ELSE true END`;
}

const mark = `'${NEUTRAL_MARK.replace(/'/g, "''")}'`;

/**
 * A CSV source with every text field back to the text that was sent: CSV writers put a mark in
 * front of formula-looking text (and of text that starts with the mark), see schema/csv-cell.ts;
 * here a leading mark is dropped, so `customer_id` in Parquet equals what the sender sent.
 */
export function restoredText(source: string): string {
  const text = new Set<EventField>(TEXT_FIELDS);
  const columns = EVENT_FIELDS.map((f) =>
    text.has(f)
      ? `CASE WHEN starts_with(${q(f)}, ${mark}) THEN substr(${q(f)}, ${NEUTRAL_MARK.length + 1}) ELSE ${q(f)} END AS ${q(f)}`
      : q(f),
  );
  return `(SELECT ${columns.join(', ')} FROM ${source})`;
}

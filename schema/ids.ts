/**
 * The id rule shared by the event record (event_id), the call record (call_id), the meter's back
 * office and the archive: what UUIDs and common id schemes use, and nothing a spreadsheet search
 * or a SQL pattern treats specially except `.`. One definition, imported everywhere it is checked.
 */

/** The rule in words, for error messages. */
export const ID_RULE = '1 to 128 characters of A-Z a-z 0-9 . _ : -';

/** The pattern without anchors, for engines that anchor it themselves (DuckDB's regexp_full_match). */
export const ID_PATTERN_SOURCE = '[A-Za-z0-9._:-]{1,128}';

export const ID_PATTERN = new RegExp(`^${ID_PATTERN_SOURCE}$`);

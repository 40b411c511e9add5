// The meter's export holds back a row by schema/archive-cell.ts; the archive refuses one by the SQL
// built from it (archive/event-sql.ts). Both must say the same of every text, or a night's file is
// refused whole again (or a good row held back).
import { expect, it } from 'vitest';
import { openDuck } from '../../archive/duck';
import { STAGE_CHECKS } from '../../archive/event-sql';
import { archiveFieldProblem } from '../../schema/archive-cell';
import { EVENT_FIELDS, type EventField } from '../../schema/event-record';

const TEXTS = [
  ...[
    '',
    ' ',
    '0',
    '5',
    ' 5 ',
    '5\t',
    '\t5',
    '-0',
    '+5',
    '1.2k',
    '1e3',
    '1E-7',
    '.5',
    '5.',
    '1e999',
    '0x10',
    '1_000',
    'NaN',
    'Infinity',
    '１',
  ],
  ...[
    '9007199254740991',
    '9007199254740992',
    '99999999999999999999999',
    '999999999.999999999',
    '1000000000',
    '1e9',
    '1',
    '1.0',
    '1.0000001',
  ],
  ...['true', 'TRUE', ' False ', 'yes', 'abc', 'a b', "'5"],
  ...[
    '2026-11-21T10:00:00.000Z',
    '2026-02-30T10:00:00Z',
    '2026-11-21T24:00:00Z',
    '+010000-01-01T00:00:00.000Z',
    '2026-11-21t10:00:00z',
    '2016-12-31T23:59:60Z',
    '2026-11-21T10:00:00+05:30',
    '2026-11-21T10:00:00-23:59',
    '2026-11-21T10:00:00+24:00',
    '2026-11-21T10:00:00+23:60',
    '2026-11-21T10:00:00+99:99',
  ],
];
const FIELDS: EventField[] = ['event_id', 'timestamp', 'input_tokens', 'cost_usd', 'eval_score', 'pii_flag'];
const sql = (text: string) => (text === '' ? 'NULL' : `'${text.replace(/'/g, "''")}'`);

it('the export and the archive refuse the same texts in every kind of field', async () => {
  const duck = await openDuck();
  const disagree: string[] = [];
  try {
    const good: Record<string, string> = { event_id: 'e1', timestamp: '2026-11-21T10:00:00Z' };
    for (const field of FIELDS) {
      for (const text of TEXTS) {
        const row = EVENT_FIELDS.map((f) => (f === field ? text : (good[f] ?? '')));
        await duck.run('DROP TABLE IF EXISTS staged');
        await duck.run(
          `CREATE TABLE staged AS SELECT 2 AS line, ${row.map((t, i) => `${sql(t)}::VARCHAR AS "${EVENT_FIELDS[i]}"`).join(', ')}`,
        );
        const archive = (await duck.all(STAGE_CHECKS)).length > 0;
        const meter = archiveFieldProblem(field, text === '' ? null : text) !== null;
        if (archive !== meter) disagree.push(`${field} ${JSON.stringify(text)}: archive refuses ${archive}, export ${meter}`);
      }
    }
  } finally {
    duck.close();
  }
  expect(disagree).toEqual([]);
});

// One measured step of `npm run bench:archive`, run in its own process so its peak memory is its
// own: `ours <convert|report> …` goes through the archive tool's code; `direct …` runs the same SQL
// straight in DuckDB. Prints one JSON line: {ms, maxRssMb, rows}.
import { DuckDBInstance } from '@duckdb/node-api';
import { convert } from '../../archive/convert';
import { openDuck } from '../../archive/duck';
import { formatRows, reportSql, type ReportName } from '../../archive/reports';
import { EVENT_FIELDS, fieldKind } from '../../schema/event-record';

const [mode, what, a, b] = process.argv.slice(2);
const start = performance.now();
let rows = 0;
const TYPES: Record<string, string> = {
  id: 'VARCHAR',
  text: 'VARCHAR',
  time: 'TIMESTAMPTZ',
  int: 'BIGINT',
  decimal: 'DOUBLE',
  unit: 'DOUBLE',
  bool: 'BOOLEAN',
};

if (mode === 'ours' && what === 'convert') {
  rows = (await convert(a, { out: b })).rows;
} else if (mode === 'ours') {
  const duck = await openDuck();
  const { columns, rows: out } = await duck.query(reportSql(what as ReportName, a, '2026-11-21'));
  formatRows(out, columns, 'csv');
  rows = out.length;
  duck.close();
} else {
  const instance = await DuckDBInstance.create(':memory:', { threads: '2' });
  const c = await instance.connect();
  await c.run("SET TimeZone = 'UTC'");
  if (what === 'convert') {
    const cols = EVENT_FIELDS.map((f) => `'${f}': '${TYPES[fieldKind(f)]}'`).join(', ');
    await c.run(
      `COPY (SELECT *, strftime("timestamp", '%Y%m%d') AS day FROM read_csv('${a}', header = true, auto_detect = false, columns = {${cols}})) ` +
        `TO '${b}' (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (day), OVERWRITE_OR_IGNORE true)`,
    );
  } else {
    rows = (await c.runAndReadAll(reportSql(what as ReportName, a, '2026-11-21'))).getRowObjectsJson().length;
  }
  c.closeSync();
  instance.closeSync();
}
console.log(JSON.stringify({ ms: performance.now() - start, maxRssMb: process.resourceUsage().maxRSS / 1024, rows }));

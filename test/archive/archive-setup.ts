/** Shared by the archive tests: a scratch folder per test, event CSVs as the gateway writes them, report and row readers. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { lit, openDuck } from '../../archive/duck';
import { reportSql, type ReportName } from '../../archive/reports';
import { CSV_HEADER, eventToCsvLine, normalizeEvent, type EventInput } from '../../schema/event-record';

export const root = join(import.meta.dirname, '..', '..');

/** A fresh scratch folder for every test of the calling file; `dir()` is the current one. */
export function scratchDir(): () => string {
  let dir = '';
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'archive-test-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  return () => dir;
}

let n = 0;
/** A CSV in the event header, built with the shared record definition (as the gateway writes it). */
export function csvIn(dir: string, events: EventInput[], name = `in${n++}.csv`): string {
  const now = () => new Date('2026-11-21T12:00:00Z');
  const lines = events.map((e, i) => eventToCsvLine(normalizeEvent(e, { now, uuid: () => `gen-${n}-${i}` })));
  const file = join(dir, name);
  writeFileSync(file, [CSV_HEADER, ...lines].join('\n') + '\n');
  return file;
}

export async function report(name: ReportName, archive: string, asOf = '2026-11-21') {
  const duck = await openDuck();
  try {
    return await duck.all(reportSql(name, archive, asOf));
  } finally {
    duck.close();
  }
}

export async function rowsIn(archive: string) {
  const duck = await openDuck();
  try {
    return await duck.all<{ event_id: string; cost_usd: number }>(
      `SELECT event_id, CAST(cost_usd AS DOUBLE) AS cost_usd FROM read_parquet(${lit(join(archive, '**', '*.parquet'))}, union_by_name = true) ORDER BY event_id`,
    );
  } finally {
    duck.close();
  }
}

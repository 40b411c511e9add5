/**
 * A DuckDB connection for the archive tools. Everything heavy happens inside DuckDB (reading CSV,
 * checking, merging, writing Parquet, reporting): rows are never all held in JavaScript.
 */
import { DuckDBInstance, type DuckDBConnection } from '@duckdb/node-api';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Duck {
  connection: DuckDBConnection;
  /** Runs statements; returns nothing. */
  run(sql: string): Promise<void>;
  /** Runs a query and returns its rows as JSON-friendly objects (numbers, strings, booleans). */
  all<T = Record<string, unknown>>(sql: string): Promise<T[]>;
  /** Runs a query and returns its column names and rows. */
  query(sql: string): Promise<{ columns: string[]; rows: Record<string, unknown>[] }>;
  close(): void;
}

/** String literal for SQL. */
export const lit = (value: string) => `'${value.replace(/'/g, "''")}'`;

/**
 * A file's path for DuckDB's readers (read_csv, read_parquet), which take every path as a pattern:
 * `*`, `?` and `[…]` in it matched other files (a day file of the archive `a*b` read that of `axb`
 * too, one of `arch[eu]` that of `arche` instead). Each is written as a set of itself (`[*]`).
 */
export const pathLit = (path: string) => lit(path.replace(/[[\]*?]/g, (c) => `[${c}]`));

export async function openDuck(options: { memoryLimit?: string } = {}): Promise<Duck> {
  // A scratch directory lets DuckDB spill to disk instead of growing without bound.
  const scratch = mkdtempSync(join(tmpdir(), 'archive-duck-'));
  const instance = await DuckDBInstance.create(':memory:', {
    temp_directory: scratch,
    memory_limit: options.memoryLimit ?? '2GB',
    threads: '2',
  });
  const connection = await instance.connect();
  await connection.run("SET TimeZone = 'UTC'");
  return {
    connection,
    run: async (sql) => {
      await connection.run(sql);
    },
    all: async <T>(sql: string) => (await connection.runAndReadAll(sql)).getRowObjectsJson() as T[],
    query: async (sql: string) => {
      const reader = await connection.runAndReadAll(sql);
      return { columns: reader.columnNames(), rows: reader.getRowObjectsJson() as Record<string, unknown>[] };
    },
    close: () => {
      connection.closeSync();
      instance.closeSync();
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}

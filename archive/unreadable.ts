/**
 * Which day file a failed read of several could not read. DuckDB names the file when its end is
 * wrong (cut short, not Parquet), but a page damaged inside a file fails the whole query with
 * "don't know what type" alone, and the SQL excerpt of its message names the first file of the
 * list, whichever failed. So after such a failure each file is read alone, every column of every
 * row, and the first that fails is named with what was expected of it.
 */
import { pathLit, type Duck } from './duck';

export async function unreadableDayFile(duck: Duck, files: string[]): Promise<string | null> {
  for (const file of files) {
    try {
      await duck.run(`SELECT max(hash(t)) FROM read_parquet(${pathLit(file)}, hive_partitioning = false) t`);
    } catch (error) {
      const reason = String((error as Error).message)
        .split('\n')[0]
        .replace(/[\s:]+$/, '');
      return (
        `${file}: cannot be read (${reason}); expected a Parquet file of events as npm run archive writes it: ` +
        'put back a good copy, or move it out of the archive folder (its events are then missing from the archive)'
      );
    }
  }
  return null;
}
